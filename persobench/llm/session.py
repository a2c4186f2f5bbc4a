"""One model's sending: THE loop that turns requests into cached replies, for generation and the judge.

An :class:`LLMSession` resolves the provider (key, reachability), runs the workers
(:meth:`LLMSession.drive`: at most ``K`` requests in flight, or ``--concurrency auto``'s
:class:`~persobench.llm.concurrency.AdaptiveLimit`), and sends each request
(:meth:`LLMSession.send`) through the same steps:

1. stop before sending when the run it is for was deleted (:func:`sending_for`) or the session stops;
2. reserve the request's upper-bound cost from the :class:`~persobench.llm.spend.SpendLedger` (not
   sent when it does not fit under the cap; while only reservations in flight keep it out, it waits
   for them to settle); a retry after a timeout reserves again;
3. :func:`call_with_retries`, below (Retry-After pause gate, pacing by the server's stated rate
   limits (:mod:`persobench.llm.pacing`), backoff, deadline, usage check);
4. scrub every known credential from the reply, then write it to the response cache BEFORE the
   caller parses it (a reply that does not parse is counted by the caller, never a traceback of this
   layer). With a plain :class:`~persobench.llm.response_cache.ResponseCache` the write is committed
   here, so a crash after it loses nothing; generation's
   :class:`~persobench.llm.response_cache.GroupCommitCache` commits the replies of one event-loop
   step together and the runner reports a sample only after its commit (a SIGKILL inside that step
   loses replies never reported done, which the next run requests again);
5. settle the reservation with the real cost (a timed-out attempt at its bound) and add the usage
   to :attr:`LLMSession.usage`. A ledger that fails (damaged, vanished, unwritable) stops the
   session: nothing more is sent, the requests in flight end and are cached, and :meth:`LLMSession.drive`
   raises the ledger's one-line error.

Callers keep only what is theirs: generation its rows, checkpoints and progress, the judge its labels.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import itertools
import os
import random
import sqlite3
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

from persobench.errors import ErrorKind, PersoBenchError, ProviderError
from persobench.store.files import write_refused
from persobench.llm.concurrency import AdaptiveLimit, LevelMemory
from persobench.llm.pacing import UNPACED, Pacer, Ticket, request_cost, server_pacer
from persobench.llm.retry import CallOutcome, PauseGate, RetryPolicy, sleep_or_stop, wait_note
from persobench.llm.spend import SpendLedger, Spending
from persobench.llm.usage import UsageRefused, UsageTotals, check_usage, estimate_prompt_tokens
from persobench.providers.base import BatchingProvider, Completion, Provider, Request
from persobench.core.secrets import known_secrets, scrub
from persobench.llm.response_cache import ResponseCache
from persobench.providers.spec import ModelSpec
import threading
from persobench.providers.models_registry import estimate_cost
from persobench.providers import make_provider


T = TypeVar("T")

#: The run folder the requests sent in this context are for (set by :func:`sending_for`).
_RUN_PATH: contextvars.ContextVar[Path | None] = contextvars.ContextVar("persobench_llm_run", default=None)


@contextlib.contextmanager
def sending_for(run_path: str | os.PathLike[str] | None) -> Iterator[None]:
    """Requests sent inside this block are for the run at ``run_path``: once the run is deleted (its
    folder gone, or a ``cancel`` file in it) the queued ones are not sent (paid requests for nothing)."""
    token = _RUN_PATH.set(Path(run_path) if run_path is not None else None)
    try:
        yield
    finally:
        _RUN_PATH.reset(token)


def run_gone() -> bool:
    """Whether the run this context sends for was deleted or cancelled."""
    path = _RUN_PATH.get()
    return path is not None and (not path.is_dir() or (path / "cancel").exists())


def run_coroutine(coro: Any) -> Any:
    """``asyncio.run``, also from code that already runs an event loop (notebooks, some apps). The
    caller's context (:func:`sending_for`) goes along."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)

    result: dict[str, Any] = {}
    context = contextvars.copy_context()

    def target() -> None:
        try:
            result["value"] = context.run(asyncio.run, coro)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            result["error"] = exc

    thread = threading.Thread(target=target, name="persobench-llm")
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result.get("value")


# --- The retry loop: every request of every provider, in the sender's own task -------------------


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
    provider: Provider, request: Request, *, policy: RetryPolicy, timeout_flag: str, gate: PauseGate,
    stopping: asyncio.Event, rng: random.Random, on_attempt: Callable[[], None] = lambda: None,
    interrupt: asyncio.Event | None = None, limit: "AdaptiveLimit | None" = None,
    on_wait: Callable[[float, str], None] = lambda *_: None, may_retry: Callable[[ProviderError], bool] = lambda _: True,
    pacer: Pacer | None = None, cost: Mapping[str, float] | None = None,
) -> CallOutcome | None:
    """THE retry loop, for every provider: the request's outcome, or ``None`` when the run is stopping before the
    request could finish; one out of time names ``timeout_flag`` (``--timeout``, ``--judge-timeout``). ``on_attempt``
    is called before each attempt (the runner counts HTTP requests with it). A request in flight is cancelled at
    once when ``interrupt`` (default: ``stopping``) is set; with another event, ``stopping`` alone lets it finish.
    With ``limit`` (``--concurrency auto``) each attempt waits for a slot and reports back how it went.
    ``on_wait(seconds, why)`` is told of a wait worth announcing (:func:`wait_note`) before it starts,
    and ``on_wait(0, "")`` when it is over, so progress can say that the run waits, how long and why.
    ``may_retry(error)`` is asked before a retry; False ends the request with ``error`` (the spend
    cap: a retry after a timeout needs a reservation of its own).
    With ``pacer``, each attempt first waits for the server's stated budgets to hold ``cost``
    (:meth:`Pacer.admit`) and then tells the pacer how it went (headers, usage)."""
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
            # last before sending: the stated limits' budget is taken when the request leaves
            ticket = UNPACED if pacer is None else await pacer.admit(cost or {}, stopping, on_wait)
            if not isinstance(ticket, Ticket):  # stopped, or no room within max_retry_after
                return None if ticket is None else CallOutcome(None, ticket, 0.0, attempt)
            attempt += 1
            on_attempt()
            started = time.monotonic()
            try:
                # A deadline for the whole request (HTTP providers declare it): a reply dripping in
                # byte by byte never lets one read time out.
                deadline = getattr(provider, "request_deadline", None)
                completion = await unless_stopping(
                    within_deadline(provider.generate(request), deadline, flag=timeout_flag), interrupt)
                # Token counts are checked here, once for every provider: unusable ones refuse the reply.
                completion = check_usage(completion)
                latency = time.monotonic() - started
                ticket.settle(completion.rate_headers, (completion.prompt_tokens, completion.completion_tokens))
                return CallOutcome(completion, None, latency, attempt)
            except Stopped:  # cancelled in flight: the sample stays pending (resumable)
                started = None  # tells the limit nothing
                ticket.settle(None, failed=True)
                return None
            except ProviderError as exc:
                error = exc
            except Exception as exc:  # noqa: BLE001 - an adapter bug must cost one sample, not the run
                error = ProviderError(ErrorKind.OTHER, f"{type(exc).__name__}: {exc}")
            ticket.settle(error.rate_headers, failed=True, refused=error.status_code == 429)
            latency = time.monotonic() - started
        finally:
            if limit is not None:
                limit.release(started, error, latency, level)
        assert error is not None
        if not error.retryable or attempt >= policy.max_attempts or not may_retry(error):
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
        waiting = wait_note(delay, error)
        if waiting:
            on_wait(delay, waiting)
        await sleep_or_stop(delay, stopping)
        if waiting:
            on_wait(0.0, "")
        if stopping.is_set():
            return None


async def within_deadline(coro: Any, seconds: float | None, *, flag: str = "--timeout") -> Any:
    """Await ``coro``, failing it as a ``timeout`` when the whole of it (connecting, waiting, reading
    every byte of the reply) takes more than ``seconds``: a server dripping one byte a second never
    lets a single read time out. ``None``: no deadline (in-process models). ``flag``: the option that
    sets the deadline, named in the error."""
    if not seconds:
        return await coro
    try:
        # In the task awaiting it (asyncio.wait_for would wrap it in a task of its own, per request).
        async with asyncio.timeout(seconds):
            return await coro
    except TimeoutError:
        raise ProviderError(ErrorKind.TIMEOUT, f"no complete reply within {seconds:g} s ({flag} is a deadline "
                            "for the whole request, reply included)") from None


class FailFast:
    """Whether the first ``threshold`` requests all failed for one reason retrying cannot fix (a bad
    key, an unknown model): then every further request would fail alike."""

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self.first: list[ProviderError | None] = []
        self.settled = threshold <= 0

    def observe(self, error: ProviderError | None) -> ProviderError | None:
        """Record one request's outcome; the common error once the threshold is reached, else None."""
        if self.settled:
            return None
        self.first.append(error)
        first = self.first[0]
        hopeless = first is not None and (not first.retryable or first.kind is ErrorKind.CONNECTION)
        if not hopeless or first is None or error is None or error.signature != first.signature:
            self.settled = True  # one success or a different failure: the model works
            return None
        if len(self.first) >= self.threshold:
            self.settled = True
            return first
        return None


@dataclass(frozen=True)
class Sent:
    """How one request sent through :meth:`LLMSession.send` ended."""

    outcome: CallOutcome | None
    """The call's outcome (the completion scrubbed and cached); ``None`` when it was not sent or
    not finished (see :attr:`skipped`)."""
    skipped: str = ""
    """Why nothing was sent: "cost cap", "run deleted", "stopped" or "spend ledger" (it failed:
    :attr:`~persobench.llm.spend.Spending.failure`); "" when sent."""


class LLMSession:
    """One model, one cache, one ledger: everything a sender needs (see the module)."""

    def __init__(self, spec: "ModelSpec", *, timeout_flag: str, policy: RetryPolicy | None = None,
                 concurrency: int | str = 8, max_concurrency: int = 32, cache: "ResponseCache | None" = None,
                 api_key: str | None = None, ledger: SpendLedger | None = None, budget_tokens: int | None = None,
                 provider: Provider | None = None, limit_start: int | None = None,
                 memory: LevelMemory | None = None, pacing_home: str | os.PathLike[str] | None = None) -> None:
        self.spec = spec
        self.policy = policy or RetryPolicy()
        self.timeout_flag = timeout_flag  # what a request out of time names: the caller's flag
        self.concurrency = concurrency
        self.max_concurrency = max_concurrency
        self.cache = cache
        self.api_key = api_key
        self.ledger = ledger
        self.budget_tokens = budget_tokens
        """Completion tokens counted for a reply without usable usage (the request's max_tokens)."""
        self.provider = provider
        self.secrets: tuple[str, ...] = known_secrets(base_url=spec.base_url, options=spec.options)
        """Every credential this session knows (key, URL credentials, secret options): scrubbed from replies."""
        self.usage = UsageTotals()
        self.gate = PauseGate()
        self.rng = random.Random()
        self.stopping = asyncio.Event()
        """Set to stop sending; requests in flight finish (unless :attr:`interrupt` is set too)."""
        self.interrupt = asyncio.Event()
        """Set to abandon the requests in flight at once (a cancel)."""
        self.spending = Spending(ledger, self.stopping) if ledger is not None else None
        """This session's reservations in the ledger (its first failure stops the session)."""
        self.limit: AdaptiveLimit | None = None
        """``--concurrency auto``'s limit, made by :meth:`workers` (read it after the run for its stats)."""
        self.limit_start = limit_start
        self.memory = memory
        """Where ``auto`` remembers the level that held for this server (``None``: nothing remembered)."""
        """Where ``auto`` starts (e.g. a level remembered for this server); ``None``: the limit's default."""
        self.pacing_home = pacing_home  # the store whose budget files this session shares (None: its own only)
        self.pacer: Pacer | None = None  # the stated rate limits' budgets (llm/pacing.py), made by connect()

    # -- provider resolution --------------------------------------------------------------------

    def connect(self) -> Provider:
        """Build and check the provider (:class:`ConfigurationError`, one line: no key, unreachable
        server) and learn the credentials to scrub; idempotent."""
        if self.provider is None:

            self.provider = make_provider(self.spec, api_key=self.api_key, timeout=self.policy.timeout)
            self.provider.check()
        keys = getattr(self.provider, "_secrets", ()) or ()
        self.secrets = known_secrets(api_keys=keys, base_url=self.spec.base_url, options=self.spec.options)
        # paced once the server states its rate limits (an in-process model never does)
        self.pacer = self.pacer or server_pacer(self.pacing_home, self.spec, keys, max_wait=self.policy.max_retry_after)
        return self.provider

    async def aclose(self) -> None:
        if self.pacer is not None:
            self.pacer.close()
        if self.provider is not None:
            await self.provider.aclose()

    # -- the workers ----------------------------------------------------------------------------

    def workers(self, todo: int) -> int:
        """Workers to start for ``todo`` requests (and the adaptive limit, with ``auto``)."""
        ceiling = self.max_concurrency if self.concurrency == "auto" else int(self.concurrency)
        allowed = getattr(self.provider, "max_concurrency", None) or ceiling
        if self.concurrency == "auto" and self.limit is None:
            if self.limit_start is None:
                self.limit = AdaptiveLimit(min(ceiling, allowed), memory=self.memory)
            else:
                self.limit = AdaptiveLimit(min(ceiling, allowed), start=self.limit_start, memory=self.memory)
        return max(1, min(ceiling, allowed, todo))

    @property
    def batch_size(self) -> int:
        """Requests per call: several for an in-process model that generates a batch at once."""
        if isinstance(self.provider, BatchingProvider):
            return max(1, int(self.provider.batch_size))
        return 1

    async def drive(self, todo: Iterable[T], handle: Callable[[list[T]], Awaitable[None]], *, total: int) -> None:
        """Hand ``todo`` to the workers (``batch_size`` items at a time) until it is empty or the
        session stops; ``handle(items)`` sends them (through :meth:`send` / :meth:`send_batch`)."""
        items = iter(todo)
        batch = self.batch_size

        async def worker() -> None:
            while not self.stopping.is_set():
                chunk = list(itertools.islice(items, batch))  # the shared iterator gives each item to one worker
                if not chunk:
                    return
                await handle(chunk)

        await asyncio.gather(*(worker() for _ in range(self.workers(total))))
        if self.spending is not None and self.spending.failure is not None:
            raise self.spending.failure  # the ledger failed: raised once the requests in flight ended

    # -- sending one request ----------------------------------------------------------------------

    def _bound(self, request: Request) -> tuple[int, float]:
        prompt = estimate_prompt_tokens(request.messages)
        return prompt, self._cost(prompt, self._budget(request))

    def _budget(self, request: Request) -> int:
        return int(self.budget_tokens if self.budget_tokens is not None else request.params.max_tokens or 0)

    def _cost(self, prompt_tokens: int, completion_tokens: int) -> float:

        return estimate_cost(self.spec, prompt_tokens, completion_tokens) or 0.0

    def _account(self, request: Request, outcome: CallOutcome | None, prompt_estimate: int) -> float:
        """Add a finished request to :attr:`usage`; its cost (0 for a failure)."""

        if outcome is None:
            return 0.0
        completion = outcome.completion
        if completion is not None:
            prompt = completion.prompt_tokens if completion.prompt_tokens is not None else prompt_estimate
            done = completion.completion_tokens if completion.completion_tokens is not None else self._budget(request)
            self.usage.replies += 1
        elif isinstance(outcome.error, UsageRefused):  # answered (and paid): counted at the estimate
            prompt, done = prompt_estimate, self._budget(request)
            self.usage.refused_usage += 1
        else:
            return 0.0
        cost = estimate_cost(self.spec, prompt, done)
        self.usage.add(prompt, done, cost)
        return cost or 0.0

    def _count_attempt(self, on_attempt: Callable[[], None] | None) -> Callable[[], None]:
        def count() -> None:
            self.usage.requests += 1
            if on_attempt is not None:
                on_attempt()
        return count

    def scrubbed(self, completion: Completion | None) -> Completion | None:
        """``completion`` with every credential this session knows removed: a server that echoes the
        key back must not get it into the cache, tables, exports or pages."""
        if completion is None or not self.secrets:
            return completion
        return dataclasses.replace(completion, text=scrub(completion.text, self.secrets),
                                   model=scrub(completion.model, self.secrets) if completion.model else completion.model)

    def scrub(self, text: str) -> str:
        return scrub(text, self.secrets) if self.secrets else text

    def store(self, key: str, completion: Completion, latency: float,
              on_store_error: Callable[[str, Completion, float, BaseException], None] | None = None) -> None:
        """Write one reply to the response cache (before anyone parses it)."""
        if self.cache is None:
            return
        try:
            self.cache.set(key, completion, latency=latency)
        except (OSError, sqlite3.Error) as exc:
            if on_store_error is None:
                raise write_refused(self.cache.directory / "cache.db", exc) from None
            on_store_error(key, completion, latency, exc)

    async def send(self, key: str, request: Request, *, on_attempt: Callable[[], None] | None = None,
                   on_wait: Callable[[float, str], None] | None = None,
                   on_store_error: Callable[[str, Completion, float, BaseException], None] | None = None) -> Sent:
        """Send one request (see the module for the steps); the reply is cached under ``key``."""
        assert self.provider is not None, "connect() first"
        if run_gone():
            self.stopping.set()  # every queued request is for the deleted run
            return Sent(None, "run deleted")
        prompt_estimate, bound = self._bound(request)
        held = await self.spending.reserve(bound, run_gone) if self.spending is not None else None
        if isinstance(held, str):
            return Sent(None, held)
        outcome: CallOutcome | None = None
        try:
            outcome = await call_with_retries(
                self.provider, request, policy=self.policy, gate=self.gate, stopping=self.stopping, rng=self.rng,
                on_attempt=self._count_attempt(on_attempt), interrupt=self.interrupt, limit=self.limit,
                on_wait=on_wait or (lambda *_: None), may_retry=held.may_retry if held else lambda _: True,
                pacer=self.pacer, timeout_flag=self.timeout_flag,
                cost=request_cost(prompt_estimate, self._budget(request)) if self.pacer is not None else None,
            )
            if outcome is not None and outcome.completion is not None:
                completion = self.scrubbed(outcome.completion)
                assert completion is not None
                # First: a crash, or a ledger that fails below, loses nothing that was paid for.
                self.store(key, completion, outcome.latency, on_store_error)
                outcome = dataclasses.replace(outcome, completion=completion)
        finally:
            cost = self._account(request, outcome, prompt_estimate)
            if held is not None and (timeouts := held.end(outcome, cost)):  # each timeout at its bound
                self.usage.timed_out += timeouts
                self.usage.add(prompt_estimate * timeouts, self._budget(request) * timeouts, bound * timeouts)
        if outcome is None:
            return Sent(None, "stopped")
        return Sent(outcome)

    async def send_batch(self, keys: Sequence[str], requests: Sequence[Request], *,
                         on_attempt: Callable[[], None] | None = None,
                         on_store_error: Callable[[str, Completion, float, BaseException], None] | None = None,
                         ) -> list[Sent] | None:
        """Several requests in one call of a :class:`BatchingProvider` (an in-process model: no cost,
        no cap). Each reply is checked, scrubbed and cached on its own; a request whose error retrying
        may fix, and every request when the whole call fails, comes back with ``outcome`` None and
        ``skipped`` "retry" for the caller to :meth:`send` alone. ``None``: stopped, nothing kept."""
        assert isinstance(self.provider, BatchingProvider)
        await self.gate.wait(self.stopping)
        if self.stopping.is_set() or run_gone():
            return None
        count = self._count_attempt(on_attempt)
        for _ in requests:
            count()
        started = time.monotonic()
        try:
            results: list[Any] = list(await unless_stopping(self.provider.generate_batch(list(requests)),
                                                            self.interrupt))
            if len(results) != len(requests):
                raise ValueError(f"{len(results)} results for {len(requests)} requests")
        except Stopped:
            return None
        except Exception:  # noqa: BLE001 - the whole call failed: one by one, each with its own retries and error
            results = [None] * len(requests)
        # Each sample's latency is its share of the batch's time, so the mean stays time per reply.
        share = (time.monotonic() - started) / len(requests)
        out: list[Sent] = []
        for key, request, result in zip(keys, requests, results):
            if isinstance(result, Completion):
                try:
                    result = check_usage(result)
                except UsageRefused as exc:
                    result = exc
            if result is None or (isinstance(result, ProviderError) and result.retryable):
                out.append(Sent(None, "retry"))
            elif isinstance(result, ProviderError):
                out.append(Sent(CallOutcome(None, result, share, 1)))
            else:
                completion = self.scrubbed(result)
                assert completion is not None
                self.store(key, completion, share, on_store_error)
                outcome = CallOutcome(completion, None, share, 1)
                self._account(request, outcome, estimate_prompt_tokens(request.messages))
                out.append(Sent(outcome))
        return out

