"""What a metric family is: the small object that computes the metrics sharing one model or one pass.

A family (HELM's ``Metric`` is the model) scores one batch of valid replies for the metrics of its
own that were asked for, and returns rows, provenance and, for families later ones depend on, named
outputs. Which metrics a family owns, and whether each needs a reference or a persona, is read from
the registry (:class:`persobench.metrics.MetricInfo`), never listed again here.

A family that reads another family's results says so in :attr:`MetricFamily.requires` (for example
persona coverage reads the NLI family's per-sentence labels); the scorer then runs the provider
first, asks it for that output, and fails loudly if the provider does not deliver it. There is no
other ordering between families.

Cheap to import: no numpy, torch or pandas here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence
from persobench.metrics.backends import SlotModel, Profile
from persobench.records import Sample
from persobench.metrics.encoders.encoder import TextEncoder
from persobench.metrics.metric_registry import MetricRegistryError, metric_info
from persobench.metrics.backends import BackendUnavailable


ProgressFn = Callable[[str, int, int], None]


class Advance(Protocol):
    """``advance(k=1)``: ``k`` more items of a stage are done."""

    def __call__(self, k: int = 1) -> None: ...


@dataclass(frozen=True)
class Item:
    """One valid reply to score, with what its metrics compare it to."""

    sample: "Sample"
    """The dataset sample the reply answers."""
    reply: str
    """The reply text (never blank)."""
    reference: str
    """The reference reply ("" when the sample has none; reference metrics then skip it)."""
    persona_sentences: tuple[tuple[str, str], ...]
    """(speaker, sentence) of every non-blank persona sentence of the sample, in source order."""
    given_persona_text: str | None = None
    """The persona text chosen by the caller (under the paper protocol: the paper's ``personas``
    cell, :func:`persobench.datasets.paper_cells.paper_persona_text`); None for the sentences."""

    @property
    def sid(self) -> str:
        return self.sample.id

    @property
    def persona_text(self) -> str:
        """The persona text that persona metrics (IDF overlap, persona distance, NLI and UniEval
        inputs) read: :attr:`given_persona_text`, else all persona sentences joined by one space."""
        if self.given_persona_text is not None:
            return self.given_persona_text
        return " ".join(s for _, s in self.persona_sentences)


@dataclass(frozen=True)
class Requirement:
    """An output of another family that a family reads."""

    family: str
    """Name of the family that provides it."""
    output: str
    """Name of the output, one of that family's :attr:`MetricFamily.provides`."""


class Progress:
    """Turns ``progress(stage, done, total)`` callbacks into per-stage ``advance(k)`` functions."""

    def __init__(self, fn: ProgressFn | None) -> None:
        self.fn = fn

    def stage(self, name: str, total: int) -> Advance:
        done = [0]
        if self.fn is not None:
            self.fn(name, 0, total)

        def advance(k: int = 1) -> None:
            done[0] += k
            if self.fn is not None:
                self.fn(name, min(done[0], total), total)

        return advance


@dataclass(frozen=True)
class FamilyBatch:
    """What a family is given: the replies, its requested metrics, the profile and its inputs."""

    items: Sequence[Item]
    """Every valid reply of the batch (a family filters with :meth:`applicable`)."""
    metrics: tuple[str, ...]
    """This family's requested metrics, in display order (may be empty when the family runs only
    because a later family requires one of its outputs)."""
    profile: "Profile"
    """Which model fills each backend slot."""
    progress: Progress
    """Progress reporting: ``advance = batch.progress.stage(name, total)``."""
    inputs: Mapping[str, Any] = field(default_factory=dict)
    """The outputs this family :attr:`~MetricFamily.requires`, by output name."""
    outputs_wanted: frozenset[str] = frozenset()
    """Which of this family's :attr:`~MetricFamily.provides` a later family reads in this batch."""
    encoder: Any = None
    """The :class:`persobench.metrics.encoders.encoder.TextEncoder` that embeds texts for BERTScore and
    persona similarity (already holding what every family's :meth:`MetricFamily.embedding_request`
    asked for); None outside the scorer: use :meth:`text_encoder`."""
    row_order: tuple[str, ...] = ()
    """Every sample id of the run in its rows' order, valid reply or not (the paper's UniEval scorer
    batches by row position); empty: the items' own order."""
    nli_answers: Any = None
    """With a judge in the profile: its answers to this batch's NLI pairs
    (:class:`persobench.metrics.judge.judge_session.NLIAnswers`), which the NLI family reads in place of the
    classifier (it never sends); None without a judge."""

    def text_encoder(self) -> Any:
        """:attr:`encoder`, or a new one without a disk cache."""
        if self.encoder is not None:
            return self.encoder

        return TextEncoder(self.profile)

    def applicable(self, metric: str) -> list[Item]:
        """The items ``metric`` is defined for (reference / persona present when it needs one)."""

        info = metric_info(metric)
        return [it for it in self.items if info.defined_for(it.reference, bool(it.persona_sentences))]

    def load_model(self, slot: str, loader: Callable[["SlotModel", str], Any],
                   result: "FamilyResult") -> tuple[Any | None, str]:
        """``(model, "")`` from ``loader(spec, device)`` for the profile's ``slot``; when the model cannot
        be loaded, ``(None, reason)`` after recording this batch's metrics as unavailable."""

        spec = self.profile.spec(slot)
        try:
            return loader(spec, self.profile.device), ""
        except BackendUnavailable as exc:
            result.unavailable(self.metrics, str(exc), spec.model_id or "")
            return None, str(exc)


@dataclass
class FamilyResult:
    """What a family returns."""

    rows: list[tuple[str, str, float]] = field(default_factory=list)
    """``(sample_id, metric, value)`` per computed value."""
    columns: list[tuple[Sequence[str], "str | Sequence[str]", Sequence[float]]] = field(default_factory=list)
    """Values computed a column at a time, ``(sample ids, metric, values)``, one value per id: stored
    as :attr:`rows` are (the family's columns first), without a tuple per value (a lexical pass
    makes 336,000). In the result of a whole pass, a family's rows become one more column whose
    metric is a list, one name per value."""
    provenance: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per requested metric: see :func:`provenance`."""
    details: list[tuple] = field(default_factory=list)
    """Rows of ``persona_details`` (:data:`persobench.metrics.sample_scores.DETAIL_COLUMNS`)."""
    outputs: dict[str, Any] = field(default_factory=dict)
    """Named results later families read (only those in :attr:`FamilyBatch.outputs_wanted`)."""

    def add(self, sid: str, metric: str, value: float) -> None:
        self.rows.append((sid, metric, float(value)))

    def add_column(self, sids: Sequence[str], metric: str, values: Sequence[float]) -> None:
        """One value of ``metric`` per sample of ``sids`` (floats; the lists are kept, not copied)."""
        if len(sids) != len(values):
            raise MetricRegistryError(f"metric family column {metric!r}: {len(values)} values for {len(sids)} samples")
        self.columns.append((sids, metric, values))

    def record(self, metric: str, status: str, **facts: Any) -> None:
        """Provenance of ``metric``; ``facts`` are the keyword arguments of :func:`provenance`."""
        self.provenance[metric] = provenance(status, **facts)

    def unavailable(self, metrics: Iterable[str], reason: str, model_id: str = "") -> None:
        for metric in metrics:
            self.record(metric, "unavailable", reason=reason, model_id=model_id)


def provenance(status: str, *, reason: str = "", model_id: str = "", revision: str = "", version: str = "",
               backend: str = "", n: int = 0) -> dict[str, Any]:
    """One metric's provenance record as stored in run manifests (``extra.scores.<profile>.metrics``)."""
    return {"status": status, "reason": reason, "model_id": model_id, "revision_or_hash": revision,
            "metric_version": version, "backend": backend, "n": n}


class MetricFamily:
    """Base of every metric family: a name, what it reads from other families, what it offers them,
    and :meth:`score`. Register a new one with :func:`persobench.metrics.register_family`."""

    name: str = ""
    """Registry name; every :class:`~persobench.metrics.MetricInfo` of the family has ``family=name``."""
    requires: tuple[Requirement, ...] = ()
    """Outputs of other families this one reads; those families run first."""
    provides: tuple[str, ...] = ()
    """Outputs this family can deliver to later families when asked (:attr:`FamilyBatch.outputs_wanted`)."""

    def score(self, batch: FamilyBatch) -> FamilyResult:  # pragma: no cover - abstract
        raise NotImplementedError

    def reads_personas(self, metrics: Sequence[str]) -> bool:  # noqa: ARG002 - overridden
        """Whether computing ``metrics`` (or this family's outputs) reads the items' persona sentences;
        when no family of a pass does, the items are built without them."""
        return True

    def embedding_request(self, batch: FamilyBatch) -> Any:  # noqa: ARG002 - overridden
        """The texts :meth:`score` will embed (a :class:`persobench.metrics.encoders.encoder.EmbeddingRequest`),
        or None: the scorer embeds the requests of all families, and of many runs, in one pass."""
        return None

    def __repr__(self) -> str:
        return f"<metric family {self.name}>"
