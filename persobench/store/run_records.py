"""Typed, versioned forms of what the stages record about a run in ``manifest.json``'s ``extra``.

The JSON keys are the ones PersoBench has always written (a reader that walks ``extra`` by hand
still works); these frozen dataclasses are how the library reads and writes them:

- :class:`GenerationRecord` (generation): start and end times, failure reason, :class:`Usage`, cost;
- ``counts`` (generation and import): replies per status;
- :class:`ImportRecord` (import): where published replies came from, with checksums;
- :class:`ProfileScores` per scoring profile (metrics): one :class:`MetricProvenance` per metric;
- :class:`ConcurrencyRecord` (generation with ``--concurrency auto``): how the adaptive limit moved;
- :class:`DatasetFileRecord` (generation from a user file): its absolute path and checksum;
- :class:`PacingRecord` (generation against a server that states its rate limits): how they paced it.

:class:`RunExtra` is all of it, read with :meth:`RunExtra.from_extra` (``RunManifest.details``).
Reading is lossless: a key this version does not model is kept in ``other`` and written back as
it was, so ``RunExtra.from_extra(extra).to_extra() == extra`` for every manifest the current
writers produce (a test checks it on a committed fixture).

:data:`SCHEMA_VERSION` is stored in ``manifest.json`` as ``schema_version``; manifests written
before the field existed have the same layout and read as version 1. A change of layout bumps the
version and teaches :meth:`RunExtra.from_extra` to read the old one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping, Self, TypeVar

#: Version of the manifest layout this code writes (``manifest.json``'s ``schema_version``).
SCHEMA_VERSION = 1

_T = TypeVar("_T")


def _split(cls: type, data: Mapping[str, Any], renames: Mapping[str, str] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(known field values, every other key) of ``data`` for dataclass ``cls``; ``renames`` maps
    JSON keys to field names where they differ."""
    renames = dict(renames or {})
    names = {f.name for f in dataclasses.fields(cls)} - {"other"}
    known, other = {}, {}
    for key, value in data.items():
        name = renames.get(key, key)
        if name in names:
            known[name] = value
        else:
            other[key] = value
    return known, other


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


class _OpenRecord:
    """Reads and writes a flat record whose unmodelled keys are kept, as read, in ``other``."""

    # Every subclass is a dataclass whose last field is ``other``; these say so to the type checker.
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]
    other: Mapping[str, Any]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        known, other = _split(cls, data)
        make: Callable[..., Self] = cls
        return make(**known, other=other)

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "other"}
        return {**data, **self.other}


@dataclass(frozen=True)
class Usage(_OpenRecord):
    """Tokens and requests of a generation run (``extra["usage"]``)."""

    prompt_tokens: int = 0
    """Prompt tokens the provider reported, summed over the finished samples."""
    completion_tokens: int = 0
    """Completion tokens the provider reported, summed over the finished samples."""
    samples_with_usage: int = 0
    """Finished samples whose provider reported usage (0: the token sums mean nothing)."""
    requests: int = 0
    """HTTP attempts made by the last process that generated the run (retries included)."""
    cached: int = 0
    """Finished samples served from the response cache."""
    other: Mapping[str, Any] = field(default_factory=dict)
    """Keys this version does not model, kept as read."""


@dataclass(frozen=True)
class GenerationRecord:
    """What the generation stage records: written when a run starts and when it ends."""

    started_at: str | None = None
    """UTC ISO-8601 time the last generation process started; ``None`` for imported runs."""
    failure_reason: str | None = None
    """Why the run failed or stopped ("the first 20 requests all failed: ..."); ``None`` otherwise."""
    finished_at: str | None = None
    """UTC ISO-8601 end time; ``None`` while running (and the fields below are then unset)."""
    usage: Usage | None = None
    """Token and request counts; ``None`` until the run ends."""
    cost_usd: float | None = None
    """Estimated USD from the model's prices; ``None`` when prices or usage are unknown."""
    baseline: bool | None = None
    """True for ``baseline:`` runs (floors and ceilings, not models); ``None`` until the run ends."""

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    def to_extra(self) -> dict[str, Any]:
        """The JSON keys, exactly as the generation stage writes them."""
        data: dict[str, Any] = {}
        if self.started_at is not None:
            data["started_at"] = self.started_at
        data["failure_reason"] = self.failure_reason
        if self.finished_at is not None:
            data.update(usage=self.usage.to_dict() if self.usage is not None else None, cost_usd=self.cost_usd,
                        finished_at=self.finished_at, baseline=self.baseline)
        return data


@dataclass(frozen=True)
class ImportRecord(_OpenRecord):
    """Where an imported run's replies came from (``extra["import"]``)."""

    folder: str | None = None
    """The imported folder (laid out like the paper's repository), absolute."""
    responses_file: str | None = None
    """The reply file the run was built from, absolute."""
    source: str | None = None
    """"processed" (the paper's post-processed replies) or "raw" (raw replies, parsed here)."""
    policy: str | None = None
    """Post-processing policy applied to raw replies ("paper"); ``None`` for processed files."""
    sha256: str | None = None
    """Checksum of ``responses_file``: an unchanged file is not imported again."""
    processed_twin: str | None = None
    """For raw replies, the processed file of the same model and mode, if there is one."""
    prompts_file: str | None = None
    """The prompt table the replies answer, row by row (the run's samples are read from it)."""
    prompts_sha256: str | None = None
    """Checksum of ``prompts_file``."""
    import_version: int | None = None
    """Version of the import code; a different one imports again."""
    other: Mapping[str, Any] = field(default_factory=dict)
    """Keys this version does not model, kept as read."""


@dataclass(frozen=True)
class MetricProvenance:
    """How one metric of one scoring profile was computed (``extra["scores"][profile]["metrics"][m]``)."""

    status: str
    """"ok", "degraded" (a fallback computed it) or "unavailable" (no value: see ``reason``)."""
    n: int = 0
    """Values computed (summed over scoring passes)."""
    reason: str = ""
    """Why the metric is degraded or unavailable, or a note ("no valid reply to score")."""
    model_id: str = ""
    """The model that computed the values ("" when no model ran)."""
    backend: str = ""
    """The implementation or backend slot ("nltk", "bert_score.BERTScorer on cpu", "nli" ...)."""
    revision_or_hash: str | None = None
    """The model's revision or file hash; ``None`` when not recorded."""
    metric_version: str | None = None
    """Version of the metric's code and settings; ``None`` when not recorded."""
    mixed_with: Mapping[str, Any] | None = None
    """The ``model_id``/``revision_or_hash``/``metric_version`` of earlier values of this run when a later
    pass used another model: the run's values mix two models."""
    persona_input: str | None = None
    """Persona metrics: what the reply was compared with ("paper personas cell" under the paper's
    protocol, else "persona sentences"); ``None`` for other metrics."""
    reference: str | None = None
    """Reference metrics not scored against the samples' own (label-free) reference, or an imported
    published run's recorded choice: which reference and why ("given by the caller for N sample(s)",
    "published run: stripped 'User2:' label, per datasets/published_references.py (...)");
    ``None`` otherwise."""
    other: Mapping[str, Any] = field(default_factory=dict)
    """Keys this version does not model, kept as read."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "MetricProvenance":
        known, other = _split(cls, data)
        known.setdefault("status", "")
        return cls(**known, other=other)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"status": self.status, "reason": self.reason, "model_id": self.model_id}
        for name in ("revision_or_hash", "metric_version"):
            if getattr(self, name) is not None:
                data[name] = getattr(self, name)
        data.update(backend=self.backend, n=self.n)
        if self.mixed_with is not None:
            data["mixed_with"] = dict(self.mixed_with)
        for name in ("persona_input", "reference"):
            if getattr(self, name) is not None:
                data[name] = getattr(self, name)
        return {**data, **self.other}

    @property
    def note(self) -> str:
        """``reason``, plus a warning when the values mix two models (for tables and boards)."""
        mixed = self.mixed_with
        if isinstance(mixed, Mapping) and mixed.get("model_id"):
            warning = f"values of this run mix {self.model_id} with earlier {mixed.get('model_id')}"
            return f"{self.reason}; {warning}" if self.reason else warning
        return self.reason


@dataclass(frozen=True)
class ProfileScores:
    """What one scoring profile computed for a run (``extra["scores"][profile key]``)."""

    metrics: Mapping[str, MetricProvenance] = field(default_factory=dict)
    """Metric name -> provenance, for every metric scored (or found unavailable) with this profile."""
    profile: Mapping[str, Any] | None = None
    """The profile as described when scoring (name, key, device, overrides, model per slot)."""
    updated_at: str | None = None
    """UTC ISO-8601 time of the last scoring pass."""
    other: Mapping[str, Any] = field(default_factory=dict)
    """Keys this version does not model, kept as read."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ProfileScores":
        if not isinstance(data.get("metrics"), Mapping):  # the first layout: the entry was the metrics
            data = {"metrics": data}
        known, other = _split(cls, data)
        metrics = {str(m): MetricProvenance.from_dict(info) for m, info in _mapping(known.pop("metrics", {})).items()
                   if isinstance(info, Mapping) and "status" in info}
        return cls(metrics=metrics, **known, other=other)

    def to_dict(self) -> dict[str, Any]:
        return {"profile": dict(self.profile) if self.profile is not None else None,
                "metrics": {m: p.to_dict() for m, p in self.metrics.items()}, "updated_at": self.updated_at,
                **self.other}


@dataclass(frozen=True)
class ConcurrencyRecord(_OpenRecord):
    """How the adaptive concurrency limit moved during a ``--concurrency auto`` run (``extra["concurrency"]``)."""

    mode: str = "auto"
    """The concurrency mode ("auto": the limit adapts to 429 and 5xx replies)."""
    final: int | None = None
    """The limit when the run ended."""
    highest: int | None = None
    """The highest limit reached."""
    decreases: int | None = None
    """How many times a 429 or 5xx halved the limit."""
    ceiling: int | None = None
    """``--max-concurrency``: the limit never went above it."""
    other: Mapping[str, Any] = field(default_factory=dict)
    """Keys this version does not model, kept as read."""


@dataclass(frozen=True)
class PacingRecord(_OpenRecord):
    """How a run was paced by the rate limits its server states (``extra["pacing"]``,
    :mod:`persobench.llm.pacing`); written when the server stated some."""

    limits: Mapping[str, float] = field(default_factory=dict)
    """The last stated limit per kind ("requests", "tokens", "input_tokens", "output_tokens"), per minute."""
    paced: int | None = None
    """Requests that waited for the budget before they were sent."""
    waited_s: float | None = None
    """Seconds those requests waited, summed."""
    refused: int | None = None
    """Attempts the server refused with HTTP 429."""
    other: Mapping[str, Any] = field(default_factory=dict)
    """Keys this version does not model, kept as read."""


@dataclass(frozen=True)
class DatasetFileRecord(_OpenRecord):
    """The user file a generated run's samples came from (``extra["dataset_file"]``)."""

    path: str | None = None
    """The file's absolute path when the run was generated."""
    sha256: str | None = None
    """Checksum of the file's bytes then: a changed file is never read as this run's inputs."""
    other: Mapping[str, Any] = field(default_factory=dict)
    """Keys this version does not model, kept as read."""


#: JSON keys of ``extra`` written by the generation stage.
_GENERATION_KEYS = ("started_at", "failure_reason", "finished_at", "usage", "cost_usd", "baseline")


@dataclass(frozen=True)
class RunExtra:
    """Everything the stages recorded about a run: ``manifest.json``'s ``extra``, typed."""

    generation: GenerationRecord | None = None
    """Written by the generation stage; ``None`` for runs it never ran (imports)."""
    counts: Mapping[str, int] | None = None
    """Finished samples per status ("ok", "invalid_json" ..., plus "pending" for generated runs)."""
    imported: ImportRecord | None = None
    """Provenance of an imported run (JSON key ``import``); ``None`` for generated runs."""
    scores: Mapping[str, ProfileScores] | None = None
    """Profile key -> what that scoring profile computed; ``None`` before any scoring."""
    concurrency: ConcurrencyRecord | None = None
    """How the adaptive concurrency limit moved; ``None`` unless the run used ``--concurrency auto``."""
    dataset_file: DatasetFileRecord | None = None
    """The user file the samples came from; ``None`` for registered datasets and imports."""
    pacing: PacingRecord | None = None
    """How the server's stated rate limits paced the run; ``None`` when it stated none."""
    other: Mapping[str, Any] = field(default_factory=dict)
    """Keys this version does not model (other stages' notes), kept as read."""

    @classmethod
    def from_extra(cls, extra: Mapping[str, Any] | None) -> "RunExtra":
        """Read ``extra`` (schema version 1) without dropping anything."""
        extra = _mapping(extra)
        generation = None
        if any(key in extra for key in _GENERATION_KEYS):
            usage = extra.get("usage")
            generation = GenerationRecord(
                started_at=extra.get("started_at"), failure_reason=extra.get("failure_reason"),
                finished_at=extra.get("finished_at"),
                usage=Usage.from_dict(usage) if isinstance(usage, Mapping) else None,
                cost_usd=extra.get("cost_usd"), baseline=extra.get("baseline"),
            )
        counts = extra.get("counts")
        imported = extra.get("import")
        scores = extra.get("scores")
        concurrency = extra.get("concurrency")
        dataset_file = extra.get("dataset_file")
        pacing = extra.get("pacing")
        typed = {"dataset_file": isinstance(dataset_file, Mapping), "concurrency": isinstance(concurrency, Mapping),
                 "pacing": isinstance(pacing, Mapping)}
        other = {k: v for k, v in extra.items()
                 if k not in (*_GENERATION_KEYS, "counts", "import", "scores") and not typed.get(k)}
        return cls(
            generation=generation,
            counts=dict(counts) if isinstance(counts, Mapping) else None,
            imported=ImportRecord.from_dict(imported) if isinstance(imported, Mapping) else None,
            scores=({str(k): ProfileScores.from_dict(v) for k, v in scores.items() if isinstance(v, Mapping)}
                    if isinstance(scores, Mapping) else None),
            concurrency=ConcurrencyRecord.from_dict(concurrency) if isinstance(concurrency, Mapping) else None,
            dataset_file=DatasetFileRecord.from_dict(dataset_file) if isinstance(dataset_file, Mapping) else None,
            pacing=PacingRecord.from_dict(pacing) if isinstance(pacing, Mapping) else None,
            other=other,
        )

    def to_extra(self) -> dict[str, Any]:
        """The JSON form, with the keys the stages have always written."""
        data: dict[str, Any] = {}
        if self.generation is not None:
            data.update(self.generation.to_extra())
        if self.counts is not None:
            data["counts"] = dict(self.counts)
        if self.imported is not None:
            data["import"] = self.imported.to_dict()
        if self.scores is not None:
            data["scores"] = {k: v.to_dict() for k, v in self.scores.items()}
        if self.concurrency is not None:
            data["concurrency"] = self.concurrency.to_dict()
        if self.dataset_file is not None:
            data["dataset_file"] = self.dataset_file.to_dict()
        if self.pacing is not None:
            data["pacing"] = self.pacing.to_dict()
        return {**data, **self.other}

    def profile_scores(self, profile: str) -> ProfileScores:
        """What ``profile`` computed (empty when the run was never scored with it)."""
        return (self.scores or {}).get(profile) or ProfileScores()

    @property
    def usage(self) -> Usage:
        """Token and request counts (zeros when the run recorded none)."""
        return (self.generation.usage if self.generation is not None else None) or Usage()

    @property
    def cost_usd(self) -> float | None:
        return self.generation.cost_usd if self.generation is not None else None
