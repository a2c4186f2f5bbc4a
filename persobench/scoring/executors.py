"""Who runs a scoring pass: one small interface (:class:`ScoreExecutor`), registered by name in
:data:`~persobench.scoring.score_config.EXECUTORS` (``score --executor``): this process
(:class:`LocalExecutor`) and Ray actors (:class:`~persobench.scoring.ray_executor.RayExecutor`).

An executor owns the pass (:meth:`ScoreExecutor.run_pass`): it decides when and where each step runs,
and takes every step the same way, through :class:`~persobench.scoring.pass_steps.PassSteps`: plan
and label in the driver, compute (here or on actors), write in the driver. So the judge is sent the
same requests, the stored values are the same and the report counts the same, whichever executor ran.
"""

from __future__ import annotations

import collections
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Generator, Iterable, Iterator, Protocol, Sequence

from persobench.errors import PersoBenchError
from persobench.core.gc_pace import fewer_collections
from persobench.scoring.work_plan import embeds_texts, split_by_embedding, work_embedding_request
from persobench.scoring.writing import RunWork
from persobench.metrics.backends import Profile
from persobench.metrics.judge.judge_session import JudgeSession
from persobench.store.run_store import Run, RunStore
from persobench.metrics import lexical
from persobench.metrics.encoders.encoder import TextEncoder, store_cache_root
from persobench.metrics.encoders.encoder import merged_request
from persobench.metrics.family import Progress
from persobench.metrics.judge.labeller import JudgeError
from persobench.metrics.sample_scores import prepare_embeddings
from persobench.scoring.compute import combine_results, compute_run
from persobench.scoring.outcome import RunScore
from persobench.scoring.overlap import Stop, ahead
from persobench.scoring.pass_steps import Computed, PassSteps, ScoreProgress, WorkGroup, staged
from persobench.scoring.score_config import ScoreConfig


class ScoreExecutor(Protocol):
    """Runs a scoring pass (a context manager: models and actors live while it is open). A class of
    its own per executor, registered in :data:`~persobench.scoring.score_config.EXECUTORS`."""

    device: str
    """Where the models run, for the report ("cpu", "cuda", "ray")."""

    @classmethod
    def where(cls, config: ScoreConfig, profile: Profile) -> str:
        """Where a pass of ``config`` would compute (the report's device), after checking that this
        executor can run here at all: a one-line :class:`~persobench.errors.ConfigurationError`
        before any work (Ray not installed) otherwise."""
        ...

    @classmethod
    def open(cls, config: ScoreConfig, profile: Profile, store: RunStore,
             runs: Sequence[Run]) -> "ScoreExecutor":
        """An executor for a pass of ``config`` over ``runs``, sized for them (enter it to start it)."""
        ...

    def __enter__(self) -> "ScoreExecutor": ...

    def __exit__(self, *exc: object) -> None: ...

    def run_pass(self, steps: PassSteps, judge: JudgeSession | None,
                 progress: ScoreProgress | None) -> Generator[RunScore, None, None]:
        """The pass: every run planned, labelled (with ``judge``), computed and written by ``steps``;
        each run's outcome as soon as it is written, runs a step refused among them."""
        ...


def _valid_replies(run: "Run") -> int:
    """The run's valid replies as its manifest counts them (0 when it does not say)."""
    counts = run.manifest.extra.get("counts") or {}
    try:
        return int(counts.get("ok", 0))
    except (TypeError, ValueError):
        return 0


class LocalExecutor:
    """Computes in this process: each dataset's texts embedded in one pass, cached in the store (the
    memory given back after the dataset), and both cores for the lexical metrics of a large pass.

    When the pass embeds texts, the encoder works in a thread of its own and never waits for the
    rest: while it embeds a dataset, this thread computes what needs no embedding (METEOR, the
    lexical metrics: :func:`~persobench.scoring.work_plan.split_by_embedding`) for that dataset's
    runs, then the rest once the dataset is embedded, while the encoder goes on to the next one.
    Each of the two datasets in flight has an encoder of its own, handed back when its runs are
    computed, so at most two datasets' embeddings are in memory. Values are the same as computing
    each run at once (a family sees the same replies either way)."""

    def __init__(self, profile: "Profile", store: "RunStore", lexical_replies: int = 0, *,
                 embeds: bool = True) -> None:
        self.profile = profile
        self.store = store
        self.lexical_replies = lexical_replies
        self.embeds = embeds
        self.device = profile.device
        self._pool: Any = None
        self.encoder: Any = None
        self._encoders: list[Any] = []
        self._running: list[tuple[Stop, ThreadPoolExecutor]] = []  # passes computing now: stopped on exit

    @classmethod
    def where(cls, config: ScoreConfig, profile: Profile) -> str:  # noqa: ARG003 - the protocol's signature
        return profile.device

    @classmethod
    def open(cls, config: ScoreConfig, profile: Profile, store: RunStore, runs: Sequence[Run]) -> "LocalExecutor":
        """Sized for ``runs``: the lexical worker pool for their valid replies when lexical metrics are
        asked, a second encoder only when something is embedded."""
        wanted = config.checked_metrics()
        lexical_wanted = wanted is None or any(m in wanted for m in (*lexical.REFERENCE_LEXICAL,
                                                                     *lexical.REPLY_LEXICAL))
        return cls(profile, store, sum(_valid_replies(r) for r in runs) if lexical_wanted else 0,
                   embeds=embeds_texts(wanted))

    def __enter__(self) -> "LocalExecutor":

        root = store_cache_root(self.store.home)
        self.encoder = TextEncoder(self.profile, root)
        # The second embeds the next dataset meanwhile (a lexical pass embeds nothing: one is enough).
        self._encoders = [self.encoder, TextEncoder(self.profile, root)] if self.embeds else [self.encoder]
        self._pool = lexical.worker_pool(self.lexical_replies)
        self._pool.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        for stop, embedding in list(self._running):  # a pass left unfinished: its embedding ends first
            _stopped(stop, embedding)
        if self._pool is not None:
            self._pool.__exit__(*exc)
            self._pool = None

    def run_pass(self, steps: PassSteps, judge: JudgeSession | None,
                 progress: ScoreProgress | None) -> Generator[RunScore, None, None]:
        """The pass as a bounded pipeline (:mod:`persobench.scoring.overlap`): a thread plans run N+1 and
        has it labelled, a thread computes run N, and this thread writes run N-1, each run under its
        lock, in the order computed. ``progress`` and the consumer of each outcome are called under
        one lock, never at once. Fewer garbage-collector passes meanwhile (:func:`fewer_collections`)."""
        said = threading.Lock()
        told = None
        if progress is not None:
            def told(stage: str, done: int, total: int) -> None:
                with said:
                    progress(stage, done, total)

        stop = Stop()
        with fewer_collections():
            try:
                planned = ahead((steps.labelled(group, judge, told) for group in steps.planned()), stop,
                                name="persobench-plan")
                for done in ahead(self.compute(planned, told), stop, name="persobench-compute"):
                    written = steps.written(done)
                    with said:
                        yield from steps.refusals()
                        yield written
                yield from steps.refusals()
            finally:
                stop.set()  # the threads end at their next item; the executor's exit cancels queued chunks

    def compute(self, groups: Iterable[WorkGroup], progress: ScoreProgress | None) -> Iterator[Computed]:
        """Every work of ``groups`` computed, each as soon as it is done."""
        if len(self._encoders) < 2:
            for group in groups:
                _embed_group(self.encoder, group, progress)
                try:
                    for work in group.works:
                        yield _computed(work, tuple(work.todo), self.encoder, progress)
                finally:
                    self.encoder.release()
            return
        planned = iter(groups)
        free = list(self._encoders)
        stop = Stop()
        embedding = ThreadPoolExecutor(max_workers=1, thread_name_prefix="persobench-embed")
        queued: collections.deque[tuple[WorkGroup, Any, Future[None]]] = collections.deque()

        def queue_next() -> None:
            group = next(planned, None)
            if group is not None:
                encoder = free.pop()
                queued.append((group, encoder, embedding.submit(_embed_group, encoder, group, progress, stop)))

        self._running.append((stop, embedding))
        try:
            queue_next()
            queue_next()
            while queued:
                group, encoder, embedded = queued.popleft()
                try:
                    yield from _computed_group(group, encoder, embedded, progress)
                finally:
                    encoder.release()
                    free.append(encoder)
                queue_next()
        finally:
            _stopped(stop, embedding)
            self._running.remove((stop, embedding))


def _computed(work: RunWork, metrics: Sequence[str], encoder: Any, progress: ScoreProgress | None) -> Computed:
    """``work``'s values of ``metrics``, or its one-line error (a judge error is raised: it is one
    line for the pass, not one per run)."""
    try:
        result = compute_run(work, metrics=metrics, progress=staged(progress, work.run_id[:48]), encoder=encoder)
    except JudgeError:
        raise
    except PersoBenchError as exc:
        return Computed(work, None, str(exc))
    return Computed(work, result)


def _computed_group(group: WorkGroup, encoder: Any, embedded: Future[None],
                    progress: ScoreProgress | None) -> Iterator[Computed]:
    """The runs of ``group``: what needs no embedding while ``embedded`` (the group's texts) is
    still running, the rest once it is done; one :class:`Computed` per run, both parts combined."""
    split = {work.run_id: split_by_embedding(tuple(work.todo)) for work in group.works}
    first = {work.run_id: _computed(work, split[work.run_id][0], encoder, progress)
             for work in group.works if split[work.run_id][0]}
    embedded.result()  # an error of the embedding pass ends the pass, as it did before
    for work in group.works:
        parts = [first[work.run_id]] if work.run_id in first else []
        if split[work.run_id][1]:
            parts.append(_computed(work, split[work.run_id][1], encoder, progress))
        yield _combined(work, parts)


def _combined(work: RunWork, parts: Sequence[Computed]) -> Computed:
    """One run's parts as one :class:`Computed`: values of every part that came back, errors joined."""
    if len(parts) == 1:
        return parts[0]
    results = [part.result for part in parts if part.result is not None]
    return Computed(work, combine_results(results), "; ".join(part.error for part in parts if part.error))


class _PassStopped(PersoBenchError):
    """Raised in the embedding thread at its next batch once the pass stopped (no one reads it: the
    pass is ending)."""


def _embed_group(encoder: Any, group: WorkGroup, progress: ScoreProgress | None, stop: Stop | None = None) -> None:
    """Embed the texts of every run of ``group`` in one pass; with ``stop``, the pass ends at the
    next batch once it is set (the batches in flight finish: a forward pass cannot be cut)."""
    told = staged(progress, group.label[:48])

    def checked(stage: str, done: int, total: int) -> None:
        if stop is not None and stop.event.is_set():
            raise _PassStopped
        if told is not None:
            told(stage, done, total)

    prepare_embeddings(encoder, merged_request(work_embedding_request(work) for work in group.works),
                       Progress(checked))


def _stopped(stop: Stop, embedding: ThreadPoolExecutor) -> None:
    """Stop a pass's embedding thread at its next batch and wait for it: torch must not be running
    in a thread when the interpreter exits (it aborts the process)."""
    stop.set()
    embedding.shutdown(wait=True, cancel_futures=True)
