"""An LLM judge in app-launched jobs: the ``score --judge`` step and its estimate before launch,
for runs about to be generated (New run page) and for the runs already stored (Metrics page). The
judge is a :class:`~persobench.metrics.judge_config.JudgeConfig` throughout (the app's form builds one)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from persobench.jobs.model import JobStep, score_step
from persobench.secrets import redact

if TYPE_CHECKING:  # pragma: no cover
    from persobench.metrics.judge_config import JudgeConfig

def judge_step(judge: "JudgeConfig", *, home: str | os.PathLike[str], env: Mapping[str, str] | None = None,
               runs: Sequence[str] | None = None) -> JobStep:
    """The score step with the judge, its :class:`~persobench.scoring.score_config.ScoreConfig` in
    ``job.json``: the runs the job wrote (``runs`` None), or the given run ids. The app's keys go only
    to a server the operator configured (as for generation)."""
    from persobench.scoring.judge_estimate import JUDGED_METRICS
    from persobench.scoring.score_config import ScoreConfig
    from persobench.secrets import key_allowed

    withhold = False
    if judge.spec.base_url:
        try:
            from persobench.models_registry import resolve_model

            configured = resolve_model(judge.model, home=home).base_url
        except Exception:  # noqa: BLE001 - an unknown model fails in the step itself, with its message
            configured = None
        withhold = not key_allowed(judge.spec.base_url, configured=[configured], env=env)
    return score_step(f"score (LLM judge {judge.model})", ScoreConfig(metrics=JUDGED_METRICS, judge=judge),
                      runs if runs is not None else "job", withhold_keys=withhold)


def estimate_for_launch(home: str | os.PathLike[str], judge: "JudgeConfig",  # noqa: ARG001 - the pages' call
                        plans: Sequence[Mapping[str, Any]], *, limit: int | None, seed: int = 0) -> tuple[Any, str]:
    """``(JudgeEstimate, "")`` for judging the planned runs once generated (each sample's reference
    stands in for its reply), or ``(None, why not)``."""
    from persobench.datasets import load_dataset
    from persobench.errors import PersoBenchError
    from persobench.scoring.judge_estimate import estimate_new_runs

    try:
        total = None
        for dataset in dict.fromkeys(p["dataset"] for p in plans):
            runs = sum(1 for p in plans if p["dataset"] == dataset)
            part = estimate_new_runs(judge, load_dataset(dataset, limit=limit, seed=seed), runs)
            total = part if total is None else _add(total, part)
        return total, "" if total is not None else "no run to judge"
    except (PersoBenchError, OSError, ValueError) as exc:
        return None, redact(" ".join(str(exc).split()))


def estimate_for_store(home: str | os.PathLike[str], judge: "JudgeConfig") -> tuple[Any, str]:
    """``(JudgeEstimate, "")`` for judging every stored run's NLI metrics not judged yet, or ``(None, why not)``."""
    from persobench.errors import PersoBenchError
    from persobench.metrics.backends import get_profile
    from persobench.scoring.judge_estimate import JUDGED_METRICS, estimate_runs
    from persobench.scoring.work_plan import run_samples
    from persobench.store import RunStore

    try:
        profile = get_profile("offline", judge=judge)
        readable, _ = RunStore(home).scan()
        cache: dict[str, dict] = {}
        return estimate_runs(profile, readable, lambda run: run_samples(run, datasets=cache), JUDGED_METRICS), ""
    except (PersoBenchError, OSError, ValueError, KeyError) as exc:
        return None, redact(" ".join(str(exc).split()))


def _add(a: Any, b: Any) -> Any:
    from dataclasses import replace

    cost = None if a.cost_usd is None or b.cost_usd is None else round(a.cost_usd + b.cost_usd, 6)
    return replace(a, pairs=a.pairs + b.pairs, cached=a.cached + b.cached, requests=a.requests + b.requests,
                   prompt_tokens=a.prompt_tokens + b.prompt_tokens,
                   completion_tokens=a.completion_tokens + b.completion_tokens, cost_usd=cost)
