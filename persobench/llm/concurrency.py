"""``--concurrency auto``: how many requests may be in flight, found by AIMD while the run goes.

A server's capacity is unknown in advance and shared with everyone else on the account, so a fixed
concurrency is either too timid or sends requests that come back 429. :class:`AdaptiveLimit` starts
low and adjusts after every attempt (additive increase, multiplicative decrease, as TCP does):

- a reply without a 429 or 5xx raises the limit: by one per reply back up to the last level known to
  be safe (whatever the latency: that level has served), and while the latency holds by one per reply
  until the first overload, then by one per round of replies (one reply per request in flight) to
  probe above the safe level;
- a 429 or 5xx halves the limit, once per round: replies to requests sent before the decrease tell
  nothing about the new limit, nor do refusals below the safe level while the limit climbs back to it
  (the limit is already down; a capacity that really fell is refused again once there). The safe level becomes one below the number of requests that were in
  flight when the refused one was sent (not one below the limit when the refusal came back: during
  the fast climb the limit runs ahead of what the server saw, and a safe level set too high costs a
  refusal on every climb back). The first probe above it waits :data:`FIRST_PROBE_ROUNDS` rounds,
  and each refusal around the same level multiplies that by :data:`PROBE_BACKOFF` (a server with a
  hard cap is not asked again and again: each refusal pauses every worker for its Retry-After).
  A single refusal at or below the safe level leaves it in place (a server may count a request as in
  flight until its reply has left, so a level that has been serving is refused now and then); a
  second one before a whole round has been served there lowers it;
- the latency holds while the recent average stays under :data:`LATENCY_TOLERANCE` times the
  fastest reply seen (a reference that drifts up slowly when no reply is that fast any more): a
  server queueing requests slows down before it refuses them, and then the limit stops growing;
- never above the ceiling (``--max-concurrency``) nor below 1.

A Retry-After is honoured apart from this (the retry loop's pause gate holds every worker back).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from persobench.errors import ErrorKind, ProviderError

#: ``--concurrency auto`` starts with this many requests in flight.
START = 2
#: ``--max-concurrency`` default.
DEFAULT_CEILING = 32
#: The limit stops growing while the recent latency exceeds this multiple of the fastest reply.
LATENCY_TOLERANCE = 2.0
#: Rounds (one reply per request in flight) at the safe level before the first probe above it.
FIRST_PROBE_ROUNDS = 4
#: Each refusal around the same level multiplies the rounds before the next probe by this.
PROBE_BACKOFF = 4
#: At most this many rounds between probes (a capacity that grows is found again).
MAX_PROBE_ROUNDS = 64
#: Per reply, the fastest latency seen drifts up by this share (it doubles in ~140 replies none as fast).
_FASTEST_DRIFT = 0.005
#: Weight of the newest latency in the recent average.
_LATENCY_WEIGHT = 0.2

_OVERLOAD_KINDS = frozenset({ErrorKind.RATE_LIMIT, ErrorKind.SERVER, ErrorKind.OVERLOADED})


def is_overload(error: ProviderError | None) -> bool:
    """A 429 or a 5xx: the server refuses load (as opposed to a bad request or a timeout)."""
    if error is None:
        return False
    status = error.status_code
    if status is not None:
        return status == 429 or status >= 500
    return error.kind in _OVERLOAD_KINDS


@dataclass(frozen=True)
class LimitStats:
    """What the limit did during a run (recorded in the manifest)."""

    final: int
    """The limit when the run ended."""
    highest: int
    """The highest limit reached."""
    decreases: int
    """How many times a 429 or 5xx halved it."""
    ceiling: int
    """``--max-concurrency``."""


class AdaptiveLimit:
    """The number of requests allowed in flight, adjusted after every attempt (see the module)."""

    def __init__(self, ceiling: int = DEFAULT_CEILING, *, start: int = START) -> None:
        if ceiling < 1:
            raise ValueError(f"the concurrency ceiling must be at least 1, got {ceiling}")
        self.ceiling = ceiling
        self.limit = max(1, min(start, ceiling))
        self.in_flight = 0
        self.safe: int | None = None
        """The level just below the last one a server refused (None before the first refusal)."""
        self.highest = self.limit
        self.decreases = 0
        self._grown_at = 0  # replies counted towards the next additive step
        self._probe_rounds = FIRST_PROBE_ROUNDS  # rounds at the safe level before probing above it
        self._decreased_at = float("-inf")  # monotonic time of the last decrease
        self._struck = False  # refused once at or below the safe level since the last full round there
        self._fastest: float | None = None
        self._recent: float | None = None
        self._changed = asyncio.Event()

    # -- slots ----------------------------------------------------------------------------------

    async def acquire(self) -> int:
        """Wait for a free slot and take it; every call is paired with one :meth:`release`.
        Returns the requests in flight with this one (pass it back to :meth:`release` as ``level``)."""
        while self.in_flight >= self.limit:
            self._changed.clear()
            await self._changed.wait()
        self.in_flight += 1
        return self.in_flight

    def release(self, sent_at: float | None, error: ProviderError | None, latency: float,
                level: int | None = None) -> None:
        """Give the slot back and learn from the attempt sent at ``sent_at`` (monotonic time;
        ``None`` when it was never sent, e.g. the run stopped first). ``level``: what
        :meth:`acquire` returned for it (``None``: unknown, the current limit stands in)."""
        self.in_flight -= 1
        if sent_at is not None:
            if is_overload(error):
                self._overloaded(sent_at, level)
            elif error is None:
                self._replied(latency)
        self._changed.set()

    # -- the rule -------------------------------------------------------------------------------

    def latency_holds(self) -> bool:
        if self._fastest is None or self._recent is None:
            return True
        return self._recent <= LATENCY_TOLERANCE * self._fastest

    def _replied(self, latency: float) -> None:
        # The reference drifts up slowly when no reply is as fast any more: a client that got busier
        # measures every latency longer, which is not the server queueing.
        self._fastest = latency if self._fastest is None else min(self._fastest * (1 + _FASTEST_DRIFT), latency)
        self._recent = latency if self._recent is None else (
            _LATENCY_WEIGHT * latency + (1 - _LATENCY_WEIGHT) * self._recent)
        if self.limit >= self.ceiling:
            return
        if self.safe is not None and self.limit < self.safe:
            self._set(self.limit + 1)  # climbing back to a level known to serve, whatever the latency
            return
        if not self.latency_holds():
            return
        if self.safe is None:
            self._set(self.limit + 1)  # nothing refused yet: one more per reply
            return
        self._grown_at += 1
        if self._grown_at == self.limit:
            self._struck = False  # a whole round served at this level
        rounds = self._probe_rounds if self.limit == self.safe else 1
        if self._grown_at >= self.limit * rounds:  # probe one above the safe level
            if self.limit > self.safe + 1:
                self._probe_rounds = FIRST_PROBE_ROUNDS  # two levels above the refused one: capacity grew
            self._set(self.limit + 1)

    def _overloaded(self, sent_at: float, level: int | None = None) -> None:
        if sent_at < self._decreased_at:
            # Sent under the old, larger limit: already answered by the last decrease, but the lowest
            # level refused in that burst is the better guess of what is safe.
            if level is not None and self.safe is not None and level - 1 < self.safe:
                self.safe = max(1, level - 1)
            return
        refused_at = self.limit if level is None else min(level, self.limit)
        if self.safe is not None and refused_at < self.safe and self.limit < self.safe:
            return  # refused below the safe level while climbing back to it: already backing off
        if self.safe is not None and refused_at <= self.safe:
            # Refused at a level that has been serving: once may be the server's own bookkeeping (a
            # request counted until its reply is out) or a burst from elsewhere; twice in a round is
            # not, and the safe level steps down: by one, or to the level refused when that is lower
            # (not below it: under such noise a refusal is seen at levels the server can take).
            if self._struck:
                self.safe = max(1, min(self.safe - 1, refused_at))
            self._struck = not self._struck
        else:
            safe = max(1, refused_at - 1)
            if self.safe is not None and abs(safe - self.safe) <= 1:
                # refused again around the same level: probe less often
                self._probe_rounds = min(self._probe_rounds * PROBE_BACKOFF, MAX_PROBE_ROUNDS)
            else:
                self._probe_rounds = FIRST_PROBE_ROUNDS
            self.safe = safe
            self._struck = False
        self.decreases += 1
        self._decreased_at = time.monotonic()
        self._set(max(1, self.limit // 2))

    def _set(self, limit: int) -> None:
        self.limit = max(1, min(limit, self.ceiling))
        self.highest = max(self.highest, self.limit)
        self._grown_at = 0

    def stats(self) -> LimitStats:
        return LimitStats(final=self.limit, highest=self.highest, decreases=self.decreases, ceiling=self.ceiling)
