"""Per-instance numbers for the side-by-side view of one dialogue (HELM's per-instance view): each
run's value of every metric on one sample, with the invalid-reply rule the boards apply, and the
dialogues where the runs differ most on a metric. Part of :mod:`persobench.aggregate` (not
re-exported); the values are the ones :func:`persobench.aggregate.leaderboard` averages.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from persobench.aggregate.results import OK, Results, results_table, score_invalid

#: Columns of :func:`instance_values`.
INSTANCE_COLUMNS = ["run_id", "sample_id", "metric", "value", "scored_worst"]
#: Columns of :func:`widest_spread`.
SPREAD_COLUMNS = ["sample_id", "spread", "low", "high", "runs"]


def _rows(results: "Results | pd.DataFrame", run_ids: Sequence[str], sample_ids: Sequence[str] | None,
          metric: str | None = None) -> pd.DataFrame:
    frame = results_table(results)
    keep = frame["run_id"].isin(list(run_ids))
    if sample_ids is not None:
        keep &= frame["sample_id"].isin(list(sample_ids))
    if metric is not None:
        keep &= frame["metric"] == metric
    return frame[keep]


def _with_policy(rows: pd.DataFrame, invalid: str) -> pd.DataFrame:
    """``rows`` (results rows) as INSTANCE_COLUMNS: each metric's values with the invalid-reply policy
    applied, ``scored_worst`` True where an invalid reply took the metric's worst value."""
    out = []
    for metric, group in rows.groupby("metric", sort=False, observed=True):
        ok = (group["status"] == OK).to_numpy()
        values = score_invalid(group["value"].to_numpy(dtype="float64"), ok, str(metric), invalid)
        worst = ~ok & ~np.isnan(values) if metric != "response_time" else np.zeros(len(group), dtype=bool)
        out.append(pd.DataFrame({"run_id": group["run_id"].astype(str).to_numpy(),
                                 "sample_id": group["sample_id"].astype(str).to_numpy(),
                                 "metric": str(metric), "value": values, "scored_worst": worst}))
    if not out:
        return pd.DataFrame(columns=INSTANCE_COLUMNS)
    return pd.concat(out, ignore_index=True)[INSTANCE_COLUMNS]


def instance_values(results: "Results | pd.DataFrame", run_ids: Sequence[str], sample_ids: Sequence[str] | None = None,
                    *, metric: str | None = None, invalid: str = "worst") -> pd.DataFrame:
    """Every metric's (or ``metric``'s) value of each run on the given samples (every sample: None), as
    the board averages it: an invalid reply takes the metric's worst value under ``invalid="worst"``
    (``scored_worst`` says so) or no value under ``"exclude"``. Columns :data:`INSTANCE_COLUMNS`; runs
    and samples without a row are absent."""
    return _with_policy(_rows(results, run_ids, sample_ids, metric), invalid)


def widest_spread(values: pd.DataFrame, run_ids: Sequence[str], metric: str) -> pd.DataFrame:
    """The samples where the runs differ most on ``metric``, from :func:`instance_values` (the board's
    invalid-reply rule already applied): per sample with a value from at least two of ``run_ids``, the
    spread (highest minus lowest value), both values and how many runs have one; widest first, then in
    the values' order. Columns :data:`SPREAD_COLUMNS`."""
    rows = values[values["run_id"].isin(list(run_ids)) & (values["metric"] == metric)].dropna(subset=["value"])
    if rows.empty:
        return pd.DataFrame(columns=SPREAD_COLUMNS)
    grouped = rows.groupby("sample_id", sort=False)["value"]
    spread = pd.DataFrame({"low": grouped.min(), "high": grouped.max(), "runs": grouped.size()})
    spread = spread[spread["runs"] >= 2]
    spread["spread"] = spread["high"] - spread["low"]
    spread = spread.reset_index().sort_values("spread", ascending=False, kind="stable")
    return spread[SPREAD_COLUMNS].reset_index(drop=True)
