"""What a board says, in words: the landing page's one-sentence finding, each metric's direction
and meaning for a column header, and how a failure status reads. Part of :mod:`persobench.aggregate`
(not re-exported); composed from a ranked board (:func:`persobench.aggregate.model_ranking`) and
counts, never from untrusted text other than model labels, which the page escapes.
"""

from __future__ import annotations

import math
from typing import Mapping

import pandas as pd

from persobench.metrics import METRICS

#: How each failure status reads in a sentence (plural: "mostly truncated replies").
STATUS_PHRASES = {
    "truncated": "truncated (it ended before a complete JSON reply)",
    "invalid_json": "invalid JSON",
    "missing_field": "JSON without a \"response\" field",
    "empty": "an empty response",
    "refused": "refusals",
    "api_error": "API errors",
}
#: The overall scores' own directions and meanings (they are not metrics of the registry).
OVERALL_MEANINGS = {
    "overall": "Mean of ue_score, persona_distance, unieval_groundedness, c_score and instructability, all x100.",
    "overall_paper": "As the paper's ranking table: instructability added unscaled (0-1), so it barely counts.",
}
#: How ranks with "=" read: the legend under every ranking.
TIES_LEGEND = ("Rank: 1 + the number of rows whose 95% CI lies entirely on the better side of this row's CI, so rows "
               "that cannot be told apart share a rank, marked \"=\" (1=, 1=, 3: two rows tie for first, and the "
               "third is behind both). \"CI overlaps with\" names the rows each one cannot be told apart from.")


def higher_is_better(metric: str) -> bool:
    """The direction of ``metric`` (the overall scores: higher)."""
    info = METRICS.get(metric)
    return True if info is None else bool(info.higher_is_better)


def arrow(metric: str) -> str:
    """↑ when higher is better, ↓ when lower is."""
    return "↑" if higher_is_better(metric) else "↓"


def metric_help(metric: str) -> str:
    """A column header's help: direction and the one-line meaning of the metric."""
    direction = "higher is better" if higher_is_better(metric) else "lower is better"
    info = METRICS.get(metric)
    meaning = OVERALL_MEANINGS.get(metric) or (info.description if info is not None else "")
    return f"{arrow(metric)} {direction}. {meaning}".strip()


def _number(metric: str, value: float) -> str:
    if metric == "response_time":
        return f"{value:.2f} s"
    if metric == "failure_ratio":
        return f"{value:.1%}"
    return f"{value:.2f}" if metric in OVERALL_MEANINGS else f"{value:.3f}"


def _is_baseline(label: str) -> bool:
    return str(label).startswith("baseline:")


def how_it_fails(statuses: Mapping[str, int]) -> str:
    """``mostly truncated (...) (81% of them)`` / ``all of them empty ...`` from a run's reply
    statuses (counts; ``ok`` ignored); "" when it has no invalid reply."""
    failed = {status: int(n) for status, n in statuses.items() if status != "ok" and int(n) > 0}
    total = sum(failed.values())
    if not total:
        return ""
    status, count = max(failed.items(), key=lambda item: (item[1], item[0]))
    phrase = STATUS_PHRASES.get(status, status.replace("_", " "))
    if count == total:
        return f"all of them {phrase}"
    return f"mostly {phrase} ({count / total:.0%} of them)"


def board_finding(ranked: pd.DataFrame, rank_by: str, statuses: Mapping[str, Mapping[str, int]] | None = None) -> str:
    """One sentence: who leads the board by ``rank_by`` with the value's 95% CI (and who ties with it),
    and which model fails most, how often and how. ``ranked``: :func:`persobench.aggregate.model_ranking`
    (best first); ``statuses``: model label -> reply status counts of its run. Baselines (the ceiling
    and the floor) are not models: neither leads nor fails most. "" without a ranked model."""
    models = ranked[~ranked["model"].map(_is_baseline) & ranked["value"].notna()]
    if models.empty:
        return ""
    leader = models.iloc[0]
    tied = [str(m) for m, r in zip(models["model"].iloc[1:], models["rank"].iloc[1:]) if r == leader["rank"]]
    direction = "higher is better" if higher_is_better(rank_by) else "lower is better"
    alone = len(models) == 1  # beside the baselines only: it leads nothing
    verb = ", the only model on this board, scores" if alone else " leads with"
    text = f"By {rank_by} ({direction}), {leader['model']}{verb} {_number(rank_by, float(leader['value']))}"
    low, high = leader.get("value_ci_low"), leader.get("value_ci_high")
    if low is not None and high is not None and not (math.isnan(low) or math.isnan(high)):
        text += f" (95% CI {_number(rank_by, float(low))} to {_number(rank_by, float(high))})"
    if tied:
        shown = ", ".join(tied[:3]) + (f" and {len(tied) - 3} more" if len(tied) > 3 else "")
        text += f", tied with {shown} (their 95% CIs overlap)"
    text += ". "
    failing = ranked[~ranked["model"].map(_is_baseline) & ranked["failure_ratio"].notna()]
    if failing.empty:
        return text.strip()
    worst = failing.iloc[int(failing["failure_ratio"].to_numpy().argmax())]  # the first largest, as idxmax
    ratio = float(worst["failure_ratio"])
    if ratio <= 0:
        return text + ("It produced no invalid reply." if alone else "No model produced an invalid reply.")
    n = int(worst["n"]) if pd.notna(worst.get("n")) else 0
    text += f"{worst['model']} fails{'' if alone else ' most'}: {ratio:.1%} of its {n:,} replies are invalid"
    how = how_it_fails((statuses or {}).get(str(worst["model"]), {}))
    return text + (f", {how}." if how else ".")
