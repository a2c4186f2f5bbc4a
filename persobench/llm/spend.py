"""The spend cap: one ledger that every process and Ray actor of an invocation reserves from.

Before a request is sent its upper-bound cost (prompt estimate plus the whole token budget) is
reserved; when it ends, the reservation is replaced by what it cost (from its usage; a reply
whose usage was refused counts at the estimate; a request that failed costs nothing). A request
whose bound does not fit under the cap is not sent. Because the bound is reserved first, however
many workers, processes or actors send at once, the total never passes the cap.

A :class:`SpendLedger` with a ``path`` keeps its totals in a small JSON file (``<home>/spend/
<invocation>.json``), read and rewritten under an exclusive ``flock`` on a lock file beside it:
held for microseconds, released by the OS however the holder ends. It pickles as its path and cap,
so the driver of ``score --executor ray`` creates it once (:meth:`SpendLedger.for_invocation`) and
hands it to every actor; :meth:`totals` then gives the real total of all of them. Without a path it
keeps its totals in this process only (a Python caller with one labeller).

A process killed between reserving and settling leaves its reservation counted: the cap errs on the
side of spending less, never more.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from persobench.errors import ConfigurationError

#: Folder of the ledger files under the store home.
SPEND_DIR = "spend"
#: Float slack when comparing a reservation with the cap (prices are rounded to 1e-6 USD).
_EPSILON = 1e-9


@dataclass(frozen=True)
class SpendTotals:
    """What an invocation has spent so far, over every process that shares the ledger."""

    spent_usd: float
    """Cost of the requests that ended (refused usage counted at the estimate)."""
    reserved_usd: float
    """Upper bounds of the requests in flight (or of processes killed while sending)."""
    requests: int
    """Requests that ended (a reply or a failure), counted once each, retries included in one."""


class SpendLedger:
    """Reserve-then-settle accounting against an optional cap (``None``: only counts)."""

    def __init__(self, cap: float | None, path: str | os.PathLike[str] | None = None) -> None:
        self.cap = cap
        self.path = Path(path) if path is not None else None
        self._lock = threading.Lock()
        self._memory = {"spent": 0.0, "reserved": 0.0, "requests": 0}
        self.refused = 0
        """Reservations this ledger object refused (kept in memory: a cap reached is asked again for
        every pair left, and those refusals must not each rewrite the file)."""

    @classmethod
    def for_invocation(cls, home: str | os.PathLike[str], cap: float | None, invocation: str | None = None
                       ) -> "SpendLedger":
        """The ledger of one invocation (a new one when ``invocation`` is None) under ``<home>/spend``."""
        invocation = invocation or uuid.uuid4().hex
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,100}", invocation) or invocation.startswith("."):
            raise ConfigurationError(f"spend ledger: invocation id {invocation!r}: letters, digits, '_', '.', '-' only")
        return cls(cap, Path(home) / SPEND_DIR / f"{invocation}.json")

    # -- pickling: a ledger travels to Ray actors and worker processes as its cap and path ----------

    def __getstate__(self) -> dict[str, Any]:
        if self.path is None:
            raise ConfigurationError("a SpendLedger without a path holds this process's totals only; "
                            "use SpendLedger.for_invocation(home, cap) to share one across processes")
        return {"cap": self.cap, "path": str(self.path)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["cap"], state["path"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"SpendLedger(cap={self.cap!r}, path={str(self.path) if self.path else None!r})"

    # -- the state, under the lock --------------------------------------------------------------

    @contextlib.contextmanager
    def _state(self) -> Iterator[dict[str, Any]]:
        with self._lock:
            if self.path is None:
                yield self._memory
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path.with_name(self.path.name + ".lock"), "a+b") as handle:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
                try:
                    state = self._read()
                    before = dict(state)
                    yield state
                    if state != before:
                        # Plain rewrite, no fsync: every reader holds the lock, and a file a crash left
                        # half-written reads as "cap spent" (see _read). Thousands of requests a minute
                        # must not each wait for the disk.
                        self.path.write_text(json.dumps(state), encoding="utf-8")
                finally:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _read(self) -> dict[str, Any]:
        assert self.path is not None
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            data = {}
        except (OSError, ValueError):
            # Unreadable: assume the cap is spent rather than start again from zero.
            data = {"spent": float("inf")}
        return {"spent": float(data.get("spent", 0.0)), "reserved": float(data.get("reserved", 0.0)),
                "requests": int(data.get("requests", 0))}

    # -- the accounting ---------------------------------------------------------------------------

    def reserve(self, bound: float) -> bool:
        """Count ``bound`` (USD) against the cap before a request is sent; False (and nothing
        counted but the refusal) when it does not fit."""
        bound = max(0.0, float(bound))
        with self._state() as state:
            if self.cap is not None and state["spent"] + state["reserved"] + bound > self.cap + _EPSILON:
                self.refused += 1
                return False
            state["reserved"] += bound
            return True

    def settle(self, bound: float, cost: float) -> None:
        """Replace a request's reserved ``bound`` by what it cost."""
        with self._state() as state:
            state["reserved"] = max(0.0, state["reserved"] - max(0.0, float(bound)))
            state["spent"] += max(0.0, float(cost))
            state["requests"] += 1

    def release(self, bound: float) -> None:
        """Give back a reservation whose request was never sent (the run stopped first)."""
        with self._state() as state:
            state["reserved"] = max(0.0, state["reserved"] - max(0.0, float(bound)))

    def totals(self) -> SpendTotals:
        with self._state() as state:
            return SpendTotals(round(state["spent"], 6), round(state["reserved"], 6), state["requests"])

    def remove(self) -> None:
        """Delete the ledger's files (the invocation is over)."""
        if self.path is not None:
            for path in (self.path, self.path.with_name(self.path.name + ".lock")):
                path.unlink(missing_ok=True)
