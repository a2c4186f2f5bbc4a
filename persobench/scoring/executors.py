"""Where the compute step of a scoring pass runs: one small interface (:class:`ScoreExecutor`),
two executors: this process (:class:`LocalExecutor`) and Ray actors
(:class:`~persobench.scoring.ray_executor.RayExecutor`). An executor only computes: the pass
(:func:`persobench.scoring.score_pass.score_runs`) plans and writes.
"""

from __future__ import annotations

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
    """Computes in this process: one text encoder for the whole pass (each dataset's texts embedded
    in one pass, cached in the store, the memory given back after the dataset) and both cores for
    the lexical metrics of a large pass."""

    def __init__(self, profile: "Profile", store: "RunStore", lexical_replies: int = 0) -> None:
        self.profile = profile
        self.store = store
        self.lexical_replies = lexical_replies
        self.device = profile.device
        self._pool: Any = None
        self.encoder: Any = None

    def __enter__(self) -> "LocalExecutor":

        self.encoder = TextEncoder(self.profile, store_cache_root(self.store.home))
        self._pool = lexical.worker_pool(self.lexical_replies)
        self._pool.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.__exit__(*exc)
            self._pool = None

    def compute(self, groups: Iterable[WorkGroup], progress: ScoreProgress | None) -> Iterator[Computed]:

        for group in groups:
            pairs: dict[tuple[str, str], None] = {}
            sentences: dict[str, None] = {}
            for work in group.works:
                request = work_embedding_request(work)
                pairs.update(dict.fromkeys(request.pairs))
                sentences.update(dict.fromkeys(request.sentences))
            prepare_embeddings(self.encoder, EmbeddingRequest(tuple(pairs), tuple(sentences)),
                               Progress(staged(progress, group.label[:48])))
            for work in group.works:
                try:
                    result, tally = compute_counted(work, progress=staged(progress, work.run_id[:48]),
                                                    encoder=self.encoder)
                except JudgeError:
                    raise  # no key, or a judge failing every request: one line, not one per run
                except PersoBenchError as exc:
                    yield Computed(work, None, str(exc), getattr(exc, "judge_tally", None))
                    continue
                yield Computed(work, result, "", tally)
            self.encoder.release()
