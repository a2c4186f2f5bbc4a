"""How failed requests are retried: the policy (:class:`RetryPolicy`), what one request's attempts
came to (:class:`CallOutcome`), the wait announcements, and the :class:`PauseGate` that makes one
worker's Retry-After hold back every worker, since rate limits are per account, not per prompt.

The loop itself, :func:`persobench.llm.session.call_with_retries`, lives beside the session that
sends: a request goes from the sender to the provider through one file of this layer.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from persobench.config.retry_policy import RetryPolicy
from persobench.errors import ProviderError
from persobench.providers.base import Completion

__all__ = ["ANNOUNCE_BACKOFF_S", "CallOutcome", "PauseGate", "RetryPolicy", "sleep_or_stop", "wait_note"]


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
