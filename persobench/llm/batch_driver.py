"""Sending requests through a provider's batch API (``run --batch``, ``score --judge ... --batch``).

:func:`fill_cache` is the one driver, for generation and the judge alike: given the requests the
response cache lacks, it submits them as one batch, records the batch id in a state file (written
atomically BEFORE any waiting), polls, and writes every reply to the response cache the moment the
batch's results are read. The caller's ordinary path then finds each reply cached; what the batch
did not answer goes out as ordinary requests (with the one retry loop). So:

* a killed or restarted command finds its batch in the state file and collects it, never
  submitting the same request twice (a process killed between the server's answer and the
  state write finds the batch again by its token, see :meth:`BatchBackend.find`);
* requests the batch answered with an error are left to the ordinary path (retried there);
* requests an expired batch left unanswered are submitted once more in a new batch; if that one
  expires too, they are left to the ordinary path;
* ``wait`` bounds the waiting: at the deadline the command returns with the batch still running
  on the server, and the next command collects it.

The state file holds ids, cache keys, states and counts, never a credential (every text a server
sends back is scrubbed before it is written).
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets as token_source
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from persobench.errors import PersoBenchError, ProviderError
from persobench.files import atomic_write_json, utc_now
from persobench.secrets import scrub
from persobench.llm.response_cache import ResponseCache
from persobench.providers.base import Request
from persobench.providers.batch_api import BatchBackend, BatchStatus
from persobench.errors import StoreWriteError
from persobench.files import write_refused
from persobench.models_registry import prices_for
from persobench.providers.batch_api import supports_batch
from persobench.errors import ConfigurationError


#: The state file of a run's batches, in the run folder.
STATE_FILE = "batch.json"
#: Share of the interactive price a batch costs when the models file names no batch price.
BATCH_DISCOUNT = 0.5


@dataclass(frozen=True)
class BatchSettings:
    """How a command uses a batch API."""

    wait: float | None = None
    """Seconds to wait for the batches to end; ``None``: until they end (up to the providers'
    24 hours); ``0``: submit (or look) and return at once, a later command collects."""
    poll: float = 30.0
    """Seconds between two status requests."""

    def __post_init__(self) -> None:

        if not self.poll > 0 or (self.wait is not None and not self.wait >= 0):
            raise ConfigurationError(f"--batch-poll must be > 0 and --batch-wait >= 0 seconds, got "
                                     f"{self.poll!r} and {self.wait!r}")


@dataclass
class BatchEntry:
    """One submitted batch as the state file records it."""

    token: str
    """Our tag of the submission (OpenAI batch metadata), known before the server answers."""
    keys: list[str]
    """The cache keys (= custom ids) it asks for."""
    submitted_at: float
    """Unix time just before submitting."""
    batch_id: str | None = None
    """The provider's id; ``None`` while the submission's answer was not recorded yet."""
    resubmission: bool = False
    """It asks again for what an expired batch left unanswered (never resubmitted itself)."""
    state: str = "submitting"
    """The provider's last reported state."""
    counts: dict[str, int] = field(default_factory=dict)
    """``total``, ``succeeded``, ``failed`` as last reported."""
    collected: bool = False
    """Its results were read and cached."""
    usage: dict[str, int] = field(default_factory=dict)
    """Of the replies it cached: ``replies``, ``prompt_tokens``, ``completion_tokens``."""
    answered: list[str] = field(default_factory=list)
    """The cache keys of the replies it cached (priced at batch prices in the run's cost); empty in
    state files written before this field."""
    updated_at: str = ""
    """When this entry last changed (UTC, ISO 8601)."""


@dataclass
class BatchState:
    """A state file: the provider and every batch submitted for this run (or judge)."""

    provider: str
    """Provider of the batches."""
    batches: list[BatchEntry] = field(default_factory=list)
    """In submission order."""

    @property
    def active(self) -> list[BatchEntry]:
        return [b for b in self.batches if not b.collected]

    @property
    def answered(self) -> frozenset[str]:
        """The cache keys whose reply a batch of this state answered."""
        return frozenset(k for b in self.batches for k in b.answered)

    def to_dict(self) -> dict[str, Any]:
        return {"version": 1, "provider": self.provider, "batches": [dataclasses.asdict(b) for b in self.batches]}

    @classmethod
    def read(cls, path: Path, provider: str) -> "BatchState":
        """The state at ``path``, or an empty one (no file, or a file this code cannot read)."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            names = {f.name for f in dataclasses.fields(BatchEntry)}
            return cls(str(data.get("provider") or provider),
                       [BatchEntry(**{k: v for k, v in b.items() if k in names}) for b in data.get("batches") or []])
        except FileNotFoundError:
            return cls(provider)
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            raise PersoBenchError(f"{path}: unreadable batch state ({exc}); move it aside only if no batch of it is "
                                  "still running (it holds the batch ids)") from None

    def write(self, path: Path) -> None:
        atomic_write_json(path, self.to_dict())


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

    @property
    def waiting(self) -> bool:
        return self.pending > 0


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

    for entry in [b for b in state.active if b.batch_id is None]:  # killed between submitting and recording
        try:
            entry.batch_id = backend.find(entry.token, since=entry.submitted_at, count=len(entry.keys))
        except ProviderError as exc:
            raise ProviderError(exc.kind, f"cannot look up the batch submitted at {entry.updated_at} whose answer "
                                f"was lost ({exc}); if the provider shows no such batch, move {state_path} aside",
                                status_code=exc.status_code) from None
        if entry.batch_id is None:
            state.batches.remove(entry)  # it never reached the server
        else:
            say(f"batch {entry.batch_id}: found again after an interrupted submission")
        save()

    covered = {k for b in state.batches for k in b.keys}
    new = {k: r for k, r in requests.items() if submit and k not in covered and k not in cache}
    keys, size = list(new), max(1, int(getattr(backend, "max_requests", 50_000)))
    for start in range(0, len(keys), size):  # the APIs cap a batch's size: several batches then
        _submit(backend, state, {k: new[k] for k in keys[start:start + size]}, resubmission=False, save=save, say=say)
        submitted += 1

    deadline = None if settings.wait is None else time.monotonic() + max(0.0, settings.wait)
    last: dict[str, str] = {}
    while True:
        for entry in list(state.active):
            status = backend.status(str(entry.batch_id))
            _record(entry, status, secrets)
            save()
            line = f"batch {entry.batch_id}: {scrub(status.describe(), secrets)}"
            if last.get(str(entry.batch_id)) != line:
                last[str(entry.batch_id)] = line
                say(line)
            if status.ended:
                got, bad, unanswered = _collect(backend, entry, status, requests, cache, secrets)
                answered += got
                failed += bad
                entry.collected = True
                save()
                say(f"batch {entry.batch_id}: {got} repl{'y' if got == 1 else 'ies'} cached, {bad} failed"
                    + (f", {len(unanswered)} unanswered" if unanswered else ""))
                if unanswered and status.expired and not entry.resubmission and submit:
                    _submit(backend, state, {k: requests[k] for k in unanswered}, resubmission=True, save=save, say=say)
                    submitted += 1
        active = state.active
        if not active or stop() or (deadline is not None and time.monotonic() >= deadline):
            break
        pause = settings.poll if deadline is None else min(settings.poll, max(0.0, deadline - time.monotonic()))
        _sleep(pause, stop)
    pending = frozenset(k for b in state.active for k in b.keys)
    return BatchOutcome(answered, failed, len(pending), submitted, _summary(state), pending)


def _sleep(seconds: float, stop: Callable[[], bool]) -> None:
    """Sleep ``seconds``, waking every tenth of a second to honour ``stop``."""
    end = time.monotonic() + seconds
    while not stop() and (left := end - time.monotonic()) > 0:
        time.sleep(min(0.1, left))


def _submit(backend: "BatchBackend", state: BatchState, requests: Mapping[str, "Request"], *, resubmission: bool,
            save: Callable[[], None], say: Callable[[str], None]) -> None:
    """Record the submission, submit, record the id: a crash at any point leaves a state that
    never submits these requests again (see :meth:`BatchBackend.find`)."""
    entry = BatchEntry(token=token_source.token_hex(8), keys=list(requests), submitted_at=time.time(),
                       resubmission=resubmission, updated_at=utc_now())
    state.batches.append(entry)
    save()
    try:
        entry.batch_id = backend.submit(requests, entry.token)
    except ProviderError as exc:
        if exc.status_code is not None and 400 <= exc.status_code < 500 and exc.status_code not in (408, 409):
            state.batches.remove(entry)  # refused outright: no batch exists, nothing to look for later
            save()
        raise
    entry.state, entry.updated_at = "submitted", utc_now()
    save()
    say(f"batch {entry.batch_id}: submitted {len(requests)} request(s)"
        + (" again (the first batch expired)" if resubmission else ""))


def _record(entry: BatchEntry, status: "BatchStatus", secrets: tuple[str, ...]) -> None:
    entry.state = scrub(status.state, secrets)[:40]
    entry.counts = {"total": status.total or len(entry.keys), "succeeded": status.succeeded, "failed": status.failed}
    entry.updated_at = utc_now()


def _collect(backend: "BatchBackend", entry: BatchEntry, status: "BatchStatus", requests: Mapping[str, "Request"],
             cache: "ResponseCache", secrets: tuple[str, ...]) -> tuple[int, int, list[str]]:
    """Cache every reply of an ended batch; (replies cached, errors, keys left unanswered that this
    process can send again)."""

    results = backend.results(status)
    latency = (status.elapsed or 0.0) / max(1, len(entry.keys))  # each reply's share, as batched local generation
    got = bad = 0
    unanswered = []
    for key in entry.keys:
        result = results.get(key)
        if result is None:
            if key in requests:
                unanswered.append(key)
        elif isinstance(result, ProviderError):
            bad += 1
        else:
            usage = entry.usage
            usage["replies"] = usage.get("replies", 0) + 1
            usage["prompt_tokens"] = usage.get("prompt_tokens", 0) + int(result.prompt_tokens or 0)
            usage["completion_tokens"] = usage.get("completion_tokens", 0) + int(result.completion_tokens or 0)
            try:
                cache.set(key, _scrubbed(result, secrets), latency=latency)
            except (OSError, sqlite3.Error) as exc:
                raise StoreWriteError(str(write_refused(Path(getattr(cache, "directory", ".")) / "cache.db", exc))) from None
            entry.answered.append(key)
            got += 1
    return got, bad, unanswered


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


def read_state(path: Path) -> BatchState | None:
    """The batch state at ``path`` for display (``None``: none, or unreadable)."""
    try:
        return BatchState.read(path, "") if path.exists() else None
    except PersoBenchError:
        return None


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


def pending_batches(home: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every batch of the store (its runs' and the judges') as rows for a page or the ``batches``
    command (run id, provider, batch id, state, counts, submitted), those not collected yet first;
    read from the state files, no key needed."""
    rows = []
    paths = [(p.parent.name, p) for p in sorted(Path(home, "runs").glob(f"*/{STATE_FILE}"))]
    paths += [(f"(judge) {p.stem}", p) for p in sorted(Path(home, "batches").glob("judge-*.json"))]
    for owner, path in paths:
        state = read_state(path)
        for b in state.batches if state else []:
            counts = b.counts or {}
            rows.append({"run_id": owner, "provider": state.provider if state else "",
                         "batch_id": b.batch_id or "(submitting)", "state": b.state,
                         "requests": counts.get("total", len(b.keys)), "succeeded": counts.get("succeeded", 0),
                         "failed": counts.get("failed", 0), "collected": b.collected,
                         "submitted": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(b.submitted_at)),
                         "updated": b.updated_at})
    return sorted(rows, key=lambda r: (r["collected"], r["submitted"]), reverse=False)
