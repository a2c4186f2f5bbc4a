"""The spend cap: one ledger that every process and Ray actor of an invocation reserves from.

Before a request is sent its upper-bound cost (prompt estimate plus the whole token budget) is
reserved; when it ends, the reservation is replaced by what it cost (from its usage; a reply
whose usage was refused counts at the estimate; a request that timed out counts at its bound,
since the server may have answered and billed it; a request that failed otherwise costs nothing).
A request whose bound does not fit under the cap is not sent. Because the bound is reserved first,
however many workers, processes or actors send at once, the total never passes the cap.

A refusal is final only when the spend alone leaves no room: while other requests hold
reservations (:meth:`SpendLedger.try_reserve` says ``None``), the sender waits for them to settle,
usually far below their bounds, and asks again.

A :class:`SpendLedger` with a ``path`` keeps its totals in a small JSON file (``<home>/spend/
<invocation>.json``), read and rewritten (a new file renamed over the old one) under an exclusive
``flock`` on a lock file beside it: held for microseconds, released by the OS however the holder
ends. The ledger object that names the path creates the file; it pickles as its path and cap, so
the driver of ``score --executor ray`` creates it once (:meth:`SpendLedger.for_invocation`) and
hands it to every actor; :meth:`totals` then gives the real total of all of them. Without a path it
keeps its totals in this process only (a Python caller with one labeller).

The file is trusted only as this module writes it: a file that is not JSON, holds NaN, infinities,
negative or wrongly typed amounts, cannot be written, or has vanished raises
:class:`SpendLedgerError` (one line naming the file and the field) and nothing more is sent; a
missing file is never read as zero.

A process killed between reserving and settling leaves its reservation counted (as spent, once a
reservation is refused and its holder is found dead on this machine): the cap errs on the side of
spending less, never more.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import fcntl
import json
import math
import os
import re
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from persobench.errors import ConfigurationError, ErrorKind, ProviderError, StoreError
from persobench.store.files import atomic_write_text
from persobench.llm.retry import CallOutcome
from persobench.core.processes import pid_alive

#: Folder of the ledger files under the store home.
SPEND_DIR = "spend"
#: Float slack when comparing a reservation with the cap (prices are rounded to 1e-6 USD).
_EPSILON = 1e-9
#: The largest amount (USD) the ledger holds: a bound or cost past it (or not a number) counts as it.
MAX_USD = 1e12
#: Seconds a reservation that may fit once others settle waits before asking again (at once when a
#: request of the same sender settles; other processes' settling is seen by asking).
RESERVE_RETRY_S = 0.2
#: Seconds a reservation waits while no request settles anywhere in the ledger before it is refused
#: (a reservation of a process that died on another machine is never settled).
RESERVE_WAIT_MAX_S = 900.0
#: Attempts at locking a lock file that another process keeps replacing (it was deleted meanwhile).
_LOCK_ATTEMPTS = 20


class SpendLedgerError(StoreError):
    """The spend ledger cannot be trusted (damaged, unreadable, unwritable or vanished): the cost cap
    cannot be kept, so nothing more is sent. One line naming the file (and the field)."""


@dataclass(frozen=True)
class SpendTotals:
    """What an invocation has spent so far, over every process that shares the ledger."""

    spent_usd: float
    """Cost of the requests that ended (refused usage counted at the estimate, a timeout at its bound)."""
    reserved_usd: float
    """Upper bounds of the requests in flight (or of processes killed while sending)."""
    requests: int
    """Requests that ended (a reply or a failure), counted once each, retries included in one."""


def _usd(value: float) -> float:
    """An amount the ledger can hold: at least 0, at most :data:`MAX_USD` (NaN counts as the most)."""
    value = float(value)
    return MAX_USD if value != value else min(max(value, 0.0), MAX_USD)


def _holder() -> str:
    """Who holds a reservation: this process, on this machine."""
    return f"{socket.gethostname()}/{os.getpid()}"


class SpendLedger:
    """Reserve-then-settle accounting against an optional cap (``None``: only counts).

    ``create`` (default): a ledger given a ``path`` creates its file when there is none yet; a ledger
    unpickled in another process never does, so a file deleted meanwhile is an error, not a new zero."""

    def __init__(self, cap: float | None, path: str | os.PathLike[str] | None = None, *,
                 create: bool = True) -> None:
        self.cap = cap
        self.path = Path(path) if path is not None else None
        self._lock = threading.Lock()
        self._memory: dict[str, Any] = {"spent": 0.0, "reserved": 0.0, "requests": 0, "holders": {}}
        self.refused = 0
        """Reservations this ledger object refused for good (kept in memory: a cap reached is asked
        again for every pair left, and those refusals must not each rewrite the file)."""
        self.settled = 0
        """Requests settled in the whole ledger when this object last read it (a waiter sees progress)."""
        if self.path is not None and create:
            self._create()

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
        self.__init__(state["cap"], state["path"], create=False)  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"SpendLedger(cap={self.cap!r}, path={str(self.path) if self.path else None!r})"

    # -- the file ----------------------------------------------------------------------------------

    def _error(self, what: str) -> SpendLedgerError:
        return SpendLedgerError(f"spend ledger {self.path}: {what}; nothing more is sent, so that the cost cap holds")

    def _create(self) -> None:
        assert self.path is not None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._error(f"cannot create its folder ({exc.strerror or exc})") from None
        with self._locked():
            if not self.path.exists():
                self._write({"spent": 0.0, "reserved": 0.0, "requests": 0, "holders": {}})

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the exclusive ``flock`` of the ledger's lock file (the file the path names now: one
        deleted and made again while we waited is locked again)."""
        assert self.path is not None
        lock_path = self.path.with_name(self.path.name + ".lock")
        for _ in range(_LOCK_ATTEMPTS):
            try:
                handle = open(lock_path, "a+b")
            except FileNotFoundError:
                raise self._error("its folder vanished while the pass ran (what was spent is not known any more)"
                                  ) from None
            except OSError as exc:
                raise self._error(f"cannot open its lock file ({exc.strerror or exc})") from None
            with handle:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
                try:
                    current = os.stat(lock_path)
                except FileNotFoundError:
                    continue
                mine = os.fstat(handle.fileno())
                if (current.st_dev, current.st_ino) != (mine.st_dev, mine.st_ino):
                    continue  # replaced while we waited for it: lock the one others will lock
                yield
                return
        raise self._error("its lock file keeps being replaced")

    @contextlib.contextmanager
    def _state(self) -> Iterator[dict[str, Any]]:
        with self._lock:
            if self.path is None:
                yield self._memory
                return
            with self._locked():
                state = self._read()
                before = copy.deepcopy(state)
                yield state
                if state != before:
                    self._write(state)

    def _write(self, state: dict[str, Any]) -> None:
        assert self.path is not None
        try:
            # A new file renamed over the old one, no fsync: every reader holds the lock, a crash never
            # leaves half a file, and thousands of requests a minute must not each wait for the disk.
            atomic_write_text(self.path, json.dumps(state), durable=False)
        except StoreError as exc:
            cause = exc.__cause__
            reason = (cause.strerror or str(cause)) if isinstance(cause, OSError) else str(exc)
            raise self._error(f"cannot write it ({reason})") from None

    def _read(self) -> dict[str, Any]:
        assert self.path is not None
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            raise self._error("the file vanished while the pass ran (what was spent is not known any more)") from None
        except OSError as exc:
            raise self._error(f"cannot read it ({exc.strerror or exc})") from None
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise self._error("damaged: not JSON") from None
        if not isinstance(data, dict):
            raise self._error(f"damaged: not a JSON object ({_JSON_TYPES.get(type(data), 'something else')})")
        holders = data.get("holders", {})
        if not isinstance(holders, dict):
            raise self._error('damaged: field "holders" is not a JSON object')
        return {"spent": self._amount(data, "spent"), "reserved": self._amount(data, "reserved"),
                "requests": self._count(data, "requests"),
                "holders": {str(k): self._amount(holders, k, f'"holders" entry {json.dumps(k[:60])}') for k in holders}}

    def _amount(self, data: dict[str, Any], field: str, name: str = "") -> float:
        value = data.get(field)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise self._error(f"damaged: field {name or json.dumps(field)} is {_shown(value)}, "
                              "not a finite number >= 0")
        return float(value)

    def _count(self, data: dict[str, Any], field: str) -> int:
        value = data.get(field)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self._error(f'damaged: field "{field}" is {_shown(value)}, not a whole number >= 0')
        return value

    # -- the accounting ---------------------------------------------------------------------------

    def try_reserve(self, bound: float) -> bool | None:
        """Count ``bound`` (USD) against the cap before a request is sent: True when it is reserved;
        False when it does not fit and never will (what was spent leaves no room for it); None when
        it does not fit now but may once the reservations in flight settle (try again then)."""
        bound = _usd(bound)
        with self._state() as state:
            self.settled = state["requests"]
            if self._fits(state, bound):
                self._hold(state, bound)
                return True
            self._reclaim_dead(state)
            if self._fits(state, bound):
                self._hold(state, bound)
                return True
            # (not fitting means there is a cap: _fits holds every bound without one)
            if self.cap is not None and state["spent"] + bound <= self.cap + _EPSILON and any(v > 0 for v in state["holders"].values()):
                return None
            self.refused += 1
            return False

    def reserve(self, bound: float) -> bool:
        """:meth:`try_reserve` without waiting: True when ``bound`` is reserved, else False."""
        return self.try_reserve(bound) is True

    def settle(self, bound: float, cost: float) -> None:
        """Replace a request's reserved ``bound`` by what it cost."""
        with self._state() as state:
            self._hold(state, -_usd(bound))
            state["spent"] = _usd(state["spent"] + _usd(cost))
            state["requests"] += 1

    def release(self, bound: float) -> None:
        """Give back a reservation whose request was never sent (the run stopped first)."""
        with self._state() as state:
            self._hold(state, -_usd(bound))

    def totals(self) -> SpendTotals:
        """What was spent and is reserved, over every process that shares the ledger."""
        with self._state() as state:
            return SpendTotals(round(state["spent"], 6), round(state["reserved"], 6), state["requests"])

    def remove(self) -> None:
        """Delete the ledger's files (the invocation is over)."""
        if self.path is not None:
            for path in (self.path, self.path.with_name(self.path.name + ".lock")):
                path.unlink(missing_ok=True)

    # -- helpers, under the lock ------------------------------------------------------------------

    def _fits(self, state: dict[str, Any], bound: float) -> bool:
        return self.cap is None or state["spent"] + state["reserved"] + bound <= self.cap + _EPSILON

    @staticmethod
    def _hold(state: dict[str, Any], amount: float) -> None:
        """Add ``amount`` (negative: give back) to this process's reservations and to the total; a
        process never gives back more than it holds."""
        holders, me = state["holders"], _holder()
        before = holders.get(me, 0.0)
        after = _usd(before + amount) if before + amount > _EPSILON else 0.0
        if after:
            holders[me] = after
        else:
            holders.pop(me, None)
        reserved = state["reserved"] + after - before
        state["reserved"] = _usd(reserved) if reserved > _EPSILON else 0.0

    @staticmethod
    def _reclaim_dead(state: dict[str, Any]) -> None:
        """Reservations of processes of this machine that died while sending count as spent (their
        request may have been paid for): they no longer stand for requests that may settle lower."""
        host = socket.gethostname()
        for holder, amount in list(state["holders"].items()):
            where, _, pid = holder.rpartition("/")
            if where == host and pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
                del state["holders"][holder]
                state["spent"] = _usd(state["spent"] + amount)
                state["reserved"] = max(0.0, state["reserved"] - amount)


class Spending:
    """One sender's use of a ledger (an :class:`~persobench.llm.session.LLMSession`'s): reservations
    that wait while only others' reservations keep them out, a reservation more for each retry after
    a timeout, and the ledger's first failure, after which nothing more is sent (``stopping`` is set;
    the requests in flight end, are cached, and the session raises :attr:`failure`)."""

    def __init__(self, ledger: SpendLedger, stopping: asyncio.Event) -> None:
        self.ledger = ledger
        self.stopping = stopping
        self.failure: SpendLedgerError | None = None
        """The ledger's first failure (damaged, vanished, unwritable), or None while it holds."""
        self._settled = asyncio.Event()  # a request of this sender settled: a waiting reservation asks again

    async def reserve(self, bound: float, gone: Callable[[], bool]) -> "Reservation | str":
        """Reserve ``bound`` for one request, or say why it is not sent: "cost cap", "spend ledger",
        "stopped" or "run deleted" (``gone()``). While the bound does not fit only because of
        reservations in flight (most settle far below their bounds), wait for one to settle and ask
        again: a refusal is final only when what was spent leaves no room."""
        seen, since = -1, time.monotonic()
        while True:
            verdict = self.call(self.ledger.try_reserve, bound)
            if self.failure is not None:
                return "spend ledger"
            if verdict is not None:
                return Reservation(self, bound) if verdict else "cost cap"
            if self.ledger.settled != seen:
                seen, since = self.ledger.settled, time.monotonic()
            elif time.monotonic() - since > RESERVE_WAIT_MAX_S:  # held by a process that is gone elsewhere
                return "cost cap"
            self._settled.clear()
            with contextlib.suppress(TimeoutError):  # another process's settling is seen by asking again
                await asyncio.wait_for(self._settled.wait(), RESERVE_RETRY_S)
            if self.stopping.is_set():
                return "stopped"
            if gone():
                self.stopping.set()
                return "run deleted"

    def call(self, method: Callable[..., Any], *args: float) -> Any:
        """``method(*args)`` of the ledger; a failure is kept in :attr:`failure` and stops the sender
        (the call then gives False)."""
        try:
            return method(*args)
        except SpendLedgerError as exc:
            self.failure = self.failure or exc
            self.stopping.set()
            return False


class Reservation:
    """One request's hold on the ledger: its bound, and one more for each retry after a timeout."""

    def __init__(self, spending: Spending, bound: float) -> None:
        self.spending = spending
        self.bound = bound
        self.held = bound
        self.timeouts = 0
        """Attempts that timed out (the server may have answered and billed each one)."""

    def may_retry(self, error: ProviderError) -> bool:
        """Before a retry: one after a timeout needs a bound of its own (False: not retried)."""
        if error.kind is not ErrorKind.TIMEOUT:
            return True
        if not self.spending.call(self.spending.ledger.reserve, self.bound):
            return False
        self.held += self.bound
        self.timeouts += 1
        return True

    def end(self, outcome: CallOutcome | None, cost: float) -> int:
        """Settle with ``cost`` plus the bound of each timed-out attempt (release it all when nothing
        was sent); the number of timed-out attempts."""
        if outcome is not None and outcome.error is not None and outcome.error.kind is ErrorKind.TIMEOUT:
            self.timeouts += 1
        if outcome is not None or self.timeouts:
            self.spending.call(self.spending.ledger.settle, self.held, cost + self.bound * self.timeouts)
        else:  # never sent, or cancelled in flight
            self.spending.call(self.spending.ledger.release, self.held)
        self.spending._settled.set()
        return self.timeouts


#: JSON's names of what :func:`json.loads` gives.
_JSON_TYPES = {dict: "an object", list: "an array", type(None): "null", str: "a string", bool: "a boolean",
               int: "a number", float: "a number"}


def _shown(value: Any) -> str:
    """A value of the ledger file, short, for the one-line error."""
    if value is None:
        return "missing or null"
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, (dict, list)):
        return _JSON_TYPES[type(value)]
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
