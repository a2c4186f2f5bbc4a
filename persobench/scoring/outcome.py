"""What a scoring pass did: per run (:class:`RunScore`), in total (:class:`ScoreReport`), and what its
LLM judge did (its :class:`~persobench.metrics.judge.JudgeStats`, for this pass only), whichever
executor computed the values.

The judge's counts travel with the values: each compute step measures what its judge did while it
ran (:func:`persobench.scoring.compute.compute_counted`), a Ray actor sends that back with its
shard, and the driver adds them up. So ``score --executor ray`` reports (and exits on) the same
counts as a local score; nothing reads a process-wide counter after the fact.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping
from persobench.metrics.judge import JudgeStats
from persobench.scoring.writing import RunScoreSummary



def judge_delta(before: "JudgeStats", after: "JudgeStats") -> "JudgeStats":
    """What a judge's running counts (:class:`~persobench.metrics.judge.JudgeStats`) gained from
    ``before`` (a copy taken earlier) to ``after``: the judge's work in between."""
    return _combined(after, before, -1)


def judge_counter(stats: "JudgeStats | None") -> "Callable[[], JudgeStats | None]":
    """Start counting what a judge does from now on: the returned call gives its work since (a
    :func:`judge_delta` of ``stats``, the judge's running counts); None without a judge."""
    if stats is None:
        return lambda: None
    before = copy.copy(stats)
    return lambda: judge_delta(before, stats)


def judge_sum(parts: "Iterable[JudgeStats]") -> "JudgeStats":
    """Several processes' (or compute steps') judge counts as one."""

    total = JudgeStats()
    for part in parts:
        total = _combined(total, part, 1)
    return total


def _combined(a: "JudgeStats", b: "JudgeStats", sign: int) -> "JudgeStats":
    """``a + sign * b`` field by field: counts add, an unknown cost (None) stays unknown, the first
    error is kept (of ``a``, else of ``b`` when adding; only a new one when subtracting)."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, str) or isinstance(y, str):
            values[f.name] = (x or y) if sign > 0 else (x if not y else "")
        elif x is None or y is None:
            values[f.name] = None
        elif isinstance(x, bool) or not isinstance(x, (int, float)) or not isinstance(y, (int, float)):
            values[f.name] = x  # not a count: kept as ``a`` has it
        elif isinstance(x, float) or isinstance(y, float):
            values[f.name] = round(x + sign * y, 6)
        else:
            values[f.name] = x + sign * y
    return type(a)(**values)


def judge_to_dict(stats: "JudgeStats | None") -> dict[str, Any] | None:
    """JSON-ready counts (what a Ray actor sends back)."""
    return dataclasses.asdict(stats) if stats is not None else None


def judge_from_dict(data: Mapping[str, Any] | None) -> "JudgeStats | None":
    """The counts :func:`judge_to_dict` made (fields this version does not know are left out)."""
    if data is None:
        return None

    known = {f.name for f in dataclasses.fields(JudgeStats)}
    return JudgeStats(**{k: v for k, v in data.items() if k in known})


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
    tokens, cost), summed over every process that computed; ``None`` without a judge."""

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
