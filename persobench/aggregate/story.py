"""The demo's story in one table: SmolLM2 as asked and with structured output beside both baselines,
across their protocols (the structured runs sit on a board of their own), with the valid share of
each run and one content metric.

Which runs are the demo's is read from their manifests (:func:`persobench.generation.demo.demo_runs`);
this module only aggregates them, with :func:`persobench.aggregate.leaderboard`'s numbers.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Mapping, cast

import pandas as pd

from persobench.aggregate.board import leaderboard
from persobench.aggregate.results import results_table
from persobench.generation.demo import DEMO_MODES, STORY_MODEL
from persobench.core.structured import structured_label

if TYPE_CHECKING:
    from persobench.aggregate.results import Results

STORY_COLUMNS = ["model", "baseline", "structured", "mode", "valid", "n", "valid_share", "mean", "protocol", "run_id"]
#: The content metric the story shows, the first one every demo run has a number for: BERTScore F1
#: in the offline profile the demo is scored with, lexical ones when only those were scored.
STORY_METRICS = ("bertscore_f1", "rougeL", "dist2")
#: Row order: the story (SmolLM2 plain, then structured), then the floor and the ceiling.
_ORDER = ((STORY_MODEL, False), (STORY_MODEL, True), ("baseline:persona-echo", False), ("baseline:reference", False))


@dataclasses.dataclass(frozen=True)
class DemoStory:
    """What the landing page shows of a demo store before any click."""

    table: pd.DataFrame
    """One row per demo run (columns :data:`STORY_COLUMNS`): model label (``+structured`` marked),
    whether it is a baseline, structured or not, mode, valid replies, samples, valid share (0-1) and
    the mean of :attr:`metric` with invalid replies scored worst (the paper's rule)."""
    metric: str
    """The content metric of the ``mean`` column."""
    sentence: str
    """What the demo shows, in one sentence with the measured valid counts."""


def demo_story(results: "Results | pd.DataFrame", runs: Mapping[tuple[str, bool, str], str], *,
               profile: str) -> DemoStory | None:
    """The story of the demo runs ``runs`` (``(model, structured, mode) -> run id``), or None when
    a SmolLM2 run has no scores in ``profile`` yet (the demo is still being prepared)."""
    frame = results_table(results)
    frame = frame[frame["run_id"].isin(list(runs.values()))]
    if frame.empty:
        return None
    board = leaderboard(frame, invalid="worst", profile=profile, all_samples=True, metric_status=())
    by_run = {run_id: rows.set_index("metric") for run_id, rows in board.groupby("run_id", sort=False)}
    means = {run_id: rows["mean"] for run_id, rows in by_run.items()}  # metric -> mean, per run
    story_runs = [run_id for (model, _, _), run_id in runs.items() if model == STORY_MODEL]
    if any(run_id not in by_run for run_id in story_runs):
        return None
    metric = next((m for m in STORY_METRICS if all(m in mean.index and pd.notna(mean[m])
                                                    for mean in means.values())), None)
    if metric is None:
        return None
    records = []
    for model, structured in _ORDER:
        for mode in DEMO_MODES:
            run_id = runs.get((model, structured, mode), "")
            rows = by_run.get(run_id)
            if rows is None:
                continue
            failures = cast("pd.Series", rows.loc["failure_ratio"])  # one row per metric: a label gives a row
            n = int(failures["n"])
            valid = n - round(float(failures["mean"]) * n)
            records.append({"model": structured_label(model, structured), "baseline": model.startswith("baseline:"),
                            "structured": structured, "mode": mode, "valid": valid, "n": n,
                            "valid_share": valid / n if n else float("nan"), "mean": float(means[run_id][metric]),
                            "protocol": str(failures["protocol"]), "run_id": runs[(model, structured, mode)]})
    table = pd.DataFrame(records, columns=STORY_COLUMNS)
    return DemoStory(table, metric, _sentence(table))


def _sentence(table: pd.DataFrame) -> str:
    def valid(structured: bool) -> str:
        rows = table[(table["model"] == structured_label(STORY_MODEL, structured))]
        return f"{int(rows['valid'].sum())} of its {int(rows['n'].sum())} replies"

    return (f"The demo asks the 135M-parameter SmolLM2 for a reply in JSON: as asked, {valid(False)} are valid "
            f"(an invalid reply scores the worst value), with structured output, which guarantees the reply's "
            f"JSON shape, {valid(True)} are, and the two baselines mark the floor (a persona sentence as the "
            "reply) and the ceiling (the gold reply).")
