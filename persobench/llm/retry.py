"""The one retry loop every provider's requests go through, and the pause gate it shares.

:func:`call_with_retries` sends one request, retrying what retrying can fix (rate limits, server
errors, timeouts ...) with exponential backoff, honouring a server's Retry-After, and stopping at
once when the run is stopping. The :class:`PauseGate` makes one worker's Retry-After hold back
every worker, since rate limits are per account, not per prompt.
"""

from __future__ import annotations

import asyncio
import random
import time
import weakref
from dataclasses import dataclass
from typing import Awaitable, Callable, TypeVar

from persobench.errors import PersoBenchError
from persobench.errors import ErrorKind, ProviderError
from persobench.llm.usage import check_usage
from persobench.providers.base import Completion, Provider, Request, within_deadline
from persobench.llm.concurrency import AdaptiveLimit


T = TypeVar("T")


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


class Stopped(PersoBenchError):
    """The run stopped while a request was in flight; the request was cancelled. A signal inside
    the retry loop, never shown to a user (a PersoBenchError only so the hierarchy has no exception)."""


async def unless_stopping(coro: Awaitable[T], stopping: asyncio.Event) -> T:
    """Await ``coro``, but cancel it at once (raising :class:`Stopped`) when ``stopping`` is set
    first: a cancel or SIGTERM must not wait for the slowest request's timeout.

    ``coro`` runs in the caller's own task, which :func:`_on_set` cancels when the event is set: a
    task of its own per request put event-loop steps between a reply and the next request, and
    every step left more of the HTTP pool's connections idle, each probed before every request
    (half a millisecond of CPU per request at 64 in flight). A stop that comes in the very step the
    reply does abandons the reply (the sample stays pending, resumable)."""
    if stopping.is_set():
        if asyncio.iscoroutine(coro):
            coro.close()
        raise Stopped()
    task = asyncio.current_task()
    assert task is not None
    stopped: list[bool] = []

    def stop() -> None:
        stopped.append(True)
        task.cancel()

    callbacks = _on_set(stopping)
    callbacks.add(stop)
    try:
        return await coro
    except asyncio.CancelledError:
        if stopped:
            task.uncancel()  # our own cancel, turned into Stopped; any other cancel goes on
            raise Stopped() from None
        raise
    finally:
        callbacks.discard(stop)


#: Per event: the callbacks to run when it is set, and the one task per event waiting for it.
_WATCHED: "weakref.WeakKeyDictionary[asyncio.Event, tuple[set[Callable[[], None]], asyncio.Future]]" = \
    weakref.WeakKeyDictionary()


def _on_set(event: asyncio.Event) -> set[Callable[[], None]]:
    """The set of callbacks run (once) when ``event`` is set: one waiting task per event, not per request."""
    entry = _WATCHED.get(event)
    if entry is None or entry[1].done() or entry[1].get_loop() is not asyncio.get_running_loop():
        callbacks: set[Callable[[], None]] = set()

        async def watch() -> None:
            await event.wait()
            for callback in list(callbacks):
                callback()

        entry = _WATCHED[event] = (callbacks, asyncio.ensure_future(watch()))
    return entry[0]


async def call_with_retries(
    provider: Provider, request: Request, *, policy: RetryPolicy, gate: PauseGate, stopping: asyncio.Event,
    rng: random.Random, on_attempt: Callable[[], None] = lambda: None, interrupt: asyncio.Event | None = None,
    limit: "AdaptiveLimit | None" = None, on_wait: Callable[[float, str], None] = lambda *_: None,
) -> CallOutcome | None:
    """THE retry loop, for every provider: the request's outcome, or ``None`` when the run is
    stopping before the request could finish. ``on_attempt`` is called before each attempt (the
    runner counts HTTP requests with it). A request in flight is cancelled at once when
    ``interrupt`` (default: ``stopping``) is set; with another event, ``stopping`` alone lets it finish.
    With ``limit`` (``--concurrency auto``) each attempt waits for a slot and reports back how it went.
    ``on_wait(seconds, why)`` is told of a wait worth announcing (:func:`wait_note`) before it starts,
    and ``on_wait(0, "")`` when it is over, so progress can say that the run waits, how long and why."""
    interrupt = stopping if interrupt is None else interrupt
    attempt = 0
    while True:
        level: int | None = None
        if limit is not None:
            level = await limit.acquire()
        error: ProviderError | None = None
        started: float | None = None  # set once the attempt is sent
        latency = 0.0
        try:
            await gate.wait(stopping)  # after the slot: a Retry-After may have come in meanwhile
            if stopping.is_set():
                return None
            attempt += 1
            on_attempt()
            started = time.monotonic()
            try:
                # A deadline for the whole request (HTTP providers declare it): a reply dripping in
                # byte by byte never lets one read time out.
                deadline = getattr(provider, "request_deadline", None)
                completion = await unless_stopping(
                    within_deadline(provider.generate(request), deadline, flag=policy.timeout_flag), interrupt)
                # Token counts are checked here, once for every provider: unusable ones refuse the reply.
                completion = check_usage(completion)
                latency = time.monotonic() - started
                return CallOutcome(completion, None, latency, attempt)
            except Stopped:  # cancelled in flight: the sample stays pending (resumable)
                started = None  # tells the limit nothing
                return None
            except ProviderError as exc:
                error = exc
            except Exception as exc:  # noqa: BLE001 - an adapter bug must cost one sample, not the run
                error = ProviderError(ErrorKind.OTHER, f"{type(exc).__name__}: {exc}")
            latency = time.monotonic() - started
        finally:
            if limit is not None:
                limit.release(started, error, latency, level)
        assert error is not None
        if not error.retryable or attempt >= policy.max_attempts:
            return CallOutcome(None, error, latency, attempt)
        if error.retry_after is not None and error.retry_after > policy.max_retry_after:
            note = ProviderError(
                error.kind, f"{error} (server asked to wait {error.retry_after:.0f}s, more than max_retry_after)",
                status_code=error.status_code, retry_after=error.retry_after,
            )
            return CallOutcome(None, note, latency, attempt)
        delay = policy.backoff(attempt, rng)
        if error.retry_after is not None:
            # Never before the server's Retry-After, and hold the other workers back too.
            gate.push(time.monotonic() + error.retry_after)
            delay = max(delay, error.retry_after)
        note = wait_note(delay, error)
        if note:
            on_wait(delay, note)
        await sleep_or_stop(delay, stopping)
        if note:
            on_wait(0.0, "")
        if stopping.is_set():
            return None
