"""A batch state file (``<run>/batch.json``, ``<home>/batches/judge-*.json``): every batch submitted
for a run or a judge, as :mod:`persobench.llm.batch_driver` records it, read back strictly.

The file holds the batch ids, so a command that finds it damaged says so in one line naming it and
sends nothing (it cannot tell which requests a batch still running would answer); listings
(:func:`batch_listing`, ``batches``, ``runs``, the New run page) name it and show every other file.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from persobench.errors import PersoBenchError
from persobench.store.files import atomic_write_json

#: The state file of a run's batches, in the run folder.
STATE_FILE = "batch.json"


@dataclass
class BatchEntry:
    """One submitted batch as the state file records it."""

    token: str
    """Our tag of the submission, known before the server answers: the prefix of its custom ids
    (``tagged``) and OpenAI's batch ``metadata``, by which a batch whose id was lost is found again."""
    keys: list[str]
    """The cache keys it asks for."""
    submitted_at: float
    """Unix time just before submitting."""
    batch_id: str | None = None
    """The provider's id; ``None`` while the submission's answer was not recorded yet."""
    resubmission: bool = False
    """It asks again for what an expired (or cancelled) batch left unanswered (never resubmitted itself)."""
    state: str = "submitting"
    """The provider's last reported state."""
    counts: dict[str, int] = field(default_factory=dict)
    """``total``, ``succeeded``, ``failed`` as last reported."""
    collected: bool = False
    """Its results were read and cached."""
    usage: dict[str, int] = field(default_factory=dict)
    """Of the replies it cached: ``replies``, ``prompt_tokens``, ``completion_tokens``."""
    answered: list[str] = field(default_factory=list)
    """The cache keys of the replies it cached (priced at batch prices in the run's cost); empty in
    state files written before this field."""
    updated_at: str = ""
    """When this entry last changed (UTC, ISO 8601)."""
    tagged: bool = False
    """Its custom ids are ``<token>-<n>``, ``n`` a key's place in :attr:`keys`
    (:func:`persobench.providers.batch_api.custom_id`); ``False`` in state files written before: the
    custom id is the cache key."""
    failure: str = ""
    """Why the batch failed as a whole (refused by the provider, or every line an error), scrubbed;
    ``""`` otherwise. Its requests are sent one by one only when the user says so (``--batch-fallback``)."""


@dataclass
class BatchState:
    """A state file: the provider and every batch submitted for this run (or judge)."""

    provider: str
    """Provider of the batches."""
    batches: list[BatchEntry] = field(default_factory=list)
    """In submission order."""

    @property
    def active(self) -> list[BatchEntry]:
        return [b for b in self.batches if not b.collected]

    def waiting(self) -> str | None:
        """``N request(s) wait on the provider (batch_x in_progress, as last seen)``; ``None`` when
        every batch is collected."""
        active = self.active
        if not active:
            return None
        seen = ", ".join(f"{b.batch_id or '(submitting)'} {b.state}" for b in active)
        return f"{sum(len(b.keys) for b in active)} request(s) wait on the provider ({seen}, as last seen)"

    @property
    def answered(self) -> frozenset[str]:
        """The cache keys whose reply a batch of this state answered."""
        return frozenset(k for b in self.batches for k in b.answered)

    def to_dict(self) -> dict[str, Any]:
        return {"version": 1, "provider": self.provider, "batches": [dataclasses.asdict(b) for b in self.batches]}

    @classmethod
    def read(cls, path: Path, provider: str) -> "BatchState":
        """The state at ``path``, or an empty one when there is no file; a file this code cannot
        read, or whose fields are not what it wrote, is one :class:`PersoBenchError` line naming it."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"), parse_constant=_no_constant)
            if not isinstance(data, dict):
                raise ValueError(f"expected an object, found {type(data).__name__}")
            batches = data.get("batches", [])
            if not isinstance(batches, list):
                raise ValueError("batches is not a list")
            return cls(_text(data.get("provider") or provider, "provider"),
                       [_entry(item, n) for n, item in enumerate(batches, start=1)])
        except FileNotFoundError:
            return cls(provider)
        except (OSError, ValueError, TypeError, RecursionError) as exc:
            raise PersoBenchError(f"{path}: unreadable batch state ({exc}); move it aside only if no batch of it is "
                                  "still running (it holds the batch ids)") from None

    def write(self, path: Path) -> None:
        atomic_write_json(path, self.to_dict())


# --- checking what a state file holds --------------------------------------------------------------

_TOKEN = re.compile(r"[A-Za-z0-9]{1,40}")
_BATCH_ID = re.compile(r"[A-Za-z0-9_.:-]{1,200}")
#: The latest time a state file may name (the year 9999): beyond it no clock can show it.
_LAST_TIME = 253402300799.0


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number this file holds")


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name} is not text")
    return value


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} is not true or false")
    return value


def _texts(value: Any, name: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{name} is not a list of text")
    return list(value)


def _counts(value: Any, name: str) -> dict[str, int]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and type(v) is int and v >= 0
                                              for k, v in value.items()):
        raise ValueError(f"{name} is not an object of whole numbers")
    return dict(value)


def _time(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 <= value <= _LAST_TIME:
        raise ValueError(f"{name} is not a time")
    return float(value)


def _pattern(pattern: re.Pattern[str]) -> Callable[[Any, str], str]:
    def check(value: Any, name: str) -> str:
        if not isinstance(value, str) or not pattern.fullmatch(value):
            raise ValueError(f"{name} is not an id")
        return value
    return check


def _optional_id(value: Any, name: str) -> str | None:
    return None if value is None else _pattern(_BATCH_ID)(value, name)


#: BatchEntry field -> the check of its stored value.
_FIELD_CHECKS: dict[str, Callable[[Any, str], Any]] = {
    "token": _pattern(_TOKEN), "keys": _texts, "submitted_at": _time, "batch_id": _optional_id,
    "resubmission": _flag, "state": _text, "counts": _counts, "collected": _flag, "usage": _counts,
    "answered": _texts, "updated_at": _text, "tagged": _flag, "failure": _text,
}
_REQUIRED = ("token", "keys", "submitted_at")


def _entry(item: Any, number: int) -> BatchEntry:
    if not isinstance(item, dict):
        raise ValueError(f"batch {number} is not an object")
    missing = [name for name in _REQUIRED if name not in item]
    if missing:
        raise ValueError(f"batch {number} lacks {', '.join(missing)}")
    return BatchEntry(**{name: check(item[name], f"batch {number}'s {name}")
                         for name, check in _FIELD_CHECKS.items() if name in item})


# --- reading for display ---------------------------------------------------------------------------


def read_state(path: Path) -> BatchState | None:
    """The batch state at ``path`` for a figure that may go without it (``None``: none, or unreadable)."""
    try:
        return BatchState.read(path, "") if path.exists() else None
    except PersoBenchError:
        return None


@dataclass(frozen=True)
class BatchListing:
    """Every batch of a store, and the state files that could not be read."""

    rows: list[dict[str, Any]]
    """One row per batch (:func:`batch_listing`)."""
    problems: list[str]
    """One line per unreadable state file, naming it."""


def batch_listing(home: str | Path) -> BatchListing:
    """Every batch of the store (its runs' and the judges') as rows for a page or the ``batches``
    command (run id, provider, batch id, state, counts, submitted), those not collected yet first;
    read from the state files, no key needed. A damaged file is a line of :attr:`BatchListing.problems`."""
    rows, problems = [], []
    paths = [(p.parent.name, p) for p in sorted(Path(home, "runs").glob(f"*/{STATE_FILE}"))]
    paths += [(f"(judge) {p.stem}", p) for p in sorted(Path(home, "batches").glob("judge-*.json"))]
    for owner, path in paths:
        try:
            state = BatchState.read(path, "")
        except PersoBenchError as exc:
            problems.append(str(exc))
            continue
        for b in state.batches:
            counts = b.counts or {}
            rows.append({"run_id": owner, "provider": state.provider,
                         "batch_id": b.batch_id or "(submitting)", "state": b.state,
                         "requests": counts.get("total", len(b.keys)), "succeeded": counts.get("succeeded", 0),
                         "failed": counts.get("failed", 0), "collected": b.collected,
                         "submitted": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(b.submitted_at)),
                         "updated": b.updated_at})
    return BatchListing(sorted(rows, key=lambda r: (r["collected"], r["submitted"])), problems)
