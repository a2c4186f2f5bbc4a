"""Running a planned generation: rows, checkpoints, cancel, fail-fast, summary.

The sending itself is the LLM layer's (:class:`~persobench.llm.session.LLMSession`, shared with the
judge): ``K`` workers pull samples from one queue, so at most ``K`` requests are ever in flight;
each request goes through the single retry loop; every reply is checked, scrubbed and written to
the response cache as it arrives, which is what makes a run killed with SIGKILL resumable without
paying twice. The replies one step of the event loop received are committed together at the start
of the next step (:class:`~persobench.llm.response_cache.GroupCommitCache`), and a sample is parsed,
counted and written to the table only after its reply's commit, so nothing reported done can be
lost. This module keeps what is generation's own: a row per sample, the table checkpoints (built
from the rows new since the last one, :class:`~persobench.generation.rows.CheckpointTable`),
progress, the cancel file, fail-fast and the run's summary.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import gc
import itertools
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from persobench.errors import ProviderError, RunAborted, StoreWriteError
from persobench.store.files import utc_now, write_refused
from persobench.config import TIMEOUT_FLAG, changed
from persobench.generation.config import GenerationConfig
from persobench.generation.lock import hold_run_lock, write_resume_file
from persobench.generation.plan import GenerationPlan, plan_generation
from persobench.generation.progress import (ETA_AFTER_REPLIES, ProgressInfo, cancel_requested, clear_cancel,
                                            write_progress)
from persobench.generation.recovery import keep_reply, restore_replies
from persobench.generation.rows import TABLE, CheckpointTable, RowTable, build_row, rows_frame
from persobench.llm.concurrency import LevelMemory
from persobench.llm.response_cache import GroupCommitCache
from persobench.llm.retry import CallOutcome
from persobench.llm.session import FailFast, LLMSession, run_coroutine
from persobench.providers.base import Completion, Request
from persobench.store.run_records import ConcurrencyRecord, GenerationRecord, PacingRecord, RunExtra, Usage
from persobench.core.secrets import scrub
from persobench.store.run_store import Run, RunStore
from persobench.records import Sample
from persobench.generation.postprocess import summarize
from persobench.generation.batch_run import answered_by_batch, batch_waiting, generate_by_batch, priced_cost


__all__ = ["Runner", "RunAborted", "run_coroutine", "run_generation"]


def run_generation(
    config: GenerationConfig | None = None,
    /,
    *,
    store: RunStore | None = None,
    home: str | os.PathLike[str] | None = None,
    samples: list["Sample"] | None = None,
    api_key: str | None = None,
    progress: Callable[[ProgressInfo], None] | None = None,
    cancel: threading.Event | None = None,
    **fields: Any,
) -> Run:
    """Run (or resume) generation and post-processing; returns the run.

    ``config`` or its fields as keywords (``run_generation(dataset="sample", model="local:smollm2")``).
    ``api_key`` overrides the provider's environment variable (the app passes Streamlit secrets);
    it is never written anywhere. ``progress`` is called after every finished sample; ``cancel``
    (or a ``cancel`` file in the run folder) stops the run between requests.

    Raises :class:`ConfigurationError` before sending anything for a bad configuration (unknown
    dataset or model, missing key, unreachable server) and :class:`RunAborted` when the first
    requests all fail for one non-retryable reason. A completed run with failed samples returns
    normally: every sample has a row with its status.
    """
    if config is None:
        config = GenerationConfig(**fields)
    elif fields:
        config = changed(config, **fields)
    store = store or RunStore(home)
    plan = plan_generation(config, store=store, samples=samples)
    if restore_replies(store.run_path(plan.run_id), plan.cache_dir, keys=plan.keys):  # kept by a run whose disk was full
        plan = plan_generation(config, store=store, samples=samples)
    # auto starts where the last run against this server held (remembered per public base URL)
    memory = LevelMemory(store.home, plan.spec.provider, plan.spec.base_url) if config.concurrency == "auto" else None
    # paced by the limits the server states, in a budget every run of this store on the same key shares
    session = LLMSession(plan.spec, policy=config.retry, timeout_flag=TIMEOUT_FLAG, concurrency=config.concurrency,
                         max_concurrency=config.max_concurrency, api_key=api_key, memory=memory,
                         pacing_home=store.home)
    if plan.n_requests:  # a fully cached run needs neither a key nor a server
        session.connect()
    run = store.create(plan.manifest)
    # One process per run folder: a second identical run stops here (RunLocked, naming the pid)
    # instead of paying for every request again and overwriting the table.
    with hold_run_lock(run.path):
        # A run without --batch whose earlier batch still runs is refused by the batch step below: the
        # command stored for it stays the one that collects that batch until the batch has ended.
        waiting = not config.batch and batch_waiting(run.path)
        if not waiting:
            write_resume_file(run, plan, store.home)
        clear_cancel(run.path)
        # Scoring reads these inputs, whatever happens to the dataset later. Written beside the first
        # requests (pandas' import and the Parquet write take about a round of requests); the run
        # waits for it before it finishes.
        recording = Background(run.record_samples, plan.samples)
        run.update(status="running", extra=RunExtra(generation=GenerationRecord(started_at=utc_now()),
                                                    dataset_file=plan.dataset_file).to_extra())
        # The batch API first (run --batch, or a batch an earlier one left): its replies are then cache hits.
        if plan.n_requests and (config.batch or (run.path / "batch.json").exists()):

            plan = generate_by_batch(plan, run, api_key=api_key, progress=progress, cancel=cancel)
        if waiting:  # the batch has ended and is collected: from here the run is this command's
            write_resume_file(run, plan, store.home)
        runner = Runner(plan, run, session, progress=progress, cancel=cancel)
        try:
            with frozen_heap():
                run_coroutine(runner.main())
            recording.result()
        except BaseException as exc:
            # Ctrl-C or a bug: keep what was received (it is cached anyway) and say what happened.
            status = "cancelled" if isinstance(exc, KeyboardInterrupt) else "failed"
            with contextlib.suppress(BaseException):
                recording.result()
            runner.finish(status, reason=f"{type(exc).__name__}: {exc}" if status == "failed" else None)
            raise
        if runner.write_failure:
            runner.finish("failed", reason=runner.write_failure)
            raise StoreWriteError(runner.write_failure_report())
        if runner.abort_reason:
            runner.finish("failed", reason=runner.abort_reason)
            raise RunAborted(runner.abort_reason, run)
        runner.finish("cancelled" if runner.cancelled and runner.pending else "completed")
    return run


class Background:
    """``function(*args)`` in a thread of its own, started now; :meth:`result` waits for it and
    returns its value or raises its exception."""

    def __init__(self, function: Callable[..., Any], *args: Any) -> None:
        self._outcome: list[Any] = []

        def target() -> None:
            try:
                self._outcome.append((True, function(*args)))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller of result()
                self._outcome.append((False, exc))

        self._thread = threading.Thread(target=target, name="persobench-background", daemon=True)
        self._thread.start()

    def result(self) -> Any:
        self._thread.join()
        ok, value = self._outcome[0]
        if not ok:
            raise value
        return value


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Keep the objects that exist now (the modules, the plan) out of the garbage collector's full
    passes while the block runs (:func:`gc.freeze`), and give them back after it.

    Requests in flight and the rows kept make the collector run a full pass now and then during a
    run, and a full pass walks every object of the process: the imported SDKs, pandas and Arrow
    and the plan, none of which becomes garbage meanwhile. At 2,000 requests one such pass cost
    0.08-0.17 ms per request, more than the run's own work on a reply. Objects made in the block are
    collected as before. Nested or already frozen (someone else froze the heap): left as it is."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class Runner:
    """State of one run in this process: rows, counters, and the stop signals."""

    def __init__(
        self, plan: GenerationPlan, run: Run, session: LLMSession, *,
        progress: Callable[[ProgressInfo], None] | None, cancel: threading.Event | None,
    ) -> None:
        self.plan = plan
        self.run = run
        self.session = session
        self.config = plan.config
        self.progress_callback = progress
        self.cancel_event = cancel
        self.rows = RowTable()  # counts failed and cached rows as they are set (progress reads them per reply)
        self.checkpoint_table = CheckpointTable()
        self.requests = 0
        self.new_done = 0
        self.started = time.monotonic()
        self.last_progress_write = 0.0
        self.cancelled = False
        self.abort_reason: str | None = None
        self.fail_fast = FailFast(min(self.config.fail_fast_after, plan.n_requests))
        self.since_checkpoint = 0
        #: The first write the disk refused (one line naming the file); generation stops sending then.
        self.write_failure: str | None = None
        #: Recovery files holding replies the cache could not store, and how many no disk took.
        self.kept_in: set[Path] = set()
        self.lost = 0
        self.waits: dict[int, tuple[float, str]] = {}
        """Announced waits in progress: token -> (monotonic end, note); progress shows the longest."""
        self._wait_tokens = itertools.count()
        self.secrets = session.secrets
        # Set by a cancel only: requests in flight are abandoned at once, while a fail-fast abort
        # (stopping alone) lets them finish so their outcome is recorded.
        self.stopping = session.stopping
        self.interrupt = session.interrupt

    @property
    def limit(self) -> Any:
        """``--concurrency auto``'s limit (None with a fixed concurrency)."""
        return self.session.limit

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        return len(self.plan.samples) - len(self.rows)

    async def main(self) -> None:
        plan = self.plan
        for i, (completion, latency) in plan.hits.items():
            self.rows[i] = self._scrub_row(build_row(plan, i, self._scrubbed(completion), None, latency=latency,
                                                     attempts=0, cached=True))
        todo = [i for i in range(len(plan.samples)) if i not in self.rows]
        self._report(force=True)
        if not plan.n_requests:
            return
        try:
            # Replies are committed a loop step after they arrive, those of one step together, and a
            # sample is recorded (parsed, counted, checkpointed) only after its reply's commit.
            cache = self.session.cache = GroupCommitCache(plan.cache_dir, on_refused=self._keep,
                                                          on_failure=self._crashed)
        except (OSError, sqlite3.Error) as exc:
            raise write_refused(plan.cache_dir, exc) from None
        watcher = asyncio.create_task(self._watch_cancel())
        try:
            await self.session.drive(todo, self._send, total=plan.n_requests)
        finally:
            watcher.cancel()
            try:
                cache.close()  # commits what the last step received and records those samples
            finally:
                await self.session.aclose()
        if cache.failure is not None:  # a bug recording a sample (raised where the event loop would only log it)
            raise cache.failure

    def _crashed(self, _exc: BaseException) -> None:
        """Recording a sample raised (a bug, or Ctrl-C in that step): stop at once, as an exception
        in a worker does; :meth:`main` raises it once the workers are done."""
        self.interrupt.set()
        self.stopping.set()

    async def _watch_cancel(self) -> None:
        while not self.stopping.is_set():
            if cancel_requested(self.run.path) or (self.cancel_event is not None and self.cancel_event.is_set()):
                self.cancelled = True
                self.interrupt.set()
                self.stopping.set()
                return
            await asyncio.sleep(0.1)

    async def _send(self, indices: list[int]) -> None:
        if len(indices) == 1:
            await self._process(indices[0])
        else:
            await self._process_batch(indices)

    def _count_request(self) -> None:
        self.requests += 1

    def _request(self, i: int) -> Request:
        plan = self.plan
        return Request(messages=tuple(plan.messages[i]), params=plan.params, sample=plan.samples[i])

    async def _process(self, i: int, attempts_before: int = 0) -> None:
        token = next(self._wait_tokens)
        sent = await self.session.send(
            self.plan.keys[i], self._request(i), on_attempt=self._count_request, on_store_error=self._keep,
            on_wait=lambda seconds, note: self._on_wait(token, seconds, note))
        outcome = sent.outcome
        if outcome is None:  # stopped during a retry wait: the sample stays pending (resumable)
            return
        if attempts_before:  # its first attempt was part of a batch
            outcome = dataclasses.replace(outcome, attempts=outcome.attempts + attempts_before)
        self._when_committed(i, outcome)

    async def _process_batch(self, indices: list[int]) -> None:
        """Samples ``indices`` in one call of a batching provider (an in-process model). A sample whose
        error retrying may fix goes through the retry loop alone, and so does every sample when the
        whole call fails. A cancel abandons the call: its samples stay pending."""
        results = await self.session.send_batch([self.plan.keys[i] for i in indices],
                                                [self._request(i) for i in indices],
                                                on_attempt=self._count_request, on_store_error=self._keep)
        if results is None:
            return
        if isinstance(self.session.cache, GroupCommitCache):
            # A batch is one slow local call: nothing to gain by waiting for other replies, and its
            # samples are recorded before the next batch starts, as progress and a cancel expect.
            self.session.cache.commit()
        for i, sent in zip(indices, results):
            if sent.outcome is None:
                await self._process(i, attempts_before=1)
            else:
                self._record(i, sent.outcome)

    def _on_wait(self, token: int, seconds: float, note: str) -> None:
        """A request starts (``note``) or ends (``""``) a long wait: progress says so at once."""
        if note:
            self.waits[token] = (time.monotonic() + seconds, note)
        else:
            self.waits.pop(token, None)
        self._report(force=True)

    def _keep(self, key: str, completion: Completion, latency: float, exc: BaseException) -> None:
        """The response cache refused a reply (full disk): stop sending, keep the reply aside."""
        self._refused(write_refused(self.plan.cache_dir / "cache.db", exc))
        kept = keep_reply(self.run.path, key, completion, latency)
        if kept is None:
            self.lost += 1
        else:
            self.kept_in.add(kept)

    def _when_committed(self, i: int, outcome: CallOutcome) -> None:
        """Record sample ``i`` once its reply (and every reply before it) is committed to the cache:
        the worker sends its next request meanwhile. A failure waits behind the replies queued before
        it, so samples are recorded (and fail-fast sees them) in the order they finished."""
        cache = self.session.cache
        if isinstance(cache, GroupCommitCache):
            cache.after_commit(functools.partial(self._record, i, outcome))
        else:
            self._record(i, outcome)

    def _record(self, i: int, outcome: CallOutcome) -> None:
        """Record the outcome of sample ``i`` (its reply is cached already), then checkpoint and report."""
        plan = self.plan
        self.rows[i] = self._scrub_row(build_row(
            plan, i, outcome.completion, outcome.error, latency=outcome.latency, attempts=outcome.attempts,
            cached=False,
        ))
        self.new_done += 1
        self._fail_fast(outcome.error)
        self.since_checkpoint += 1
        if self.since_checkpoint >= max(1, self.config.checkpoint_every):
            self.since_checkpoint = 0
            self._write_table(checkpoint=True)
        self._report()

    def _refused(self, error: StoreWriteError) -> None:
        """The disk refused a write: stop sending (requests in flight still finish and are kept)."""
        if self.write_failure is None:
            self.write_failure = str(error)
        self.stopping.set()

    def write_failure_report(self) -> str:
        """The one line a run stopped by a refused write ends with: the file, what is kept where."""
        text = f"{self.write_failure}; stopped sending requests"
        if self.kept_in:
            files = ", ".join(str(p) for p in sorted(self.kept_in))
            text += (f"; replies received but not cached are kept in {files} and reused by the next run of the "
                     "same command (free some space first)")
        if self.lost:
            text += f"; {self.lost} received repl{'y' if self.lost == 1 else 'ies'} could not be written anywhere"
        return text

    def _scrubbed(self, completion: Completion | None) -> Completion | None:
        return self.session.scrubbed(completion)

    def _scrub_row(self, row: dict[str, Any]) -> dict[str, Any]:
        if not self.secrets:
            return row
        return {k: scrub(v, self.secrets) if isinstance(v, str) else v for k, v in row.items()}

    def _fail_fast(self, error: ProviderError | None) -> None:
        """Stop when the first N requests all failed for one reason that retrying cannot fix."""
        common = self.fail_fast.observe(error)
        if common is not None:
            self.abort_reason = scrub(f"the first {self.fail_fast.threshold} requests all failed: {common.describe()}",
                                      self.secrets)
            self.stopping.set()

    # -- files ------------------------------------------------------------------------------------

    def _write_table(self, *, checkpoint: bool = False) -> None:
        """Replace the table on disk: at a checkpoint from the rows set since the last one
        (:class:`CheckpointTable`), at the end from every row."""
        try:
            table = self.checkpoint_table.table(self.rows) if checkpoint else rows_frame(self.rows)
            self.run.write_table(TABLE, table)
        except StoreWriteError as exc:  # the rows are rebuilt from the cache by the next run
            self._refused(exc)

    def snapshot(self, status: str = "running") -> ProgressInfo:
        done = len(self.rows)
        failed, cached = self.rows.failed, self.rows.cached
        elapsed = time.monotonic() - self.started
        eta = None  # a few replies first (one quick or slow first reply says little); none once finished
        if status == "running" and self.new_done >= ETA_AFTER_REPLIES:
            eta = round(self.pending * elapsed / self.new_done, 1)
        return ProgressInfo(
            run_id=self.run.run_id, status=status, total=len(self.plan.samples), done=done, failed=failed,
            cached=cached, requests=self.requests, elapsed=round(elapsed, 3), eta=eta, pid=os.getpid(),
            note=max(self.waits.values())[1] if self.waits and status == "running" else "",
        )

    def _report(self, *, force: bool = False, status: str = "running") -> None:
        now = time.monotonic()
        due = force or now - self.last_progress_write >= 0.5
        if self.progress_callback is None and not due:
            return  # nobody to tell: no snapshot (this runs after every reply)
        info = self.snapshot(status)
        if self.progress_callback is not None:
            self.progress_callback(info)
        if due:
            self.last_progress_write = now
            try:
                write_progress(self.run.path, info)
            except StoreWriteError as exc:
                self._refused(exc)

    def _cost(self) -> float | None:
        """The run's replies, each at the price it was answered at: the batch API's for those a batch
        of this run answered (cached rows whose key its state file lists), the interactive price else."""
        by_batch = answered_by_batch(self.run.path)
        return priced_cost(self.plan.spec, [
            (bool(row["cached"]) and self.plan.keys[i] in by_batch, int(row["prompt_tokens"] or 0),
             int(row["completion_tokens"] or 0)) for i, row in self.rows.items()])

    def finish(self, status: str, *, reason: str | None = None) -> None:
        """Write the table, the manifest summary and the final progress."""

        self._write_table()
        rows = list(self.rows.values())
        prompt_tokens = sum(int(r["prompt_tokens"] or 0) for r in rows)
        completion_tokens = sum(int(r["completion_tokens"] or 0) for r in rows)
        reported = sum(1 for r in rows if r["prompt_tokens"] is not None)
        counts = summarize(r["status"] for r in rows)
        counts["pending"] = self.pending
        usage = Usage(
            prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, samples_with_usage=reported,
            requests=self.requests, cached=sum(1 for r in rows if r["cached"]),
        )
        record = GenerationRecord(  # started_at stays as written when the run started
            failure_reason=scrub(reason, self.secrets) if reason else reason, finished_at=utc_now(), usage=usage,
            cost_usd=self._cost() if reported else None,
            baseline=self.plan.manifest.is_baseline,
        )
        concurrency = None
        if self.limit is not None:  # --concurrency auto: how the limit moved
            concurrency = ConcurrencyRecord.from_dict({"mode": "auto", **dataclasses.asdict(self.limit.stats())})
        pacing = None
        stats = self.session.pacer.stats if self.session.pacer is not None else None
        if stats is not None and stats.limits:  # the server stated its rate limits: how they paced the run
            pacing = PacingRecord(limits=dict(stats.limits), paced=stats.paced, waited_s=round(stats.waited_s, 3),
                                  refused=stats.refused)
        extra = RunExtra(generation=record, counts=counts, concurrency=concurrency, pacing=pacing).to_extra()
        try:
            self.run.update(status=status, extra=extra)
        except StoreWriteError as exc:  # the manifest stays "running": the run reads as interrupted
            self._refused(exc)
        self._report(force=True, status=status)
