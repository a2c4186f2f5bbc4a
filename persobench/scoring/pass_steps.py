"""The steps of a scoring pass that every executor takes the same way: what a pass hands an executor
(:class:`WorkGroup`) and gets back (:class:`Computed`), and the judge's label step
(:func:`label_work`): each run's NLI pairs asked in the process that drives the pass, before the run
is computed, the answers travelling with the run's work.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Callable

from persobench.errors import PersoBenchError
from persobench.metrics.family import Progress
from persobench.metrics.judge import JudgeError
from persobench.metrics.judge_session import JudgeSession
from persobench.metrics.scoring import ScoreResult
from persobench.scoring.outcome import RunScore
from persobench.scoring.work_plan import items_nli_pairs, work_items
from persobench.scoring.writing import RunWork

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
    judge: object = None
    """What a judge did while this run was computed elsewhere (:class:`~persobench.metrics.judge.JudgeStats`;
    None when nothing was sent)."""


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


def label_group(group: WorkGroup, judge: JudgeSession | None, run_paths: Callable[[str], "os.PathLike[str]"],
                progress: ScoreProgress | None, refuse: Callable[[RunScore], None]) -> WorkGroup:
    """``group`` with each run's answers attached (:func:`label_work`; ``run_paths(run_id)``: the run's
    folder; progress stages named by the run). A judge that cannot label at all stops the pass (:class:`~persobench.metrics.judge.JudgeError`,
    one line); a run whose labelling fails otherwise goes to ``refuse`` with its one-line reason."""
    if judge is None:
        return group
    works = []
    for work in group.works:
        try:
            works.append(label_work(work, judge, run_path=run_paths(work.run_id),
                                    progress=staged(progress, work.run_id[:48])))
        except JudgeError:
            raise
        except PersoBenchError as exc:
            refuse(RunScore(work.run_id, error=str(exc)))
    return WorkGroup(group.label, tuple(works))

