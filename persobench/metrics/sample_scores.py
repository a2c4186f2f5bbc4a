"""Scoring in memory: replies in, a long table of per-sample metric values (with provenance) out.

:func:`score_samples` scores in memory. Scoring a stored run (plan what it lacks, compute, write
under its lock, on this process or Ray actors) is :mod:`persobench.scoring`;
:func:`persobench.metrics.score_run` is its one-run front.

What gets a number:

- only valid replies (a non-empty reply for the sample id; in a run, rows whose ``status`` is
  ``ok``). Invalid replies get **no** row here; aggregation decides whether they count as the
  paper's worst value or are excluded.
- metrics whose :class:`~persobench.metrics.MetricInfo` says ``needs_reference`` (BLEU, ROUGE,
  METEOR, BERTScore, ``ue_score``) only for samples with a non-empty reference; those that say
  ``needs_persona`` (``c_score``, ``p_consistency``, ``ue_score``, ``persona_distance``,
  ``idf_overlap``, ``persona_coverage``, ``unieval_groundedness``, ``unieval_overall``) only for
  samples with at least one persona sentence.
- metrics whose model is unavailable get no rows, and their provenance says ``unavailable`` and why.

Who computes what: :func:`family_plan` picks the metric families of the requested metrics (and the
families they require), orders them so a family runs after those it requires, and each family
scores the whole batch in one pass (:mod:`persobench.metrics.family`).

Persona sentences: all of the sample's persona sentences (every speaker), in source order; the
persona *text* joins them with one space.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from persobench.metrics.metric_registry import (
    MetricRegistryError, family_names, get_family, metric_info, metric_names, validate_metric_names,
)
from persobench.metrics.backends import Profile, get_profile
from persobench.metrics.family import FamilyBatch, FamilyResult, Item, MetricFamily, Progress, ProgressFn
from persobench.metrics.encoders.encoder import EmbeddingRequest, TextEncoder, merged_request
from persobench.records import Sample
from persobench.store.run_store import Run, RunManifest
from persobench.metrics.backends import BackendUnavailable
from persobench.prompts.protocol import PAPER, protocol_of
from persobench.datasets.paper_cells import paper_persona_text
from persobench.metrics.judge.judge_session import JudgeSession, NLIAnswers
from persobench.metrics.nli import SENTENCE_LABELS, nli_pairs
from persobench.metrics.nli_inputs import AUTO, PAIRS, NLIInput

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    import pyarrow as pa



SCORE_COLUMNS = ("sample_id", "metric", "value")
DETAIL_COLUMNS = ("sample_id", "persona_index", "speaker", "sentence", "nli_label", "similarity")


@dataclass
class ScoreResult:
    """What :func:`score_samples` returns."""

    scores: "pd.DataFrame"
    """Long table ``sample_id, metric, value`` (float), computed metrics only."""
    persona_details: "pd.DataFrame"
    """Per persona sentence: ``sample_id, persona_index, speaker, sentence, nli_label, similarity``
    (``nli_label`` None without an NLI model; ``similarity`` NaN without an embedding model)."""
    provenance: dict[str, dict[str, Any]]
    """Per requested metric: ``status`` (ok, degraded, unavailable), ``reason``, ``model_id``,
    ``revision_or_hash``, ``metric_version``, ``backend``, ``n`` (values computed)."""
    profile: str = "offline"
    """The profile key (name, plus a hash of the overrides when any)."""

    def unavailable(self) -> dict[str, str]:
        """metric -> reason, for metrics that produced no number because a model is missing."""
        return {m: p["reason"] for m, p in self.provenance.items() if p["status"] == "unavailable"}

    def wide(self) -> "pd.DataFrame":
        """One row per sample, one column per metric."""
        if self.scores.empty:
            import pandas as pd

            return pd.DataFrame(index=pd.Index([], name="sample_id"))
        return self.scores.pivot(index="sample_id", columns="metric", values="value")


def applicable(metric: str, reference: str, has_persona: bool) -> bool:
    """Whether ``metric`` is defined for a sample with this reference and persona presence."""
    return metric_info(metric).defined_for(reference, has_persona)


# --- Running the families ------------------------------------------------------------------------


@dataclass(frozen=True)
class FamilyStep:
    """One family in a scoring plan."""

    family: MetricFamily
    metrics: tuple[str, ...]
    """The family's requested metrics (empty when it runs only for an output a later family reads)."""
    outputs_wanted: frozenset[str]
    """Which of its outputs later families in the plan read."""


def _family(name: str) -> MetricFamily:
    """The registered family ``name``, which the scorer drives as a :class:`MetricFamily`."""
    family = get_family(name)
    if not isinstance(family, MetricFamily):
        raise MetricRegistryError(f"metric family {name!r} is a {type(family).__name__}, not a MetricFamily")
    return family


def family_plan(wanted: Sequence[str]) -> list[FamilyStep]:
    """The families that compute ``wanted`` (registered metric names), plus the families they require,
    each after every family it requires; families no dependency orders keep registration order.

    Raises :class:`~persobench.metrics.MetricRegistryError` for a requirement on an unknown family or on
    an output that family does not provide, and for a dependency cycle."""
    own: dict[str, list[str]] = {}
    for metric in wanted:
        own.setdefault(metric_info(metric).family, []).append(metric)
    needed: dict[str, MetricFamily] = {}
    outputs: dict[str, set[str]] = {}
    pending = list(own)
    while pending:
        name = pending.pop()
        if name in needed:
            continue
        family = needed[name] = _family(name)
        for req in family.requires:
            provider = _family(req.family)
            if req.output not in provider.provides:
                raise MetricRegistryError(f"metric family {name!r} requires {req.output!r} of {req.family!r}, "
                                          f"which provides {', '.join(provider.provides) or 'nothing'}")
            outputs.setdefault(req.family, set()).add(req.output)
            pending.append(req.family)
    order: list[str] = []
    remaining = [n for n in family_names() if n in needed]
    while remaining:
        ready = next((n for n in remaining if all(r.family in order for r in needed[n].requires)), None)
        if ready is None:
            raise MetricRegistryError(f"metric families {', '.join(remaining)} require each other in a cycle")
        order.append(ready)
        remaining.remove(ready)
    known = set(wanted)
    return [FamilyStep(needed[n], tuple(m for m in metric_names(family=n) if m in known),
                       frozenset(outputs.get(n, ()))) for n in order]


def embedding_request(items: Sequence[Item], wanted: Sequence[str], profile: Profile) -> "EmbeddingRequest":
    """Every text the families of ``wanted`` will embed for ``items``, in one request."""

    return merged_request(step.family.embedding_request(
        FamilyBatch(items, step.metrics, profile, Progress(None), {}, step.outputs_wanted))
        for step in family_plan(tuple(wanted)))


def prepare_embeddings(encoder: "TextEncoder", request: "EmbeddingRequest", progress: Progress) -> None:
    """Embed a request in one pass; a model that cannot be loaded is left to the families to report."""

    if not request.pairs and not request.sentences:
        return
    stage: list[Any] = []

    def report(done: int, total: int) -> None:
        if not stage:
            stage.append(progress.stage("embeddings", total))
        stage[0](done - getattr(report, "last", 0))
        report.last = done  # type: ignore[attr-defined]

    try:
        encoder.prepare(request.pairs, request.sentences, progress=report)
    except BackendUnavailable:
        pass


def items_nli_pairs(items: Sequence[Item], metrics: Sequence[str], profile: Profile) -> "list[NLIInput]":
    """The (premise, hypothesis) pairs the NLI family labels for ``items`` when ``metrics`` are
    scored under ``profile`` (its input layout resolved for the run, as
    :func:`~persobench.scoring.work_plan.plan_run` does; an unresolved one reads as the pairs
    layout, as the family does): what a judge is asked before the family runs, and the one count
    behind ``score --judge --dry-run`` and the New run page's estimate."""
    steps = {step.family.name: step for step in family_plan(tuple(metrics))}
    if "nli" not in steps:
        return []
    step = steps["nli"]
    layout = profile.input_layout if profile.input_layout != AUTO else PAIRS
    return nli_pairs(items, step.metrics, SENTENCE_LABELS in step.outputs_wanted, layout)[0]


def judge_answers(items: Sequence[Item], metrics: Sequence[str], profile: Profile, judge: "JudgeSession | None",
                  progress: Progress) -> "NLIAnswers | None":
    """The judge's answers to the NLI pairs of ``items`` (None without a judge in ``profile``), asked
    through ``judge``, or through a session of this call's own when it is None."""
    if profile.judge is None:
        return None
    pairs = items_nli_pairs(items, metrics, profile)
    if not pairs:
        return NLIAnswers()
    session = judge if judge is not None else JudgeSession(profile.judge)
    return session.label(pairs, progress=progress.stage("judge", len(pairs)))


def _run_families(items: list[Item], wanted: tuple[str, ...], profile: Profile,
                  progress: Progress, encoder: "TextEncoder | None" = None,
                  row_order: tuple[str, ...] = (), nli_answers: "NLIAnswers | None" = None) -> FamilyResult:
    """Every family of the plan in order, each given the outputs it requires; results concatenated.
    The texts the families embed are embedded first, in one pass (``encoder``: a new one when None)."""

    encoder = encoder if encoder is not None else TextEncoder(profile)
    prepare_embeddings(encoder, embedding_request(items, wanted, profile), progress)
    total = FamilyResult()
    delivered: dict[tuple[str, str], Any] = {}
    for step in family_plan(wanted):
        family = step.family
        inputs = {req.output: delivered[(req.family, req.output)] for req in family.requires}
        result = family.score(FamilyBatch(items, step.metrics, profile, progress, inputs, step.outputs_wanted,
                                          encoder, row_order, nli_answers))
        missing = sorted(step.outputs_wanted - set(result.outputs))
        if missing:
            raise MetricRegistryError(f"metric family {family.name!r} did not deliver {', '.join(missing)}")
        delivered.update(((family.name, k), v) for k, v in result.outputs.items())
        total.columns.extend(result.columns)
        if result.rows:  # kept in the family's order: its columns, then its rows
            total.columns.append(_row_columns(result.rows))
        total.details.extend(result.details)
        total.provenance.update(result.provenance)
    return total


@lru_cache(maxsize=1 << 16)
def _persona_pairs(sample: "Sample") -> tuple[tuple[str, str], ...]:
    """(speaker, sentence) of the sample's non-blank persona sentences; cached, as the runs of a
    dataset share their sample objects (a PEC sample has ~76 sentences, rebuilt for every run)."""
    return tuple([(p.speaker, s) for p in sample.personas for s in p.sentences if str(s).strip()])


def items_of(samples: Sequence["Sample"], replies: Mapping[str, str],
             references: Mapping[str, str] | None, persona_texts: Mapping[str, str] | None = None,
             *, personas: bool = True) -> list[Item]:
    """The valid replies as items; without their persona sentences when not ``personas`` (no family
    of the pass reads them: collecting them was a third of a lexical pass's bookkeeping)."""
    items: list[Item] = []
    for sample in samples:
        reply = replies.get(sample.id)
        if reply is None or not isinstance(reply, str) or not reply.strip():
            continue
        reference = references.get(sample.id, sample.reference) if references else sample.reference
        given = persona_texts.get(sample.id) if persona_texts else None
        items.append(Item(sample, reply, str(reference or ""), _persona_pairs(sample) if personas else (), given))
    return items


def _row_columns(rows: list) -> tuple[list, list, list]:
    """A family's ``(sample id, metric, value)`` rows as three columns (one metric per value)."""
    # One pass per column: zip(*rows) passes every row as an argument, ten times slower here.
    return [row[0] for row in rows], [row[1] for row in rows], [row[2] for row in rows]


def _score_frame(columns: Sequence[tuple[Sequence[str], "str | Sequence[str]", Sequence[float]]]) -> "pd.DataFrame":
    """The families' columns (:attr:`FamilyResult.columns`; a metric's name, or one per value) as
    the scores frame (str, str, float64), in their order.

    Built as Arrow columns and converted once: pandas's own conversion of Python strings to its
    Arrow-backed strings cost twice as much on a lexical pass's 336,000 rows."""
    import pandas as pd
    import pyarrow as pa

    if not columns:
        frame = pd.DataFrame({column: pd.Series(dtype=str) for column in SCORE_COLUMNS[:2]})
        return frame.assign(value=pd.Series(dtype="float64"))
    # The metrics of a family often share one list of sample ids: converted once.
    ids: dict[int, "pa.Array"] = {}
    sid_parts, metric_parts, value_parts = [], [], []
    for sids, metric, values in columns:
        if id(sids) not in ids:
            ids[id(sids)] = _arrow_column(list(sids), pa.string(), str)
        sid_parts.append(ids[id(sids)])
        metric_parts.append(pa.repeat(pa.scalar(metric, pa.string()), len(values)) if isinstance(metric, str)
                            else _arrow_column(list(metric), pa.string(), str))
        value_parts.append(_arrow_column(list(values), pa.float64(), float))
    return pa.table({"sample_id": pa.concat_arrays(sid_parts), "metric": pa.concat_arrays(metric_parts),
                     "value": pa.concat_arrays(value_parts)}).to_pandas()


def _arrow_column(values: list, kind: "pa.DataType", python_type: type) -> "pa.Array":
    """``values`` as an Arrow array of ``kind``; what Arrow does not convert itself (a registered
    family's int ids, numpy booleans, numbers as text) goes through ``str`` or numpy first."""
    import pyarrow as pa

    try:
        return pa.array(values, kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        if python_type is str:
            return pa.array([str(value) for value in values], kind)
        import numpy as np

        return pa.array(np.asarray(values, dtype="float64"), kind)


def _frames(columns: list, details: list) -> tuple["pd.DataFrame", "pd.DataFrame"]:
    return _score_frame(columns), _detail_frame(details) if details else _no_details().copy()


def _detail_frame(details: list) -> "pd.DataFrame":
    """The ``persona_details`` rows as a frame (:data:`DETAIL_COLUMNS`, typed)."""
    import pandas as pd

    detail = pd.DataFrame(details, columns=list(DETAIL_COLUMNS))
    detail["persona_index"] = detail["persona_index"].astype("int64")
    detail["similarity"] = detail["similarity"].astype("float64")
    detail["nli_label"] = detail["nli_label"].astype(object)
    return detail


@lru_cache(maxsize=1)
def _no_details() -> "pd.DataFrame":
    """The empty ``persona_details`` frame, made once: most passes (every lexical one) have no rows,
    and building and typing an empty frame cost a millisecond and a half per run (copied for each
    result: a caller may add to its own)."""
    return _detail_frame([])


def score_samples(
    samples: Sequence["Sample"],
    replies: Mapping[str, str],
    *,
    profile: "str | Profile" = "offline",
    metrics: Sequence[str] | None = None,
    overrides: Mapping[str, str] | None = None,
    progress: ProgressFn | None = None,
    references: Mapping[str, str] | None = None,
    persona_texts: Mapping[str, str] | None = None,
    encoder: "TextEncoder | None" = None,
    reference_note: str | None = None,
    row_order: Sequence[str] | None = None,
    judge: "JudgeSession | None" = None,
    nli_answers: "NLIAnswers | None" = None,
) -> ScoreResult:
    """Score each sample's reply (``replies``: sample id -> text; missing or blank = invalid, unscored).

    ``references`` (sample id -> text) replaces ``sample.reference`` where given (e.g. to score
    against a published reference exactly as the paper did). ``persona_texts`` (sample id -> text)
    is the persona text persona metrics read instead of the sentences joined by spaces (the paper's
    ``personas`` cell under its protocol); each persona metric's provenance says which
    (``persona_input``). ``progress(stage, done, total)`` is called as work advances. ``encoder``
    embeds texts for BERTScore and persona similarity (default: a new one, no disk cache).
    ``reference_note``: which reference the reference metrics read and why, recorded as their
    provenance's ``reference`` (default, when ``references`` are given: "given by the caller for N
    sample(s)"; the scorer of a stored run passes where its default reference came from).
    ``row_order``: every sample id of the run in its rows' order (default: ``samples``' order), read
    by the paper's UniEval scorer (``Profile.unieval_scorer``), which batches by row position.

    With a judge in the profile, the NLI pairs are labelled first: ``nli_answers`` when given (a
    scoring pass labels each run before it is computed), else through ``judge`` (a
    :class:`~persobench.metrics.judge.judge_session.JudgeSession`: read its ``stats`` afterwards), else
    through a session of this call's own.
    """
    prof = get_profile(profile, overrides) if not isinstance(profile, Profile) else profile
    if isinstance(profile, Profile) and overrides:
        prof = replace(get_profile(profile.name, {**profile.overrides, **overrides}, judge=profile.judge),
                       unieval_scorer=profile.unieval_scorer)
    wanted = validate_metric_names(list(metrics) if metrics is not None else None)
    # A registered family need not derive from MetricFamily: one without the method reads them.
    personas = any(getattr(step.family, "reads_personas", lambda _metrics: True)(step.metrics)
                   for step in family_plan(wanted))
    items = items_of(samples, replies, references, persona_texts, personas=personas)
    if nli_answers is None:
        nli_answers = judge_answers(items, wanted, prof, judge, Progress(progress))
    scored = _run_families(items, wanted, prof, Progress(progress), encoder,
                           tuple(row_order) if row_order is not None else tuple(s.id for s in samples), nli_answers)
    scores, details = _frames(scored.columns, scored.details)
    provenance = {m: scored.provenance[m] for m in wanted if m in scored.provenance}
    for m in provenance:
        if metric_info(m).needs_persona:
            provenance[m]["persona_input"] = PAPER_PERSONA_INPUT if persona_texts else SENTENCES_PERSONA_INPUT
    if references and reference_note is None:
        overridden = sum(1 for it in items if it.sid in references)
        reference_note = f"given by the caller for {overridden} sample(s)"
    if reference_note is not None:
        for m in provenance:
            if metric_info(m).needs_reference:
                provenance[m]["reference"] = reference_note
    return ScoreResult(scores, details, provenance, prof.key)


#: ``persona_input`` of a persona metric's provenance: what it compared the reply with.
PAPER_PERSONA_INPUT = "paper personas cell"
SENTENCES_PERSONA_INPUT = "persona sentences"


def paper_persona_texts(run: "Run | RunManifest", samples: Sequence["Sample"]) -> dict[str, str] | None:
    """Sample id -> the paper's persona text when ``run`` (a run, or the manifest of one being
    planned) is under the paper protocol, else None."""

    if protocol_of(run).name != PAPER:
        return None

    return {s.id: paper_persona_text(s) for s in samples}
