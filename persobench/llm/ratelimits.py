"""The rate limits a server states on its replies, read from the headers of both dialects.

OpenAI, and the OpenAI-compatible servers that copy it, send on every reply (429s included)::

    x-ratelimit-limit-requests: 600          x-ratelimit-limit-tokens: 40000
    x-ratelimit-remaining-requests: 599      x-ratelimit-remaining-tokens: 39800
    x-ratelimit-reset-requests: 100ms        x-ratelimit-reset-tokens: 1m30s

the reset being the time until the limit is whole again, as a duration (``6s``, ``1m30s``,
``12ms``, ``1h2m3.5s``). Anthropic sends ``anthropic-ratelimit-<kind>-limit``, ``-remaining`` and
``-reset`` for ``requests``, ``tokens``, ``input-tokens`` and ``output-tokens``, the reset an RFC 3339
time (``2026-12-06T10:00:30Z``). :func:`read_stated_limits` turns either into one
:class:`StatedLimit` per kind (``requests``, ``tokens``, ``input_tokens``, ``output_tokens``);
:mod:`persobench.llm.pacing` keeps the budgets. A header that does not parse is ignored, never an
error: the headers only save time.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
import time
from dataclasses import dataclass
from typing import Mapping

#: The kinds of limit a server may state, in the names the budgets use.
KINDS = ("requests", "tokens", "input_tokens", "output_tokens")
#: A stated reset further away than this (seconds) is read as this: a day-long limit spent is
#: paced like one, a hostile header cannot hold a run for a year.
MAX_RESET_S = 86_400.0

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|us|µs|ns|h|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


@dataclass(frozen=True)
class StatedLimit:
    """One limit as a reply states it."""

    limit: float
    """Units (requests or tokens) the window allows in all: the bucket's size."""
    remaining: float
    """Units left when the server answered (at most ``limit``)."""
    reset: float | None
    """Seconds until the limit is whole again (``None``: not stated or unreadable)."""


def parse_duration(text: str) -> float | None:
    """Seconds in a duration as OpenAI writes it (``6s``, ``1m30s``, ``12ms``, ``1h2m3.5s``, ``0s``)
    or a bare number of seconds; ``None`` when ``text`` is neither."""
    text = text.strip().lower()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        return value if math.isfinite(value) and value >= 0 else None
    total, position = 0.0, 0
    for match in _DURATION_PART.finditer(text):
        if match.start() != position:
            return None
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if position != len(text) or not math.isfinite(total):
        return None
    return total


def parse_reset(text: str, *, now: float | None = None) -> float | None:
    """Seconds from ``now`` (default: the clock) until ``text``: a duration (OpenAI), an RFC 3339
    time (Anthropic; a time without a zone is UTC) or a bare number of seconds. A time already past
    is 0; ``None`` when ``text`` is none of these."""
    seconds = parse_duration(text)
    if seconds is None:
        try:
            when = _dt.datetime.fromisoformat(text.strip().replace("z", "Z"))
        except ValueError:
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=_dt.UTC)
        seconds = max(0.0, when.timestamp() - (time.time() if now is None else now))
    return min(seconds, MAX_RESET_S)


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _stated(limit: str | None, remaining: str | None, reset: str | None, now: float | None) -> StatedLimit | None:
    size, left = _number(limit), _number(remaining)
    if size is None or left is None or size < 1:
        return None
    return StatedLimit(size, min(left, size), parse_reset(reset, now=now) if reset else None)


def read_stated_limits(headers: Mapping[str, str] | None, *, now: float | None = None) -> dict[str, StatedLimit]:
    """The limits ``headers`` state, by kind (:data:`KINDS`); empty when they state none.

    A limit needs its ``limit`` and ``remaining`` headers (numbers); its reset is optional. When
    Anthropic states input and output tokens separately, its ``tokens`` headers (the most
    restrictive of the two, rounded) are left out: the two buckets say it exactly."""
    if not headers:
        return {}
    lower = {str(k).lower(): str(v) for k, v in headers.items()}
    found: dict[str, StatedLimit] = {}
    for kind in ("requests", "tokens"):
        stated = _stated(lower.get(f"x-ratelimit-limit-{kind}"), lower.get(f"x-ratelimit-remaining-{kind}"),
                         lower.get(f"x-ratelimit-reset-{kind}"), now)
        if stated is not None:
            found[kind] = stated
    for kind in KINDS:
        prefix = f"anthropic-ratelimit-{kind.replace('_', '-')}"
        stated = _stated(lower.get(f"{prefix}-limit"), lower.get(f"{prefix}-remaining"), lower.get(f"{prefix}-reset"), now)
        if stated is not None:
            found[kind] = stated
    if "input_tokens" in found or "output_tokens" in found:
        if any(k.startswith("anthropic-ratelimit-tokens") for k in lower):
            found.pop("tokens", None)
    return found


def format_duration(seconds: float) -> str:
    """``seconds`` the way OpenAI writes a reset (``12ms``, ``6s``, ``1m30s``, ``1h2m3.5s``): the
    inverse of :func:`parse_duration`, for servers (the tests' fake) and messages."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{secs:.3f}".rstrip("0").rstrip(".") + "s"
    if minutes or hours:
        text = f"{int(minutes)}m{text}"
    if hours:
        text = f"{int(hours)}h{text}"
    return text
