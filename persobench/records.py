"""Typed, immutable records that flow through the pipeline.

Every stage reads and writes these (or their dict form on disk), so a sample keeps its
stable id from the dataset loader to the leaderboard and tables are never joined by position.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any, Mapping
import re

__all__ = ["USER1", "USER2", "PersonaSet", "Sample", "Turn", "natural_key", "other_speaker"]

#: Canonical speaker labels. Source labels such as "User 1", "[User 1 persona]" or
#: "[Responder persona]" are normalised to these.
USER1 = "User1"
USER2 = "User2"


@dataclass(frozen=True)
class Turn:
    """One utterance of the dialogue context."""

    speaker: str
    """Canonical speaker label ("User1" or "User2")."""
    text: str
    """The utterance with its speaker prefix removed and whitespace trimmed."""


@dataclass(frozen=True)
class PersonaSet:
    """The persona sentences that describe one speaker."""

    speaker: str
    """Canonical label of the speaker these sentences describe."""
    sentences: tuple[str, ...]
    """The persona facts, one sentence each, in source order."""


@dataclass(frozen=True)
class Sample:
    """One benchmark item: personas and context in, the responder's next turn expected."""

    id: str
    """Stable id ``"<dataset>:<source index>"``; the same on every machine and never a row position
    of a derived table."""
    dataset: str
    """Registered name of the dataset the sample came from."""
    personas: tuple[PersonaSet, ...]
    """Personas grouped by speaker, in source order; empty when the source has none."""
    context: tuple[Turn, ...]
    """The dialogue so far, oldest turn first. A single turn is a one-question context."""
    responder: str
    """Canonical label of the speaker whose next turn the model must write."""
    reference: str
    """The gold next turn with any speaker label stripped."""
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    """Provenance: source file or split, original row, and loader-specific notes."""

    def __hash__(self) -> int:
        """The hash of the compared fields, as the dataclass would compute it, once per object:
        scoring looks a sample up in caches for every reply to it (58 runs share a dataset's
        samples), and hashing its nested personas and context each time cost a tenth of a pass."""
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(tuple(getattr(self, f.name) for f in fields(self)
                                if (f.compare if f.hash is None else f.hash)))
            self.__dict__["_hash"] = cached  # frozen: as functools.cached_property stores its value
        return cached

    def __getstate__(self) -> dict[str, Any]:
        # A string's hash differs between processes: a copy sent to a worker computes its own.
        state = dict(self.__dict__)
        state.pop("_hash", None)
        return state

    def persona_sentences(self, speaker: str | None = None) -> list[str]:
        """All persona sentences, or those of one speaker."""
        return [s for p in self.personas if speaker is None or p.speaker == speaker for s in p.sentences]

    @property
    def is_single_query(self) -> bool:
        """True when the context is one utterance to answer, not a conversation."""
        return len(self.context) == 1

    @cached_property
    def input_hash(self) -> str:
        """sha256 of what a reply to this sample is generated from and scored against (personas,
        context, responder, reference); metadata is left out. Scores record it, so a value computed
        against other inputs is recognised as stale. Computed once per sample object (the sample is
        immutable; scoring reads it for every value's basis)."""
        payload = {"personas": [[p.speaker, list(p.sentences)] for p in self.personas],
                   "context": [[t.speaker, t.text] for t in self.context],
                   "responder": self.responder, "reference": self.reference}
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; :meth:`from_dict` inverts it exactly."""
        return {
            "id": self.id,
            "dataset": self.dataset,
            "personas": [{"speaker": p.speaker, "sentences": list(p.sentences)} for p in self.personas],
            "context": [{"speaker": t.speaker, "text": t.text} for t in self.context],
            "responder": self.responder,
            "reference": self.reference,
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Sample":
        return cls(
            id=data["id"],
            dataset=data["dataset"],
            personas=tuple(PersonaSet(p["speaker"], tuple(p["sentences"])) for p in data["personas"]),
            context=tuple(Turn(t["speaker"], t["text"]) for t in data["context"]),
            responder=data["responder"],
            reference=data["reference"],
            metadata=dict(data.get("metadata") or {}),
        )


def other_speaker(speaker: str) -> str:
    """The conversation partner of ``speaker`` in a two-party dialogue."""
    return USER1 if speaker == USER2 else USER2


def natural_key(sample_id: str) -> tuple[Any, ...]:
    """Sort key that puts ``sample:2`` before ``sample:10``."""

    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(sample_id)))
