"""The two ends of scoring a stored run: what it still needs (:class:`RunWork`) and the locked write
of new values (:func:`write_run`).

Between them sits the compute step (:func:`persobench.scoring.compute.compute_run`), pure: samples
and replies in, rows out. Splitting the three lets the compute step run anywhere (in this process,
or on Ray actors: :mod:`persobench.scoring.ray_executor`) while only the process that planned the
work writes, through the same merge under the run's state lock, so a score computed elsewhere and
one computed here are interchangeable, and a killed score resumes with only the missing values.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from persobench.metrics.metric_registry import metric_info
from persobench.metrics.stored import STORED_SCORE_COLUMNS, empty_scores
from persobench.store.run_records import MetricProvenance, RunExtra
from persobench.metrics.backends import Profile
from persobench.metrics.sample_scores import ScoreResult
from persobench.records import Sample
from persobench.store.run_store import Run

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd



@dataclass
class RunScoreSummary:
    """What scoring did to one run (:func:`persobench.scoring.compute.score_run`)."""

    run_id: str
    profile: str
    computed: dict[str, int] = field(default_factory=dict)
    """metric -> number of new values written."""
    cached: dict[str, int] = field(default_factory=dict)
    """metric -> number of values already stored (not recomputed)."""
    provenance: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Provenance of every requested metric (stored or new)."""
    skipped_invalid: int = 0
    """Generation rows not scored because their status is not ``ok``."""

    def unavailable(self) -> dict[str, str]:
        return {m: p.get("reason", "") for m, p in self.provenance.items() if p.get("status") == "unavailable"}


@dataclass(frozen=True)
class RunWork:
    """What a run still needs under one profile, worked out from its stored scores (the plan step);
    everything the compute step reads, so it can be shipped to another process."""

    run_id: str
    """The run."""
    profile: "Profile"
    """The profile the values are computed with and stored under."""
    wanted: tuple[str, ...]
    """Every requested metric (computed or cached)."""
    replies: dict[str, str]
    """Sample id -> reply of every ``ok`` generation row (blank replies included: they get no value)."""
    bases: dict[str, str]
    """Sample id -> :func:`~persobench.metrics.stored.score_basis` of its current valid reply."""
    invalid: frozenset[str]
    """Samples whose generation row is not ``ok`` (stored values of theirs are stale)."""
    todo: dict[str, frozenset[str]]
    """Metric -> the samples that lack a current value of it (only metrics with some)."""
    summary: RunScoreSummary
    """Cached counts so far; :func:`write_run` fills in the rest."""
    samples: tuple["Sample", ...] = ()
    """The samples to score (those in any ``todo`` set), in the order of the generations table."""
    references: Mapping[str, str] | None = None
    """Sample id -> reference replacing ``sample.reference`` (None: the samples' own)."""
    persona_texts: Mapping[str, str] | None = None
    """Sample id -> the persona text persona metrics read (the paper protocol's cell), or None."""
    reference_note: str | None = None
    """Which reference the reference metrics read and why, for their provenance, when the plan chose
    it (an imported published run: :func:`persobench.generation.importer.run_reference_note`); None: the caller's
    references ("given by the caller") or the samples' own."""
    row_order: tuple[str, ...] = ()
    """Every sample id of the generations table in its order, valid or not (the paper's UniEval
    scorer batches replies by row position)."""
    nli_answers: Any = None
    """With a judge in the profile: its answers to the run's NLI pairs
    (:class:`~persobench.metrics.judge.judge_session.NLIAnswers`), attached by the pass's label step
    (:func:`persobench.scoring.pass_steps.label_work`) before the run is computed; None until then."""

    @property
    def sample_ids(self) -> set[str]:
        """Every sample that some metric still needs."""
        return set().union(*self.todo.values()) if self.todo else set()


def merge_scores(current: "pd.DataFrame | None", new_rows: "pd.DataFrame", work: RunWork) -> "pd.DataFrame | None":
    """The stored scores with ``new_rows`` merged in: rows another process wrote meanwhile are kept;
    a (sample, metric, profile) scored again is replaced; values of a sample whose reply is now
    invalid, or computed from another reply or other inputs (its basis), are dropped. ``None`` when
    nothing changes (the table is not rewritten)."""
    import pandas as pd

    if current is None or current.empty:
        merged = new_rows
    else:
        if "basis" not in current.columns:
            current = current.assign(basis=None)
        sids = current["sample_id"].astype(str)
        stale = sids.isin(work.invalid) | pd.Series(
            [sid in work.bases and basis != work.bases[sid] for sid, basis in zip(sids, current["basis"])],
            index=current.index, dtype=bool)
        replaced = set(zip(new_rows["sample_id"], new_rows["metric"], new_rows["profile"]))
        again = pd.Series([key in replaced for key in zip(sids, current["metric"], current["profile"])],
                          index=current.index, dtype=bool)
        if new_rows.empty and not stale.any():
            return None
        merged = pd.concat([current[~(stale | again)], new_rows], ignore_index=True)
    columns, index = list(STORED_SCORE_COLUMNS), merged.index
    if list(merged.columns) == columns and isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1:
        return merged  # already in the stored layout (a run's first scores): not copied (0.7 ms a run)
    return merged.reset_index(drop=True)[columns]


def _new_rows(work: RunWork, result: "ScoreResult") -> "pd.DataFrame":
    """The computed rows the run lacked, with profile and basis: a value for a (sample, metric) the
    run already has (computed because another metric needed the sample) is not written again."""
    import pandas as pd

    todo, ids = work.todo, work.sample_ids
    if all(len(sids) == len(ids) for sids in todo.values()):
        rows = result.scores  # every metric was missing for every scored sample: keep all
    else:
        keep = [m in todo and s in todo[m] for s, m in
                zip(result.scores["sample_id"].tolist(), result.scores["metric"].tolist())]
        rows = result.scores[pd.Series(keep, index=result.scores.index, dtype=bool)]
    bases = work.bases
    return rows.assign(profile=work.profile.key, basis=[bases[sid] for sid in rows["sample_id"].tolist()])


def _metric_counts(metrics: "pd.Series") -> dict[str, int]:
    """How many values each metric has in ``metrics`` (a ``metric`` column): one pass, not one
    comparison per metric."""
    return {str(metric): int(n) for metric, n in metrics.value_counts().items()}


def write_run(run: "Run", work: RunWork, result: "ScoreResult | None") -> RunScoreSummary:
    """The write step: merge ``result`` (the computed values, None when nothing was computed) into
    the run's scores, persona details and manifest provenance, under the run's state lock; values
    and provenance another process wrote meanwhile (a second ``score``, generation's checkpoints)
    are kept, never overwritten. Returns the run's summary."""
    import pandas as pd

    prof, wanted, summary = work.profile, work.wanted, work.summary
    new_prov: dict[str, dict[str, Any]] = {}
    details = None
    made: dict[str, int] = {}
    if result is None:
        new_rows = empty_scores()
    else:
        new_rows = _new_rows(work, result)
        made = _metric_counts(new_rows["metric"])
        for metric in work.todo:
            summary.computed[metric] = made.get(metric, 0)
        if "persona_coverage" in work.todo and len(result.persona_details):
            details = result.persona_details.assign(profile=prof.key)
        new_prov = result.provenance

    with run.locked():
        first: list[bool] = []  # whether the run had no scores: the merged table is then the new rows

        def merged_scores(current: "pd.DataFrame | None") -> "pd.DataFrame | None":
            first.append(current is None or current.empty)
            return merge_scores(current, new_rows, work)

        merged = run.merge_table("scores", merged_scores)
        if details is not None:
            def merge_details(old: "pd.DataFrame | None") -> "pd.DataFrame":
                if old is None:
                    return details.reset_index(drop=True)
                keep = ~(old["profile"].eq(prof.key) & old["sample_id"].isin(set(details["sample_id"])))
                return pd.concat([old[keep], details], ignore_index=True).reset_index(drop=True)

            run.merge_table("persona_details", merge_details)
        key = prof.key  # a property worked out on each read
        if first[0]:  # every row is new, of this profile: counted above
            counted = made
        else:
            counted = _metric_counts(merged.loc[merged["profile"] == key, "metric"]) if merged is not None else {}
        entry = run.manifest.details.profile_scores(prof.key)
        stored_prov: dict[str, MetricProvenance] = dict(entry.metrics)
        for metric in wanted:
            if metric in new_prov:
                stored_prov[metric] = _merged_provenance(stored_prov.get(metric),
                                                         MetricProvenance.from_dict(new_prov[metric]))
            if metric in stored_prov and stored_prov[metric].status != "unavailable":
                # n counts the values stored now, whoever computed them.
                stored_prov[metric] = dataclasses.replace(stored_prov[metric], n=int(counted.get(metric, 0)))
        recorded_empty = not work.replies and _record_empty(stored_prov, wanted, prof)
        summary.provenance = {m: stored_prov[m].to_dict() for m in wanted if m in stored_prov}
        if new_prov or recorded_empty or stored_prov != dict(entry.metrics):
            entry = dataclasses.replace(
                entry, profile=prof.describe(), metrics=stored_prov,
                updated_at=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"))
            run.update(extra=RunExtra(scores={prof.key: entry}).to_extra())
    return summary


def _merged_provenance(previous: MetricProvenance | None, record: MetricProvenance) -> MetricProvenance:
    """A metric's new provenance, given what the stored numbers were made with."""
    if previous is None or previous.status == "unavailable":
        return record
    if record.status == "unavailable":
        return previous  # keep what the stored numbers were made with
    if (previous.model_id, previous.revision_or_hash) != (record.model_id, record.revision_or_hash):
        return dataclasses.replace(record, mixed_with={
            "model_id": previous.model_id, "revision_or_hash": previous.revision_or_hash,
            "metric_version": previous.metric_version})
    return record


def _record_empty(stored_prov: dict[str, MetricProvenance], wanted: tuple[str, ...], prof: "Profile") -> bool:
    """Nothing valid to score (every reply failed): still record which metrics this profile covers,
    so aggregation can give the run the worst values the paper assigns instead of leaving the metric
    out, and still mark a metric unavailable where the profile has no model. True when it recorded."""
    recorded = False
    for metric in wanted:
        if metric in stored_prov:
            continue
        slot = metric_info(metric).needs
        spec = prof.specs.get(slot)
        if spec is not None and not spec.available:
            stored_prov[metric] = MetricProvenance("unavailable", reason=spec.unavailable_reason, backend=slot)
        else:
            # No model ran, so no model id: comparisons must not see a second "model" here.
            stored_prov[metric] = MetricProvenance("ok", reason="no valid reply to score", backend=slot)
        recorded = True
    return recorded
