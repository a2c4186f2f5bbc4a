"""An LLM judge in app-launched jobs: the ``score --judge`` step and its estimate before launch,
for runs about to be generated (New run page) and for the runs already stored (Metrics page). The
judge is a :class:`~persobench.metrics.judge.judge_config.Judge` throughout (the app's form builds one)."""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from persobench.jobs.model import JobStep, score_step
from persobench.core import redact
from persobench.metrics import Judge
from persobench.scoring import JUDGED_METRICS
from persobench.scoring import ScoreConfig
from persobench.core import key_allowed
from persobench.datasets import load_dataset
from persobench.errors import PersoBenchError
from persobench.scoring import estimate_new_runs
from persobench.metrics import get_profile
from persobench.scoring import estimate_runs
from persobench.pipeline import run_samples
from persobench.store import RunStore
from dataclasses import replace
from persobench.providers import resolve_model


def judge_step(judge: "Judge", *, home: str | os.PathLike[str], env: Mapping[str, str] | None = None,
               runs: Sequence[str] | None = None) -> JobStep:
    """The score step with the judge, its :class:`~persobench.scoring.score_config.ScoreConfig` in
    ``job.json``: the runs the job wrote (``runs`` None), or the given run ids. The app's keys go only
    to a server the operator configured (as for generation)."""

    withhold = False
    if judge.spec.base_url:
        try:

            configured = resolve_model(judge.model, home=home).base_url
        except Exception:  # noqa: BLE001 - an unknown model fails in the step itself, with its message
            configured = None
        withhold = not key_allowed(judge.spec.base_url, configured=[configured], env=env)
    return score_step(f"score (LLM judge {judge.model})", ScoreConfig(metrics=JUDGED_METRICS, judge=judge),
                      runs if runs is not None else "job", withhold_keys=withhold)


def estimate_for_launch(home: str | os.PathLike[str], judge: "Judge",  # noqa: ARG001 - the pages' call
                        plans: Sequence[Mapping[str, Any]], *, limit: int | None, seed: int = 0) -> tuple[Any, str]:
    """``(JudgeEstimate, "")`` for judging the planned runs once generated (each sample's reference
    stands in for its reply), or ``(None, why not)``."""

    try:
        total = None
        # The template and mode decide a run's protocol, and so what its judge is sent (the notebook
        # layout under the paper's): runs are counted per (dataset, template, mode).
        kinds = [(p["dataset"], p.get("template") or None, p.get("mode") or "vanilla") for p in plans]
        for kind in dict.fromkeys(kinds):
            dataset, template, mode = kind
            part = estimate_new_runs(judge, load_dataset(dataset, limit=limit, seed=seed), kinds.count(kind),
                                     template=template, mode=mode)
            total = part if total is None else _add(total, part)
        return total, "" if total is not None else "no run to judge"
    except (PersoBenchError, OSError, ValueError) as exc:
        return None, redact(" ".join(str(exc).split()))


def estimate_for_store(home: str | os.PathLike[str], judge: "Judge") -> tuple[Any, str]:
    """``(JudgeEstimate, "")`` for judging every stored run's NLI metrics not judged yet, or ``(None, why not)``."""

    try:
        profile = get_profile("offline", judge=judge)
        readable, _ = RunStore(home).scan()
        cache: dict[str, dict] = {}
        return estimate_runs(profile, readable, lambda run: run_samples(run, datasets=cache), JUDGED_METRICS), ""
    except (PersoBenchError, OSError, ValueError, KeyError) as exc:
        return None, redact(" ".join(str(exc).split()))


def _add(a: Any, b: Any) -> Any:

    cost = None if a.cost_usd is None or b.cost_usd is None else round(a.cost_usd + b.cost_usd, 6)
    return replace(a, pairs=a.pairs + b.pairs, cached=a.cached + b.cached, requests=a.requests + b.requests,
                   prompt_tokens=a.prompt_tokens + b.prompt_tokens,
                   completion_tokens=a.completion_tokens + b.completion_tokens, cost_usd=cost)
