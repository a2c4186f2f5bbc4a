"""Cached leaderboards, overall scores, per-sample values and comparisons for the pages, and which
backend produced the stored numbers. The statistics are :mod:`persobench.aggregate`'s; this module
only caches them per store state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from persobench.app.cache import cache_data, cache_resource
from persobench.app.loaders import manifests
from persobench.secrets import redact

if TYPE_CHECKING:  # pandas is imported inside the functions that need it
    import pandas as pd


def _metric_records(entry: Any) -> Mapping[str, Any]:
    """The per-metric provenance of one profile entry of ``extra["scores"]`` (both layouts)."""
    if not isinstance(entry, Mapping):
        return {}
    metrics = entry.get("metrics")
    if isinstance(metrics, Mapping):
        return metrics
    return {k: v for k, v in entry.items() if isinstance(v, Mapping) and "status" in v}


@cache_data(show_spinner=False, max_entries=4)
def metric_provenance(home: str, signature: str) -> "pd.DataFrame":
    """One row per (profile, metric, backend state) across the store's runs, with the run count.

    Columns: profile, metric, status (ok, degraded, unavailable), model_id, revision, backend,
    metric_version, reason, runs.
    """
    import pandas as pd

    counts: dict[tuple[str, ...], int] = {}
    for manifest in manifests(home, signature).values():
        scores = (manifest.get("extra") or {}).get("scores") or {}
        if not isinstance(scores, Mapping):
            continue
        for profile, entry in scores.items():
            for metric, record in _metric_records(entry).items():
                if not isinstance(record, Mapping):
                    continue
                key = (str(profile), str(metric), str(record.get("status") or ""),
                       str(record.get("model_id") or ""), str(record.get("revision_or_hash") or ""),
                       str(record.get("backend") or ""), str(record.get("metric_version") or ""),
                       redact(record.get("reason") or ""))
                counts[key] = counts.get(key, 0) + 1
    columns = ["profile", "metric", "status", "model_id", "revision", "backend", "metric_version", "reason", "runs"]
    return pd.DataFrame([(*k, n) for k, n in counts.items()], columns=columns)


def unavailable_metrics(provenance: "pd.DataFrame", profile: str | None) -> dict[str, str]:
    """metric -> why it has no number under ``profile`` (unavailable in every run that tried it)."""
    if provenance.empty or profile is None:
        return {}
    mine = provenance[provenance["profile"] == profile]
    result = {}
    for metric, group in mine.groupby("metric"):
        if (group["status"] == "unavailable").all():
            reasons = [r for r in group["reason"] if r]
            result[str(metric)] = reasons[0] if reasons else "no model available for it in this profile"
    return result


@cache_data(show_spinner=False)
def profile_slots(name: str) -> "pd.DataFrame":
    """The models a profile uses per slot (``offline``, ``standard``), without loading any."""
    import pandas as pd

    try:
        from persobench.metrics import get_profile

        described = get_profile(name).describe()
    except Exception as exc:  # noqa: BLE001
        return pd.DataFrame([{"slot": "?", "model": "", "source": "", "note": redact(str(exc))}])
    rows = []
    for slot, info in (described.get("slots") or {}).items():
        rows.append({"slot": slot, "model": info.get("model_id") or "", "source": info.get("source") or "",
                     "note": redact(info.get("unavailable_reason") or "")})
    return pd.DataFrame(rows, columns=["slot", "model", "source", "note"])


@cache_resource(show_spinner="Loading scores…", max_entries=3)
def results_frame(home: str, signature: str, profile: str) -> "pd.DataFrame":  # noqa: ARG001
    """``aggregate.load_results`` for one profile: shared, read-only (never modify the frame)."""
    from persobench.aggregate import load_results
    from persobench.store import RunStore

    return load_results(RunStore(home), profile=profile)


@cache_data(show_spinner=False, max_entries=4)
def available_profiles(home: str, signature: str) -> list[str]:  # noqa: ARG001
    from persobench.aggregate import available_profiles as _available
    from persobench.store import RunStore

    return _available(RunStore(home))


@cache_data(show_spinner="Aggregating…", max_entries=48)
def board_for(home: str, signature: str, profile: str, dataset: str, invalid: str, side_by_side: bool = False,
              all_samples: bool = False) -> "pd.DataFrame":
    """The leaderboards of one dataset (both modes, every protocol): one row per run and metric; the
    ``board`` column tells the boards apart (see :func:`persobench.aggregate.leaderboard`)."""
    from persobench.aggregate import leaderboard

    results = results_frame(home, signature, profile)
    return leaderboard(results, dataset=dataset, invalid=invalid, profile=profile, side_by_side=side_by_side,
                       all_samples=all_samples)


def board_choices(board: "pd.DataFrame", mode: str) -> list[str]:
    """The boards (protocol labels) of one mode, the paper protocol's first."""
    from persobench.protocol import paper_protocol

    names = sorted(set(board.loc[board["mode"] == mode, "board"]))
    paper = paper_protocol(mode).label
    return sorted(names, key=lambda name: (name != paper, name))


def overall_with_ci(home: str, signature: str, profile: str, dataset: str, invalid: str, side_by_side: bool = False,
                    all_samples: bool = False) -> "pd.DataFrame":
    """``aggregate.overall_table`` plus a bootstrap 95% CI of each overall score.

    The CI resamples the samples of the per-sample composite (the four per-sample components x100
    and the run's instructability, averaged), which has the overall score as its mean when every
    component is defined on the same samples.
    """
    return _overall_with_ci(home, signature, profile, dataset, invalid, side_by_side, all_samples)


@cache_data(show_spinner=False, max_entries=48)
def _overall_with_ci(home: str, signature: str, profile: str, dataset: str, invalid: str, side_by_side: bool,
                     all_samples: bool) -> "pd.DataFrame":
    import numpy as np

    from persobench import stats
    from persobench.aggregate import OVERALL_COMPONENTS, overall_table
    from persobench.metrics import METRICS

    board = board_for(home, signature, profile, dataset, invalid, side_by_side, all_samples)
    table = overall_table(board)
    for column in ("overall_ci_low", "overall_ci_high", "overall_paper_ci_low", "overall_paper_ci_high"):
        table[column] = np.nan
    if table.empty or table["overall"].isna().all():
        return table
    results = results_frame(home, signature, profile)
    rows = results[results["dataset"] == dataset]
    per_sample = list(OVERALL_COMPONENTS[:-1])
    instr = board[board["metric"] == "instructability"].set_index("run_id")["mean"]
    run_of = board.drop_duplicates(["mode", "model"]).set_index(["mode", "model"])["run_id"]
    for index, row in table.iterrows():
        if np.isnan(row["overall"]):
            continue
        run_id = run_of.get((row["mode"], row["model"]))
        mine = rows[(rows["run_id"] == run_id) & rows["metric"].isin(per_sample)]
        wide = mine.pivot_table(index="sample_id", columns="metric", values="value", aggfunc="first", dropna=False)
        status = rows[rows["run_id"] == run_id].drop_duplicates("sample_id").set_index("sample_id")["status"]
        if not all_samples:  # the samples the board compared (those every run of it answered)
            status = status[status.index.isin(_board_samples(rows, board, run_id))]
        wide = wide.reindex(index=status.index, columns=per_sample)
        bad = (status != "ok").to_numpy()
        for metric in per_sample:
            worst = METRICS[metric].worst_value
            values = wide[metric].to_numpy(dtype="float64")
            values[bad] = worst if invalid == "worst" and worst is not None else np.nan
            wide[metric] = values
        components = wide.to_numpy(dtype="float64") * 100.0
        i_value = float(instr.get(run_id, np.nan))
        composite = (components.sum(axis=1) + 100.0 * i_value) / 5.0
        composite_paper = (components.sum(axis=1) + i_value) / 5.0
        table.loc[index, ["overall_ci_low", "overall_ci_high"]] = stats.bootstrap_ci(composite)
        table.loc[index, ["overall_paper_ci_low", "overall_paper_ci_high"]] = stats.bootstrap_ci(composite_paper)
    return table


def _board_samples(rows: "pd.DataFrame", board: "pd.DataFrame", run_id: str) -> set:
    """Sample ids shared by every run on ``run_id``'s board."""
    mine = board[board["run_id"] == run_id].iloc[0]
    peers = set(board[(board["mode"] == mine["mode"]) & (board["board"] == mine["board"])]["run_id"])
    per_run = rows[rows["run_id"].isin(peers)].groupby("run_id")["sample_id"].agg(set)
    shared = set.intersection(*per_run) if len(per_run) else set()
    return shared or set(rows.loc[rows["run_id"] == run_id, "sample_id"])


@cache_data(show_spinner=False, max_entries=32)
def sample_values(home: str, signature: str, profile: str, dataset: str, mode: str, metric: str,
                  invalid: str) -> "pd.DataFrame":
    """Per-sample values (model, sample_id, value) of one metric, with the invalid-reply policy
    applied as the leaderboard does (worst value, or left out)."""
    import numpy as np

    from persobench.metrics import METRICS

    results = results_frame(home, signature, profile)
    rows = results[(results["dataset"] == dataset) & (results["mode"] == mode) & (results["metric"] == metric)]
    values = rows["value"].to_numpy(dtype="float64", copy=True)
    if metric != "response_time":
        bad = (rows["status"] != "ok").to_numpy()
        info = METRICS.get(metric)
        worst = info.worst_value if info is not None else None
        values[bad] = worst if invalid == "worst" and worst is not None else np.nan
    frame = rows[["model", "sample_id"]].assign(value=values)
    return frame.dropna(subset=["value"]).reset_index(drop=True)


@cache_data(show_spinner="Comparing…", max_entries=32)
def comparison_table(home: str, signature: str, profile: str, run_a: str, run_b: str, invalid: str,
                     metrics: tuple[str, ...]) -> tuple["pd.DataFrame", list[tuple[str, str]]]:
    """Paired tests of two runs for each metric: (table, [(metric, why it was skipped)])."""
    import pandas as pd

    from persobench.aggregate import compare_models

    results = results_frame(home, signature, profile)
    rows, skipped = [], []
    for metric in metrics:
        try:
            c = compare_models(results, run_a, run_b, metric, invalid=invalid)
        except ValueError as exc:
            skipped.append((metric, redact(str(exc))))
            continue
        rows.append({"metric": metric, "n": c.n, "mean A": c.mean_a, "mean B": c.mean_b, "A - B": c.mean_diff,
                     "CI low": c.ci_low, "CI high": c.ci_high, "t-test p": c.t_pvalue,
                     "Wilcoxon p": c.wilcoxon_pvalue, "bootstrap p": c.bootstrap_pvalue,
                     "A wins": c.wins, "ties": c.ties, "B wins": c.losses,
                     "better": "higher" if c.higher_is_better else "lower"})
    return pd.DataFrame(rows), skipped


@cache_data(show_spinner=False, max_entries=32)
def paired_sample_values(home: str, signature: str, profile: str, run_a: str, run_b: str, metric: str,
                         invalid: str) -> "pd.DataFrame":
    """sample_id, A, B, difference (A - B) of one metric on the samples both runs share."""
    import numpy as np

    from persobench.metrics import METRICS

    results = results_frame(home, signature, profile)
    info = METRICS.get(metric)
    worst = info.worst_value if info is not None else None
    columns = {}
    for name, run_id in (("A", run_a), ("B", run_b)):
        rows = results[(results["run_id"] == run_id) & (results["metric"] == metric)]
        values = rows["value"].to_numpy(dtype="float64", copy=True)
        if metric != "response_time":
            bad = (rows["status"] != "ok").to_numpy()
            values[bad] = worst if invalid == "worst" and worst is not None else np.nan
        columns[name] = dict(zip(rows["sample_id"].astype(str), values))
    import pandas as pd

    common = [i for i in columns["A"] if i in columns["B"]]
    frame = pd.DataFrame({"sample_id": common, "A": [columns["A"][i] for i in common],
                          "B": [columns["B"][i] for i in common]})
    frame["difference"] = frame["A"] - frame["B"]
    return frame.dropna(subset=["difference"]).reset_index(drop=True)
