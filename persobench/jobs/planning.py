"""Planning what a job will do, before anything is sent: estimates per (dataset, model, mode) and the
steps of generation and import jobs."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from persobench.jobs.model import JobStep, score_step
from persobench.jobs.step_requests import FetchRequest, ImportRequest, RunRequest
from persobench.core import public_text, redact, remember_url
from persobench.core import structured_label
from persobench.providers import missing_key_env
from persobench.providers import find_registry_file, load_registry
from persobench import pipeline
from persobench.config import changed, validated
from persobench.generation import GenerationConfig
from persobench.generation import public_config
from persobench.store import lock_holder
from persobench.store import RunStore
from persobench.llm import estimated_max_batch_cost
from persobench.providers import resolve_model
from persobench.providers import supports_batch
from persobench.core import key_allowed
from persobench.scoring import ScoreConfig
from persobench.jobs.judging import judge_step
from persobench.metrics import metric_names

#: Models every installation can run without a key or a server.
BUILTIN_MODEL_CHOICES = ("local:smollm2", "baseline:reference", "baseline:persona-echo")
#: The New run page's template choices: value ("" = the default) -> label.
TEMPLATE_CHOICES = {
    "": "paper protocol (paper for API models, paper-open for local ones)",
    "paper": "paper: the paper's closed-source prompt",
    "paper-open": "paper-open: the paper's open-source prompt, raw text",
    "persobench": "persobench: PersoBench's own wording",
}

def missing_key(spec: Any, env: Mapping[str, str] | None = None) -> str | None:
    """Name of the environment variable a model needs and ``env`` (default: this process's
    environment) lacks, else None. Only the variable's name is ever reported, never a value."""

    return missing_key_env(spec, env)


def registry_models(home: str | os.PathLike[str]) -> tuple[list[str], str]:
    """(names in the model registry file, a note: the file used or why it could not be read)."""

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
    template: str | None = None
    """Prompt template name; ``None`` for the paper's protocol (the default for the model)."""
    structured: bool = False
    """Ask for structured output (``run --structured``); baselines ignore it."""
    batch: bool = False
    """Send through the provider's batch API (``run --batch``: about half the price, within 24 h);
    models whose provider has none (local, baselines) ignore it."""


def plan_launch(home: str | os.PathLike[str], choices: Sequence[LaunchChoice], *, limit: int | None,
                seed: int = 0, env: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """For each choice: run id, samples, requests to send, cache hits, prompt-token and cost estimates
    and any problem (unknown model, missing key), without sending anything."""

    store = RunStore(home)
    rows = []
    for choice in choices:
        # Only the URL's public form goes into the plan (and so into job.json and the page); its
        # credentials reach the run's process through its environment (remember_url).
        row: dict[str, Any] = {"dataset": choice.dataset, "model": choice.model, "mode": choice.mode,
                               "base_url": remember_url(choice.base_url) or "", "template": choice.template or "",
                               "structured": False}
        row["config"] = None
        try:  # a bad number (limit -3) is this choice's problem, in the line `run` gives
            config = validated(GenerationConfig, dict(
                dataset=choice.dataset, model=choice.model, mode=choice.mode, base_url=choice.base_url or None,
                limit=limit, seed=seed, template=choice.template or None, structured=choice.structured,
                batch=choice.batch and _has_batch_api(choice, home)))
            # The job runs exactly the configuration estimated here; its base URL in public form (the
            # credentials stay in this process's memory, remember_url, and reach the job's environment).
            plan = pipeline.plan(config, store=store)
            # what the plan applies: a baseline ignores structured output, so its config says so
            row["config"] = changed(public_config(config)[0], structured=plan.params.response_schema is not None)
        except Exception as exc:  # noqa: BLE001 - shown next to the choice, never raised
            row.update(run_id="", samples=0, requests=0, cached=0, prompt_tokens=0, max_cost_usd=None,
                       batch=False, batch_cost_usd=None, key_withheld=False,
                       problem=public_text(redact(" ".join(str(exc).split()) or type(exc).__name__)))
            rows.append(row)
            continue
        withheld = not _key_may_go_to(choice, home, env)
        # Without the operator's key the run is still launched (local servers need none).
        need = missing_key(plan.spec, env) if plan.n_requests and not withheld else None
        holder = lock_holder(store.run_path(plan.run_id))  # the same lock `run` takes (one process per run)
        row.update(
            template=plan.template.name, template_option=choice.template or "",
            structured=plan.params.response_schema is not None,
            run_id=plan.run_id, samples=len(plan.samples), requests=plan.n_requests, cached=len(plan.hits),
            prompt_tokens=plan.estimated_prompt_tokens, max_cost_usd=plan.estimated_max_cost(),
            batch=config.batch, batch_cost_usd=estimated_max_batch_cost(plan),
            key_withheld=withheld,
            problem=(f"set {need} in the environment of the app or in Streamlit secrets before launching"
                     if need else f"already being generated by process {holder or '?'}"
                     if holder is not None else ""),
        )
        rows.append(row)
    return rows


def _has_batch_api(choice: LaunchChoice, home: str | os.PathLike[str]) -> bool:
    """Whether the choice's model has a batch API (an unknown model is reported by its plan)."""

    try:
        return supports_batch(resolve_model(choice.model, base_url=choice.base_url or None, home=home).provider)
    except Exception:  # noqa: BLE001
        return False


def _key_may_go_to(choice: LaunchChoice, home: str | os.PathLike[str], env: Mapping[str, str] | None) -> bool:
    """Whether the operator's key may go to the choice's base URL: the provider's own endpoint, the
    URL of the model's models-file entry or preset, or a server in ``$PERSOBENCH_KEY_HOSTS``."""

    if not choice.base_url:
        return True
    try:

        configured = resolve_model(choice.model, home=home).base_url
    except Exception:  # noqa: BLE001 - an unknown model is reported by the plan itself
        configured = None
    return key_allowed(choice.base_url, configured=[configured], env=env)


def launch_steps(plans: Sequence[Mapping[str, Any]], *, limit: int | None = None, seed: int = 0,
                 profile: str | None = "offline", concurrency: int | str | None = None,
                 judge: Any = None, home: str | os.PathLike[str] | None = None,
                 env: Mapping[str, str] | None = None) -> list[JobStep]:
    """The job for planned runs (rows of :func:`plan_launch`): one ``run`` step each, with the
    configuration the plan estimated, then one ``score`` step for the runs the job completes.
    ``concurrency``: requests in flight per run (a number or ``"auto"``; default the CLI's);
    ``limit`` and ``seed`` apply to rows planned without a configuration. ``judge`` (a
    :class:`~persobench.metrics.judge.judge_config.Judge`): a last score step with the LLM judge for the
    NLI-based metrics of those runs (``home``/``env``: where the judge's models file and keys are)."""


    steps = []
    for plan in plans:
        if isinstance(plan.get("config"), GenerationConfig):
            config = plan["config"]
        else:
            config = GenerationConfig(dataset=plan["dataset"], model=plan["model"], mode=plan["mode"],
                                      base_url=plan.get("base_url") or None, limit=limit, seed=seed,
                                      template=plan.get("template_option") or None,
                                      structured=bool(plan.get("structured")))
        if concurrency is not None:  # a page's choice may come as text ("8", "auto")
            config = changed(config, concurrency="auto" if str(concurrency) == "auto" else int(concurrency))
        stored, _ = public_config(config)  # the base URL's credentials travel in the environment
        label = structured_label(config.model, config.structured)
        steps.append(JobStep(label=f"{label} · {config.mode} · {stored.dataset}", request=RunRequest(config=stored),
                             expect={"dataset": config.dataset, "model": config.model, "mode": config.mode},
                             run_id=plan.get("run_id") or None, withhold_keys=bool(plan.get("key_withheld"))))
    if profile and steps:

        steps.append(score_step(f"score ({profile} profile)", ScoreConfig(profile=profile), "job"))
    if judge is not None and steps:

        steps.append(judge_step(judge, home=home or ".", env=env))
    return steps


def import_steps(folder: str, *, score: str) -> list[JobStep]:
    """Import a folder in the paper's layout, then score (``lexical``, ``offline`` or ``none``)."""
    steps = [JobStep(label="import", request=ImportRequest(folder=str(Path(folder).expanduser().resolve())))]
    return steps + _score_steps(score)


def fetch_paper_steps(*, score: str, url: str | None = None, trust_unpinned: bool = False) -> list[JobStep]:
    """Download the paper's data (a mirror ``url`` if given) and import it, then score.
    ``trust_unpinned``: accept files the content manifest does not pin (``fetch-paper --trust-unpinned``)."""
    # A mirror URL is stored in its public form (a presigned link's token is not); the full URL reaches
    # the job's process through its environment (remember_url), as a run's base URL does.
    return [JobStep(label="download and import the paper's data",
                    request=FetchRequest(url=remember_url(url) or None, trust_unpinned=trust_unpinned)),
            *_score_steps(score)]


def _score_steps(score: str) -> list[JobStep]:
    """Scoring after an import: ``lexical`` (fast), ``offline`` (the whole profile) or ``none``."""

    if score == "lexical":
        # The metrics that need no model: fast enough to score all published replies right after an import.

        return [score_step("score (lexical metrics)", ScoreConfig(metrics=tuple(metric_names(needs="none"))), "all")]
    if score == "offline":
        return [score_step("score (offline profile)", ScoreConfig(), "all")]
    return []
