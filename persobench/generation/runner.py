"""Running a planned generation: workers, cache writes, checkpoints, cancel, fail-fast, summary.

One asyncio event loop drives every provider: ``K`` workers pull samples from one queue, so at
most ``K`` requests are ever in flight; each request goes through the single retry loop
(:func:`~persobench.generation.retry.call_with_retries`); every reply is written to the response
cache the moment it arrives, which is what makes a run killed with SIGKILL resumable without
paying twice.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
import random
import sqlite3
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from persobench.cache import ResponseCache
from persobench.errors import RunAborted, StoreWriteError
from persobench.generation.concurrency import AdaptiveLimit, LevelMemory
from persobench.generation.config import GenerationConfig
from persobench.generation.lock import hold_run_lock, write_resume_file
from persobench.generation.plan import GenerationPlan, plan_generation
from persobench.generation.recovery import keep_reply, restore_replies
from persobench.generation.progress import ProgressInfo, cancel_requested, clear_cancel, write_progress
from persobench.generation.retry import CallOutcome, PauseGate, Stopped, call_with_retries, unless_stopping
from persobench.generation.rows import TABLE, RowTable, build_row, rows_frame
from persobench.providers import make_provider
from persobench.providers.base import BatchingProvider, Completion, Provider, Request
from persobench.errors import ErrorKind, ProviderError
from persobench.run_records import ConcurrencyRecord, GenerationRecord, RunExtra, Usage
from persobench.secrets import known_secrets, scrub
from persobench.store import Run, RunStore
from persobench.files import write_refused, utc_now

if TYPE_CHECKING:
    from persobench.records import Sample


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
        config = dataclasses.replace(config, **fields)
    store = store or RunStore(home)
    plan = plan_generation(config, store=store, samples=samples)
    if restore_replies(store.run_path(plan.run_id), plan.cache_dir):  # kept by a run whose disk was full
        plan = plan_generation(config, store=store, samples=samples)
    provider: Provider | None = None
    if plan.n_requests:  # a fully cached run needs neither a key nor a server
        provider = make_provider(plan.spec, api_key=api_key, timeout=config.retry.timeout)
        provider.check()
    run = store.create(plan.manifest)
    # One process per run folder: a second identical run stops here (RunLocked, naming the pid)
    # instead of paying for every request again and overwriting the table.
    with hold_run_lock(run.path):
        write_resume_file(run, plan, store.home)
        clear_cancel(run.path)
        run.record_samples(plan.samples)  # scoring reads these inputs, whatever happens to the dataset later
        run.update(status="running", extra=RunExtra(generation=GenerationRecord(started_at=utc_now()),
                                                    dataset_file=plan.dataset_file).to_extra())
        runner = Runner(plan, run, provider, progress=progress, cancel=cancel)
        try:
            run_coroutine(runner.main())
        except BaseException as exc:
            # Ctrl-C or a bug: keep what was received (it is cached anyway) and say what happened.
            status = "cancelled" if isinstance(exc, KeyboardInterrupt) else "failed"
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


def run_coroutine(coro: Any) -> Any:
    """``asyncio.run``, also from code that already runs an event loop (notebooks, some apps)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = asyncio.run(coro)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            result["error"] = exc

    thread = threading.Thread(target=target, name="persobench-generation")
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result.get("value")


class Runner:
    """State of one run in this process: rows, counters, and the stop signals."""

    def __init__(
        self, plan: GenerationPlan, run: Run, provider: Provider | None, *,
        progress: Callable[[ProgressInfo], None] | None, cancel: threading.Event | None,
    ) -> None:
        self.plan = plan
        self.run = run
        self.provider = provider
        self.config = plan.config
        self.progress_callback = progress
        self.cancel_event = cancel
        self.rows = RowTable()  # counts failed and cached rows as they are set (progress reads them per reply)
        self.requests = 0
        self.new_done = 0
        self.started = time.monotonic()
        self.last_progress_write = 0.0
        self.cancelled = False
        self.abort_reason: str | None = None
        self.rng = random.Random()
        self.gate = PauseGate()
        self.first_outcomes: list[ProviderError | None] = []
        self.since_checkpoint = 0
        self.limit: AdaptiveLimit | None = None
        #: The first write the disk refused (one line naming the file); generation stops sending then.
        self.write_failure: str | None = None
        #: Recovery files holding replies the cache could not store, and how many no disk took.
        self.kept_in: set[Path] = set()
        self.lost = 0
        self.waits: dict[int, tuple[float, str]] = {}
        """Announced waits in progress: token -> (monotonic end, note); progress shows the longest."""
        self._wait_tokens = itertools.count()
        spec = plan.spec
        self.secrets = known_secrets(api_keys=getattr(provider, "_secrets", ()) or (), base_url=spec.base_url,
                                     options=spec.options)

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        return len(self.plan.samples) - len(self.rows)

    async def main(self) -> None:
        plan = self.plan
        for i, (completion, latency) in plan.hits.items():
            self.rows[i] = self._scrub_row(build_row(plan, i, self._scrubbed(completion), None, latency=latency,
                                                     attempts=0, cached=True))
        self.stopping = asyncio.Event()
        # Set by a cancel only: requests in flight are abandoned at once, while a fail-fast abort
        # (stopping alone) lets them finish so their outcome is recorded.
        self.interrupt = asyncio.Event()
        todo = iter(i for i in range(len(plan.samples)) if i not in self.rows)
        self._report(force=True)
        if not plan.n_requests:
            return
        assert self.provider is not None
        try:
            self.cache = ResponseCache(plan.cache_dir)
        except (OSError, sqlite3.Error) as exc:
            raise write_refused(plan.cache_dir, exc) from None
        ceiling = self.config.max_concurrency if self.config.concurrency == "auto" else int(self.config.concurrency)
        workers = min(ceiling, self.provider.max_concurrency or ceiling, plan.n_requests)
        if self.config.concurrency == "auto":  # starts where the last run against this server held
            memory = LevelMemory(self.run.path.parents[1], plan.spec.provider, plan.spec.base_url)  # <home>/runs/<id>
            self.limit = AdaptiveLimit(min(ceiling, self.provider.max_concurrency or ceiling), memory=memory)
        # A provider that generates several samples per call (an in-process model) gets them in batches.
        batch = max(1, int(self.provider.batch_size)) if isinstance(self.provider, BatchingProvider) else 1
        watcher = asyncio.create_task(self._watch_cancel())
        try:
            await asyncio.gather(*(self._worker(todo, batch) for _ in range(workers)))
        finally:
            watcher.cancel()
            self.cache.close()
            await self.provider.aclose()

    async def _watch_cancel(self) -> None:
        while not self.stopping.is_set():
            if cancel_requested(self.run.path) or (self.cancel_event is not None and self.cancel_event.is_set()):
                self.cancelled = True
                self.interrupt.set()
                self.stopping.set()
                return
            await asyncio.sleep(0.1)

    async def _worker(self, todo: Any, batch: int = 1) -> None:
        while not self.stopping.is_set():
            chunk = list(itertools.islice(todo, batch))  # the shared iterator hands each sample to one worker
            if not chunk:
                return
            if len(chunk) == 1:
                await self._process(chunk[0])
            else:
                await self._process_batch(chunk)

    def _count_request(self) -> None:
        self.requests += 1

    async def _process(self, i: int, attempts_before: int = 0) -> None:
        plan = self.plan
        assert self.provider is not None
        request = Request(messages=tuple(plan.messages[i]), params=plan.params, sample=plan.samples[i])
        token = next(self._wait_tokens)
        outcome = await call_with_retries(
            self.provider, request, policy=self.config.retry, gate=self.gate, stopping=self.stopping,
            rng=self.rng, on_attempt=self._count_request, interrupt=self.interrupt, limit=self.limit,
            on_wait=lambda seconds, note: self._on_wait(token, seconds, note),
        )
        if outcome is None:  # stopped during a retry wait: the sample stays pending (resumable)
            return
        if attempts_before:  # its first attempt was part of a batch
            outcome = dataclasses.replace(outcome, attempts=outcome.attempts + attempts_before)
        self._record(i, outcome)

    async def _process_batch(self, indices: list[int]) -> None:
        """Samples ``indices`` in one call of a :class:`BatchingProvider`. Each reply is cached and
        recorded on its own; a sample whose error retrying may fix goes through the retry loop alone,
        and so does every sample when the whole call fails. A cancel abandons the call: its samples
        stay pending."""
        plan = self.plan
        assert isinstance(self.provider, BatchingProvider)
        requests = [Request(messages=tuple(plan.messages[i]), params=plan.params, sample=plan.samples[i])
                    for i in indices]
        await self.gate.wait(self.stopping)
        if self.stopping.is_set():
            return
        for _ in indices:
            self._count_request()
        started = time.monotonic()
        try:
            results = list(await unless_stopping(self.provider.generate_batch(requests), self.interrupt))
            if len(results) != len(indices):
                raise ValueError(f"{len(results)} results for {len(indices)} requests")
        except Stopped:
            return
        except Exception:  # noqa: BLE001 - the whole call failed: one by one, each with its own retries and error
            results = [None] * len(indices)
        # Each sample's latency is its share of the batch's time, so the mean stays time per reply.
        share = (time.monotonic() - started) / len(indices)
        for i, result in zip(indices, results):
            if result is None or (isinstance(result, ProviderError) and result.retryable):
                await self._process(i, attempts_before=1)
            elif isinstance(result, ProviderError):
                self._record(i, CallOutcome(None, result, share, 1))
            else:
                self._record(i, CallOutcome(result, None, share, 1))

    def _on_wait(self, token: int, seconds: float, note: str) -> None:
        """A request starts (``note``) or ends (``""``) a long wait: progress says so at once."""
        if note:
            self.waits[token] = (time.monotonic() + seconds, note)
        else:
            self.waits.pop(token, None)
        self._report(force=True)

    def _record(self, i: int, outcome: CallOutcome) -> None:
        """Cache and record the outcome of sample ``i``, then checkpoint and report."""
        plan = self.plan
        completion = self._scrubbed(outcome.completion)
        if completion is not None:
            # Store first: from here on a crash cannot lose this reply.
            try:
                self.cache.set(plan.keys[i], completion, latency=outcome.latency)
            except (OSError, sqlite3.Error) as exc:
                self._refused(write_refused(plan.cache_dir / "cache.db", exc))
                kept = keep_reply(self.run.path, plan.keys[i], completion, outcome.latency)
                if kept is None:
                    self.lost += 1
                else:
                    self.kept_in.add(kept)
        self.rows[i] = self._scrub_row(build_row(
            plan, i, completion, outcome.error, latency=outcome.latency, attempts=outcome.attempts,
            cached=False,
        ))
        self.new_done += 1
        self._fail_fast(outcome.error)
        self.since_checkpoint += 1
        if self.since_checkpoint >= max(1, self.config.checkpoint_every):
            self.since_checkpoint = 0
            self._write_table()
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
        """``completion`` with every credential the run knows removed from its text: a server that
        echoes the key back must not get it into the cache, the table, exports or pages."""
        if completion is None or not self.secrets:
            return completion
        return dataclasses.replace(completion, text=scrub(completion.text, self.secrets),
                                   model=scrub(completion.model, self.secrets) if completion.model else completion.model)

    def _scrub_row(self, row: dict[str, Any]) -> dict[str, Any]:
        if not self.secrets:
            return row
        return {k: scrub(v, self.secrets) if isinstance(v, str) else v for k, v in row.items()}

    def _fail_fast(self, error: ProviderError | None) -> None:
        """Stop when the first N requests all failed for one reason that retrying cannot fix."""
        threshold = min(self.config.fail_fast_after, self.plan.n_requests)
        if threshold <= 0 or len(self.first_outcomes) >= threshold:
            return
        self.first_outcomes.append(error)
        if len(self.first_outcomes) < threshold:
            return
        first = self.first_outcomes[0]
        hopeless = first is not None and (not first.retryable or first.kind is ErrorKind.CONNECTION)
        if hopeless and all(e is not None and e.signature == first.signature for e in self.first_outcomes):
            self.abort_reason = scrub(f"the first {threshold} requests all failed: {first.describe()}", self.secrets)
            self.stopping.set()

    # -- files ------------------------------------------------------------------------------------

    def _write_table(self) -> None:
        try:
            self.run.write_table(TABLE, rows_frame(self.rows))
        except StoreWriteError as exc:  # the rows are rebuilt from the cache by the next run
            self._refused(exc)

    def snapshot(self, status: str = "running") -> ProgressInfo:
        done = len(self.rows)
        failed, cached = self.rows.failed, self.rows.cached
        elapsed = time.monotonic() - self.started
        eta = None
        if status == "running" and self.new_done:
            eta = round(self.pending * elapsed / self.new_done, 1)
        elif status != "running":
            eta = 0.0
        return ProgressInfo(
            run_id=self.run.run_id, status=status, total=len(self.plan.samples), done=done, failed=failed,
            cached=cached, requests=self.requests, elapsed=round(elapsed, 3), eta=eta, pid=os.getpid(),
            note=max(self.waits.values())[1] if self.waits and status == "running" else "",
        )

    def _report(self, *, force: bool = False, status: str = "running") -> None:
        info = self.snapshot(status)
        if self.progress_callback is not None:
            self.progress_callback(info)
        now = time.monotonic()
        if force or now - self.last_progress_write >= 0.5:
            self.last_progress_write = now
            try:
                write_progress(self.run.path, info)
            except StoreWriteError as exc:
                self._refused(exc)

    def finish(self, status: str, *, reason: str | None = None) -> None:
        """Write the table, the manifest summary and the final progress."""
        from persobench.models_registry import estimate_cost
        from persobench.postprocess import summarize

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
            cost_usd=estimate_cost(self.plan.spec, prompt_tokens, completion_tokens) if reported else None,
            baseline=self.plan.manifest.is_baseline,
        )
        concurrency = None
        if self.limit is not None:  # --concurrency auto: how the limit moved
            concurrency = ConcurrencyRecord.from_dict({"mode": "auto", **dataclasses.asdict(self.limit.stats())})
        extra = RunExtra(generation=record, counts=counts, concurrency=concurrency).to_extra()
        try:
            self.run.update(status=status, extra=extra)
        except StoreWriteError as exc:  # the manifest stays "running": the run reads as interrupted
            self._refused(exc)
        self._report(force=True, status=status)
