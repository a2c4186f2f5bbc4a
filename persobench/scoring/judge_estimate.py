"""What an LLM judge would label and cost, before anything is sent: for stored runs (the ``score
--judge --dry-run`` numbers, the app's Metrics page) and for runs not generated yet (the app's New
run page, with each sample's reference standing in for the reply it will get)."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence
from persobench.metrics.backends import Profile
from persobench.metrics.judge.labeller import Judge, JudgeEstimate
from persobench.records import Sample
from persobench.metrics.judge.labeller import JudgeLabeller
from persobench.scoring.work_plan import items_nli_pairs, run_nli_pairs
from dataclasses import replace
from persobench.metrics.backends import get_profile
from persobench.metrics.metric_registry import validate_metric_names
from persobench.metrics.nli_inputs import AUTO, resolve_layout
from persobench.metrics.sample_scores import items_of, paper_persona_texts
from persobench.store.run_store import RunManifest


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

    labeller = JudgeLabeller(profile.judge)
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


def estimate_new_runs(judge: "Judge", samples: Sequence["Sample"], runs: int,
                      metrics: Sequence[str] = JUDGED_METRICS, *, template: str | None = None,
                      mode: str = "vanilla", input_layout: str = AUTO) -> "JudgeEstimate":
    """Roughly what the judge will cost on ``runs`` runs over ``samples`` once they are generated:
    the pairs the metrics need with each sample's reference standing in for its reply (replies
    do not exist yet), times ``runs``. Nothing is cached yet: every pair counts as a request.

    ``template`` and ``mode``: the planned runs' prompt template and mode, which decide their
    protocol; the inputs are counted as scoring will build them (:func:`items_nli_pairs`, with the
    layout resolved for that protocol as :func:`~persobench.scoring.work_plan.plan_run` resolves it:
    the notebook layout under the paper's, three inputs per reply for ``ue_score`` instead of two).
    ``template`` None: a run outside the paper protocol. ``input_layout``: as ``score --nli-inputs``."""

    planned = RunManifest(run_id="planned", dataset=samples[0].dataset if samples else "", sample_ids=(),
                          model={}, mode=mode, template=template or "", template_hash="")
    profile = resolve_layout(replace(get_profile("offline", judge=judge), input_layout=input_layout), planned)
    stand_in = {s.id: s.reference or "A reply." for s in samples}
    items = items_of(samples, stand_in, None, paper_persona_texts(planned, samples))
    pairs = items_nli_pairs(items, validate_metric_names(list(metrics)), profile)
    one = JudgeLabeller(judge).estimate(pairs)
    n = max(0, int(runs))
    cost = None if one.cost_usd is None else round(one.cost_usd * n, 6)
    # Distinct pairs, as the judge sends them (a one-sentence persona's sentence pair is its
    # ue_score persona pair in the notebook layout): one.pairs, not len(pairs).
    return replace(one, pairs=one.pairs * n, cached=0, requests=one.pairs * n,
                   prompt_tokens=one.prompt_tokens * n, completion_tokens=one.pairs * n * judge.template.max_tokens,
                   cost_usd=cost)
