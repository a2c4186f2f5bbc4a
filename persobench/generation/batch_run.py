"""A run's batch-API hook (``run --batch``): answer the plan's missing requests through
:func:`persobench.llm.batch_driver.fill_cache` before the runner sends anything, so the batch's
replies are cache hits and only what it did not answer goes out as ordinary requests."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, NoReturn

from persobench.errors import PersoBenchError, ProviderError
from persobench.store.files import utc_now
from persobench.llm.batch_driver import STATE_FILE, BatchOutcome, BatchState, batch_cost, fill_cache, read_state
from persobench.core.secrets import scrub
from persobench.providers.base import Request
from persobench.providers.batch_api import BatchBackend
from persobench.llm.response_cache import ResponseCache
from persobench.generation.config import batch_settings
from persobench.generation.progress import ProgressInfo, cancel_requested, write_progress
from persobench.providers.batch_api import make_batch_backend
from persobench.core.secrets import known_secrets
from persobench.errors import RunAborted
from persobench.store.run_records import GenerationRecord, RunExtra
from persobench.errors import ConfigurationError
from persobench.generation.lock import command_with, stored_command
from persobench.providers.models_registry import estimate_cost



class BatchPending(PersoBenchError):
    """A run's batch is still running on the provider when the command stops waiting (its
    ``--batch-wait`` deadline, or a cancel): the same command later collects it."""

    def __init__(self, message: str, run: Any, *, cancelled: bool = False) -> None:
        super().__init__(message)
        self.run = run
        """The run (status ``pending``, or ``cancelled`` when a cancel stopped the waiting)."""
        self.cancelled = cancelled
        """A cancel, not the deadline, stopped the waiting."""


def generate_by_batch(plan: Any, run: Any, *, api_key: str | None = None,
                      progress: Callable[[Any], None] | None = None, cancel: Any = None) -> Any:
    """The generation hook: answer the plan's missing requests through the batch API, then return
    the plan with every cached reply as a hit, so the runner sends only what the batch did not
    answer. Raises :class:`BatchPending` when the batch is still running at the deadline."""

    config = plan.config
    backend = make_batch_backend(plan.spec, api_key=api_key, timeout=config.retry.timeout)
    secrets = known_secrets(api_keys=getattr(backend, "_secrets", ()) or (), base_url=plan.spec.base_url,
                            options=plan.spec.options)
    started = time.monotonic()

    def say(line: str, status: str = "running") -> None:
        info = ProgressInfo(run_id=run.run_id, status=status, total=len(plan.samples), done=len(plan.hits),
                            failed=0, cached=len(plan.hits), requests=0, elapsed=round(time.monotonic() - started, 3),
                            eta=None, pid=os.getpid(), note=scrub(line, secrets))
        write_progress(run.path, info)
        if progress is not None:
            progress(info)

    def stop() -> bool:
        return cancel_requested(run.path) or (cancel is not None and cancel.is_set())

    requests = {plan.keys[i]: Request(messages=tuple(plan.messages[i]), params=plan.params, sample=plan.samples[i])
                for i in range(len(plan.samples)) if i not in plan.hits}
    # Without --batch, a batch an earlier `run --batch` left running is only looked at (collected if
    # it ended): its requests must not be paid for a second time by accident.
    settings = batch_settings(config)
    try:
        with ResponseCache(plan.cache_dir) as cache:
            outcome = _fill_or_abort(run, backend, requests, cache=cache, state_path=Path(run.path) / STATE_FILE,
                                     settings=settings, secrets=secrets, say=say, stop=stop, submit=config.batch)
            for i, key in enumerate(plan.keys):
                if i not in plan.hits and (hit := cache.get(key)) is not None:
                    plan.hits[i] = hit
    finally:
        backend.close()
    run.update(extra={"batch": batch_record(Path(run.path) / STATE_FILE, plan.spec)})
    if outcome.failures and settings.fallback == "stop":
        _stop_for_failure(plan, run, outcome, secrets)
    if outcome.waiting and not config.batch:

        run.update(status="pending")
        say(f"waiting for the batch: {outcome.status}", "pending")
        raise ConfigurationError(
            f"run {run.run_id}: a batch from an earlier `run --batch` is still running ({outcome.pending} request(s): "
            f"{outcome.status}); add --batch to wait for it and collect it, or move {Path(run.path) / STATE_FILE} "
            "aside to send its requests one by one (paying for them a second time)")
    if outcome.waiting:
        cancelled = stop()
        run.update(status="cancelled" if cancelled else "pending")
        say(f"waiting for the batch: {outcome.status}", "cancelled" if cancelled else "pending")
        why = "cancelled while waiting" if cancelled else "still running at the --batch-wait deadline"
        raise BatchPending(f"run {run.run_id}: batch {why} ({outcome.pending} request(s) pending: {outcome.status}); "
                           "run the same command again to collect it (nothing is submitted twice)", run,
                           cancelled=cancelled)
    return plan


def _fill_or_abort(run: Any, backend: "BatchBackend", requests: Mapping[str, "Request"], **kwargs: Any) -> BatchOutcome:
    """:func:`fill_cache`, a failure of the batch API itself (a refused key, an unknown model, a
    server down for every retry) ending the run ``failed`` with the reason in one line."""

    try:
        return fill_cache(backend, requests, **kwargs)
    except ProviderError as exc:
        _abort(run, scrub(f"the batch API failed: {exc.describe()}", kwargs.get("secrets", ())))


def _stop_for_failure(plan: Any, run: Any, outcome: BatchOutcome, secrets: Any) -> NoReturn:
    """A batch failed as a whole: end the run ``failed`` saying why, with the command that sends its
    requests one by one (at full price: the user's choice, never made for them)."""
    command, note = command_with(plan, Path(run.path).parent.parent, batch_fallback="interactive")
    _abort(run, scrub(f"{outcome.failure_line()}; to send them one by one at full price: {command}"
                      + (f" ({note})" if note else ""), secrets))


def _abort(run: Any, reason: str) -> NoReturn:
    run.update(status="failed", extra=RunExtra(generation=GenerationRecord(failure_reason=reason,
                                                                           finished_at=utc_now())).to_extra())
    raise RunAborted(reason, run) from None


def batch_record(state_path: Path, spec: Any) -> dict[str, Any]:
    """The manifest's ``extra["batch"]``: the provider, the batch ids, the replies the batches
    answered, their tokens and their cost at batch prices."""
    state = read_state(state_path) or BatchState("")
    replies = sum(b.usage.get("replies", 0) for b in state.batches)
    prompt_tokens = sum(b.usage.get("prompt_tokens", 0) for b in state.batches)
    completion_tokens = sum(b.usage.get("completion_tokens", 0) for b in state.batches)
    return {"provider": state.provider, "batch_ids": [b.batch_id for b in state.batches if b.batch_id],
            "replies": replies, "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "cost_usd": batch_cost(spec, prompt_tokens, completion_tokens) if replies else None}


def batch_waiting(run_path: str | os.PathLike[str]) -> bool:
    """Whether a batch of the run at ``run_path`` is not collected yet (as its state file says)."""
    state = read_state(Path(run_path) / STATE_FILE)
    return bool(state is not None and state.active)


def answered_by_batch(run_path: str | os.PathLike[str]) -> frozenset[str]:
    """The cache keys whose reply a batch of the run at ``run_path`` answered (none without one)."""
    state = read_state(Path(run_path) / STATE_FILE)
    return state.answered if state is not None else frozenset()


def priced_cost(spec: Any, tokens: list[tuple[bool, int, int]]) -> float | None:
    """USD of replies given as (answered by a batch, prompt tokens, completion tokens): each at the
    price it was answered at (``None``: a price unknown)."""
    interactive = [sum(t[1] for t in tokens if not t[0]), sum(t[2] for t in tokens if not t[0])]
    batched = [sum(t[1] for t in tokens if t[0]), sum(t[2] for t in tokens if t[0])]
    cost = estimate_cost(spec, *interactive)
    if not any(t[0] for t in tokens):
        return cost
    by_batch = batch_cost(spec, *batched)
    return None if cost is None or by_batch is None else round(cost + by_batch, 6)


def batch_notes(plan: Any, run_path: str | os.PathLike[str]) -> list[str]:
    """What a dry run says about the run's batches: those still on the provider (collected by this
    command, or with ``--batch`` only) and those that failed with requests this command would send."""
    try:
        state = BatchState.read(Path(run_path) / STATE_FILE, "")
    except PersoBenchError as exc:
        return [f"batch state: {exc} (the command stops on it)"]
    notes = []
    if waiting := state.waiting():
        notes.append(f"batch pending: {waiting}; " + ("this command collects them instead of sending them"
                                                      if plan.config.batch else "without --batch this command stops "
                                                      "while they run: add --batch to wait for them and collect them"))
    to_send = {plan.keys[i] for i in range(len(plan.keys)) if i not in plan.hits}
    for b in state.batches:
        if b.failure and (left := to_send.intersection(b.keys)):
            notes.append(f"batch {b.batch_id} failed ({b.failure}): its {len(left)} request(s) are sent one by one "
                         + ("(--batch-fallback interactive)" if plan.config.batch_fallback == "interactive"
                            else "only with --batch-fallback interactive; this command stops"))
    return notes


@dataclass(frozen=True)
class WaitingBatch:
    """A run whose batch is still on the provider (status ``pending``, or cancelled while waiting)."""

    requests: int
    """Requests its uncollected batches ask for."""
    command: str
    """The command that collects it: the run's own (credentials left out)."""
    note: str = ""
    """What the command leaves out and must be given again (secret options), or ``""``."""

    def describe(self) -> str:
        text = (f"batch pending: {self.requests} request(s) waiting on the provider; run the same command again to "
                f"collect it (nothing is submitted twice): {self.command}")
        return f"{text} ({self.note})" if self.note else text


def waiting_batch(run: Any) -> WaitingBatch | None:
    """How to collect ``run``'s batch, or ``None`` when no batch of it waits on the provider; a
    damaged state file is one :class:`PersoBenchError` line naming it."""
    active = BatchState.read(Path(run.path) / STATE_FILE, "").active
    if not active:
        return None
    stored = stored_command(run)
    if stored is None:
        return WaitingBatch(sum(len(b.keys) for b in active), "`python -m persobench run ... --batch`")
    return WaitingBatch(sum(len(b.keys) for b in active), stored.command, stored.note)
