"""Where the compute step of a scoring pass runs: one small interface (:class:`ScoreExecutor`),
two executors: this process (:class:`LocalExecutor`) and Ray actors
(:class:`~persobench.scoring.ray_executor.RayExecutor`). An executor only computes: the pass
(:func:`persobench.scoring.score_pass.score_runs`) plans and writes.
"""

from __future__ import annotations

import collections
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Iterable, Iterator, Protocol, Sequence

from persobench.errors import PersoBenchError
from persobench.scoring.work_plan import split_by_embedding, work_embedding_request
from persobench.scoring.writing import RunWork
from persobench.metrics.backends import Profile
from persobench.store import RunStore
from persobench.metrics import lexical
from persobench.metrics.encoder import TextEncoder, store_cache_root
from persobench.metrics.encoder import merged_request
from persobench.metrics.family import Progress
from persobench.metrics.judge import JudgeError
from persobench.metrics.scoring import prepare_embeddings
from persobench.scoring.compute import combine_results, compute_run
from persobench.scoring.overlap import Stop
from persobench.scoring.pass_steps import Computed, ScoreProgress, WorkGroup, staged


class ScoreExecutor(Protocol):
    """Where the compute step runs (a context manager: models and actors live while it is open)."""

    device: str
    """Where the models run, for the report ("cpu", "cuda", "ray")."""

    def __enter__(self) -> "ScoreExecutor": ...

    def __exit__(self, *exc: object) -> None: ...

    def compute(self, groups: Iterable[WorkGroup], progress: ScoreProgress | None) -> Iterator[Computed]:
        """Every work of ``groups`` computed, each as soon as it is done (any order)."""
        ...


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

    def compute(self, groups: Iterable[WorkGroup], progress: ScoreProgress | None) -> Iterator[Computed]:
        if len(self._encoders) < 2:
            for group in groups:
                _embed_group(self.encoder, group, progress)
                try:
                    for work in group.works:
                        yield _computed(work, work.todo, self.encoder, progress)
                finally:
                    self.encoder.release()
            return
        planned = iter(groups)
        free = list(self._encoders)
        stop = Stop()
        embedding = ThreadPoolExecutor(max_workers=1, thread_name_prefix="persobench-embed")
        queued: "collections.deque[tuple[WorkGroup, Any, Future[None]]]" = collections.deque()

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


def _computed_group(group: WorkGroup, encoder: Any, embedded: "Future[None]",
                    progress: ScoreProgress | None) -> Iterator[Computed]:
    """The runs of ``group``: what needs no embedding while ``embedded`` (the group's texts) is
    still running, the rest once it is done; one :class:`Computed` per run, both parts combined."""
    split = {work.run_id: split_by_embedding(work.todo) for work in group.works}
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
