"""Planning what a job will do, before anything is sent: estimates per (dataset, model, mode) and the
steps of generation and import jobs."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from persobench.jobs.model import JobStep, score_step_marker
from persobench.secrets import redact

#: Models every installation can run without a key or a server.
BUILTIN_MODEL_CHOICES = ("local:smollm2", "baseline:reference", "baseline:persona-echo")

def missing_key(spec: Any, env: Mapping[str, str] | None = None) -> str | None:
    """Name of the environment variable a model needs and ``env`` (default: this process's
    environment) lacks, else None. Only the variable's name is ever reported, never a value."""
    from persobench.providers import missing_key_env

    return missing_key_env(spec, env)


def registry_models(home: str | os.PathLike[str]) -> tuple[list[str], str]:
    """(names in the model registry file, a note: the file used or why it could not be read)."""
    from persobench.models_registry import find_registry_file, load_registry

    try:
        path = find_registry_file(home=home)
        if path is None:
            return [], "no models file (models.toml / $PERSOBENCH_MODELS)"
        return sorted(load_registry(path)), f"models from {path}"
    except Exception as exc:  # noqa: BLE001 - a broken file is reported, the page still works
        return [], redact(str(exc))


@dataclass(frozen=True)
class LaunchChoice:
    """One (dataset, model, mode) to generate."""

    dataset: str
    """Registered dataset name or a file path."""
    model: str
    """Model spec (``provider:model``) or a name from the models file."""
    mode: str
    """Prompt mode (``vanilla`` or ``cot``)."""
    base_url: str | None = None
    """Server of an OpenAI-compatible model, when not the provider's default."""


def plan_launch(home: str | os.PathLike[str], choices: Sequence[LaunchChoice], *, limit: int | None,
                seed: int = 0, env: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """For each choice: run id, samples, requests to send, cache hits, prompt-token and cost estimates
    and any problem (unknown model, missing key), without sending anything."""
    from persobench.generation import GenerationConfig, plan_generation
    from persobench.store import RunStore

    store = RunStore(home)
    rows = []
    for choice in choices:
        row: dict[str, Any] = {"dataset": choice.dataset, "model": choice.model, "mode": choice.mode,
                               "base_url": choice.base_url or ""}
        try:
            plan = plan_generation(
                GenerationConfig(dataset=choice.dataset, model=choice.model, mode=choice.mode,
                                 base_url=choice.base_url or None, limit=limit, seed=seed),
                store=store,
            )
        except Exception as exc:  # noqa: BLE001 - shown next to the choice, never raised
            row.update(run_id="", samples=0, requests=0, cached=0, prompt_tokens=0, max_cost_usd=None,
                       problem=redact(" ".join(str(exc).split()) or type(exc).__name__))
            rows.append(row)
            continue
        need = missing_key(plan.spec, env) if plan.n_requests else None
        row.update(
            run_id=plan.run_id, samples=len(plan.samples), requests=plan.n_requests, cached=len(plan.hits),
            prompt_tokens=plan.estimated_prompt_tokens, max_cost_usd=plan.estimated_max_cost(),
            problem=(f"set {need} in the environment of the app or in Streamlit secrets before launching"
                     if need else ""),
        )
        rows.append(row)
    return rows


def launch_steps(plans: Sequence[Mapping[str, Any]], *, limit: int | None, seed: int = 0,
                 profile: str | None = "offline") -> list[JobStep]:
    """The job for planned runs: one ``run`` step each, then one ``score`` step for them all."""
    steps = []
    for plan in plans:
        argv = ["run", "--dataset", plan["dataset"], "--model", plan["model"], "--mode", plan["mode"],
                "--seed", str(seed), "--no-progress"]
        if limit:
            argv += ["--limit", str(limit)]
        if plan.get("base_url"):
            argv += ["--base-url", plan["base_url"]]
        steps.append(JobStep(label=f"{plan['model']} · {plan['mode']} · {plan['dataset']}", argv=tuple(argv),
                             expect={"dataset": plan["dataset"], "model": plan["model"], "mode": plan["mode"]},
                             kind="run", run_id=plan.get("run_id") or None))
    if profile and steps:
        steps.append(JobStep(label=f"score ({profile} profile)", kind="score",
                             argv=("score", "--profile", profile, "--no-progress", score_step_marker())))
    return steps


def import_steps(folder: str, *, score: str) -> list[JobStep]:
    """Import a folder in the paper's layout, then score (``lexical``, ``offline`` or ``none``)."""
    steps = [JobStep(label="import", argv=("import-persobench", str(Path(folder).expanduser().resolve())),
                     kind="import")]
    if score == "lexical":
        # The metrics that need no model: fast enough to score all published replies right after an import.
        from persobench.metrics import metric_names

        steps.append(JobStep(label="score (lexical metrics)", kind="score",
                             argv=("score", "--profile", "offline", "--metrics", ",".join(metric_names(needs="none")),
                                   "--no-progress")))
    elif score == "offline":
        steps.append(JobStep(label="score (offline profile)", kind="score",
                             argv=("score", "--profile", "offline", "--no-progress")))
    return steps
