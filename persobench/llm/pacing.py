"""Pacing sends by the limits a server states: a request budget and a token budget per server, key
and model, shared by every process of a store.

Providers limit requests and tokens per minute and say on every reply where a client stands
(:mod:`persobench.llm.ratelimits`). Learning the limit from refusals alone costs a refusal each
time, and a refused request counts against the limit too. A :class:`Pacer` keeps one token bucket
per stated limit instead, the way the servers count:

- **size and refill**: a limit of ``L`` is a bucket of ``L`` units refilled at ``L`` per minute
  (OpenAI's and Anthropic's limits are per minute); a stated reset that shows a slower refill (a
  daily limit) is believed instead;
- **before a send**: the request's cost is estimated (1 request; the prompt's tokens, estimated
  from its characters, plus the reply's whole token budget, ``max_tokens``) and the send waits
  until every bucket holds it, then takes it (:meth:`Pacer.admit`). Only when some bucket is known:
  against a server that states nothing, nothing waits and nothing is written;
- **after the reply** (:meth:`Pacer.settle`): the estimate is corrected by the reply's usage (the
  unused part of ``max_tokens`` comes back, a prompt longer than estimated costs more), a failed
  request gives its tokens back, and the stated ``remaining`` is believed whenever it is below the
  bucket's level (minus what was sent since that request: a server counts a request when it
  arrives), so other users of the key, the server's own token counts and a cold start are all
  learnt from the replies. The first reply creates the buckets;
- **shared**: with a path (``<home>/ratelimits/<digest>.json``, :func:`budget_path`) the buckets
  live in a small JSON file, read and rewritten under an exclusive ``flock`` for each send and each
  reply, so two ``run`` commands against the same server, key and model draw from one budget
  instead of each believing the whole limit is theirs. The file name is a digest of the provider,
  the server's public URL, the model and a digest of the key; the file holds the public URL, the
  model and numbers, never a byte of the key. It outlives the run: the next run starts paced.

A wait longer than the retry policy's ``max_retry_after`` fails the request as a rate limit (the
server asked for more patience than the user allows). ``--concurrency auto``
(:mod:`persobench.llm.concurrency`) keeps limiting the requests in flight, which is what a server
stating no limits needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

from persobench.errors import ErrorKind, ProviderError
from persobench.llm.ratelimits import KINDS, StatedLimit, read_stated_limits
from persobench.llm.retry import ANNOUNCE_BACKOFF_S
from persobench.providers.spec import ModelSpec
from persobench.core.secrets import public_url

#: Folder of the shared budget files under the store home.
BUDGET_DIR = "ratelimits"
#: A stated limit refills at ``limit`` per this many seconds unless its reset says slower.
WINDOW_S = 60.0
#: A waiting send looks again at least this often: at a shared budget (another process may have
#: given tokens back meanwhile) and at whether the run stops.
POLL_S = 0.5
#: Token kinds (everything but ``requests``): corrected by a reply's usage.
TOKEN_KINDS = KINDS[1:]


def request_cost(prompt_tokens: int, max_tokens: int) -> dict[str, float]:
    """What one request takes from each budget before its reply: 1 request, the prompt plus the
    whole reply budget in tokens (servers reserve ``max_tokens`` when a request arrives)."""
    return {"requests": 1.0, "tokens": float(prompt_tokens + max_tokens), "input_tokens": float(prompt_tokens),
            "output_tokens": float(max_tokens)}


def _usage_cost(prompt_tokens: int, completion_tokens: int) -> dict[str, float]:
    return {"tokens": float(prompt_tokens + completion_tokens), "input_tokens": float(prompt_tokens),
            "output_tokens": float(completion_tokens)}


@dataclass
class Bucket:
    """One stated limit as a token bucket (levels at a wall-clock time, so processes share them)."""

    capacity: float
    """The stated limit: the most the bucket holds."""
    rate: float
    """Units refilled per second."""
    level: float
    """Units left at :attr:`at` (negative: owed, when the server counted more than the estimates)."""
    at: float
    """``time.time()`` of :attr:`level`."""

    def advance(self, now: float) -> None:
        if now > self.at:
            self.level = min(self.capacity, self.level + self.rate * (now - self.at))
            self.at = now

    def wait_for(self, amount: float, now: float) -> float:
        """Seconds until the bucket holds ``amount`` (a cost above the whole limit waits for a full bucket)."""
        self.advance(now)
        missing = min(amount, self.capacity) - self.level
        return missing / self.rate if missing > 0 else 0.0

    def to_json(self) -> list[float]:
        return [self.capacity, self.rate, self.level, self.at]

    @classmethod
    def from_json(cls, data: object) -> "Bucket | None":
        if not isinstance(data, (list, tuple)):
            return None
        try:
            capacity, rate, level, at = (float(x) for x in data)
        except (TypeError, ValueError):
            return None
        if not (capacity >= 1 and rate > 0 and abs(level) < 1e15 and at > 0):
            return None
        return cls(capacity, rate, min(level, capacity), at)


def refill_rate(stated: StatedLimit) -> float:
    """Units per second for ``stated``: its limit per minute, unless its reset shows a slower refill
    (measured only when far enough from full to be precise: a reset of 10 s or more and 5% spent)."""
    per_minute = stated.limit / WINDOW_S
    spent = stated.limit - stated.remaining - 1  # remaining is rounded down: at least this was spent
    if stated.reset is not None and stated.reset >= 10 and spent >= 0.05 * stated.limit:
        measured = spent / stated.reset
        if measured < 0.8 * per_minute:
            return measured
    return per_minute


@dataclass(frozen=True)
class Ticket:
    """One admitted send: what it took and from which buckets, for :meth:`Pacer.settle`."""

    cost: Mapping[str, float]
    """The estimated cost, by kind."""
    sent_before: Mapping[str, float]
    """This process's sends counted before this one (to tell what was sent after it)."""
    charged: frozenset[str] = frozenset()
    """The buckets it was taken from (none when no limit was known yet)."""
    pacer: "Pacer | None" = field(default=None, compare=False, repr=False)
    """The pacer that admitted it (``None``: :data:`UNPACED`)."""

    def settle(self, headers: Mapping[str, str] | None, usage: tuple[int | None, int | None] | None = None,
               *, failed: bool = False, refused: bool = False) -> None:
        """:meth:`Pacer.settle` of this attempt (nothing without a pacer)."""
        if self.pacer is not None:
            self.pacer.settle(self, headers, usage, failed=failed, refused=refused)


#: The ticket of an attempt sent without a pacer.
UNPACED = Ticket({}, {})


@dataclass
class PacingStats:
    """What pacing did in this process (recorded in the run's manifest)."""

    paced: int = 0
    """Sends that waited for the budget."""
    waited_s: float = 0.0
    """Seconds those sends waited, summed."""
    limits: dict[str, float] = field(default_factory=dict)
    """The last stated limit per kind, in units per minute."""
    refused: int = 0
    """Attempts the server refused with HTTP 429."""


class Pacer:
    """The budgets of one server, key and model (see the module). ``path``: the shared file
    (:func:`budget_path`); ``None`` keeps them in this object. ``max_wait``: the longest a send may
    wait for the budget before it fails as a rate limit."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, server: str = "", model: str = "",
                 max_wait: float = 600.0) -> None:
        self.path = Path(path) if path is not None else None
        self.server = server
        self.model = model
        self.max_wait = max_wait
        self.stats = PacingStats()
        self._memory: dict[str, Bucket] = {}
        self._known = False
        self._sent = dict.fromkeys(KINDS, 0.0)
        self._line: asyncio.Lock | None = None
        self._line_loop: asyncio.AbstractEventLoop | None = None
        self._fd: int | None = None
        self._checked = 0.0  # when the file was last checked for having been deleted
        self._written = b""  # what this process last wrote to it
        self._pending: list[tuple[Ticket, dict[str, StatedLimit], dict[str, float], float]] = []
        """What replies taught since the last change of the buckets (applied with the next one, so a
        request costs one locked read and write of the shared file, not two)."""

    # -- the state: in this object, or in the shared file under its lock -------------------------

    def known(self) -> bool:
        """Whether some limit is known (then sends are paced)."""
        if not self._known:
            self._known = bool(self._memory or self._pending) if self.path is None else self.path.exists()
        return self._known

    def _open(self) -> int:
        """The shared file, opened once (again when someone deleted it); ``OSError``: it cannot be."""
        assert self.path is not None
        now = time.monotonic()
        if self._fd is not None and now > self._checked + POLL_S:  # deleted? others use a new one
            self._checked = now
            if os.fstat(self._fd).st_nlink == 0:
                os.close(self._fd)
                self._fd = None
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        return self._fd

    @contextlib.contextmanager
    def _state(self) -> Iterator[dict[str, Bucket]]:
        """The buckets, with what the replies since the last time taught applied, for one change."""
        fd, raw = None, b""
        if self.path is not None:
            try:
                fd = self._open()
                fcntl.flock(fd, fcntl.LOCK_EX)
                # One read and one write at the same offset on a descriptor kept open, under the
                # lock: every reader holds it, and a file a crash left half written reads as empty
                # (the next reply's headers fill it again). No fsync: it is rewritten at every send.
                raw = os.pread(fd, 1 << 16, 0)
            except OSError:
                self._give_up_sharing()  # a store that cannot be used costs the sharing, never the run
                fd = None
        if fd is None:
            self._apply_pending(self._memory)
            yield self._memory
            return
        try:
            # What this process wrote last, unchanged since: its buckets as they are, not parsed again.
            buckets = self._memory if raw and raw == self._written else parse_budget(raw)
            self._apply_pending(buckets)
            yield buckets
            self._memory = buckets
            data = json.dumps({"version": 1, "server": self.server, "model": self.model,
                               "buckets": {k: b.to_json() for k, b in buckets.items()}}).encode("utf-8")
            self._written = data
            if data != raw:
                with contextlib.suppress(OSError):
                    os.pwrite(fd, data, 0)
                    if len(data) < len(raw):
                        os.ftruncate(fd, len(data))
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def _give_up_sharing(self) -> None:
        self.path = None
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)  # closing releases a lock held on it too
            self._fd = None

    def close(self) -> None:
        """Write down what the last replies taught, and let go of the file."""
        if self._pending:
            with contextlib.suppress(OSError), self._state():
                pass
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # -- before a send ----------------------------------------------------------------------------

    async def admit(self, cost: Mapping[str, float], stopping: asyncio.Event,
                    on_wait: Callable[[float, str], None] = lambda *_: None) -> Ticket | ProviderError | None:
        """Wait until every known budget holds ``cost``, then take it: the attempt's ticket; ``None``
        when the run stops first; a :class:`ProviderError` (rate limit, the attempt's outcome) when
        the wait would pass ``max_wait``. Sends of this process queue in order (one waits at a time)."""
        if not self.known():
            return self._count(cost, frozenset())
        loop = asyncio.get_running_loop()
        if self._line is None or self._line_loop is not loop:  # a lock belongs to one event loop
            self._line, self._line_loop = asyncio.Lock(), loop
        async with self._line:
            announced = False
            started = time.monotonic()
            try:
                while True:
                    with self._state() as buckets:
                        now = time.time()
                        wait = max((b.wait_for(cost.get(k, 0.0), now) for k, b in buckets.items()), default=0.0)
                        if wait <= 0:
                            for kind, bucket in buckets.items():
                                bucket.level -= cost.get(kind, 0.0)
                            charged = frozenset(buckets)
                            break
                    if wait > self.max_wait:
                        return ProviderError(
                            ErrorKind.RATE_LIMIT, f"the server's stated rate limits leave no room for {wait:.0f} s "
                            f"({self._describe()}), more than max_retry_after", status_code=429, retry_after=wait)
                    if not announced and wait >= ANNOUNCE_BACKOFF_S:
                        announced = True
                        on_wait(wait, f"waiting {wait:.0f} s: the server's stated rate limits are used up "
                                      f"({self._describe()}; runs on the same key share them)")
                    # A plain sleep, the stop looked at every POLL_S: a task waiting for the stop
                    # event per wait cost more loop steps than the send itself.
                    await asyncio.sleep(min(wait, POLL_S))
                    if stopping.is_set():
                        return None
            finally:
                if announced:
                    on_wait(0.0, "")
            waited = time.monotonic() - started
            if waited > 0.001:
                self.stats.paced += 1
                self.stats.waited_s += waited
            return self._count(cost, charged)

    def _count(self, cost: Mapping[str, float], charged: frozenset[str]) -> Ticket:
        ticket = Ticket(cost, dict(self._sent), charged, self)
        for kind in KINDS:
            self._sent[kind] += cost.get(kind, 0.0)
        return ticket

    def _describe(self) -> str:
        names = {"requests": "requests", "tokens": "tokens", "input_tokens": "input tokens",
                 "output_tokens": "output tokens"}
        return ", ".join(f"{per_minute:,.0f} {names[kind]} a minute" for kind, per_minute in self.stats.limits.items())

    # -- after a reply or a failure ----------------------------------------------------------------

    def settle(self, ticket: Ticket, headers: Mapping[str, str] | None, usage: tuple[int | None, int | None] | None = None,
               *, failed: bool = False, refused: bool = False) -> None:
        """Learn from the attempt ``ticket`` admitted: its reply's (or failure's) rate-limit
        ``headers``, its ``usage`` (prompt, completion tokens), whether it ``failed`` (no reply:
        its tokens come back) or was ``refused`` (a 429, counted). Applied to the buckets with their
        next change (the next send, a waiting send's next look, or :meth:`close`)."""
        if refused:
            self.stats.refused += 1
        stated = read_stated_limits(headers)
        correction = self._correction(ticket, usage, failed)
        if not stated and not correction:
            return
        for kind, limit in stated.items():
            self.stats.limits[kind] = refill_rate(limit) * WINDOW_S
        self._pending.append((ticket, stated, correction, time.time()))
        if self.path is None:  # nothing to save a file write for
            self._apply_pending(self._memory)
        elif not stated.keys() <= self._memory.keys():  # a limit first heard of: tell the others at once
            with contextlib.suppress(OSError), self._state():
                pass
        if stated:
            self._known = True

    def _correction(self, ticket: Ticket, usage: tuple[int | None, int | None] | None, failed: bool) -> dict[str, float]:
        """Tokens to give back (negative: to take) for the estimate of ``ticket``."""
        charged = [k for k in TOKEN_KINDS if k in ticket.charged]
        if not charged:
            return {}
        if failed:
            return {k: ticket.cost.get(k, 0.0) for k in charged}
        if usage is None or usage[0] is None or usage[1] is None:
            return {}
        real = _usage_cost(usage[0], usage[1])
        return {k: ticket.cost.get(k, 0.0) - real[k] for k in charged if ticket.cost.get(k, 0.0) != real[k]}

    def _apply_pending(self, buckets: dict[str, Bucket]) -> None:
        pending, self._pending = self._pending, []
        now = time.time()
        for ticket, stated, correction, seen in pending:
            for kind, amount in correction.items():
                bucket = buckets.get(kind)
                if bucket is not None:
                    bucket.advance(now)
                    bucket.level = min(bucket.capacity, bucket.level + amount)
            for kind, limit in stated.items():
                self._believe(buckets, kind, limit, ticket, seen, now)

    def _believe(self, buckets: dict[str, Bucket], kind: str, limit: StatedLimit, ticket: Ticket, seen: float,
                 now: float) -> None:
        """Take ``limit``, stated at ``seen``, into the bucket of ``kind``: its size and refill, and its
        ``remaining`` refilled since ``seen`` when that is below the bucket's level."""
        # The server counted the request when it arrived: what this process sent after it may not be
        # in ``remaining`` yet (other processes' sends are in the shared level already).
        sent_after = self._sent[kind] - ticket.sent_before.get(kind, 0.0) - ticket.cost.get(kind, 0.0)
        rate = refill_rate(limit)
        level = min(limit.limit, limit.remaining + rate * max(0.0, now - seen)) - max(0.0, sent_after)
        bucket = buckets.get(kind)
        if bucket is None:
            buckets[kind] = Bucket(limit.limit, rate, level, now)
            return
        bucket.advance(now)
        bucket.capacity, bucket.rate = limit.limit, rate
        bucket.level = min(bucket.level, level, limit.limit)


def parse_budget(raw: bytes) -> dict[str, Bucket]:
    """The buckets of a budget file's bytes; nothing for bytes that are not one (empty, half written)."""
    try:
        data = json.loads(raw)
        found = data.get("buckets") if isinstance(data, dict) and data.get("version") == 1 else None
    except ValueError:
        return {}
    buckets = {}
    for kind, value in (found.items() if isinstance(found, dict) else ()):
        bucket = Bucket.from_json(value)
        if kind in KINDS and bucket is not None:
            buckets[kind] = bucket
    return buckets


def budget_path(home: str | os.PathLike[str], provider: str, base_url: str | None, model: str,
                key: str | None) -> Path:
    """The shared budget file of one server, key and model under ``home``: a digest of the
    provider, the base URL's public form, the model and a digest of the key (providers state
    limits per key and model), so the key is never written, not even in a name."""
    key_digest = hashlib.sha256((key or "").encode("utf-8")).hexdigest()
    identity = "\0".join(("persobench-budget-1", provider, public_url(base_url).rstrip("/") if base_url else "",
                          model, key_digest))
    return Path(home) / BUDGET_DIR / f"{hashlib.sha256(identity.encode('utf-8')).hexdigest()[:32]}.json"


def server_pacer(home: str | os.PathLike[str] | None, spec: ModelSpec, keys: Sequence[str | None] = (), *,
                 max_wait: float = 600.0) -> Pacer:
    """The pacer of the server, key (the first of ``keys``) and model of ``spec``: shared through
    ``home`` (``None``: this process only)."""
    key = next((k for k in keys if k), None)
    server = public_url(spec.base_url).rstrip("/") if spec.base_url else f"{spec.provider}:default"
    path = budget_path(home, spec.provider, spec.base_url, spec.model, key) if home is not None else None
    return Pacer(path, server=server, model=spec.model, max_wait=max_wait)
