"""An LLM judge in app-launched jobs: the ``score --judge`` step and its estimate before launch,
for runs about to be generated (New run page) and for the runs already stored (Metrics page)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from persobench.jobs.model import JobStep
from persobench.secrets import redact

#: The metrics a judge step scores (only those whose pairs it labels).
JUDGE_METRICS = "c_score,p_consistency,ue_score,persona_coverage"


@dataclass(frozen=True)
class JudgeChoice:
    """The LLM judge a job scores the NLI-based metrics with (``score --judge``)."""

    model: str
    """Model spec (``provider:model``), preset or models-file name."""
    base_url: str | None = None
    """Server of an OpenAI-compatible judge, when not the provider's default."""
    concurrency: int | str = 8
    """Judge requests in flight, or ``"auto"``."""
    max_cost: float | None = None
    """Stop sending once the estimated spend would pass this many USD; ``None``: no cap."""

    def config(self, home: str | os.PathLike[str]) -> Any:
        """The checked :class:`~persobench.metrics.judge.JudgeConfig` (raises ConfigurationError)."""
        from persobench.llm.response_cache import default_cache_dir
        from persobench.metrics.judge import make_judge

        return make_judge(self.model, base_url=self.base_url or None, concurrency=self.concurrency,
                          max_cost=self.max_cost, cache_dir=str(default_cache_dir(home)), home=home)


def judge_step(choice: JudgeChoice, *, home: str | os.PathLike[str], env: Mapping[str, str] | None = None,
               runs: Sequence[str] | None = None) -> JobStep:
    """The score step with the judge: the runs the job wrote (``runs`` None), or the given run ids.
    The app's keys go only to a server the operator configured (as for generation)."""
    from persobench.secrets import key_allowed, public_url

    withhold = False
    if choice.base_url:
        try:
            from persobench.models_registry import resolve_model

            configured = resolve_model(choice.model, home=home).base_url
        except Exception:  # noqa: BLE001 - an unknown model fails in the step itself, with its message
            configured = None
        withhold = not key_allowed(choice.base_url, configured=[configured], env=env)
    judge = {"model": choice.model, "base_url": public_url(choice.base_url) if choice.base_url else None,
             "concurrency": choice.concurrency, "max_cost": choice.max_cost}
    return JobStep(label=f"score (LLM judge {choice.model})", kind="score", withhold_keys=withhold,
                   config={"profile": "offline", "metrics": JUDGE_METRICS.split(","),
                           "runs": list(runs) if runs is not None else "job", "judge": judge})


def judge_profile(config: Mapping[str, Any], home: str | os.PathLike[str]) -> Any:
    """The scoring profile of a score step's config, with its judge when it has one."""
    from persobench.metrics.backends import get_profile
    from persobench.secrets import url_with_credentials

    judge = config.get("judge")
    if not judge:
        return get_profile(str(config.get("profile") or "offline"))
    choice = JudgeChoice(**{**judge, "base_url": url_with_credentials(judge.get("base_url"))})
    return get_profile(str(config.get("profile") or "offline"), judge=choice.config(home))


def estimate_for_launch(home: str | os.PathLike[str], choice: JudgeChoice, plans: Sequence[Mapping[str, Any]],
                        *, limit: int | None, seed: int = 0) -> tuple[Any, str]:
    """``(JudgeEstimate, "")`` for judging the planned runs once generated (each sample's reference
    stands in for its reply), or ``(None, why not)``."""
    from persobench.datasets import load_dataset
    from persobench.errors import PersoBenchError
    from persobench.metrics.judge_plan import estimate_new_runs

    try:
        config = choice.config(home)
        total = None
        for dataset in dict.fromkeys(p["dataset"] for p in plans):
            runs = sum(1 for p in plans if p["dataset"] == dataset)
            part = estimate_new_runs(config, load_dataset(dataset, limit=limit, seed=seed), runs)
            total = part if total is None else _add(total, part)
        return total, "" if total is not None else "no run to judge"
    except (PersoBenchError, OSError, ValueError) as exc:
        return None, redact(" ".join(str(exc).split()))


def estimate_for_store(home: str | os.PathLike[str], choice: JudgeChoice) -> tuple[Any, str]:
    """``(JudgeEstimate, "")`` for judging every stored run's NLI metrics not judged yet, or ``(None, why not)``."""
    from persobench.errors import PersoBenchError
    from persobench.metrics.backends import get_profile
    from persobench.metrics.judge_plan import JUDGED_METRICS, estimate_runs
    from persobench.pipeline import run_samples
    from persobench.store import RunStore

    try:
        profile = get_profile("offline", judge=choice.config(home))
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
