"""Rate limits for the fake servers: token buckets per minute, stated in OpenAI's or Anthropic's headers.

A :class:`RateLimits` holds one bucket per limit it is given: requests (``rpm``), tokens (``tpm``:
prompt plus reply), input tokens (``itpm``) and output tokens (``otpm``). A bucket of limit ``L``
holds at most ``L`` and refills at ``L`` per minute; ``start`` sets how full it is when the first
request arrives (a client rarely finds its buckets full; the clock starts then, so a client's own
start-up time does not fill them). A request arriving is charged 1 request, its prompt's tokens
(:func:`count_tokens` of every message) and its whole ``max_tokens`` as output, or refused when a
bucket lacks that (429 with ``retry-after``: whole seconds until it would fit). Its reply gives
back the ``max_tokens`` it did not use, as Anthropic says it counts output tokens. Every reply and
refusal states every bucket the way the chosen dialect does: ``x-ratelimit-{limit,remaining,
reset}-{requests,tokens}`` (reset a duration) or ``anthropic-ratelimit-<kind>-{limit,remaining,reset}``
(reset an RFC 3339 time); ``state=False`` states nothing (a server limited like the others that says
nothing about it).
"""

from __future__ import annotations

import datetime as _dt
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Mapping

from persobench.llm.ratelimits import format_duration

#: Characters per token in the fake's own counts (the estimate OpenAI makes when a request arrives).
CHARS_PER_TOKEN = 4


def count_tokens(text: str) -> int:
    """The fake's token count of ``text`` (what its usage reports)."""
    return len(text) // CHARS_PER_TOKEN + 1


def prompt_tokens(body: Mapping[str, Any]) -> int:
    """Tokens of a request's prompt: every message's text (the system prompt and a raw prompt included)."""
    parts: list[str] = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [b.get("text", "") for b in content if isinstance(b, Mapping)]
    for name in ("system", "prompt"):
        if isinstance(body.get(name), str):
            parts.append(body[name])
    return count_tokens("".join(parts)) if parts else 0


@dataclass
class _Bucket:
    limit: float
    level: float
    at: float

    @property
    def rate(self) -> float:
        return self.limit / 60.0

    def refill(self, now: float) -> None:
        self.level = min(self.limit, self.level + self.rate * (now - self.at))
        self.at = now


class RateLimits:
    """Per-minute buckets shared by every request to one fake server (see the module)."""

    def __init__(self, *, rpm: float | None = None, tpm: float | None = None, itpm: float | None = None,
                 otpm: float | None = None, start: Mapping[str, float] | None = None, dialect: str = "openai",
                 state: bool = True) -> None:
        if dialect not in ("openai", "anthropic"):
            raise ValueError(dialect)
        now = time.monotonic()
        start = dict(start or {})
        self.buckets = {kind: _Bucket(float(limit), float(start.get(kind, limit)), now)
                        for kind, limit in (("requests", rpm), ("tokens", tpm), ("input_tokens", itpm),
                                            ("output_tokens", otpm)) if limit}
        self.dialect = dialect
        self.state = state
        self.admitted: list[dict[str, float]] = []
        """Per admitted request, in arrival order: ``at`` (monotonic), ``prompt``, ``max_tokens``,
        and ``completion`` once its reply has given back the unused tokens."""
        self.refused = 0
        """Requests refused for an empty bucket."""
        self._lock = threading.Lock()
        self._started = False

    def admit(self, body: Mapping[str, Any]) -> tuple[int | None, dict[str, str]]:
        """Charge a request: (its index in :attr:`admitted`, the headers stating the buckets), or refuse
        it: (None, the headers with ``retry-after``)."""
        prompt = prompt_tokens(body)
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 0)
        cost = {"requests": 1.0, "tokens": prompt + max_tokens, "input_tokens": prompt, "output_tokens": max_tokens}
        with self._lock:
            now = time.monotonic()
            if not self._started:  # the buckets start as they are when the first request arrives
                self._started = True
                for bucket in self.buckets.values():
                    bucket.at = now
            wait = 0.0
            for kind, bucket in self.buckets.items():
                bucket.refill(now)
                need = min(cost[kind], bucket.limit) - bucket.level
                if need > 0:
                    wait = max(wait, need / bucket.rate)
            if wait > 0:
                self.refused += 1
                return None, {**self._headers(now), "retry-after": str(max(1, math.ceil(wait)))}
            for kind, bucket in self.buckets.items():
                bucket.level -= cost[kind]
            self.admitted.append({"at": now, "prompt": prompt, "max_tokens": max_tokens})
            return len(self.admitted) - 1, self._headers(now)

    def settle(self, index: int, completion_tokens: int) -> dict[str, str]:
        """The reply to admitted request ``index`` used ``completion_tokens``: the rest comes back."""
        with self._lock:
            record = self.admitted[index]
            record["completion"] = completion_tokens
            unused = max(0.0, record["max_tokens"] - completion_tokens)
            now = time.monotonic()
            for kind in ("tokens", "output_tokens"):
                bucket = self.buckets.get(kind)
                if bucket is not None:
                    bucket.refill(now)
                    bucket.level = min(bucket.limit, bucket.level + unused)
            return self._headers(now)

    def _headers(self, now: float) -> dict[str, str]:
        if not self.state:
            return {}
        headers: dict[str, str] = {}
        for kind, bucket in self.buckets.items():
            remaining = max(0, math.floor(bucket.level))
            reset = max(0.0, (bucket.limit - bucket.level) / bucket.rate)
            if self.dialect == "openai":
                if kind in ("requests", "tokens"):
                    headers[f"x-ratelimit-limit-{kind}"] = str(int(bucket.limit))
                    headers[f"x-ratelimit-remaining-{kind}"] = str(remaining)
                    headers[f"x-ratelimit-reset-{kind}"] = format_duration(reset)
            else:
                name = kind.replace("_", "-")
                when = _dt.datetime.now(_dt.UTC) + _dt.timedelta(seconds=reset)
                headers[f"anthropic-ratelimit-{name}-limit"] = str(int(bucket.limit))
                headers[f"anthropic-ratelimit-{name}-remaining"] = str(remaining)
                headers[f"anthropic-ratelimit-{name}-reset"] = when.isoformat(timespec="milliseconds").replace(
                    "+00:00", "Z")
        return headers

    def summary(self) -> dict[str, Any]:
        """What the buckets saw (the benchmark computes the time they allow from it)."""
        with self._lock:
            return {"limits": {k: b.limit for k, b in self.buckets.items()}, "refused": self.refused,
                    "admitted": [dict(r) for r in self.admitted]}


def min_seconds(admitted: list[Mapping[str, float]], limits: Mapping[str, float], start: Mapping[str, float],
                latency: float) -> float:
    """The least time the buckets allow for ``admitted`` requests in their order (prompt, max_tokens,
    completion each), from the first send to the last reply: every request sent as soon as every
    bucket holds its cost, the unused reply tokens given back ``latency`` after it was sent."""
    levels = {kind: float(start.get(kind, limit)) for kind, limit in limits.items()}
    rates = {kind: limit / 60.0 for kind, limit in limits.items()}
    refunds: list[tuple[float, float]] = []  # (time, tokens), in time order
    now, last = 0.0, 0.0

    def advance(to: float) -> None:
        nonlocal now
        while refunds and refunds[0][0] <= to:
            when, amount = refunds.pop(0)
            grow(when)
            for kind in ("tokens", "output_tokens"):
                if kind in levels:
                    levels[kind] = min(limits[kind], levels[kind] + amount)
        grow(to)

    def grow(to: float) -> None:
        nonlocal now
        if to > now:
            for kind in levels:
                levels[kind] = min(limits[kind], levels[kind] + rates[kind] * (to - now))
            now = to

    for record in admitted:
        cost = {"requests": 1.0, "tokens": record["prompt"] + record["max_tokens"], "input_tokens": record["prompt"],
                "output_tokens": record["max_tokens"]}
        while True:
            advance(now)
            wait = max((min(cost[k], limits[k]) - levels[k]) / rates[k] for k in levels)
            if wait <= 1e-9:
                break
            target = now + wait
            if refunds and refunds[0][0] < target:
                target = refunds[0][0]
            advance(target)
        for kind in levels:
            levels[kind] -= cost[kind]
        unused = max(0.0, record["max_tokens"] - record.get("completion", record["max_tokens"]))
        refunds.append((now + latency, unused))
        refunds.sort()
        last = now
    return last + latency
