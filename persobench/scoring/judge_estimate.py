"""What an LLM judge would label and cost, before anything is sent: for stored runs (the ``score
--judge --dry-run`` numbers, the app's Metrics page) and for runs not generated yet (the app's New
run page, with each sample's reference standing in for the reply it will get)."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence
from persobench.metrics.backends import Profile
from persobench.metrics.judge import JudgeConfig, JudgeEstimate
from persobench.records import Sample
from persobench.metrics.judge import judge_labeller
from persobench.scoring.work_plan import run_nli_pairs
from dataclasses import replace
from persobench.metrics import metric_info
from persobench.metrics.nli import nli_pairs
from persobench.metrics.scoring import _items


#: The metrics whose pairs a judge labels: the one list (the CLI's help, the app's form, a judge
#: job's score step and the estimates all read it).
JUDGED_METRICS = ("c_score", "p_consistency", "ue_score", "persona_coverage")
#: :data:`JUDGED_METRICS` in a sentence.
JUDGED_METRICS_TEXT = f"{', '.join(JUDGED_METRICS[:-1])} and {JUDGED_METRICS[-1]}"


def estimate_runs(profile: "Profile", runs: Iterable[Any], samples_for: Callable[[Any], Any],
                  metrics: Sequence[str] | None = None,
                  show: Callable[[str], None] | None = None) -> "JudgeEstimate":
    """The judge's estimate for every NLI pair the runs still lack (duplicates across runs counted
    once); ``samples_for(run)`` gives a run's samples by id, ``show`` gets one line per run."""

    labeller = judge_labeller(profile.judge)
    every: dict[tuple[str, str], None] = {}
    for run in runs:
        if not run.has_table("generations"):
            continue
        pairs = run_nli_pairs(run, samples_for(run), profile=profile, metrics=metrics)
        every.update(dict.fromkeys(pairs))
        if show is not None:
            part = labeller.estimate(pairs)
            show(f"  {run.run_id}: {part.pairs} pair(s), {part.cached} cached, {part.requests} to send")
    return labeller.estimate(list(every))


def estimate_new_runs(judge: "JudgeConfig", samples: Sequence["Sample"], runs: int,
                      metrics: Sequence[str] = JUDGED_METRICS) -> "JudgeEstimate":
    """Roughly what the judge will cost on ``runs`` runs over ``samples`` once they are generated:
    the pairs the metrics need with each sample's reference standing in for its reply (replies
    do not exist yet), times ``runs``. Nothing is cached yet: every pair counts as a request."""


    stand_in = {s.id: s.reference or "A reply." for s in samples}
    items = _items(samples, stand_in, None)
    nli = tuple(m for m in metrics if metric_info(m).family == "nli")
    pairs = nli_pairs(items, nli, "persona_coverage" in metrics)[0]
    one = judge_labeller(judge).estimate(pairs)
    n = max(0, int(runs))
    cost = None if one.cost_usd is None else round(one.cost_usd * n, 6)
    return replace(one, pairs=len(pairs) * n, cached=0, requests=len(pairs) * n,
                   prompt_tokens=one.prompt_tokens * n, completion_tokens=len(pairs) * n * judge.template.max_tokens,
                   cost_usd=cost)

