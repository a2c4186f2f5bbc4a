"""Generation runs: samples -> prompts -> provider -> cache -> post-processing -> run store.

One asyncio event loop drives every provider: ``K`` workers pull samples from one queue, so at
most ``K`` requests are ever in flight; each request goes through the single retry loop
(:meth:`_Runner._call`); every reply is written to the response cache the moment it arrives, which
is what makes a run killed with SIGKILL resumable without paying twice.

Python API (what the CLI and the Streamlit app call)::

    from persobench.generation import GenerationConfig, run_generation
    run = run_generation(GenerationConfig(dataset="sample", model="openai:gpt-4o-mini"), home="cache")

Files in the run folder while a run is going (for an app polling from another process):

``progress.json``
    ``{"run_id", "status", "total", "done", "failed", "cached", "requests", "elapsed", "eta",
    "pid", "updated_at"}``, rewritten atomically at most twice a second and at the end. ``done``
    counts finished samples of any status, ``failed`` those whose status is not "ok", ``cached``
    those served from the cache, ``eta`` is seconds (``null`` until measurable). ``status`` is
    "running", then "completed", "cancelled" or "failed"; a "running" file whose ``pid`` no
    longer exists belongs to a killed run (start it again to resume).
``cancel``
    Create this file (:func:`request_cancel`) to stop the run: it is checked between requests
    and during retry waits; requests in flight finish and are cached, the table is written with
    the finished samples and the run ends "cancelled". Running the same configuration again
    resumes it; the file is removed when a run starts.
``generations.parquet``
    Rewritten atomically every ``checkpoint_every`` completions and at the end, one row per
    finished sample (see :data:`COLUMNS`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from persobench.cache import ResponseCache, cache_key, default_cache_dir
from persobench.models_registry import resolve_model
from persobench.providers import DEFAULT_LOCAL_MODEL, PROVIDERS, ModelSpec, make_provider
from persobench.providers.base import (
    Completion,
    ConfigurationError,
    ErrorKind,
    GenerationParams,
    Provider,
    ProviderError,
    Request,
)
from persobench.store import Run, RunManifest, RunStore, atomic_write_json, make_run_id, utc_now

if TYPE_CHECKING:
    from persobench.prompts import PromptTemplate
    from persobench.records import Sample

#: Columns of ``generations.parquet``, in order. The app and the metrics stage read these.
COLUMNS = (
    "sample_id", "status", "response", "reasoning", "raw_text", "finish_reason", "latency",
    "prompt_tokens", "completion_tokens", "error", "attempts", "cached", "prompt",
)
TABLE = "generations"
PROGRESS_FILE = "progress.json"
CANCEL_FILE = "cancel"

#: Provider stop reasons that mean the provider itself declined to answer.
_REFUSAL_REASONS = frozenset({"refusal", "content_filter"})


class RunAborted(RuntimeError):
    """The run stopped early because its first requests all failed for the same non-retryable
    reason (bad key, unknown model, no quota ...). The finished samples are saved."""

    def __init__(self, reason: str, run: Run) -> None:
        super().__init__(reason)
        self.run = run


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
    """Seconds before one HTTP request counts as timed out."""

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """Wait after failed attempt ``attempt`` (1-based): exponential with "equal jitter" (half
        fixed, half random), so simultaneous failures do not retry in lockstep."""
        ceiling = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        return ceiling / 2 + rng.uniform(0, ceiling / 2)


@dataclass(frozen=True)
class GenerationConfig:
    """Everything that defines a generation run (the CLI flags map one to one onto these)."""

    dataset: str = "sample"
    """Registered dataset name or path to a .csv/.jsonl file."""
    model: str = DEFAULT_LOCAL_MODEL
    """``provider:model`` spec or a name from the models file."""
    base_url: str | None = None
    """Server URL for OpenAI-compatible servers (overrides the models file)."""
    mode: str = "vanilla"
    """Prompt mode, "vanilla" or "cot"; selects the built-in template when ``template`` is unset."""
    template: str | None = None
    """Template name or file; default: the built-in template of ``mode``."""
    limit: int | None = None
    """Number of samples (a deterministic subset chosen by ``seed``); ``None`` for all."""
    seed: int = 0
    """Subset seed, and the sampling seed when temperature > 0."""
    concurrency: int = 8
    """Maximum requests in flight."""
    max_tokens: int | None = None
    """Completion budget; default from the template (110 vanilla, 220 cot)."""
    temperature: float | None = None
    """Sampling temperature; default from the template (0)."""
    top_p: float | None = None
    """Nucleus sampling mass; ``None`` for the provider default."""
    policy: str = "robust"
    """Post-processing policy ("robust" or "paper")."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Extra model options merged over the models-file entry."""
    models_file: str | None = None
    """Model registry file; default: discovered (see :mod:`persobench.models_registry`)."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """Retry and timeout settings."""
    checkpoint_every: int = 50
    """Rewrite the table after this many new completions."""
    fail_fast_after: int = 20
    """Stop the run when this many first requests all fail for the same non-retryable reason."""
    cache_dir: str | None = None
    """Response cache folder; default ``<home>/responses``."""


@dataclass(frozen=True)
class ProgressInfo:
    """A progress snapshot (also the content of ``progress.json``)."""

    run_id: str
    """The run being generated."""
    status: str
    """"running", "completed", "cancelled" or "failed"."""
    total: int
    """Samples in the run."""
    done: int
    """Samples finished, whatever their status (cached ones included)."""
    failed: int
    """Finished samples whose status is not "ok"."""
    cached: int
    """Finished samples served from the cache."""
    requests: int
    """HTTP attempts made by this process (retries included)."""
    elapsed: float
    """Seconds since this process started the run."""
    eta: float | None
    """Estimated seconds to finish; ``None`` before the first reply."""
    pid: int
    """Process generating the run (lets a poller tell a live run from a killed one)."""


@dataclass
class GenerationPlan:
    """A resolved configuration: what would be sent, and what the cache already holds."""

    config: GenerationConfig
    spec: ModelSpec
    template: "PromptTemplate"
    params: GenerationParams
    samples: list["Sample"]
    messages: list[list[dict[str, str]]]
    keys: list[str]
    hits: dict[int, tuple[Completion, float]]
    """Sample position -> cached (completion, original latency)."""
    manifest: RunManifest
    cache_dir: Path

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    @property
    def n_requests(self) -> int:
        """Requests a run would send (before retries)."""
        return len(self.samples) - len(self.hits)

    @property
    def estimated_prompt_tokens(self) -> int:
        """Rough prompt tokens of the requests to send (4 characters per token)."""
        chars = sum(
            len(m["content"]) for i, msgs in enumerate(self.messages) if i not in self.hits for m in msgs
        )
        return chars // 4

    def estimated_max_cost(self) -> float | None:
        """Upper-bound USD for the requests to send (every reply at the token limit)."""
        from persobench.models_registry import estimate_cost

        return estimate_cost(self.spec, self.estimated_prompt_tokens, self.n_requests * self.params.max_tokens)


# ------------------------------------------------------------------------------------------------
# planning


def _load_samples(config: GenerationConfig) -> list["Sample"]:
    from persobench.datasets import load_dataset
    from persobench.registry import UnknownNameError

    try:
        return load_dataset(config.dataset, limit=config.limit, seed=config.seed)
    except (UnknownNameError, ValueError, OSError) as exc:  # DatasetError is a ValueError
        raise ConfigurationError(" ".join(str(exc).split())) from None


def plan_generation(
    config: GenerationConfig, *, store: RunStore, samples: list["Sample"] | None = None,
) -> GenerationPlan:
    """Resolve model, template, samples, run id and cache hits. Sends nothing, needs no key."""
    from persobench.prompts import MODES, TemplateError, build_messages, get_template

    if config.mode not in MODES:
        raise ConfigurationError(f"unknown mode {config.mode!r}; expected one of {', '.join(MODES)}")
    if config.concurrency < 1:
        raise ConfigurationError(f"concurrency must be at least 1, got {config.concurrency}")
    if config.retry.max_attempts < 1:
        raise ConfigurationError("max_attempts must be at least 1")
    from persobench.postprocess import POLICIES

    if config.policy not in POLICIES:
        raise ConfigurationError(f"unknown post-processing policy {config.policy!r}; known: {', '.join(POLICIES)}")
    spec = resolve_model(
        config.model, base_url=config.base_url, options=config.options, models_file=config.models_file,
        home=store.home,
    )
    try:
        template = get_template(config.template or config.mode)
    except TemplateError as exc:
        raise ConfigurationError(str(exc)) from None
    if config.template and template.mode != config.mode and config.mode != "vanilla":
        raise ConfigurationError(f"template {template.name!r} is in {template.mode!r} mode, not {config.mode!r}")
    mode = template.mode
    temperature = template.temperature if config.temperature is None else float(config.temperature)
    max_tokens = template.max_tokens if config.max_tokens is None else int(config.max_tokens)
    if temperature < 0 or max_tokens < 1:
        raise ConfigurationError("temperature must be >= 0 and max_tokens >= 1")
    params = GenerationParams(
        temperature=temperature, max_tokens=max_tokens, top_p=config.top_p,
        seed=config.seed if temperature > 0 else None,  # greedy decoding has nothing to seed
    )
    if samples is None:
        samples = _load_samples(config)
    if not samples:
        raise ConfigurationError(f"dataset {config.dataset!r} selected no samples")

    # The class attribute is enough: no client (and no key) is needed to compute keys.
    sample_dependent = bool(getattr(PROVIDERS.get(spec.provider), "sample_dependent", False))
    options = spec.output_options
    messages = [build_messages(sample, template) for sample in samples]
    keys = [
        cache_key(
            provider=spec.provider, model=spec.model, base_url=spec.base_url, messages=msgs, params=params,
            options=options, sample_id=sample.id, sample_dependent=sample_dependent,
        )
        for sample, msgs in zip(samples, messages)
    ]
    cache_dir = Path(config.cache_dir) if config.cache_dir else default_cache_dir(store.home)
    with ResponseCache(cache_dir) as cache:
        hits = {i: hit for i, key in enumerate(keys) if (hit := cache.get(key)) is not None}

    parameters: dict[str, Any] = {
        "temperature": temperature, "max_tokens": max_tokens, "seed": config.seed, "limit": config.limit,
        "policy": config.policy,
    }
    if config.top_p is not None:
        parameters["top_p"] = config.top_p
    identity = {"provider": spec.provider, "model": spec.model, "base_url": spec.base_url,
                "options": options, "label": spec.label}
    sample_ids = tuple(s.id for s in samples)
    run_id = make_run_id(
        dataset=config.dataset, model={k: v for k, v in identity.items() if v}, mode=mode,
        template_hash=template.version_hash, sample_ids=sample_ids, parameters=parameters,
    )
    manifest = RunManifest(
        run_id=run_id, dataset=config.dataset, sample_ids=sample_ids, model=spec.to_public_dict(), mode=mode,
        template=template.name, template_hash=template.version_hash, parameters=parameters,
    )
    return GenerationPlan(config, spec, template, params, samples, messages, keys, hits, manifest, cache_dir)


# ------------------------------------------------------------------------------------------------
# running


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
    provider: Provider | None = None
    if plan.n_requests:  # a fully cached run needs neither a key nor a server
        provider = make_provider(plan.spec, api_key=api_key, timeout=config.retry.timeout)
        provider.check()
    run = store.create(plan.manifest)
    (run.path / CANCEL_FILE).unlink(missing_ok=True)
    run.update(status="running", extra={"started_at": utc_now(), "failure_reason": None})
    runner = _Runner(plan, run, provider, progress=progress, cancel=cancel)
    try:
        _run_coroutine(runner.main())
    except BaseException as exc:
        # Ctrl-C or a bug: keep what was received (it is cached anyway) and say what happened.
        status = "cancelled" if isinstance(exc, KeyboardInterrupt) else "failed"
        runner.finish(status, reason=f"{type(exc).__name__}: {exc}" if status == "failed" else None)
        raise
    if runner.abort_reason:
        runner.finish("failed", reason=runner.abort_reason)
        raise RunAborted(runner.abort_reason, run)
    runner.finish("cancelled" if runner.cancelled and runner.pending else "completed")
    return run


def _run_coroutine(coro: Any) -> Any:
    """``asyncio.run``, also from code that already runs an event loop (notebooks, some apps)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = asyncio.run(coro)
        except BaseException as exc:  # re-raised in the caller's thread
            result["error"] = exc

    thread = threading.Thread(target=target, name="persobench-generation")
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result.get("value")


class _PauseGate:
    """A shared "no request before" time: a Retry-After from one request holds back all workers,
    since rate limits are per account, not per prompt."""

    def __init__(self) -> None:
        self.not_before = 0.0

    def push(self, until: float) -> None:
        self.not_before = max(self.not_before, until)

    async def wait(self, stopping: asyncio.Event) -> None:
        while (delay := self.not_before - time.monotonic()) > 0 and not stopping.is_set():
            await _sleep_or_stop(delay, stopping)


async def _sleep_or_stop(delay: float, stopping: asyncio.Event) -> None:
    try:
        await asyncio.wait_for(stopping.wait(), timeout=delay)
    except asyncio.TimeoutError:
        pass


class _Runner:
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
        self.rows: dict[int, dict[str, Any]] = {}
        self.requests = 0
        self.new_done = 0
        self.started = time.monotonic()
        self.last_progress_write = 0.0
        self.cancelled = False
        self.abort_reason: str | None = None
        self.rng = random.Random()
        self.gate = _PauseGate()
        self.first_outcomes: list[ProviderError | None] = []
        self.since_checkpoint = 0

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        return len(self.plan.samples) - len(self.rows)

    async def main(self) -> None:
        plan = self.plan
        for i, (completion, latency) in plan.hits.items():
            self.rows[i] = self._row(i, completion, None, latency=latency, attempts=0, cached=True)
        self.stopping = asyncio.Event()
        todo = iter(i for i in range(len(plan.samples)) if i not in self.rows)
        self._report(force=True)
        if not plan.n_requests:
            return
        assert self.provider is not None
        self.cache = ResponseCache(plan.cache_dir)
        limit = min(self.config.concurrency, self.provider.max_concurrency or self.config.concurrency, plan.n_requests)
        watcher = asyncio.create_task(self._watch_cancel())
        try:
            await asyncio.gather(*(self._worker(todo) for _ in range(limit)))
        finally:
            watcher.cancel()
            self.cache.close()
            await self.provider.aclose()

    async def _watch_cancel(self) -> None:
        cancel_file = self.run.path / CANCEL_FILE
        while not self.stopping.is_set():
            if cancel_file.exists() or (self.cancel_event is not None and self.cancel_event.is_set()):
                self.cancelled = True
                self.stopping.set()
                return
            await asyncio.sleep(0.1)

    async def _worker(self, todo: Any) -> None:
        for i in todo:  # the shared iterator hands each sample to exactly one worker
            if self.stopping.is_set():
                return
            await self._process(i)

    async def _process(self, i: int) -> None:
        plan = self.plan
        request = Request(messages=tuple(plan.messages[i]), params=plan.params, sample=plan.samples[i])
        outcome = await self._call(request)
        if outcome is None:  # stopped during a retry wait: the sample stays pending (resumable)
            return
        completion, error, latency, attempts = outcome
        if completion is not None:
            # Store first: from here on a crash cannot lose this reply.
            self.cache.set(plan.keys[i], completion, latency=latency)
        self.rows[i] = self._row(i, completion, error, latency=latency, attempts=attempts, cached=False)
        self.new_done += 1
        self._fail_fast(error)
        self.since_checkpoint += 1
        if self.since_checkpoint >= max(1, self.config.checkpoint_every):
            self.since_checkpoint = 0
            self._write_table()
        self._report()

    async def _call(self, request: Request) -> tuple[Completion | None, ProviderError | None, float, int] | None:
        """THE retry loop, for every provider. Returns (completion, error, latency, attempts), or
        ``None`` when the run is stopping before the request could finish."""
        assert self.provider is not None
        policy = self.config.retry
        attempt = 0
        while True:
            await self.gate.wait(self.stopping)
            if self.stopping.is_set():
                return None
            attempt += 1
            self.requests += 1
            started = time.monotonic()
            try:
                completion = await self.provider.generate(request)
                return completion, None, time.monotonic() - started, attempt
            except ProviderError as exc:
                error = exc
            except Exception as exc:  # an adapter bug must cost one sample, not the run
                error = ProviderError(ErrorKind.OTHER, f"{type(exc).__name__}: {exc}")
            latency = time.monotonic() - started
            if not error.retryable or attempt >= policy.max_attempts:
                return None, error, latency, attempt
            if error.retry_after is not None and error.retry_after > policy.max_retry_after:
                note = ProviderError(
                    error.kind, f"{error} (server asked to wait {error.retry_after:.0f}s, more than max_retry_after)",
                    status_code=error.status_code, retry_after=error.retry_after,
                )
                return None, note, latency, attempt
            delay = policy.backoff(attempt, self.rng)
            if error.retry_after is not None:
                # Never before the server's Retry-After, and hold the other workers back too.
                self.gate.push(time.monotonic() + error.retry_after)
                delay = max(delay, error.retry_after)
            await _sleep_or_stop(delay, self.stopping)
            if self.stopping.is_set():
                return None

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
            self.abort_reason = f"the first {threshold} requests all failed: {first.describe()}"
            self.stopping.set()

    # -- rows and files -------------------------------------------------------------------------

    def _row(
        self, i: int, completion: Completion | None, error: ProviderError | None, *,
        latency: float, attempts: int, cached: bool,
    ) -> dict[str, Any]:
        from persobench.postprocess import Status, parse_output

        plan = self.plan
        row: dict[str, Any] = {
            "sample_id": plan.samples[i].id, "latency": float(latency), "attempts": attempts, "cached": cached,
            "prompt": next((m["content"] for m in reversed(plan.messages[i]) if m["role"] == "user"), ""),
        }
        if completion is None:
            assert error is not None
            row.update(status=Status.API_ERROR.value, response=None, reasoning=None, raw_text=None,
                       finish_reason=None, prompt_tokens=None, completion_tokens=None, error=error.describe())
            return row
        parsed = parse_output(
            completion.text, policy=self.config.policy, finish_reason=completion.finish_reason,
            require_reasoning=plan.template.requires_reasoning,
        )
        status, err = parsed.status, parsed.error
        if status != Status.OK.value and completion.finish_reason in _REFUSAL_REASONS:
            status, err = Status.REFUSED.value, f"the provider declined (finish_reason={completion.finish_reason!r})"
        row.update(
            status=status, response=parsed.response, reasoning=parsed.reasoning, raw_text=completion.text,
            finish_reason=completion.finish_reason, prompt_tokens=completion.prompt_tokens,
            completion_tokens=completion.completion_tokens, error=err,
        )
        return row

    def frame(self) -> Any:
        import pandas as pd

        ordered = [self.rows[i] for i in sorted(self.rows)]
        frame = pd.DataFrame(ordered, columns=list(COLUMNS))
        for column in ("prompt_tokens", "completion_tokens", "attempts"):
            frame[column] = frame[column].astype("Int64")
        frame["latency"] = frame["latency"].astype(float)
        frame["cached"] = frame["cached"].astype(bool)
        return frame

    def _write_table(self) -> None:
        self.run.write_table(TABLE, self.frame())

    def snapshot(self, status: str = "running") -> ProgressInfo:
        done = len(self.rows)
        failed = sum(1 for r in self.rows.values() if r["status"] != "ok")
        cached = sum(1 for r in self.rows.values() if r["cached"])
        elapsed = time.monotonic() - self.started
        eta = None
        if status == "running" and self.new_done:
            eta = round(self.pending * elapsed / self.new_done, 1)
        elif status != "running":
            eta = 0.0
        return ProgressInfo(
            run_id=self.run.run_id, status=status, total=len(self.plan.samples), done=done, failed=failed,
            cached=cached, requests=self.requests, elapsed=round(elapsed, 3), eta=eta, pid=os.getpid(),
        )

    def _report(self, *, force: bool = False, status: str = "running") -> None:
        info = self.snapshot(status)
        if self.progress_callback is not None:
            self.progress_callback(info)
        now = time.monotonic()
        if force or now - self.last_progress_write >= 0.5:
            self.last_progress_write = now
            atomic_write_json(self.run.path / PROGRESS_FILE, {**dataclasses.asdict(info), "updated_at": utc_now()})

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
        extra = {
            "counts": counts,
            "usage": {
                "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                "samples_with_usage": reported, "requests": self.requests,
                "cached": sum(1 for r in rows if r["cached"]),
            },
            "cost_usd": estimate_cost(self.plan.spec, prompt_tokens, completion_tokens) if reported else None,
            "failure_reason": reason,
            "finished_at": utc_now(),
            "baseline": self.plan.spec.provider == "baseline",
        }
        self.run.update(status=status, extra=extra)
        self._report(force=True, status=status)


# ------------------------------------------------------------------------------------------------
# helpers for callers in other processes (the app)


def read_progress(run_path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The run's ``progress.json`` (``None`` before the run wrote one). ``alive`` is added: whether
    the generating process still exists."""
    path = Path(run_path) / PROGRESS_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    data["alive"] = _pid_alive(int(data.get("pid") or 0))
    return data


def request_cancel(run_path: str | os.PathLike[str]) -> None:
    """Ask the run generating in ``run_path`` to stop after its in-flight requests."""
    Path(run_path).mkdir(parents=True, exist_ok=True)
    (Path(run_path) / CANCEL_FILE).touch()


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
