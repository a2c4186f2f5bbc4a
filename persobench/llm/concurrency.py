"""``--concurrency auto``: how many requests may be in flight, found while the run goes and
remembered per server for the next run.

A server's capacity is unknown in advance and shared with everyone else on the account, so a fixed
concurrency is either too timid or sends requests that come back 429. Each 429 with a Retry-After
pauses every worker (the retry loop's pause gate), so a refusal costs the whole run that pause:
:class:`AdaptiveLimit` is built to be refused as rarely as possible. It adjusts after every attempt:

- **start**: from the last level that held against the same server (:class:`LevelMemory`, keyed by
  the base URL's public form, in ``<home>/concurrency.json``); with nothing remembered, at
  :data:`START`;
- **slow start**: while nothing has been refused (and the latency holds) one more per reply, which
  doubles the limit every round (one reply per request in flight), so a capacity of 8 is reached in
  about three rounds;
- **a refusal above the safe level** (a 429 or 5xx; the first one, or a probe): the safe level
  becomes one below the number of requests that were in flight when the refused request was sent
  (not one below the limit when the refusal came back: during the fast climb the limit runs ahead
  of what the server saw), and the limit drops to it: not lower, since that level has served (the
  Retry-After pause already holds every worker back). With the level of the refused request
  unknown, the limit halves. A slow start refused just above the highest level it has served has
  found the edge: that counts as a refused probe (below). Refusals of requests sent before a
  decrease tell nothing about the new limit, except that the lowest level refused in that burst is
  a better guess of the safe level;
- **probing**: back at the safe level, the first probe one above it waits :data:`FIRST_PROBE_ROUNDS`
  rounds, and each refusal around the same level multiplies that by :data:`PROBE_BACKOFF` (up to
  :data:`MAX_PROBE_ROUNDS`): a server with a hard cap is not asked again and again. The backoff is
  remembered too, so the next run against a capped server does not pay for those refusals again
  (the rounds are counted within a run: a run shorter than that never probes a capped server, a
  longer one finds a capacity that grew). A probe that serves a whole round raises the level;
  above the safe level the limit then grows by one per round (capacity grew);
- **a single refusal at or below the safe level** leaves the level and the limit in place (a server
  may count a request as in flight until its reply has left, so a level that has been serving is
  refused now and then); a second one before a whole round has been served there lowers the safe
  level by one and halves the limit, which climbs back to the safe level by one per reply, whatever
  the latency;
- **latency**: the limit grows only while the recent average stays under :data:`LATENCY_TOLERANCE`
  times the fastest reply seen (a reference that drifts up slowly when no reply is that fast any
  more): a server queueing requests slows down before it refuses them;
- never above the ceiling (``--max-concurrency``) nor below 1.

What is remembered is rewritten only when it changes (a refusal, a level newly served), never per
reply; a store that cannot be written costs the memory, never the run.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

from persobench.errors import ErrorKind, PersoBenchError, ProviderError
from persobench.core.secrets import public_url
from persobench.store.files import atomic_write_json, utc_now
from persobench.store.locks import hold_state_lock

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
#: The file under the store home holding the level that held last, per server.
MEMORY_FILE = "concurrency.json"
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
    """How many times a 429 or 5xx lowered it."""
    ceiling: int
    """``--max-concurrency``."""
    start: int = START
    """The limit the run started with (the level remembered for the server, or :data:`START`)."""


@dataclass(frozen=True)
class HeldLevel:
    """What runs against one server learnt, where the next one starts (:class:`LevelMemory`)."""

    level: int
    """Requests in flight that the server served: the last level that held."""
    refused: int | None = None
    """The lowest level refused above ``level`` since it held; ``None``: none, the next run keeps
    climbing from ``level`` as if nothing had been refused."""
    probe_rounds: int = FIRST_PROBE_ROUNDS
    """Rounds at ``level`` before probing one above it."""


def server_key(provider: str, base_url: str | None) -> str:
    """The name a server is remembered under: its base URL's public form (no user info, no secret
    query parameter, no trailing "/"), or the provider's default endpoint."""

    if base_url:
        return public_url(base_url).rstrip("/")
    return f"{provider}:default"


def _is_public_key(key: str) -> bool:
    """Whether ``key`` is a name :func:`server_key` gives (a provider's default endpoint, or a base
    URL's public form), not one an older version wrote with user info or a secret query."""
    return key.endswith(":default") and "/" not in key or public_url(key).rstrip("/") == key


#: The most requests in flight a remembered level may name (a hint above it is ignored).
_MOST_REMEMBERED = 1_000_000


def _whole(value: object, low: int, high: int) -> int | None:
    """``value`` as an int when it is a whole number from ``low`` to ``high`` (an int, or a float with
    no fraction), else None: never an OverflowError for ``1e400`` nor a ValueError for ``NaN``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return None
    return int(value) if low <= value <= high else None


class LevelMemory:
    """The last level that held, per server, in ``<home>/concurrency.json``:
    ``{"version": 1, "servers": {"http://host:8000/v1": {"level": 8, "refused": 9, "probe_rounds": 16,
    "updated_at": "..."}}}``. Read once when a run starts; rewritten atomically (under the file's
    lock, merged with what other processes wrote) when what a run learnt changes. An unreadable file
    is treated as empty; a write the disk refuses is skipped (the memory only saves time)."""

    def __init__(self, home: str | os.PathLike[str], provider: str, base_url: str | None) -> None:
        self.path = Path(home) / MEMORY_FILE
        self.key = server_key(provider, base_url)

    def _read_all(self) -> dict[str, dict]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            servers = data.get("servers") if isinstance(data, dict) and data.get("version") == 1 else None
        except (OSError, ValueError, RecursionError):  # RecursionError: JSON nested too deeply to read
            return {}
        return {str(k): v for k, v in servers.items() if isinstance(v, dict)} if isinstance(servers, dict) else {}

    def load(self) -> HeldLevel | None:
        """The level remembered for this server, or ``None``. The file is a hint anybody may have
        edited: a value that is not a whole number in range (``1e400``, ``NaN``, ``2.5``, ``"8"``,
        ``true``) is ignored, a level as if nothing were remembered, the other fields as if absent."""
        entry = self._read_all().get(self.key)
        if entry is None:
            return None
        level = _whole(entry.get("level"), 1, _MOST_REMEMBERED)
        if level is None:
            return None
        refused = _whole(entry.get("refused"), level + 1, _MOST_REMEMBERED + 1)
        rounds = _whole(entry.get("probe_rounds"), 0, _MOST_REMEMBERED)
        rounds = FIRST_PROBE_ROUNDS if rounds is None else min(max(rounds, FIRST_PROBE_ROUNDS), MAX_PROBE_ROUNDS)
        return HeldLevel(level, refused, rounds)

    def save(self, held: HeldLevel) -> None:
        """Remember ``held`` for this server (other servers' entries are kept). Replaced atomically
        (a reader sees the old file or the new one) but not fsynced: this runs on the event loop
        right after a refusal, where an fsync on a busy disk stalls every request in flight, and a
        file lost to a power cut costs one run its head start."""

        entry = {"level": held.level, "refused": held.refused, "probe_rounds": held.probe_rounds,
                 "updated_at": utc_now()}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with hold_state_lock(self.path.parent, timeout=2.0):
                # Only keys in public form are carried over: an older version keyed servers by a URL
                # whose query could hold a credential (?pw=...), and carrying it over kept it forever.
                servers = {key: value for key, value in self._read_all().items() if _is_public_key(key)}
                servers[self.key] = entry
                atomic_write_json(self.path, {"version": 1, "servers": servers}, durable=False)
        except (OSError, PersoBenchError):
            pass  # a full disk or a busy lock costs the next run its head start, nothing more


class AdaptiveLimit:
    """The number of requests allowed in flight, adjusted after every attempt (see the module).
    ``memory``: where the level that held is read at the start and written when it changes."""

    def __init__(self, ceiling: int = DEFAULT_CEILING, *, start: int = START,
                 memory: LevelMemory | None = None) -> None:
        if ceiling < 1:
            raise ValueError(f"the concurrency ceiling must be at least 1, got {ceiling}")
        self.ceiling = ceiling
        self.limit = max(1, min(start, ceiling))
        self.in_flight = 0
        self.safe: int | None = None
        """The level just below the last one a server refused (None before the first refusal)."""
        self.held: int | None = None
        """The last level that held: served a whole round (or, before any refusal, one request)."""
        self.refused: int | None = None
        """The lowest level refused above :attr:`held` (None: none since it held)."""
        self.decreases = 0
        self._grown_at = 0  # replies counted towards the next additive step
        self._probe_rounds = FIRST_PROBE_ROUNDS  # rounds at the safe level before probing above it
        self._decreased_at = float("-inf")  # monotonic time of the last decrease
        self._struck = False  # refused once at or below the safe level since the last full round there
        self._fastest: float | None = None
        self._recent: float | None = None
        self._changed = asyncio.Event()
        self.memory = memory
        self._saved: HeldLevel | None = memory.load() if memory is not None else None
        if self._saved is not None:
            self.held = self.limit = max(1, min(self._saved.level, ceiling))
            if self._saved.refused is not None:  # a level above was refused: start there, and probe as late
                self.safe, self.refused = self.held, self._saved.refused
                self._probe_rounds = self._saved.probe_rounds
        self.start = self.limit
        self.highest = self.limit

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
                self._replied(latency, level)
        self._changed.set()

    # -- the rule -------------------------------------------------------------------------------

    def latency_holds(self) -> bool:
        if self._fastest is None or self._recent is None:
            return True
        return self._recent <= LATENCY_TOLERANCE * self._fastest

    def _replied(self, latency: float, level: int | None = None) -> None:
        # The reference drifts up slowly when no reply is as fast any more: a client that got busier
        # measures every latency longer, which is not the server queueing.
        self._fastest = latency if self._fastest is None else min(self._fastest * (1 + _FASTEST_DRIFT), latency)
        self._recent = latency if self._recent is None else (
            _LATENCY_WEIGHT * latency + (1 - _LATENCY_WEIGHT) * self._recent)
        if self.safe is None and level is not None:  # nothing refused yet: every level served has held
            self._held(min(level, self.ceiling))
        if self.limit >= self.ceiling:
            return
        if self.safe is not None and self.limit < self.safe:
            self._set(self.limit + 1)  # climbing back to a level known to serve, whatever the latency
            return
        if not self.latency_holds():
            return
        if self.safe is None:
            self._set(self.limit + 1)  # slow start: one more per reply doubles the limit every round
            return
        self._grown_at += 1
        if self._grown_at == self.limit:
            self._struck = False  # a whole round served at this level
            self._held(self.limit)
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
                self.limit = min(self.limit, self.safe)
                self._refused_above(self.safe, level)
            return
        refused_at = self.limit if level is None else min(level, self.limit)
        if self.safe is not None and refused_at < self.safe and self.limit < self.safe:
            return  # refused below the safe level while climbing back to it: already backing off
        if self.safe is not None and refused_at <= self.safe:
            # Refused at a level that has been serving: once may be the server's own bookkeeping (a
            # request counted until its reply is out) or a burst from elsewhere, and the limit stays;
            # twice in a round is not: the safe level steps down by one, or to the level refused when
            # that is lower (not below it: under such noise a refusal is seen at levels the server
            # can take), and the limit halves.
            self._struck = not self._struck
            if self._struck:
                return
            self.safe = max(1, min(self.safe - 1, refused_at))
            self._refused_above(self.safe, self.safe + 1)
            self._decrease(max(1, self.limit // 2))
            return
        safe = max(1, refused_at - 1)
        # Refused again around the same level: probe less often. Before any refusal the level that
        # held is the highest one served, so a slow start refused just above it has found the edge
        # and counts as a first refused probe.
        known = self.safe if self.safe is not None else self.held
        if known is not None and abs(safe - known) <= 1:
            self._probe_rounds = min(self._probe_rounds * PROBE_BACKOFF, MAX_PROBE_ROUNDS)
        else:
            self._probe_rounds = FIRST_PROBE_ROUNDS
        self.safe = safe
        self._struck = False
        self._refused_above(safe, refused_at)
        # Down to the level that held, not below: the Retry-After pause already holds every worker
        # back. Without the level the request was sent at, what held is unknown: halve.
        self._decrease(safe if level is not None else max(1, self.limit // 2))

    def _decrease(self, limit: int) -> None:
        self.decreases += 1
        self._decreased_at = time.monotonic()
        self._set(limit)

    def _set(self, limit: int) -> None:
        self.limit = max(1, min(limit, self.ceiling))
        self.highest = max(self.highest, self.limit)
        self._grown_at = 0

    # -- memory ---------------------------------------------------------------------------------

    def _held(self, level: int) -> None:
        """``level`` has served: remembered when it is above the last level that held."""
        if self.held is not None and level <= self.held:
            return
        self.held = level
        if self.refused is not None and self.refused <= level:
            self.refused = None  # refused once, served since: the capacity grew
        # Before any refusal the level grows with every reply: written when it has doubled, and at
        # the ceiling, so a run writes a handful of times.
        saved = self._saved.level if self._saved is not None else 0
        if self.safe is not None or level >= 2 * saved or level >= self.ceiling:
            self._remember()

    def _refused_above(self, safe: int, refused: int) -> None:
        """The server refused ``refused`` requests in flight; ``safe`` is the level that holds."""
        self.held = safe
        self.refused = max(safe + 1, refused if self.refused is None else min(self.refused, refused))
        self._remember()

    def _remember(self) -> None:
        if self.memory is None or self.held is None:
            return
        held = HeldLevel(self.held, self.refused, self._probe_rounds)
        if held != self._saved:
            self.memory.save(held)
            self._saved = held

    def stats(self) -> LimitStats:
        return LimitStats(final=self.limit, highest=self.highest, decreases=self.decreases, ceiling=self.ceiling,
                          start=self.start)
