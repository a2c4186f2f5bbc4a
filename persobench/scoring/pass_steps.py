"""The steps of a scoring pass, which every executor takes the same way (:class:`PassSteps`): plan each
run in the driver, have its NLI pairs labelled by the pass's judge in the driver, hand the work to the
executor to compute, write what comes back in the driver. An executor
(:mod:`persobench.scoring.executors`) decides only when and where each step runs; none of them does
a step its own way, so the requests a judge is sent, the values stored and the report are the same
whichever computed.

The label step (:func:`label_work`) asks a run's NLI pairs through the pass's
:class:`~persobench.metrics.judge.judge_session.JudgeSession` before the run is computed; the answers
travel inside the run's work, so the compute step (in this process or on a Ray actor) never sends.
"""

from __future__ import annotations

import collections
import dataclasses
import os
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

from persobench.errors import PersoBenchError
from persobench.metrics.backends import Profile
from persobench.metrics.family import Progress
from persobench.metrics.judge.labeller import JudgeError
from persobench.metrics.judge.judge_session import JudgeSession
from persobench.metrics.sample_scores import ScoreResult
from persobench.records import Sample
from persobench.scoring.outcome import RunScore
from persobench.scoring.work_plan import by_dataset, embeds_texts, items_nli_pairs, plan_run, run_samples, work_items
from persobench.scoring.writing import RunWork, write_run
from persobench.store.run_store import Run

#: ``progress(stage, done, total)`` of a scoring pass; ``stage`` names the run (or dataset) and step.
ScoreProgress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class WorkGroup:
    """The planned runs of one dataset (their texts are embedded in one pass)."""

    label: str
    """The dataset and how many runs, for progress lines."""
    works: tuple[RunWork, ...]
    """The runs' work, in order."""


@dataclass(frozen=True)
class Computed:
    """One run's compute step, back from an executor."""

    work: RunWork
    """The run's planned work."""
    result: "ScoreResult | None"
    """The values it lacked (None when nothing was computed)."""
    error: str = ""
    """Why (part of) the compute failed, one line; the values that came back are still in ``result``."""


def staged(progress: ScoreProgress | None, label: str) -> ScoreProgress | None:
    """``progress`` with ``label`` before each stage name."""
    if progress is None:
        return None
    return lambda stage, done, total: progress(f"{label} {stage}", done, total)


def label_work(work: RunWork, judge: JudgeSession | None, *, run_path: str | os.PathLike[str] | None = None,
               progress: ScoreProgress | None = None) -> RunWork:
    """``work`` with the judge's answers to its NLI pairs attached (:attr:`RunWork.nli_answers`); ``work``
    as it is without a judge. The requests are for the run at ``run_path``: those still queued once
    it is deleted are not sent. ``progress`` gets the ``judge`` stage."""
    if judge is None or work.profile.judge is None:
        return work
    pairs = items_nli_pairs(work_items(work), tuple(work.todo), work.profile)
    advance = Progress(progress).stage("judge", len(pairs)) if pairs else None
    return dataclasses.replace(work, nli_answers=judge.label(pairs, run_path=run_path, progress=advance))


@dataclass
class PassSteps:
    """The driver's steps of one pass over ``runs``: :meth:`planned`, :meth:`labelled`, :meth:`written`.
    A run refused by a step (it cannot be planned or labelled) waits in :attr:`refused` with its one-line
    reason until the executor hands it on (:meth:`refusals`), in the order the runs are written."""

    runs: Sequence[Run]
    """The runs to score, each once."""
    profile: Profile
    """The pass's profile (each run's input layout is resolved when it is planned)."""
    wanted: tuple[str, ...] | None
    """The requested metrics (None: every per-sample metric)."""
    refused: "collections.deque[RunScore]" = field(default_factory=collections.deque)
    """Runs a step refused, not handed on yet."""

    def __post_init__(self) -> None:
        self._by_id = {run.run_id: run for run in self.runs}

    def planned(self) -> Iterator[WorkGroup]:
        """Each dataset's runs planned (lazily: a dataset is planned when the executor asks for it).

        When nothing requested is embedded (lexical metrics), each run is its own group: the executor
        starts computing a run as soon as it is planned instead of waiting for its whole dataset."""
        datasets: dict[str, dict[str, Sample]] = {}
        per_run = not embeds_texts(self.wanted)
        for group in by_dataset(self.runs):
            works = []
            label = f"{group[0].manifest.dataset} ({len(group)} run{'s' if len(group) != 1 else ''})"
            for run in group:
                if not run.has_table("generations"):
                    self.refused.append(RunScore(run.run_id, error="no generations table"))
                    continue
                try:
                    work = plan_run(run, run_samples(run, datasets=datasets), profile=self.profile,
                                    metrics=self.wanted)
                except PersoBenchError as exc:
                    self.refused.append(RunScore(run.run_id, error=str(exc)))
                    continue
                if per_run:
                    yield WorkGroup(label, (work,))
                else:
                    works.append(work)
            if not per_run:
                yield WorkGroup(label, tuple(works))

    def labelled(self, group: WorkGroup, judge: JudgeSession | None, progress: ScoreProgress | None) -> WorkGroup:
        """``group`` with each run's answers attached (:func:`label_work`, progress stages named by the
        run); ``group`` itself without a judge. A judge that cannot label at all stops the pass
        (:class:`~persobench.metrics.judge.labeller.JudgeError`, one line); a run whose labelling fails
        otherwise is refused with its one-line reason."""
        if judge is None:
            return group
        works = []
        for work in group.works:
            try:
                works.append(label_work(work, judge, run_path=self._by_id[work.run_id].path,
                                        progress=staged(progress, work.run_id[:48])))
            except JudgeError:
                raise
            except PersoBenchError as exc:
                self.refused.append(RunScore(work.run_id, error=str(exc)))
        return WorkGroup(group.label, tuple(works))

    def written(self, done: Computed) -> RunScore:
        """Write what came back (kept even beside an error) under the run's lock; the run's outcome."""
        run = self._by_id[done.work.run_id]
        if done.error and done.result is None:
            return RunScore(run.run_id, error=done.error)
        try:
            summary = write_run(run, done.work, done.result)
        except PersoBenchError as exc:
            return RunScore(run.run_id, error=str(exc))
        return RunScore(run.run_id, error=done.error) if done.error else RunScore(run.run_id, summary)

    def refusals(self) -> Iterator[RunScore]:
        """The runs refused so far, each handed on once."""
        while self.refused:
            yield self.refused.popleft()
