"""Numbers built on a board: the overall score with its CI, the radar's aspects, ranks with ties,
and paired comparisons between two runs. Part of :mod:`persobench.aggregate`; the paper's own
published ranking and its typed inputs are :mod:`persobench.aggregate.published_ranking`."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence, cast

import numpy as np
import pandas as pd

from persobench.aggregate import stats
from persobench.aggregate.board import _board_frame, _common_samples, leaderboard
from persobench.aggregate.results import (INVALID_POLICIES, OK, Results, _info, label_stem, results_table,
                                          scaled_worst_to_best, score_invalid, worst_and_best)
from persobench.errors import ConfigurationError
from persobench.metrics import METRICS
from persobench.prompts.protocol import Protocol
from persobench.core.structured import LABEL_SUFFIX

OVERALL_COMPONENTS = ("ue_score", "persona_distance", "unieval_groundedness", "c_score", "instructability")
#: The paper's radar chart: aspect -> metric.
RADAR_ASPECTS = {
    "fluency": "bertscore_f1",
    "diversity": "dist2",
    "coherence": "ue_score",
    "persona_coverage": "persona_distance",
    "groundedness": "unieval_groundedness",
    "persona_consistency": "c_score",
}


# --- overall score and radar -------------------------------------------------------------------

def _board_keys(board: pd.DataFrame) -> list[str]:
    """Columns that name one displayed board (``board`` is absent from boards made elsewhere)."""
    return ["dataset", "mode", "board"] if "board" in board.columns else ["dataset", "mode"]


def _means(board: pd.DataFrame) -> pd.DataFrame:
    keys = _board_keys(board) + ["model", "profile"]
    unique = board.drop_duplicates(keys + ["metric"])
    return unique.set_index(keys + ["metric"])["mean"].unstack("metric")


def overall_table(board: pd.DataFrame) -> pd.DataFrame:
    """One row per dataset, mode and model: the overall score, the paper's variant and ranks.

    Columns: dataset, mode, model, profile, the five components (means), ``overall`` (mean of the
    five, all x100), ``overall_paper`` (instructability unscaled, as the paper's ranking table),
    ``rank``/``rank_paper`` (1 = best within dataset, mode and profile; missing when the score is)
    and ``reason`` (why the score is missing, empty otherwise). Boards from :func:`leaderboard`
    also carry ``board`` (the protocol), and ranks are within it.
    """
    keys = _board_keys(board) + ["model", "profile"]
    columns = keys + list(OVERALL_COMPONENTS) + ["overall", "overall_paper", "rank", "rank_paper", "reason"]
    if board.empty:
        return pd.DataFrame(columns=columns)
    means = _means(board)
    reasons = {(*(r[k] for k in keys), r["metric"]): r["reason"]
               for r in board[board["status"] == "unavailable"].to_dict("records")}
    rows = []
    for label, series in means.iterrows():
        key = cast("tuple[Any, ...]", label)  # means is indexed by (board keys..., model, profile)
        values = {m: float(series[m]) if m in series.index and not pd.isna(series[m]) else math.nan
                  for m in OVERALL_COMPONENTS}
        missing = [m for m, v in values.items() if math.isnan(v)]
        row = dict(zip(keys, key), **values)
        if missing:
            parts = []
            for m in missing:
                why = reasons.get((*key, m))
                parts.append(f"{m} ({why})" if why else f"{m} (not scored in profile {key[-1]})")
            row.update(overall=math.nan, overall_paper=math.nan, reason="missing " + "; ".join(parts))
        else:
            scaled = [100.0 * values[m] for m in OVERALL_COMPONENTS]
            row["overall"] = float(np.mean(scaled))
            row["overall_paper"] = float(np.mean(scaled[:-1] + [values["instructability"]]))
            row["reason"] = ""
        rows.append(row)
    table = pd.DataFrame(rows)
    ranked_within = keys[:-2] + ["profile"]
    group = table.groupby(ranked_within)
    table["rank"] = group["overall"].rank(ascending=False, method="min").astype("Int64")
    table["rank_paper"] = group["overall_paper"].rank(ascending=False, method="min").astype("Int64")
    table = table.sort_values(ranked_within + ["rank", "model"], na_position="last")
    return table[columns].reset_index(drop=True)


OVERALL_CI_COLUMNS = ("overall_ci_low", "overall_ci_high", "overall_paper_ci_low", "overall_paper_ci_high")


def overall_with_ci(
    results: "Results | pd.DataFrame", *, dataset: str | None = None, mode: str | None = None, invalid: str = "worst",
    profile: str = "offline", side_by_side: bool = False, all_samples: bool = False,
    board: pd.DataFrame | None = None, level: float = stats.DEFAULT_LEVEL,
    n_resamples: int = stats.DEFAULT_RESAMPLES, seed: int = 0,
) -> pd.DataFrame:
    """:func:`overall_table` plus a percentile bootstrap CI of each overall score.

    Adds :data:`OVERALL_CI_COLUMNS`. The CI resamples the samples the board compared (the same
    selection as :func:`leaderboard` with these arguments; pass its result as ``board`` to skip
    computing it again) of the per-sample composite: the four per-sample components x100, invalid
    policy applied, and the run's instructability, averaged. Its mean is the overall score when every
    component is defined on the same samples. NaN where the overall score is.
    """
    if board is None:  # given the Results, the board keeps their metric provenance
        board = leaderboard(results, dataset=dataset, mode=mode, invalid=invalid, profile=profile,
                            side_by_side=side_by_side, all_samples=all_samples, level=level,
                            n_resamples=n_resamples, seed=seed)
    table = overall_table(board)
    for column in OVERALL_CI_COLUMNS:
        table[column] = np.nan
    if table.empty or table["overall"].isna().all():
        return table
    frame = _board_frame(results_table(results), dataset=dataset, mode=mode, profile=profile,
                         side_by_side=side_by_side)
    if not all_samples:
        frame = _common_samples(frame)
    keys = [k for k in _board_keys(board) if k in table.columns] + ["model", "profile"]
    run_of = board.drop_duplicates(keys).set_index(keys)["run_id"]
    instructability = board[board["metric"] == "instructability"].drop_duplicates("run_id").set_index("run_id")["mean"]
    per_sample = list(OVERALL_COMPONENTS[:-1])
    for index, row in table.iterrows():
        if np.isnan(row["overall"]):
            continue
        run_id = run_of.get(tuple(row[k] for k in keys))
        rows = frame[frame["run_id"] == run_id]
        status = rows.drop_duplicates("sample_id").set_index("sample_id")["status"]
        wide = rows[rows["metric"].isin(per_sample)].pivot_table(
            index="sample_id", columns="metric", values="value", aggfunc="first", dropna=False)
        wide = wide.reindex(index=status.index, columns=per_sample)
        ok = (status == OK).to_numpy()
        components = np.column_stack([score_invalid(wide[m], ok, m, invalid) for m in per_sample]) * 100.0
        value = float(instructability.get(run_id, np.nan))
        composite = (components.sum(axis=1) + 100.0 * value) / 5.0
        composite_paper = (components.sum(axis=1) + value) / 5.0
        ci: dict[str, Any] = dict(level=level, n_resamples=n_resamples, seed=seed)
        at = cast("int", index)  # table has a RangeIndex
        table.loc[at, ["overall_ci_low", "overall_ci_high"]] = stats.bootstrap_ci(composite, **ci)
        table.loc[at, ["overall_paper_ci_low", "overall_paper_ci_high"]] = stats.bootstrap_ci(composite_paper, **ci)
    return table


def radar_aspects(board: pd.DataFrame, *, normalize: bool = False,
                  aspects: Mapping[str, str] | None = None) -> pd.DataFrame:
    """The paper's radar aspects per dataset, mode and model (NaN when the metric is unavailable).

    Aspects: ``aspects`` (axis name -> metric), default :data:`RADAR_ASPECTS`. ``normalize=True``
    puts each metric's mean on [0, 1] from its worst value (what an invalid reply scores: 0, -1 for
    ``c_score``) to its best (:func:`persobench.aggregate.results.scaled_worst_to_best`), so the axes
    are comparable and a model with no valid reply sits at the centre on every axis.
    """
    aspects = dict(RADAR_ASPECTS if aspects is None else aspects)
    keys = _board_keys(board) + ["model", "profile"]
    if board.empty:
        return pd.DataFrame(columns=keys + list(aspects))
    means = _means(board)
    out = means.reset_index()[keys].copy()
    for aspect, metric in aspects.items():
        values = means[metric].to_numpy(dtype="float64") if metric in means.columns else np.full(len(means), np.nan)
        out[aspect] = scaled_worst_to_best(metric, values) if normalize else values
    return out.reset_index(drop=True)


def radar_metrics(board: pd.DataFrame) -> dict[str, str]:
    """The board's per-sample metrics that have a number and a worst-to-best scale, in the registry's
    order, as radar axes (metric -> metric): the radar of a profile that lacks the paper's aspects
    (the lexical metrics of an imported store)."""
    present = set(board.loc[board["mean"].notna() & (board["status"] != "unavailable"), "metric"])
    return {m: m for m in METRICS if m in present and METRICS[m].level == "sample" and worst_and_best(m) is not None}


def rank_with_ties(frame: pd.DataFrame, value: str, low: str, high: str, *, higher_is_better: bool) -> pd.DataFrame:
    """Rank rows by ``value`` and show ties where confidence intervals overlap.

    ``rank`` is 1 + the number of rows whose CI lies entirely on the better side of this row's CI
    (so rows that cannot be told apart share a rank, marked with "="); ``overlaps`` lists the other
    rows whose CI overlaps this one. Rows without a value are unranked.
    """
    frame = frame.copy()
    values = frame[value].to_numpy(dtype="float64")
    lows = frame[low].to_numpy(dtype="float64")
    highs = frame[high].to_numpy(dtype="float64")
    # Without a CI (a single sample, or a run-level number) a row's interval is its value.
    lows = np.where(np.isnan(lows), values, lows)
    highs = np.where(np.isnan(highs), values, highs)
    labels = frame["model"].astype(str).tolist()
    ranks: list[str] = []
    overlaps: list[str] = []
    numeric: list[float] = []
    for i in range(len(frame)):
        if np.isnan(values[i]):
            ranks.append("–")
            overlaps.append("")
            numeric.append(np.inf)
            continue
        valid = ~np.isnan(values)
        if higher_is_better:
            better = valid & (lows > highs[i])
        else:
            better = valid & (highs < lows[i])
        rank = 1 + int(better.sum())
        overlap = [labels[j] for j in range(len(frame)) if j != i and valid[j]
                   and not (lows[j] > highs[i] or highs[j] < lows[i])]
        numeric.append(rank)
        ranks.append(str(rank))
        overlaps.append(", ".join(overlap))
    counts: dict[str, int] = {}
    for r in ranks:
        counts[r] = counts.get(r, 0) + 1
    frame["rank"] = [f"{r}=" if r != "–" and counts[r] > 1 else r for r in ranks]
    frame["overlaps"] = overlaps
    frame["_rank"] = numeric
    frame["_value"] = -values if higher_is_better else values
    frame = frame.sort_values(["_rank", "_value"], na_position="last").drop(columns=["_rank", "_value"])
    return frame.reset_index(drop=True)


def model_ranking(board: pd.DataFrame, overall: pd.DataFrame, rank_by: str,
                  models: Sequence[str] | None = None) -> pd.DataFrame:
    """The models of one board (one dataset, mode and profile) ranked by ``rank_by``, with ties.

    ``rank_by`` is ``"overall"``, ``"overall_paper"`` (from ``overall``, a :func:`overall_with_ci`
    table) or a metric of the board. Columns: model, value, value_ci_low, value_ci_high (the ranking
    number and its 95% CI), n, failure_ratio, instructability, response_time, the overall scores with
    their CIs, then ``rank`` and ``overlaps`` from :func:`rank_with_ties`; best first.
    """
    models = list(models) if models is not None else sorted(board["model"].unique())
    summary = pd.DataFrame({"model": models})

    def by_model(metric: str, column: str = "mean") -> pd.Series:
        rows = board[board["metric"] == metric].drop_duplicates("model").set_index("model")
        return summary["model"].map(rows[column]) if len(rows) else pd.Series(math.nan, index=summary.index)

    by_overall = overall.drop_duplicates("model").set_index("model")
    for column in ("overall", "overall_paper", "overall_ci_low", "overall_ci_high",
                   "overall_paper_ci_low", "overall_paper_ci_high"):
        summary[column] = summary["model"].map(by_overall[column]) if column in by_overall.columns else math.nan
    summary["n"] = by_model("failure_ratio", "n")
    for metric in ("failure_ratio", "instructability", "response_time"):
        summary[metric] = by_model(metric)
    if rank_by in ("overall", "overall_paper"):
        summary["value"] = summary[rank_by]
        summary["value_ci_low"], summary["value_ci_high"] = summary[f"{rank_by}_ci_low"], summary[f"{rank_by}_ci_high"]
        higher = True
    else:
        summary["value"] = by_model(rank_by)
        summary["value_ci_low"], summary["value_ci_high"] = by_model(rank_by, "ci_low"), by_model(rank_by, "ci_high")
        info = _info(rank_by)
        higher = info.higher_is_better if info is not None else True
    return rank_with_ties(summary, "value", "value_ci_low", "value_ci_high", higher_is_better=higher)


# --- paired comparison -------------------------------------------------------------------------

#: The columns :func:`_paired_values` reads.
_PAIRED_COLUMNS = ("run_id", "sample_id", "status", "metric", "value")


def _run_rows(results: pd.DataFrame, run_id: str) -> tuple[pd.DataFrame, pd.Series]:
    """A run's rows of ``results`` and its samples' status (indexed by sample id)."""
    rows = results[results["run_id"] == run_id]
    if rows.empty:
        known = ", ".join(sorted(results["run_id"].unique())[:10]) or "(none)"
        raise ConfigurationError(f"no results for run {run_id!r}; runs: {known}")
    return rows, rows.drop_duplicates("sample_id").set_index("sample_id")["status"]


def _paired_values(results: pd.DataFrame, run_id: str, metric: str, invalid: str,
                   run_rows: "tuple[pd.DataFrame, pd.Series] | None" = None) -> pd.Series:
    """``run_id``'s value of ``metric`` per sample, invalid replies scored by ``invalid``; ``run_rows``:
    :func:`_run_rows` of the run when the caller has it."""
    rows, samples = run_rows if run_rows is not None else _run_rows(results, run_id)
    if metric == "failure_ratio":
        return (samples != OK).astype("float64")
    metric_rows = rows[rows["metric"] == metric]
    if metric_rows.empty:
        raise ConfigurationError(f"run {run_id!r} has no {metric!r} values in these results")
    values = metric_rows.drop_duplicates("sample_id", keep="last").set_index("sample_id")["value"].astype("float64")
    values = values.reindex(samples.index)
    return pd.Series(score_invalid(values, samples == OK, metric, invalid), index=samples.index)


def compare_models(
    results: "Results | pd.DataFrame", run_a: str, run_b: str, metric: str, *, invalid: str = "worst",
    level: float = stats.DEFAULT_LEVEL, n_resamples: int = stats.DEFAULT_RESAMPLES, seed: int = 0,
) -> stats.PairedComparison:
    """Paired tests of ``run_a`` against ``run_b`` on ``metric`` over their common sample ids.

    Applies the invalid-reply policy first (``"exclude"`` keeps samples valid in both runs).
    ``failure_ratio`` compares the per-sample invalid indicator. Raises :class:`ConfigurationError`
    (a ``ValueError``) when a run or metric is missing or the runs share no sample with two values.
    """
    return _compare(results_table(results), run_a, run_b, metric, invalid=invalid, level=level,
                    n_resamples=n_resamples, seed=seed, found={})


def _compare(table: pd.DataFrame, run_a: str, run_b: str, metric: str, *, invalid: str, level: float,
             n_resamples: int, seed: int, found: "Mapping[str, tuple[pd.DataFrame, pd.Series]]",
             ) -> stats.PairedComparison:
    """:func:`compare_models` on a results table; ``found``: :func:`_run_rows` of the runs the caller
    already took (:func:`comparison_table` takes each run's rows once for all its metrics)."""
    if invalid not in INVALID_POLICIES:
        raise ConfigurationError(f"unknown invalid-reply policy {invalid!r}; expected one of {', '.join(INVALID_POLICIES)}")
    if metric == "instructability":
        raise ConfigurationError("instructability is a run-level number; it has no per-sample values to pair")
    a = _paired_values(table, run_a, metric, invalid, found.get(run_a))
    b = _paired_values(table, run_b, metric, invalid, found.get(run_b))
    common = a.index.intersection(b.index)
    if not len(common):
        raise ConfigurationError(f"runs {run_a!r} and {run_b!r} share no sample id")
    paired = ~(np.isnan(a.loc[common].to_numpy()) | np.isnan(b.loc[common].to_numpy()))
    if not paired.any():
        raise ConfigurationError(f"runs {run_a!r} and {run_b!r} have no sample with a {metric} value in both "
                                 f"(invalid replies: {invalid})")
    info = _info(metric)
    higher = info.higher_is_better if info is not None else True
    return stats.paired_comparison(
        a.loc[common].to_numpy(), b.loc[common].to_numpy(), metric=metric, run_a=run_a, run_b=run_b,
        higher_is_better=higher, level=level, n_resamples=n_resamples, seed=seed,
    )


def sample_values(results: "Results | pd.DataFrame", *, dataset: str, mode: str, metric: str,
                  invalid: str = "worst", profile: str = "offline", board: str | None = None,
                  side_by_side: bool = False, all_samples: bool = False) -> pd.DataFrame:
    """Per-sample values (model, sample_id, value) of one metric in one dataset and mode: the values
    :func:`leaderboard` with the same arguments averages, so a distribution shows what the board ranks.

    The invalid-reply policy is applied, and runs of one board are restricted to the sample ids they
    all share unless ``all_samples``; ``board`` (a protocol label, or :data:`SIDE_BY_SIDE` with
    ``side_by_side``) keeps that board's runs only, and ``model`` carries the protocol when
    ``side_by_side``, as the board's rows do. Samples left without a value are dropped.
    """
    frame = _board_frame(results_table(results), dataset=dataset, mode=mode, profile=profile,
                         side_by_side=side_by_side)
    if board is not None:
        frame = frame[frame["board"] == board]
    if not all_samples:  # on every metric's rows, as the board: the common ids are the board's
        frame = _common_samples(frame)
    rows = frame[frame["metric"] == metric]
    values = score_invalid(rows["value"], (rows["status"] == OK).to_numpy(), metric, invalid)
    models = rows["model"].astype(str)  # labels are categories in the results table
    if side_by_side:
        models = models + " (" + rows["protocol"].astype(str) + ")"
    out = pd.DataFrame({"model": models.to_numpy(), "sample_id": rows["sample_id"].astype(str).to_numpy(),
                        "value": values})
    return out.dropna(subset=["value"]).reset_index(drop=True)


def paired_values(results: "Results | pd.DataFrame", run_a: str, run_b: str, metric: str, *,
                  invalid: str = "worst") -> pd.DataFrame:
    """``sample_id, A, B, difference`` (A - B) of one metric on the sample ids both runs have, the
    values :func:`compare_models` pairs (``failure_ratio``: 1 for an invalid reply, else 0); pairs
    without two values are dropped. Raises :class:`ConfigurationError` when a run or the metric is missing."""
    results = results_table(results)
    a = _paired_values(results, run_a, metric, invalid)
    b = _paired_values(results, run_b, metric, invalid)
    common = a.index.intersection(b.index, sort=False)
    frame = pd.DataFrame({"sample_id": common.astype(str), "A": a.loc[common].to_numpy(),
                          "B": b.loc[common].to_numpy()})
    frame["difference"] = frame["A"] - frame["B"]
    return frame.dropna(subset=["difference"]).reset_index(drop=True)


COMPARISON_COLUMNS = ["metric", "n", "mean A", "mean B", "A - B", "CI low", "CI high", "t-test p", "Wilcoxon p",
                      "bootstrap p", "A wins", "ties", "B wins", "better"]


def comparison_table(results: "Results | pd.DataFrame", run_a: str, run_b: str, metrics: Sequence[str], *,
                     invalid: str = "worst", level: float = stats.DEFAULT_LEVEL,
                     n_resamples: int = stats.DEFAULT_RESAMPLES, seed: int = 0,
                     ) -> tuple[pd.DataFrame, list[tuple[str, str]]]:
    """:func:`compare_models` for each metric: (one row per metric, columns :data:`COMPARISON_COLUMNS`;
    ``[(metric, why it could not be compared)]``)."""
    results = results_table(results)
    # Each run's rows (and the columns a comparison reads) taken once for every metric: each
    # metric's comparison filtered, deduplicated and indexed them again, and on a whole dataset's
    # table (16 runs, 13 columns) that was a third of the `score` command's landing step. A run
    # missing is looked for again by each metric, whose error lists the runs there are.
    narrow = results[[c for c in _PAIRED_COLUMNS if c in results.columns]]
    found: dict[str, tuple[pd.DataFrame, pd.Series]] = {}
    for run_id in dict.fromkeys((run_a, run_b)):
        try:
            found[run_id] = _run_rows(narrow, run_id)
        except ConfigurationError:
            pass
    rows, skipped = [], []
    for metric in metrics:
        try:
            c = _compare(results, run_a, run_b, metric, invalid=invalid, level=level,
                         n_resamples=n_resamples, seed=seed, found=found)
        except ConfigurationError as exc:
            skipped.append((metric, str(exc)))
            continue
        rows.append([metric, c.n, c.mean_a, c.mean_b, c.mean_diff, c.ci_low, c.ci_high, c.t_pvalue,
                     c.wilcoxon_pvalue, c.bootstrap_pvalue, c.wins, c.ties, c.losses,
                     "higher" if c.higher_is_better else "lower"])
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS), skipped


def structured_pairs(runs: pd.DataFrame) -> list[tuple[str, str]]:
    """(plain run id, structured run id) for every model that has both in one dataset and mode under
    the same protocol but for structured output: the "plain vs structured" comparisons. ``runs`` has
    one row per run with run_id, dataset, mode, model (the label) and protocol."""

    def plain_protocol(label: str) -> Protocol | None:
        try:
            return dataclasses.replace(Protocol.from_label(str(label)), structured=False)
        except ValueError:
            return None

    rows = runs.drop_duplicates("run_id").sort_values(["dataset", "mode", "model", "run_id"]).to_dict("records")
    for r in rows:
        r["stem"] = label_stem(r["model"], r["run_id"])
    plain = {(r["dataset"], r["mode"], r["stem"], plain_protocol(r["protocol"])): r["run_id"]
             for r in rows if not r["stem"].endswith(LABEL_SUFFIX)}
    pairs = []
    for r in rows:
        if r["stem"].endswith(LABEL_SUFFIX):
            key = (r["dataset"], r["mode"], r["stem"].removesuffix(LABEL_SUFFIX), plain_protocol(r["protocol"]))
            if key in plain:
                pairs.append((plain[key], r["run_id"]))
    return pairs
