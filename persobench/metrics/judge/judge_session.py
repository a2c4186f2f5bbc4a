"""One scoring pass's LLM judge (:class:`JudgeSession`) and the answers it gives (:class:`NLIAnswers`).

A pass that scores with a judge opens one session (:func:`judge_session`), labels each run's NLI
pairs through it before the run is computed (:meth:`JudgeSession.label`: the response cache first,
then requests, for that run only while the run exists), and hands the answers to the compute step
with the run's work. The NLI family reads them where it would run the NLI classifier
(:attr:`persobench.metrics.family.FamilyBatch.nli_answers`); it never sends. So only the process that
drives the pass talks to the judge, whichever executor computes, and what the judge did is the
session's own :attr:`~JudgeSession.stats`: no counter is shared between passes, threads or processes.

:func:`persobench.metrics.score_samples` and :func:`persobench.scoring.score_run` (one run, no pass)
open a session of their own when they are given none.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

from persobench.llm.session import sending_for
from persobench.llm.spend import SpendLedger
from persobench.metrics.judge.labeller import UNANSWERED, JudgeEstimate, JudgeLabeller, JudgeStats
from persobench.metrics.judge.judge_config import Judge
from persobench.metrics.nli_labels import LABELS, NLIPrediction


@dataclass(frozen=True)
class NLIAnswers:
    """The judge's label for each (premise, hypothesis) pair it was asked: an entailment, neutral or
    contradiction label, :data:`~persobench.metrics.judge.labeller.UNPARSEABLE` or
    :data:`~persobench.metrics.judge.labeller.UNANSWERED`. Plain data: it travels inside a run's work to
    another process (a Ray actor) and reads the same there. A pair it does not hold is unanswered."""

    labels: Mapping[tuple[str, str], str] = field(default_factory=dict)
    """(premise, hypothesis) -> the judge's label."""

    def label(self, pair: Sequence[str]) -> str:
        """The label of ``pair`` (an :class:`~persobench.metrics.nli_inputs.NLIInput` or a plain pair)."""
        return self.labels.get((pair[0], pair[1]), UNANSWERED)

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int = 0,  # noqa: ARG002 - NLIModel's signature
                progress: Callable[[int], None] | None = None) -> list[NLIPrediction]:
        """One prediction per pair, in order, from the answers (the NLI classifier's signature: the
        NLI family reads these in its place)."""
        out = []
        for pair in pairs:
            label = self.label(pair)
            out.append(NLIPrediction(label, {label: 1.0} if label in LABELS else {}))
        if progress is not None:
            progress(len(pairs))
        return out

    def __len__(self) -> int:
        return len(self.labels)


class JudgeSession:
    """The judge of one scoring pass: one labeller (answers kept for the session: a pair two runs share
    is asked and counted once), the spend ledger its cost cap is kept in, and its counts. Made by the
    pass (:func:`judge_session`) and passed to whatever labels; it holds nothing process-wide."""

    def __init__(self, judge: Judge, *, ledger: SpendLedger | None = None) -> None:
        self.judge = judge
        """The judge's configuration."""
        self.labeller = JudgeLabeller(judge, ledger=ledger, remember=True)
        """The labeller every request of the session goes through."""

    def label(self, pairs: Sequence[tuple[str, str]], *, run_path: str | os.PathLike[str] | None = None,
              progress: Callable[[int], None] | None = None) -> NLIAnswers:
        """The judge's answers to ``pairs``: from the response cache, else asked now. With ``run_path``,
        the requests are for that run: those still queued when it is deleted are not sent
        (:func:`~persobench.llm.session.sending_for`). Raises
        :class:`~persobench.metrics.judge.labeller.JudgeError` when the judge cannot label at all (its first
        requests all failed for one reason, the spend ledger cannot be trusted)."""
        if not pairs:
            return NLIAnswers()
        # Without a run path, a caller's own sending_for block (if any) still holds.
        with sending_for(run_path) if run_path is not None else contextlib.nullcontext():
            predictions = self.labeller.predict(pairs, progress=progress)
        return NLIAnswers({(pair[0], pair[1]): prediction.label for pair, prediction in zip(pairs, predictions)})

    def estimate(self, pairs: Sequence[tuple[str, str]]) -> JudgeEstimate:
        """What labelling ``pairs`` would send, from the response cache; sends nothing, needs no key."""
        return self.labeller.estimate(pairs)

    @property
    def stats(self) -> JudgeStats:
        """What this session's judge did so far (a copy)."""
        return dataclasses.replace(self.labeller.stats)


@contextlib.contextmanager
def judge_session(judge: Judge | None, *,
                  home: str | os.PathLike[str] | None = None) -> Iterator[JudgeSession | None]:
    """A :class:`JudgeSession` for one pass (``None`` without a judge). With a cost cap and a store
    ``home``, the cap is kept in a ledger file of this pass (``<home>/spend/<id>.json``,
    :meth:`~persobench.llm.spend.SpendLedger.for_invocation`), removed when the pass ends: a ledger
    damaged, deleted or made unwritable meanwhile stops the pass in one line naming it."""
    if judge is None:
        yield None
        return
    ledger = (SpendLedger.for_invocation(Path(home), judge.max_cost)
              if home is not None and judge.max_cost is not None else None)
    try:
        yield JudgeSession(judge, ledger=ledger)
    finally:
        if ledger is not None:
            ledger.remove()
