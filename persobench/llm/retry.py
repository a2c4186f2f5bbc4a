"""How failed requests are retried: the policy (:class:`RetryPolicy`), what one request's attempts
came to (:class:`CallOutcome`), the wait announcements, and the :class:`PauseGate` that makes one
worker's Retry-After hold back every worker, since rate limits are per account, not per prompt.

The loop itself, :func:`persobench.llm.session.call_with_retries`, lives beside the session that
sends: a request goes from the sender to the provider through one file of this layer.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass

from persobench.errors import ProviderError
from persobench.providers.base import Completion




@dataclass(frozen=True)
class RetryPolicy:
    """How failed requests are retried. None of this is part of the cache key."""

    max_attempts: int = 6
    """Attempts per request, the first included."""
    base_delay: float = 1.0
    """Backoff before the second attempt, doubled for each further one (before jitter)."""
    max_delay: float = 60.0
    """Cap on one backoff wait."""
    max_retry_after: float = 600.0
    """A server asking to wait longer than this (seconds) fails the request instead."""
    timeout: float = 60.0
    """Seconds one HTTP request may take in all, reply included, before it counts as timed out."""
    timeout_flag: str = "--timeout"
    """The command-line flag that sets :attr:`timeout`, named when a request runs out of time
    (``run``: ``--timeout``; ``score --judge``: ``--judge-timeout``)."""

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """Wait after failed attempt ``attempt`` (1-based): exponential with "equal jitter" (half
        fixed, half random), so simultaneous failures do not retry in lockstep."""
        ceiling = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        return ceiling / 2 + rng.uniform(0, ceiling / 2)


@dataclass(frozen=True)
class CallOutcome:
    """How one request ended after all its attempts."""

    completion: Completion | None
    """The reply, or ``None`` when the request failed."""
    error: ProviderError | None
    """Why the last attempt failed (``None`` with a completion)."""
    latency: float
    """Seconds the last attempt took."""
    attempts: int
    """Attempts made, the first included."""


#: A backoff wait shorter than this passes unannounced; a server's Retry-After is always announced.
ANNOUNCE_BACKOFF_S = 10.0


def wait_note(delay: float, error: ProviderError) -> str:
    """One line saying that a request waits ``delay`` seconds before its retry, and why; ``""`` for a
    short backoff not worth a line."""
    status = f" HTTP {error.status_code}" if error.status_code is not None else ""
    if error.retry_after is not None:
        return (f"waiting {delay:.0f} s before retrying: the server asked for it (Retry-After) with "
                f"{error.kind.value}{status}")
    if delay >= ANNOUNCE_BACKOFF_S:
        return f"waiting {delay:.0f} s before retrying: backing off after {error.kind.value}{status}"
    return ""


class PauseGate:
    """A shared "no request before" time: a Retry-After from one request holds back all workers,
    since rate limits are per account, not per prompt."""

    def __init__(self) -> None:
        self.not_before = 0.0

    def push(self, until: float) -> None:
        self.not_before = max(self.not_before, until)

    async def wait(self, stopping: asyncio.Event) -> None:
        while (delay := self.not_before - time.monotonic()) > 0 and not stopping.is_set():
            await sleep_or_stop(delay, stopping)


async def sleep_or_stop(delay: float, stopping: asyncio.Event) -> None:
    """Sleep ``delay`` seconds, or less when ``stopping`` is set meanwhile."""
    try:
        await asyncio.wait_for(stopping.wait(), timeout=delay)
    except TimeoutError:
        pass
