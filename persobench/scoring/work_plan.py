"""The plan step of scoring a stored run: what it still lacks (:class:`~persobench.scoring.writing.RunWork`),
read from its stored scores, and the samples its replies answer.

Planning reads the store and never writes; the compute step (:mod:`persobench.scoring.compute`)
then needs nothing but the work, so it can run in this process or on a Ray actor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from persobench.errors import PersoBenchError, ScoringError, StoreError
from persobench.metrics.backends import Profile, get_profile
from persobench.generation.importer import run_reference_note, run_references
from persobench.metrics import lexical
from persobench.metrics.family import Item, MetricFamily
from persobench.metrics.metric_registry import metric_info, metric_names, validate_metric_names
from persobench.metrics.nli_inputs import NLIInput, resolve_layout
from persobench.metrics.unieval import PAPER_SCORER
from persobench.metrics.sample_scores import items_of, paper_persona_texts, embedding_request, family_plan
from persobench.metrics.sample_scores import items_nli_pairs  # noqa: F401 - the scoring stage's name for it
from persobench.metrics.stored import score_basis, stored_keys
from persobench.scoring.writing import RunScoreSummary, RunWork
from persobench.metrics.encoders.encoder import EmbeddingRequest
from persobench.records import Sample
from persobench.store.run_store import Run
from persobench.datasets import samples_by_id
from persobench.store.files import read_parquet_lists, sha256_file
from persobench.generation.importer import samples_for_run



def plan_run(run: "Run", samples_by_id: Mapping[str, "Sample"], *, profile: "str | Profile" = "offline",
             metrics: Sequence[str] | None = None, overrides: Mapping[str, str] | None = None,
             references: Mapping[str, str] | None = None) -> RunWork:
    """The plan step of :func:`score_run`: what ``run`` lacks under ``profile`` (its ``ok`` replies,
    their bases, and per metric the samples without a current value), read from its stored scores.

    Raises :class:`ScoringError` when the generations table lacks its columns or names samples
    that ``samples_by_id`` does not have."""
    prof = get_profile(profile, overrides) if not isinstance(profile, Profile) else profile
    wanted = validate_metric_names(list(metrics) if metrics is not None else None)
    reference_note = None  # references the caller gave: score_samples says so
    if references is None:  # an imported published run: the reference the paper scored it against
        references = run_references(run, samples_by_id)
        reference_note = run_reference_note(run)
    prof = resolve_layout(prof, run)  # NLI/UniEval inputs: the notebooks' layout under the paper protocol
    # Only the columns planning reads (the raw outputs and reasoning are most of the table's bytes),
    # as lists: planning walks them in Python, and a DataFrame cost five times the read.
    path = run.table_path("generations")
    generations = read_parquet_lists(path, ("sample_id", "status", "response"))
    if "status" not in generations or "sample_id" not in generations:
        raise ScoringError(f"{path}: needs sample_id and status columns")
    if "response" not in generations:
        raise ScoringError(f"{path}: no response column")
    replies: dict[str, str] = {}
    invalid_ids: list[str] = []
    for sid, status, text in zip(generations["sample_id"], generations["status"], generations["response"]):
        if status == "ok":
            replies[str(sid)] = "" if text is None or (isinstance(text, float) and text != text) else str(text)
        else:
            invalid_ids.append(str(sid))
    missing = [sid for sid in replies if sid not in samples_by_id]
    if missing:
        raise ScoringError(
            f"run {run.run_id}: {len(missing)} sample id(s) not in dataset {run.manifest.dataset!r} "
            f"(first: {', '.join(missing[:3])})")

    summary = RunScoreSummary(run.run_id, prof.key, skipped_invalid=len(invalid_ids))
    # What each valid reply has, worked out once (not once per metric): (reference, persona) present.
    # Whether a sample has persona sentences matters only to metrics that read them.
    reads_persona_sentences = any(metric_info(m).needs_persona for m in wanted)
    present: dict[str, tuple[str, bool]] = {}
    bases: dict[str, str] = {}
    for sid, reply in replies.items():
        if reply.strip():
            sample = samples_by_id[sid]
            reference = str((references.get(sid, sample.reference) if references else sample.reference) or "")
            present[sid] = (reference, reads_persona_sentences and bool(sample.persona_sentences()))
            bases[sid] = score_basis(sample, reply, reference)
    have: dict[str, set[str]] = {}
    for metric, sid, basis in stored_keys(run, prof.key):
        if bases.get(sid) == basis:  # a value computed from another reply or other inputs is stale
            have.setdefault(metric, set()).add(sid)

    todo: dict[str, frozenset[str]] = {}
    # Which samples a metric is defined for depends only on whether it reads a reference and a
    # persona: worked out once per such pair, not once per metric (six lexical metrics share one).
    defined: dict[tuple[bool, bool], list[str]] = {}
    for metric in wanted:
        stored = have.get(metric, set())
        info = metric_info(metric)
        kind = (info.needs_reference, info.needs_persona)
        if kind not in defined:
            defined[kind] = [sid for sid, (reference, has_persona) in present.items()
                             if info.defined_for(reference, has_persona)]
        need = frozenset(sid for sid in defined[kind] if sid not in stored) if stored else frozenset(defined[kind])
        if need and info.family == "unieval" and prof.unieval_scorer == PAPER_SCORER:
            need, stored = frozenset(defined[kind]), set()  # the slip makes each value depend on the whole run
        summary.cached[metric] = len(stored)
        if need:
            todo[metric] = need
    invalid = frozenset(invalid_ids)
    ids = set().union(*todo.values()) if todo else set()
    samples = tuple(samples_by_id[sid] for sid in replies if sid in ids)
    # The paper's persona cells are read by persona metrics only (rebuilding them costs more than
    # scoring BLEU): a run lacking none of those does not need them.
    reads_persona = any(metric_info(m).needs_persona for m in todo)
    # In a pass with a lexical worker pool, its workers start on this run now (the replies and
    # references its lexical family will be given), while the run before it is still computed.
    lexical.send_ahead([present[s.id][0] for s in samples], [replies[s.id] for s in samples], todo)
    return RunWork(run.run_id, prof, wanted, replies, bases, invalid, todo, summary, samples,
                   dict(references) if references else None,
                   paper_persona_texts(run, samples) if samples and reads_persona else None, reference_note,
                   tuple(str(sid) for sid in generations["sample_id"]))


def work_items(work: RunWork) -> list[Item]:
    """The replies the compute step scores for ``work`` (every sample some metric still needs)."""
    ids = work.sample_ids
    return items_of(work.samples, {sid: work.replies[sid] for sid in ids}, work.references, work.persona_texts)


def work_embedding_request(work: RunWork, metrics: Sequence[str] | None = None) -> "EmbeddingRequest":
    """The texts the compute step of ``work`` (of ``metrics`` only, when given) will embed."""

    todo = [m for m in work.todo if metrics is None or m in metrics]
    if not todo or not embeds_texts(todo):  # e.g. lexical metrics: no item built for an empty request
        return EmbeddingRequest()
    return embedding_request(work_items(work), todo, work.profile)


def embeds_texts(metrics: Sequence[str] | None) -> bool:
    """Whether scoring ``metrics`` (None: every metric) may embed texts (a family of theirs does)."""
    return any(_embeds(step.family) for step in family_plan(validate_metric_names(
        list(metrics) if metrics is not None else None)))


def run_embedding_request(run: "Run", samples_by_id: Mapping[str, "Sample"], *,
                          profile: "str | Profile" = "offline", metrics: Sequence[str] | None = None,
                          references: Mapping[str, str] | None = None) -> "EmbeddingRequest":
    """The texts :func:`score_run` would embed for ``run`` (only for the scores it lacks), so a
    caller scoring many runs can embed them all in one pass first (the ``score`` command)."""
    if not embeds_texts(metrics):
        # Nothing to embed (e.g. lexical metrics only): planning the run here would read its tables
        # and hash every reply's basis a second time, for an empty request.

        return EmbeddingRequest()
    return work_embedding_request(plan_run(run, samples_by_id, profile=profile, metrics=metrics,
                                           references=references))


def run_nli_pairs(run: "Run", samples_by_id: Mapping[str, "Sample"], *, profile: "str | Profile" = "offline",
                  metrics: Sequence[str] | None = None,
                  references: Mapping[str, str] | None = None) -> "list[NLIInput]":
    """The (premise, hypothesis) pairs :func:`score_run` would have labelled for ``run`` (only for the
    NLI-based scores it lacks), so ``score --judge --dry-run`` can count and price them."""

    work = plan_run(run, samples_by_id, profile=profile, metrics=metrics, references=references)
    if not work.todo:
        return []
    ids = set().union(*work.todo.values())
    samples = [samples_by_id[sid] for sid in work.replies if sid in ids]
    items = items_of(samples, {sid: work.replies[sid] for sid in ids}, work.references,
                   paper_persona_texts(run, samples))
    return items_nli_pairs(items, tuple(work.todo), work.profile)


def _embeds(family: MetricFamily) -> bool:
    """Whether ``family`` may ask for texts to be embedded (it overrides ``embedding_request``)."""
    return type(family).embedding_request is not MetricFamily.embedding_request




#: Backend slots whose models are torch networks (worth a GPU); the others run on CPUs.
GPU_SLOTS = frozenset({"bertscore", "embedding", "nli", "unieval"})


@dataclass(frozen=True)
class FamilyGroup:
    """Metric families scored together by one actor: a family and the families it requires."""

    families: tuple[str, ...]
    """Family names, in plan order."""
    metrics: tuple[str, ...]
    """The requested metrics these families compute."""
    gpu: bool
    """Whether one of its families runs a torch model (it then asks for a GPU when there is one)."""
    embeds: bool = False
    """Whether one of its families may ask for texts to be embedded (the text encoder's work)."""


def family_groups(wanted: Sequence[str]) -> list[FamilyGroup]:
    """The families of ``wanted`` (and those they require), grouped so that a family and the families
    it requires are in one group (their outputs stay in one process); groups in plan order."""

    steps = family_plan(tuple(wanted))
    group_of = {step.family.name: i for i, step in enumerate(steps)}
    for step in steps:  # union: a family joins the groups of the families it requires
        for req in step.family.requires:
            old, new = group_of[step.family.name], group_of[req.family]
            group_of = {name: (new if g == old else g) for name, g in group_of.items()}
    groups: dict[int, list[Any]] = {}
    for step in steps:
        groups.setdefault(group_of[step.family.name], []).append(step)
    result = []
    for members in groups.values():
        names = tuple(step.family.name for step in members)
        metrics = tuple(m for step in members for m in step.metrics)
        slots = {metric_info(m).needs for name in names for m in metric_names(family=name)}
        result.append(FamilyGroup(names, metrics, bool(slots & GPU_SLOTS), any(_embeds(s.family) for s in members)))
    return result


def split_by_embedding(wanted: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``wanted`` as (metrics whose family groups embed no text, the others): the first need nothing
    from the text encoder, so they can be computed while it embeds (:class:`~persobench.scoring.executors.LocalExecutor`)."""
    groups = family_groups(wanted)
    return (tuple(m for g in groups if not g.embeds for m in g.metrics),
            tuple(m for g in groups if g.embeds for m in g.metrics))


def by_dataset(runs: Iterable["Run"]) -> list[list["Run"]]:
    """Runs grouped by dataset, in order of first appearance (the runs of a dataset share texts)."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(str(run.manifest.dataset), []).append(run)
    return list(groups.values())


def run_samples(run: "Run", *, datasets: dict[str, dict[str, "Sample"]] | None = None) -> dict[str, "Sample"]:
    """Sample id -> the inputs ``run``'s replies answer, which is what its scores are computed against.

    A run records its samples when it is generated (``samples.parquet``), so an edited, moved or
    replaced dataset file never changes its scores. An imported run reads the prompt table it was
    imported with. A run made before runs recorded their samples reads its dataset, and is refused
    (:class:`~persobench.errors.StoreError` naming the file) when that dataset is a file whose
    checksum no longer matches the one recorded at generation time. ``datasets``: a per-call cache
    of loaded registered datasets."""
    recorded = run.recorded_samples()
    if recorded is not None:
        return recorded
    details = run.manifest.details
    if details.imported is not None and details.imported.prompts_file:

        try:
            return samples_for_run(run)
        except (PersoBenchError, KeyError, ValueError, OSError) as exc:
            raise StoreError(f"run {run.run_id}: cannot read its imported prompt table "
                             f"{details.imported.prompts_file}: {exc}") from None
    _check_dataset_file(run)

    name = run.manifest.dataset
    cache = datasets if datasets is not None else {}
    try:
        if name not in cache:
            cache[name] = samples_by_id(name)
        everything = cache[name]
        return {sid: everything[sid] for sid in run.manifest.sample_ids}
    except KeyError as exc:
        raise StoreError(f"run {run.run_id}: sample {exc.args[0]!r} is not in dataset {name!r} any more") from None
    except (PersoBenchError, ValueError, OSError) as exc:
        raise StoreError(f"run {run.run_id}: cannot load the samples of dataset {name!r}: {exc}") from None


def _check_dataset_file(run: "Run") -> None:
    """Refuse to read a user file that changed or moved since the run was generated from it."""

    record = run.manifest.details.dataset_file
    if record is None or not record.path:
        return
    try:
        digest = sha256_file(record.path)
    except OSError:
        raise StoreError(f"{record.path}: the dataset file run {run.run_id} was generated from is gone; put it "
                         "back to score the run") from None
    if digest != record.sha256:
        raise StoreError(f"{record.path}: the dataset file changed since run {run.run_id} was generated from it "
                         "(checksum differs); its scores would no longer match its replies. Restore the file, or "
                         "generate the run again")
