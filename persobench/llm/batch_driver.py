"""Sending requests through a provider's batch API (``run --batch``, ``score --judge ... --batch``).

:func:`fill_cache` is the one driver, for generation and the judge alike: given the requests the
response cache lacks, it submits them as one batch, records the batch id in a state file
(:mod:`persobench.llm.batch_state`, written atomically BEFORE any waiting), polls, and writes every
reply to the response cache the moment the batch's results are read. The caller's ordinary path
then finds each reply cached; what the batch did not answer goes out as ordinary requests (with
the one retry loop). So:

* a killed or restarted command finds its batch in the state file and collects it, never
  submitting the same request twice; a process killed between the server's answer and the state
  write (or whose answer was lost) finds the batch again by the token it wrote into it before
  submitting (:meth:`BatchBackend.find`: OpenAI's ``metadata``, the custom ids' prefix), never by
  its size or time; while the provider cannot tell yet (Anthropic shows custom ids only once a batch
  has ended) nothing is submitted;
* requests the batch answered with an error, or whose custom id its output repeats (neither line is
  used), are left to the ordinary path;
* requests an expired or cancelled batch left unanswered are submitted once more in a new batch; if
  that one ends the same way, they are left to the ordinary path;
* a batch that failed as a whole (refused by the provider, or every line an error) leaves its
  requests unsent: the outcome names it (:attr:`BatchOutcome.failures`) and the caller stops,
  unless the user chose ``--batch-fallback interactive``;
* ``wait`` bounds the waiting: at the deadline the command returns with the batch still running
  on the server, and the next command collects it.

The state file holds ids, cache keys, states and counts, never a credential (every text a server
sends back is scrubbed before it is written).
"""

from __future__ import annotations

import dataclasses
import secrets as token_source
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from persobench.errors import ConfigurationError, ErrorKind, PersoBenchError, ProviderError, StoreWriteError
from persobench.store.files import utc_now, write_refused
from persobench.llm.batch_state import (  # noqa: F401 - the state's names, where callers have found them
    STATE_FILE, BatchEntry, BatchListing, BatchState, batch_listing, read_state,
)
from persobench.llm.response_cache import ResponseCache
from persobench.providers.models_registry import prices_for
from persobench.providers.base import Request
from persobench.providers.batch_api import BatchBackend, BatchStatus, RepeatedId, custom_id, supports_batch
from persobench.core.secrets import scrub

#: Share of the interactive price a batch costs when the models file names no batch price.
BATCH_DISCOUNT = 0.5
#: What happens to the requests of a batch that failed as a whole (``--batch-fallback``).
FALLBACKS = ("stop", "interactive")


@dataclass(frozen=True)
class BatchSettings:
    """How a command uses a batch API."""

    wait: float | None = None
    """Seconds to wait for the batches to end; ``None``: until they end (up to the providers'
    24 hours); ``0``: submit (or look) and return at once, a later command collects."""
    poll: float = 30.0
    """Seconds between two status requests."""
    fallback: str = "stop"
    """The requests of a batch that failed as a whole: ``stop`` (the command stops and names the
    command that sends them one by one) or ``interactive`` (sent one by one, at full price)."""

    def __post_init__(self) -> None:

        if not self.poll > 0 or (self.wait is not None and not self.wait >= 0):
            raise ConfigurationError(f"--batch-poll must be > 0 and --batch-wait >= 0 seconds, got "
                                     f"{self.poll!r} and {self.wait!r}")
        if self.fallback not in FALLBACKS:
            raise ConfigurationError(f"--batch-fallback must be one of {', '.join(FALLBACKS)}, got {self.fallback!r}")


class BatchFailed(PersoBenchError):
    """A batch failed as a whole and its requests were not sent one by one (``--batch-fallback stop``)."""

    def __init__(self, failure: str) -> None:
        super().__init__(f"{failure}; to send them one by one at full price, give --batch-fallback interactive")
        self.failure = failure
        """What failed, how many requests it left unanswered (:meth:`BatchOutcome.failure_line`)."""


@dataclass(frozen=True)
class BatchOutcome:
    """What one call of :func:`fill_cache` did."""

    answered: int
    """Replies written to the response cache by this call."""
    failed: int
    """Requests a batch answered with an error (left to the ordinary path)."""
    pending: int
    """Requests still waiting on the provider (the deadline came first)."""
    submitted: int
    """Batches this call submitted (0 when it only collected)."""
    status: str
    """One line: the batches' state and counts."""
    pending_keys: frozenset[str] = frozenset()
    """The cache keys still waiting on the provider."""
    failures: tuple[str, ...] = ()
    """``<batch id> failed (<why>)`` for each batch that failed as a whole with requests still unanswered."""
    failed_keys: frozenset[str] = frozenset()
    """The requests of those batches: sent one by one only with ``fallback="interactive"``."""

    @property
    def waiting(self) -> bool:
        return self.pending > 0

    def failure_line(self) -> str:
        """``batch batch_x failed (why): its N request(s) were not sent one by one at full price``."""
        return (f"{'; '.join(self.failures)}: its {len(self.failed_keys)} request(s) were not sent one by one at "
                "full price")


def fill_cache(
    backend: "BatchBackend", requests: Mapping[str, "Request"], *, cache: "ResponseCache", state_path: Path,
    settings: BatchSettings = BatchSettings(), secrets: tuple[str, ...] = (),
    say: Callable[[str], None] = lambda _: None, stop: Callable[[], bool] = lambda: False, submit: bool = True,
) -> BatchOutcome:
    """Answer ``requests`` (cache key -> request, all missing from ``cache``) through ``backend``'s
    batch API as far as ``settings.wait`` allows; see the module docstring. ``say`` gets one line
    per change of state; ``stop`` ends the waiting early (a cancel): the batch keeps running.
    ``submit=False`` only collects the batches the state file already holds."""
    state = BatchState.read(state_path, backend.provider)
    answered = failed = submitted = 0

    def save() -> None:
        state.write(state_path)

    deadline = None if settings.wait is None else time.monotonic() + max(0.0, settings.wait)
    last: dict[str, str] = {}
    look_for_new = True
    while True:
        for entry in [b for b in state.active if b.batch_id is None]:  # its answer was never recorded
            if _look_up(backend, entry, state, state_path, say, last):
                look_for_new = True  # it never reached the provider: its requests are to submit
            save()
        if look_for_new and submit:
            covered = {k for b in state.batches for k in b.keys}
            new = {k: r for k, r in requests.items() if k not in covered and k not in cache}
            keys, size = list(new), max(1, int(getattr(backend, "max_requests", 50_000)))
            for start in range(0, len(keys), size):  # the APIs cap a batch's size: several batches then
                _submit(backend, state, {k: new[k] for k in keys[start:start + size]}, resubmission=False,
                        save=save, say=say)
                submitted += 1
        look_for_new = False
        for entry in [b for b in state.active if b.batch_id is not None]:
            status = backend.status(str(entry.batch_id))
            _record(entry, status, secrets)
            save()
            _say_once(say, last, str(entry.batch_id), f"batch {entry.batch_id}: {scrub(status.describe(), secrets)}")
            if status.ended:
                got, bad, unanswered = _collect(backend, entry, status, requests, cache, secrets, say)
                answered += got
                failed += bad
                entry.collected = True
                save()
                if unanswered and status.expired and not entry.resubmission and submit:
                    _submit(backend, state, {k: requests[k] for k in unanswered}, resubmission=True, save=save, say=say)
                    submitted += 1
        active = state.active
        if not active or stop() or (deadline is not None and time.monotonic() >= deadline):
            break
        pause = settings.poll if deadline is None else min(settings.poll, max(0.0, deadline - time.monotonic()))
        _sleep(pause, stop)
    pending = frozenset(k for b in state.active for k in b.keys)
    broken = [b for b in state.batches if b.failure and any(k in requests for k in b.keys)]
    return BatchOutcome(answered, failed, len(pending), submitted, _summary(state), pending,
                        tuple(f"batch {b.batch_id} failed ({b.failure})" for b in broken),
                        frozenset(k for b in broken for k in b.keys if k in requests))


def _say_once(say: Callable[[str], None], last: dict[str, str], topic: str, line: str) -> None:
    """Say ``line`` unless it is what was last said about ``topic``."""
    if last.get(topic) != line:
        last[topic] = line
        say(line)


def _look_up(backend: "BatchBackend", entry: BatchEntry, state: BatchState, state_path: Path,
             say: Callable[[str], None], last: dict[str, str]) -> bool:
    """Find the batch of a submission whose answer was lost by its token: record its id, or drop
    the entry when it never reached the provider (``True``), or leave it while the provider cannot
    tell yet."""
    try:
        found = backend.find(entry.token, since=entry.submitted_at, count=len(entry.keys), tagged=entry.tagged)
    except ProviderError as exc:
        raise ProviderError(exc.kind, f"cannot look up the batch submitted at {entry.updated_at} whose answer "
                            f"was lost ({exc}); if the provider shows no such batch, move {state_path} aside",
                            status_code=exc.status_code) from None
    if found.batch_id is not None:
        entry.batch_id, entry.state, entry.updated_at = found.batch_id, "submitted", utc_now()
        say(f"batch {entry.batch_id}: found again after an interrupted submission")
        return False
    if found.undecided:
        _say_once(say, last, entry.token, f"batch submitted at {entry.updated_at}: its answer was lost; "
                  f"{found.undecided} batch(es) of its size are still running and show their custom ids only when "
                  "they end: waiting to tell which is ours (nothing is submitted meanwhile)")
        return False
    state.batches.remove(entry)  # it never reached the server
    return True


def _sleep(seconds: float, stop: Callable[[], bool]) -> None:
    """Sleep ``seconds``, waking every tenth of a second to honour ``stop``."""
    end = time.monotonic() + seconds
    while not stop() and (left := end - time.monotonic()) > 0:
        time.sleep(min(0.1, left))


def _custom_ids(entry: BatchEntry) -> dict[str, str]:
    """Custom id -> cache key of the batch's requests (state files written before custom ids carried
    the token: the cache key itself)."""
    return {custom_id(entry.token, n) if entry.tagged else k: k for n, k in enumerate(entry.keys)}


def _submit(backend: "BatchBackend", state: BatchState, requests: Mapping[str, "Request"], *, resubmission: bool,
            save: Callable[[], None], say: Callable[[str], None]) -> None:
    """Record the submission, submit, record the id: a crash at any point leaves a state that
    never submits these requests again (see :meth:`BatchBackend.find`)."""
    entry = BatchEntry(token=token_source.token_hex(8), keys=list(requests), submitted_at=time.time(),
                       resubmission=resubmission, updated_at=utc_now(), tagged=True)
    ids = _custom_ids(entry)
    state.batches.append(entry)
    save()
    try:
        entry.batch_id = backend.submit({cid: requests[key] for cid, key in ids.items()}, entry.token)
    except ProviderError as exc:
        if exc.status_code is not None and 400 <= exc.status_code < 500 and exc.status_code not in (408, 409):
            state.batches.remove(entry)  # refused outright: no batch exists, nothing to look for later
            save()
        raise
    entry.state, entry.updated_at = "submitted", utc_now()
    save()
    say(f"batch {entry.batch_id}: submitted {len(requests)} request(s)"
        + (" again (the first batch expired or was cancelled)" if resubmission else ""))


def _record(entry: BatchEntry, status: "BatchStatus", secrets: tuple[str, ...]) -> None:
    entry.state = scrub(status.state, secrets)[:40]
    entry.counts = {"total": status.total or len(entry.keys), "succeeded": status.succeeded, "failed": status.failed}
    entry.updated_at = utc_now()


def _collect(backend: "BatchBackend", entry: BatchEntry, status: "BatchStatus", requests: Mapping[str, "Request"],
             cache: "ResponseCache", secrets: tuple[str, ...], say: Callable[[str], None]) -> tuple[int, int, list[str]]:
    """Cache every reply of an ended batch, say what it gave, and mark it failed as a whole when it
    answered nothing; (replies cached, errors, keys left unanswered that this process can send again)."""

    results = {} if status.batch_failed else backend.results(status)
    by_key = {key: results.get(cid) for cid, key in _custom_ids(entry).items()}
    latency = (status.elapsed or 0.0) / max(1, len(entry.keys))  # each reply's share, as batched local generation
    errors = [r for r in by_key.values() if isinstance(r, ProviderError)]
    unanswered = [key for key, result in by_key.items() if result is None and key in requests]
    for key, result in by_key.items():
        if result is None or isinstance(result, ProviderError):
            continue
        usage = entry.usage
        usage["replies"] = usage.get("replies", 0) + 1
        usage["prompt_tokens"] = usage.get("prompt_tokens", 0) + int(result.prompt_tokens or 0)
        usage["completion_tokens"] = usage.get("completion_tokens", 0) + int(result.completion_tokens or 0)
        try:
            cache.set(key, _scrubbed(result, secrets), latency=latency)
        except (OSError, sqlite3.Error) as exc:
            raise StoreWriteError(str(write_refused(Path(getattr(cache, "directory", ".")) / "cache.db", exc))) from None
        entry.answered.append(key)
    got = len(by_key) - len(errors) - sum(r is None for r in by_key.values())
    repeated = sum(isinstance(r, RepeatedId) for r in errors)
    # Failed as a whole: the provider refused the batch, or it answered nothing and every line is an
    # error of the server's (a reply over our size cap was answered: sending it again is the cap's rule).
    if status.batch_failed:
        entry.failure = scrub(status.error or status.state, secrets)[:300]
    elif entry.keys and not got and len(errors) == len(entry.keys) \
            and not any(e.kind is ErrorKind.TOO_LARGE for e in errors):
        entry.failure = scrub(f"every request errored, first: {errors[0]}", secrets)[:300]
    if status.batch_failed:
        say(f"batch {entry.batch_id}: failed as a whole ({entry.failure})")
    else:
        say(f"batch {entry.batch_id}: {got} repl{'y' if got == 1 else 'ies'} cached, {len(errors) - repeated} failed"
            + (f", {repeated} repeated custom_id(s) (neither line used: sent again)" if repeated else "")
            + (f", {len(unanswered)} unanswered" if unanswered else ""))
    return got, len(errors), unanswered


def _scrubbed(completion: Any, secrets: tuple[str, ...]) -> Any:
    """A server that echoes the key must not get it into the cache."""
    if not secrets:
        return completion
    return dataclasses.replace(completion, text=scrub(completion.text, secrets),
                               model=scrub(completion.model, secrets) if completion.model else completion.model)


def _summary(state: BatchState) -> str:
    if not state.batches:
        return "no batch"
    parts = []
    for b in state.batches:
        counts = b.counts or {}
        parts.append(f"{b.batch_id or '(submitting)'} {b.state}"
                     + (f" {counts.get('succeeded', 0)}/{counts.get('total', len(b.keys))} done" if counts else "")
                     + (" collected" if b.collected else ""))
    return "; ".join(parts)


def batch_prices(spec: Any) -> tuple[float, float] | None:
    """USD per million (input, output) tokens through the batch API: the models file's
    ``price_batch_input_per_mtok`` / ``price_batch_output_per_mtok``, else half the model's prices."""

    given = (getattr(spec, "price_batch_input_per_mtok", None), getattr(spec, "price_batch_output_per_mtok", None))
    prices = prices_for(spec)
    if given != (None, None):
        return (given[0] if given[0] is not None else (prices or (0.0, 0.0))[0] * BATCH_DISCOUNT,
                given[1] if given[1] is not None else (prices or (0.0, 0.0))[1] * BATCH_DISCOUNT)
    return None if prices is None else (prices[0] * BATCH_DISCOUNT, prices[1] * BATCH_DISCOUNT)


def batch_cost(spec: Any, prompt_tokens: int, completion_tokens: int) -> float | None:
    """Estimated USD through the batch API (``None``: unknown prices)."""
    prices = batch_prices(spec)
    if prices is None:
        return None
    return round((prompt_tokens * prices[0] + completion_tokens * prices[1]) / 1_000_000, 6)


def estimated_max_batch_cost(plan: Any) -> float | None:
    """Upper-bound USD of a plan's requests through the batch API (every reply at the token limit,
    as :meth:`GenerationPlan.estimated_max_cost`); ``None``: no batch API, or unknown prices."""

    if not supports_batch(plan.spec.provider):
        return None
    return batch_cost(plan.spec, plan.estimated_prompt_tokens, plan.n_requests * plan.params.max_tokens)
