"""Where the compute step of a scoring pass runs: one small interface (:class:`ScoreExecutor`),
two executors: this process (:class:`LocalExecutor`) and Ray actors
(:class:`~persobench.scoring.ray_executor.RayExecutor`). An executor only computes: the pass
(:func:`persobench.scoring.score_pass.score_runs`) plans and writes.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Protocol

from persobench.errors import PersoBenchError
from persobench.scoring.work_plan import work_embedding_request
from persobench.scoring.writing import RunWork
from persobench.metrics.backends import Profile
from persobench.metrics.scoring import ScoreResult
from persobench.store import RunStore
from persobench.metrics import lexical
from persobench.metrics.encoder import TextEncoder, store_cache_root
from persobench.metrics.encoder import EmbeddingRequest
from persobench.metrics.family import Progress
from persobench.metrics.judge import JudgeError
from persobench.metrics.scoring import prepare_embeddings
from persobench.scoring.compute import compute_counted
from persobench.scoring.overlap import Stop, ahead


#: ``progress(stage, done, total)`` of a scoring pass; ``stage`` names the run (or dataset) and step.
ScoreProgress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Computed:
    """One run's compute step, back from an executor."""

    work: RunWork
    """The run's planned work."""
    result: "ScoreResult | None"
    """The values it lacked (None when nothing was computed)."""
    error: str = ""
    """Why (part of) the compute failed, one line; the values that came back are still in ``result``."""
    judge: Any = None
    """What the judge did for this run (:class:`~persobench.metrics.judge.JudgeStats`; None without a judge)."""


@dataclass(frozen=True)
class WorkGroup:
    """The planned runs of one dataset (their texts are embedded in one pass)."""

    label: str
    """The dataset and how many runs, for progress lines."""
    works: tuple[RunWork, ...]
    """The runs' work, in order."""


class ScoreExecutor(Protocol):
    """Where the compute step runs (a context manager: models and actors live while it is open)."""

    device: str
    """Where the models run, for the report ("cpu", "cuda", "ray")."""

    def __enter__(self) -> "ScoreExecutor": ...

    def __exit__(self, *exc: object) -> None: ...

    def compute(self, groups: Iterable[WorkGroup], progress: ScoreProgress | None) -> Iterator[Computed]:
        """Every work of ``groups`` computed, each as soon as it is done (any order)."""
        ...


def staged(progress: ScoreProgress | None, label: str) -> ScoreProgress | None:
    """``progress`` with ``label`` before each stage name."""
    if progress is None:
        return None
    return lambda stage, done, total: progress(f"{label} {stage}", done, total)


class LocalExecutor:
    """Computes in this process: each dataset's texts embedded in one pass, cached in the store (the
    memory given back after the dataset), and both cores for the lexical metrics of a large pass.

    When the pass embeds texts, the next dataset's texts are embedded while this dataset's runs are
    computed (METEOR, matching, lexical metrics: mostly Python on one core, while the encoder's
    streams use the others); each of the two datasets in flight has an encoder of its own, handed
    back when its runs are computed, so at most two datasets' embeddings are in memory."""

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
        self._stops: list[Stop] = []  # of the passes computing now: stopped on exit

    def __enter__(self) -> "LocalExecutor":

        root = store_cache_root(self.store.home)
        self.encoder = TextEncoder(self.profile, root)
        # The second embeds the next dataset meanwhile (a lexical pass embeds nothing: one is enough).
        self._encoders = [self.encoder, TextEncoder(self.profile, root)] if self.embeds else [self.encoder]
        self._pool = lexical.worker_pool(self.lexical_replies)
        self._pool.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        for stop in list(self._stops):  # a pass left unfinished: its embedding thread ends first
            _stopped(stop)
        if self._pool is not None:
            self._pool.__exit__(*exc)
            self._pool = None

    def compute(self, groups: Iterable[WorkGroup], progress: ScoreProgress | None) -> Iterator[Computed]:
        if len(self._encoders) < 2:
            for group in groups:
                yield from self._computed(group, self.encoder, progress)
            return
        free: "queue.Queue[Any]" = queue.Queue()
        for encoder in self._encoders:
            free.put(encoder)
        stop = Stop()
        self._stops.append(stop)

        def embedded() -> Iterator[tuple[WorkGroup, Any]]:
            for group in groups:
                encoder = _take(free, stop)
                if encoder is None:
                    return
                _embed_group(encoder, group, progress, stop)
                yield group, encoder

        try:
            for group, encoder in ahead(embedded(), stop, depth=1, name="persobench-embed"):
                try:
                    yield from self._computed(group, encoder, progress)
                finally:
                    free.put(encoder)
        finally:
            _stopped(stop)
            self._stops.remove(stop)

    def _computed(self, group: WorkGroup, encoder: Any, progress: ScoreProgress | None) -> Iterator[Computed]:
        """The runs of ``group`` computed with ``encoder`` (its texts embedded by
        :func:`_embed_group` unless they already are); the encoder's memory is given back after."""
        try:
            if len(self._encoders) < 2:
                _embed_group(encoder, group, progress)
            for work in group.works:
                try:
                    result, tally = compute_counted(work, progress=staged(progress, work.run_id[:48]),
                                                    encoder=encoder)
                except JudgeError:
                    raise  # no key, or a judge failing every request: one line, not one per run
                except PersoBenchError as exc:
                    yield Computed(work, None, str(exc), getattr(exc, "judge_tally", None))
                    continue
                yield Computed(work, result, "", tally)
        finally:
            encoder.release()


class _PassStopped(Exception):
    """Raised in the embedding thread at its next batch once the pass stopped."""


def _embed_group(encoder: Any, group: WorkGroup, progress: ScoreProgress | None, stop: Stop | None = None) -> None:
    """Embed the texts of every run of ``group`` in one pass; with ``stop``, the pass ends at the
    next batch once it is set (the batches in flight finish: a forward pass cannot be cut)."""
    pairs: dict[tuple[str, str], None] = {}
    sentences: dict[str, None] = {}
    for work in group.works:
        request = work_embedding_request(work)
        pairs.update(dict.fromkeys(request.pairs))
        sentences.update(dict.fromkeys(request.sentences))
    told = staged(progress, group.label[:48])

    def checked(stage: str, done: int, total: int) -> None:
        if stop is not None and stop.event.is_set():
            raise _PassStopped
        if told is not None:
            told(stage, done, total)

    prepare_embeddings(encoder, EmbeddingRequest(tuple(pairs), tuple(sentences)), Progress(checked))


def _stopped(stop: Stop) -> None:
    """Stop a pass's embedding thread and wait for it: torch must not be running in a thread
    when the interpreter exits (it aborts the process)."""
    stop.set()
    stop.join(timeout=120.0)


def _take(free: "queue.Queue[Any]", stop: Stop) -> Any:
    """The next encoder handed back, or None once the pass stopped."""
    while not stop.event.is_set():
        try:
            return free.get(timeout=0.1)
        except queue.Empty:
            continue
    return None
