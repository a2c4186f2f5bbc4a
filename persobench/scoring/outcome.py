"""What a scoring pass did: per run (:class:`RunScore`), in total (:class:`ScoreReport`), and what its
LLM judge did (its :class:`~persobench.metrics.judge.labeller.JudgeStats`, for this pass only), whichever
executor computed the values.

The judge's counts are the pass's judge session's own
(:attr:`persobench.metrics.judge.judge_session.JudgeSession.stats`): only the driver of a pass sends judge
requests, on the local executor and on Ray alike, so ``score --executor ray`` reports (and exits on)
the same counts as a local score, and nothing is read off a counter another pass shares.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping
from persobench.metrics.judge.labeller import JudgeStats
from persobench.scoring.writing import RunScoreSummary


@dataclass(frozen=True)
class RunScore:
    """What one scoring pass did to one run."""

    run_id: str
    """The run."""
    summary: "RunScoreSummary | None" = None
    """New and cached values per metric and the provenance; ``None`` when the run was not scored."""
    error: str = ""
    """Why the run was not scored (one line), or ``""``."""

    @property
    def ok(self) -> bool:
        return self.summary is not None


@dataclass(frozen=True)
class ScoreReport:
    """What a scoring pass (:func:`persobench.pipeline.score`) did."""

    profile: str
    """The profile key the numbers were stored under."""
    device: str
    """Where the models ran ("cpu", "cuda" ...; "ray" for the Ray executor's actors)."""
    runs: tuple[RunScore, ...] = ()
    """One entry per run asked for, in order."""
    unavailable: Mapping[str, str] = field(default_factory=dict)
    """Metric -> why it has no number (its model is not available in this profile)."""
    degraded: Mapping[str, str] = field(default_factory=dict)
    """Metric -> why its numbers come from a fallback (stored, labelled in the provenance)."""
    judge: "JudgeStats | None" = None
    """What the LLM judge did in this pass (pairs, cached, sent, requests, unparseable, unanswered,
    tokens, cost): its session's counts; ``None`` without a judge."""

    @property
    def failures(self) -> int:
        """Runs that could not be scored."""
        return sum(1 for r in self.runs if not r.ok)

    @property
    def new_values(self) -> int:
        """Values computed by this pass, over all runs."""
        return sum(sum(r.summary.computed.values()) for r in self.runs if r.summary is not None)

    @property
    def unlabelled(self) -> int:
        """Judge pairs left without a label this pass (unanswered): those scores are missing."""
        return self.judge.unanswered if self.judge is not None else 0

    @property
    def complete(self) -> bool:
        """Every run scored and every judge pair answered (what exit status 0 means)."""
        return not self.failures and not self.unlabelled
