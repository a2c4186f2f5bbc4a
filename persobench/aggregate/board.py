"""The leaderboard: one row per run x metric with mean, std, n and a bootstrap CI, boards split by
protocol, runs compared on common samples. Part of :mod:`persobench.aggregate`."""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from persobench.aggregate import stats
from persobench.aggregate.results import (INVALID_POLICIES, OK, Results, _metric_order, results_table, score_invalid,
                                         worst_value)
from persobench.errors import ConfigurationError

BOARD_COLUMNS = [
    "dataset", "mode", "model", "metric", "mean", "std", "n", "ci_low", "ci_high", "profile",
    "run_id", "source", "invalid", "status", "reason", "model_id", "protocol", "board", "run_n", "sample_set",
]
#: The ``board`` value of a board that puts several protocols side by side (labels carry them).
SIDE_BY_SIDE = "side by side"


# --- leaderboard -------------------------------------------------------------------------------

def _status_lookup(results: "Results | pd.DataFrame", metric_status: pd.DataFrame | Iterable[Mapping] | None) -> dict:
    if metric_status is None and isinstance(results, Results):
        metric_status = results.metric_status
    if metric_status is None:
        return {}
    rows = metric_status.to_dict("records") if isinstance(metric_status, pd.DataFrame) else list(metric_status)
    return {(r["run_id"], r["metric"]): r for r in rows}


def _board_frame(results: pd.DataFrame, *, dataset: str | None, mode: str | None, profile: str,
                 side_by_side: bool) -> pd.DataFrame:
    """The result rows of one profile, dataset and mode, each with the ``board`` it is shown on."""
    frame = results.copy(deep=False)  # the shared table is never modified
    if "profile" in frame.columns and len(frame):
        frame = frame[frame["profile"] == profile]
    if dataset is not None:
        frame = frame[frame["dataset"] == dataset]
    if mode is not None:
        frame = frame[frame["mode"] == mode]
    if "protocol" not in frame.columns:  # results made before protocols: one unnamed protocol
        frame = frame.assign(protocol="?")
    return frame.assign(board=SIDE_BY_SIDE if side_by_side else frame["protocol"])


def leaderboard(
    results: "Results | pd.DataFrame", *, dataset: str | None = None, mode: str | None = None, invalid: str = "worst",
    profile: str = "offline", metric_status: pd.DataFrame | Iterable[Mapping] | None = None,
    level: float = stats.DEFAULT_LEVEL, n_resamples: int = stats.DEFAULT_RESAMPLES, seed: int = 0,
    side_by_side: bool = False, all_samples: bool = False,
) -> pd.DataFrame:
    """Aggregate per-sample results into one row per run and metric (columns :data:`BOARD_COLUMNS`).

    A board is one dataset, mode and protocol: ``board`` is the protocol label, so runs made under
    different protocols are never ranked together. ``side_by_side=True`` puts every protocol of a
    dataset and mode on one board (``board`` = :data:`SIDE_BY_SIDE`) with the protocol in each row's
    ``model`` label. Runs of one board are compared on the sample ids they all share (``n`` counts
    those, ``run_n`` the run's own samples); ``all_samples=True`` aggregates each run over all of its
    samples (when runs share no sample id at all, that is what happens, and ``run_n`` shows it).

    ``invalid``: ``"worst"`` scores invalid replies with each metric's worst value (the paper);
    ``"exclude"`` leaves them out (``n`` then counts valid replies only). ``metric_status`` (default:
    ``results.metric_status`` of a :class:`Results`) adds each metric's provenance and a row with NaN numbers for
    metrics that are unavailable in the profile, with the reason.
    """
    if invalid not in INVALID_POLICIES:
        raise ConfigurationError(f"unknown invalid-reply policy {invalid!r}; expected one of {', '.join(INVALID_POLICIES)}")
    frame = _board_frame(results_table(results), dataset=dataset, mode=mode, profile=profile,
                         side_by_side=side_by_side)
    run_sizes = frame.groupby("run_id", sort=False)["sample_id"].nunique().to_dict() if len(frame) else {}
    if not all_samples:
        frame = _common_samples(frame)
    sample_sets = _disjoint_sample_sets(frame)
    provenance = _status_lookup(results, metric_status)
    order = {m: i for i, m in enumerate(_metric_order())}
    rows: list[dict[str, Any]] = []
    # Work on integer codes and numpy arrays: a pandas groupby/pivot per run is slow with many runs.
    run_codes, run_names = pd.factorize(frame["run_id"], sort=True)
    sample_codes, _ = pd.factorize(frame["sample_id"])
    metric_codes, metric_names = pd.factorize(frame["metric"])
    all_values = frame["value"].to_numpy(dtype="float64")
    all_ok = (frame["status"] == OK).to_numpy()
    positions_by_run = pd.Series(np.arange(len(frame))).groupby(run_codes).indices if len(frame) else {}
    meta = frame[["dataset", "mode", "model", "source", "protocol", "board"]]
    for code, run_id in enumerate(run_names):
        pos = positions_by_run[code]
        first = meta.iloc[int(pos[0])]
        label = f"{first['model']} ({first['protocol']})" if side_by_side else first["model"]
        base = {"dataset": first["dataset"], "mode": first["mode"], "model": label, "profile": profile,
                "run_id": run_id, "source": first["source"], "invalid": invalid, "protocol": first["protocol"],
                "board": first["board"], "run_n": int(run_sizes.get(run_id, 0)),
                "sample_set": sample_sets.get(run_id, "")}
        samp = sample_codes[pos]
        uniq, first_index, row_of = np.unique(samp, return_index=True, return_inverse=True)
        order_of = np.argsort(np.argsort(first_index, kind="stable"), kind="stable")  # keep run order
        row_of = order_of[row_of]
        n_total = len(uniq)
        ok_mask = np.zeros(n_total, dtype=bool)
        ok_mask[row_of] = all_ok[pos]
        n_bad = int((~ok_mask).sum())
        run_metrics, col_of = np.unique(metric_codes[pos], return_inverse=True)
        matrix = np.full((n_total, len(run_metrics)), np.nan)
        matrix[row_of, col_of] = all_values[pos]
        wide = {str(metric_names[m]): matrix[:, j] for j, m in enumerate(run_metrics)}
        columns: dict[str, np.ndarray] = {}
        notes: dict[str, str] = {}
        for metric in sorted(wide, key=lambda name: (order.get(name, len(order)), name)):
            columns[metric] = score_invalid(wide[metric], ok_mask, metric, invalid)
            if invalid == "worst" and metric != "response_time" and worst_value(metric) is None:
                notes[metric] = "no worst value known: invalid replies left out"
        cis = _bootstrap_columns(columns, level=level, n_resamples=n_resamples, seed=seed)
        for metric, values in columns.items():
            mean, std, n = stats.describe(values)
            low, high = cis.get(metric, (math.nan, math.nan))
            prov = provenance.get((run_id, metric), {})
            rows.append({**base, "metric": metric, "mean": mean, "std": std, "n": n, "ci_low": low, "ci_high": high,
                         "status": prov.get("status") or OK, "reason": notes.get(metric, prov.get("reason") or ""),
                         "model_id": prov.get("model_id") or ""})
        low, high = stats.wilson_interval(n_bad, n_total, level=level)
        rows.append({**base, "metric": "failure_ratio", "mean": n_bad / n_total if n_total else math.nan,
                     "std": math.nan, "n": n_total, "ci_low": low, "ci_high": high, "status": OK,
                     "reason": "", "model_id": ""})
        for (r_id, metric), prov in provenance.items():
            if r_id == run_id and metric not in columns and prov.get("status") == "unavailable":
                rows.append({**base, "metric": metric, "mean": math.nan, "std": math.nan, "n": 0,
                             "ci_low": math.nan, "ci_high": math.nan, "status": "unavailable",
                             "reason": prov.get("reason") or "", "model_id": prov.get("model_id") or ""})
    board = pd.DataFrame(rows, columns=BOARD_COLUMNS)
    board = _add_instructability(board)
    if len(board):
        board["_order"] = board["metric"].map(lambda m: order.get(m, len(order)))
        board = board.sort_values(["dataset", "mode", "board", "model", "_order", "metric"]).drop(columns="_order")
    board["n"] = board["n"].astype("int64")
    board["run_n"] = board["run_n"].astype("int64")
    return board.reset_index(drop=True)


def _common_samples(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows of each board restricted to the sample ids every run of that board answered.

    A board whose runs share no sample id is left whole (nothing could be compared otherwise);
    its rows' ``n`` then differ from one another and the display says so.
    """
    if frame.empty:
        return frame
    keys = ["dataset", "mode", "board"]
    pairs = frame[keys + ["run_id", "sample_id"]].drop_duplicates(["run_id", "sample_id"])
    runs_per_board = pairs.groupby(keys, sort=False)["run_id"].nunique()
    shared = pairs.groupby(keys + ["sample_id"], sort=False)["run_id"].nunique()
    # pandas-stubs refuse a level name for droplevel and an array for eq, both of which pandas takes
    shared = shared[shared.eq(runs_per_board.reindex(shared.index.droplevel("sample_id")).to_numpy())]  # type: ignore[arg-type]
    largest = pairs.groupby(keys + ["run_id"], sort=False).size().groupby(level=keys, sort=False).max()
    common_n = shared.groupby(level=keys, sort=False).size()
    keep = [key for key, n in zip(common_n.index, common_n) if largest[key] > n]  # a run has samples the others lack
    if not keep:
        return frame
    restricted = pd.MultiIndex.from_tuples(keep, names=keys)
    board_key = pd.MultiIndex.from_frame(frame[keys])
    in_restricted = board_key.isin(restricted)
    sample_key = pd.MultiIndex.from_frame(frame[keys + ["sample_id"]])
    return frame[~in_restricted | sample_key.isin(shared.index)]


def _disjoint_sample_sets(frame: pd.DataFrame) -> dict[str, str]:
    """run id -> ``"S1"``, ``"S2"`` ... for the runs of boards where no sample id is common to all runs
    (each row is then over its own samples): runs with the same label answered the same sample ids.
    Runs of every other board get no label."""
    if frame.empty:
        return {}
    keys = ["dataset", "mode", "board"]
    pairs = frame[keys + ["run_id", "sample_id"]].drop_duplicates(["run_id", "sample_id"])
    labels: dict[str, str] = {}
    for _, group in pairs.groupby(keys, sort=False, observed=True):
        by_run = {run: frozenset(ids) for run, ids in group.groupby("run_id", sort=True, observed=True)["sample_id"]}
        if len(by_run) < 2 or frozenset.intersection(*by_run.values()):
            continue
        names: dict[frozenset, str] = {}
        for run, ids in sorted(by_run.items(), key=lambda item: (-len(item[1]), item[0])):
            labels[str(run)] = names.setdefault(ids, f"S{len(names) + 1}")
    return labels


def _bootstrap_columns(columns: Mapping[str, np.ndarray], *, level: float, n_resamples: int, seed: int) -> dict:
    """Bootstrap CIs of every column's mean; columns with the same missing rows share resamples."""
    groups: dict[bytes, list[str]] = {}
    for metric, values in columns.items():
        groups.setdefault(np.isnan(values).tobytes(), []).append(metric)
    out = {}
    for names in groups.values():
        keep = ~np.isnan(columns[names[0]])
        matrix = np.column_stack([columns[name][keep] for name in names])
        low, high = stats.bootstrap_mean_cis(matrix, level=level, n_resamples=n_resamples, seed=seed)
        out.update({name: (float(lo), float(hi)) for name, lo, hi in zip(names, low, high)})
    return out


def _add_instructability(board: pd.DataFrame) -> pd.DataFrame:
    failures = board[board["metric"] == "failure_ratio"]
    extra = []
    for _, group in failures.groupby(["dataset", "mode", "board"], sort=False):
        worst = group["mean"].max()
        for _, row in group.iterrows():
            value = (worst - row["mean"]) / worst if worst > 0 else 1.0
            reason = ("no compared model had an invalid reply" if not worst > 0 else
                      f"relative to the highest failure ratio among {len(group)} compared model(s)")
            extra.append({**row.to_dict(), "metric": "instructability", "mean": value, "std": math.nan,
                          "ci_low": math.nan, "ci_high": math.nan, "reason": reason})
    if not extra:
        return board
    return pd.concat([board, pd.DataFrame(extra, columns=BOARD_COLUMNS)], ignore_index=True)
