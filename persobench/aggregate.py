"""Leaderboards: per-sample scores of many runs turned into comparable numbers.

Pure functions over DataFrames plus thin loaders from the run store, shared by the CLI
(``python -m persobench leaderboard``) and the app.

Pipeline::

    results = load_results(store, profile="offline")     # Results: .frame long, one row per sample x metric
    board = leaderboard(results, invalid="worst")          # long, one row per run x metric
    overall = overall_table(board)                         # wide, one row per run: overall + rank
    text = export_board(board, "markdown")

Conventions, as the paper's tables:

- mean and population standard deviation (``ddof=0``) over the samples of a run, with n and a
  percentile-bootstrap 95% CI of the mean;
- invalid replies (status other than ``ok``) are scored with the metric's worst value (0, and -1
  for ``c_score``: policy ``"worst"``, the default and the paper's) or left out (``"exclude"``);
- ``failure_ratio`` is the share of invalid replies, ``response_time`` the mean latency over all
  samples (invalid ones included, whatever the policy), ``instructability`` is
  ``(max failure - failure) / max failure`` across the models compared on the same dataset and
  mode (1 for every model when none failed);
- ``overall`` is the mean of ``ue_score``, ``persona_distance``, ``unieval_groundedness``,
  ``c_score`` and ``instructability``, all x100. ``overall_paper`` reproduces the paper's ranking
  table, which added instructability unscaled (0-1) to the x100 values. When a component is
  unavailable (the offline profile has no NLI or UniEval model) both are NaN and ``reason`` says why.

Numbers never mix profiles: a board holds one profile, named in its ``profile`` column, and each
row carries the ``model_id`` its metric was computed with, so a display can warn when runs of the
same comparison used different models.

A board compares like with like: one dataset, one mode and one protocol
(:func:`persobench.protocol.protocol_of`: template family, max tokens, temperature, parse policy,
structured output). Runs under different protocols land on separate boards (the ``board`` column),
or on one board with the protocol in the row label when asked (``side_by_side=True``). Runs of one
board that answered different sample sets are compared on the sample ids common to all of them
(``n`` says how many; ``run_n`` is each run's own count) unless ``all_samples=True``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from persobench import stats
from persobench.errors import ConfigurationError

if TYPE_CHECKING:  # pragma: no cover
    from persobench.store import Run, RunStore

__all__ = [
    "BOARD_COLUMNS", "CSV_COLUMNS", "INVALID_POLICIES", "OVERALL_COMPONENTS", "RADAR_ASPECTS",
    "RESULT_COLUMNS", "Results", "SIDE_BY_SIDE", "available_profiles", "compare_models", "comparison_table",
    "export_board", "leaderboard", "load_metric_status", "load_results", "model_ranking", "overall_table",
    "overall_with_ci", "paired_values", "protocol_heading", "radar_aspects", "rank_with_ties", "results_table",
    "run_samples", "sample_notes", "sample_values", "score_invalid", "structured_note", "worst_value",
]

RESULT_COLUMNS = ["run_id", "dataset", "mode", "model", "source", "protocol", "sample_id", "status", "metric",
                  "value", "profile"]
BOARD_COLUMNS = [
    "dataset", "mode", "model", "metric", "mean", "std", "n", "ci_low", "ci_high", "profile",
    "run_id", "source", "invalid", "status", "reason", "model_id", "protocol", "board", "run_n",
]
#: Protocol fields added to every row of the json export.
PROTOCOL_FIELDS = ("name", "max_tokens", "temperature", "policy", "structured")
#: The ``board`` value of a board that puts several protocols side by side (labels carry them).
SIDE_BY_SIDE = "side by side"
#: The long CSV export has exactly these columns.
CSV_COLUMNS = ["dataset", "mode", "model", "metric", "mean", "std", "n"]
INVALID_POLICIES = ("worst", "exclude")
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
OK = "ok"


def _metric_order() -> list[str]:
    from persobench.metrics import METRICS

    return list(METRICS)


def _info(metric: str):
    from persobench.metrics import METRICS

    return METRICS.get(metric)


def worst_value(metric: str) -> float | None:
    """The value an invalid reply takes under the ``worst`` policy (None when the metric has none)."""
    info = _info(metric)
    return None if info is None else info.worst_value


def score_invalid(values: Sequence[float] | np.ndarray, ok: Sequence[bool] | np.ndarray, metric: str,
                  invalid: str = "worst") -> np.ndarray:
    """Per-sample ``values`` of ``metric`` with the invalid-reply policy applied (a new float array).

    The one place the rule lives: with ``invalid="worst"`` (the paper's) a sample whose reply is
    invalid (``ok`` False) takes the metric's worst value (0, and -1 for ``c_score``), or NaN when the
    metric has none; with ``"exclude"`` it becomes NaN (left out of means). ``response_time`` is kept
    as is: it is the latency of every attempt, whatever the reply's status.
    """
    if invalid not in INVALID_POLICIES:
        raise ConfigurationError(f"unknown invalid-reply policy {invalid!r}; expected one of {', '.join(INVALID_POLICIES)}")
    out = np.array(values, dtype="float64", copy=True)
    if metric == "response_time":
        return out
    worst = worst_value(metric) if invalid == "worst" else None
    out[~np.asarray(ok, dtype=bool)] = np.nan if worst is None else worst
    return out


# --- loading ----------------------------------------------------------------------------------

def _completed_runs(store: "RunStore", include_incomplete: bool, runs: "Iterable[Run] | None" = None) -> list["Run"]:
    runs = [r for r in (store.runs() if runs is None else runs) if r.has_table("generations")]
    if not include_incomplete:
        runs = [r for r in runs if r.manifest.status == "completed"]
    return sorted(runs, key=lambda r: r.run_id)


def _unique_labels(runs: Sequence["Run"]) -> dict[str, str]:
    """Run id -> display label; runs sharing dataset, mode and model label get a run-id suffix."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for run in runs:
        m = run.manifest
        groups.setdefault((m.dataset, m.mode, m.model_label), []).append(run.run_id)
    labels = {}
    for (_, _, label), ids in groups.items():
        for run_id in ids:
            labels[run_id] = label if len(ids) == 1 else f"{label} [{run_id.rsplit('__', 1)[-1]}]"
    return labels


METRIC_STATUS_COLUMNS = ["run_id", "profile", "metric", "status", "reason", "model_id", "revision", "backend",
                         "metric_version"]


def load_metric_status(store: "RunStore", *, profile: str | None = "offline",
                       include_incomplete: bool = False) -> pd.DataFrame:
    """Provenance of every metric of every run for ``profile`` (every profile when None), columns
    :data:`METRIC_STATUS_COLUMNS`: the backend state (ok, degraded, unavailable) and why, the model
    and its revision, the backend and the metric's version."""
    rows = []
    for run in _completed_runs(store, include_incomplete):
        scores = run.manifest.details.scores or {}
        for name in (sorted(scores) if profile is None else [profile]):
            rows.extend(_provenance_rows(run, name))
    return pd.DataFrame(rows, columns=METRIC_STATUS_COLUMNS)


def _provenance_rows(run: "Run", profile: str) -> list[dict[str, str]]:
    """Provenance of each metric scored for ``profile`` (:class:`~persobench.run_records.ProfileScores`)."""
    metrics = run.manifest.details.profile_scores(profile).metrics
    return [{"run_id": run.run_id, "profile": str(profile), "metric": metric, "status": record.status,
             "reason": record.note, "model_id": record.model_id, "revision": record.revision_or_hash or "",
             "backend": record.backend, "metric_version": record.metric_version or ""}
            for metric, record in metrics.items()]


def available_profiles(store: "RunStore", *, include_incomplete: bool = False) -> list[str]:
    """Profile keys that have scores in at least one completed run (``offline`` first)."""
    keys = set()
    for run in _completed_runs(store, include_incomplete):
        keys.update(run.manifest.details.scores or {})
    return sorted(keys, key=lambda k: (k != "offline", k))


def run_samples(run: "Run") -> pd.DataFrame:
    """``sample_id, status, latency`` of a run's generations, in run order."""
    gens = run.read_table("generations")
    missing = {"sample_id", "status"} - set(gens.columns)
    if missing:
        from persobench.store import StoreError

        raise StoreError(f"{run.table_path('generations')}: missing column(s) {', '.join(sorted(missing))}")
    if "latency" not in gens.columns:
        gens["latency"] = np.nan
    gens = gens.drop_duplicates("sample_id", keep="last")
    return gens[["sample_id", "status", "latency"]].reset_index(drop=True)


@dataclass(frozen=True)
class Results:
    """What :func:`load_results` returns: the long per-sample table and what came with it."""

    frame: pd.DataFrame
    """One row per run, sample and metric (columns :data:`RESULT_COLUMNS`); shared, never modify it."""
    metric_status: tuple[Mapping[str, str], ...] = ()
    """Provenance rows (run_id, metric, status, reason, model_id) of :func:`load_metric_status`."""
    profile: str = "offline"
    """The scoring profile the values belong to."""
    skipped_runs: tuple[tuple[str, str], ...] = ()
    """(folder, reason) of each run that could not be read, for a visible warning."""

    @property
    def empty(self) -> bool:
        return self.frame.empty


def results_table(results: "Results | pd.DataFrame") -> pd.DataFrame:
    """The per-sample table of ``results`` (a :class:`Results` or the table itself)."""
    return results.frame if isinstance(results, Results) else results


def load_results(store: "RunStore", *, profile: str = "offline", include_incomplete: bool = False) -> Results:
    """Every per-sample value of every completed run, for one scoring profile.

    Long format, columns :data:`RESULT_COLUMNS`: one row per sample and metric the run was scored
    on (its ``scores`` rows of ``profile``), plus ``response_time`` from the generation latency;
    ``protocol`` is the run's protocol label (:attr:`persobench.protocol.Protocol.label`).
    Samples whose reply was invalid (``status`` not ``ok``) are present with ``value`` NaN: no
    invalid-reply policy is applied here (see :func:`leaderboard`). The :class:`Results` also hold
    the provenance rows of :func:`load_metric_status`, the profile and the runs that were skipped.
    """
    from persobench.protocol import protocol_of
    from persobench.store import StoreError

    readable, problems = store.scan()
    runs = _completed_runs(store, include_incomplete, readable)
    labels = _unique_labels(runs)
    order = {m: i for i, m in enumerate(_metric_order())}
    frames = []
    status_rows = []
    skipped: list[tuple[str, str]] = [(str(p.path), p.reason) for p in problems]
    for run in runs:
        m = run.manifest
        try:
            samples = run_samples(run)
            scores_table = run.read_table("scores") if run.has_table("scores") else None
        except StoreError as exc:  # damaged beyond what the store's scan can see: skip, say so
            skipped.append((str(run.path), str(exc)))
            continue
        ids = samples["sample_id"]
        parts = [pd.DataFrame({"sample_id": ids, "status": samples["status"], "metric": "response_time",
                               "value": samples["latency"].astype("float64")})]
        provenance = _provenance_rows(run, profile)
        # A metric the run was scored on but that has no value for any sample (every reply invalid)
        # still needs its rows, or the "worst" policy would have nothing to fill and show n/a.
        scored = {r["metric"] for r in provenance if r["status"] != "unavailable"}
        wide = pd.DataFrame(index=pd.Index(ids, name="sample_id"))
        if scores_table is not None:
            scores = scores_table
            if "profile" in scores.columns:
                scores = scores[scores["profile"] == profile]
            if len(scores):
                scores = scores.drop_duplicates(["sample_id", "metric"], keep="last")
                wide = scores.pivot(index="sample_id", columns="metric", values="value").reindex(ids)
        for metric in sorted(set(wide.columns) | scored, key=lambda name: (order.get(name, len(order)), name)):
            values = wide[metric].to_numpy(dtype="float64") if metric in wide.columns else np.full(len(ids), np.nan)
            values = np.where(samples["status"].to_numpy() == OK, values, np.nan)
            parts.append(pd.DataFrame({"sample_id": ids, "status": samples["status"], "metric": metric,
                                       "value": values}))
        frame = pd.concat(parts, ignore_index=True)
        frame.insert(0, "run_id", run.run_id)
        frame.insert(1, "dataset", m.dataset)
        frame.insert(2, "mode", m.mode)
        frame.insert(3, "model", labels[run.run_id])
        frame.insert(4, "source", m.source)
        frame.insert(5, "protocol", protocol_of(m).label)
        frame["profile"] = profile
        frames.append(frame)
        status_rows.extend(provenance)
    if frames:
        results = pd.concat(frames, ignore_index=True)[RESULT_COLUMNS]
    else:
        results = pd.DataFrame({c: pd.Series(dtype="float64" if c == "value" else object) for c in RESULT_COLUMNS})
    return Results(results, tuple(status_rows), profile, tuple(skipped))


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
                "board": first["board"], "run_n": int(run_sizes.get(run_id, 0))}
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
    shared = shared[shared.eq(runs_per_board.reindex(shared.index.droplevel("sample_id")).to_numpy())]
    largest = pairs.groupby(keys + ["run_id"], sort=False).size().groupby(level=keys, sort=False).max()
    common_n = shared.groupby(level=keys, sort=False).size()
    keep = [key for key, n in common_n.items() if largest[key] > n]  # a run has samples the others lack
    if not keep:
        return frame
    restricted = pd.MultiIndex.from_tuples(keep, names=keys)
    board_key = pd.MultiIndex.from_frame(frame[keys])
    in_restricted = board_key.isin(restricted)
    sample_key = pd.MultiIndex.from_frame(frame[keys + ["sample_id"]])
    return frame[~in_restricted | sample_key.isin(shared.index)]


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
    for key, series in means.iterrows():
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
        ci = dict(level=level, n_resamples=n_resamples, seed=seed)
        table.loc[index, ["overall_ci_low", "overall_ci_high"]] = stats.bootstrap_ci(composite, **ci)
        table.loc[index, ["overall_paper_ci_low", "overall_paper_ci_high"]] = stats.bootstrap_ci(composite_paper, **ci)
    return table


def radar_aspects(board: pd.DataFrame, *, normalize: bool = False) -> pd.DataFrame:
    """The paper's radar aspects per dataset, mode and model (NaN when the metric is unavailable).

    Aspects: :data:`RADAR_ASPECTS`. ``normalize=True`` maps each metric's mean onto [0, 1] by its
    range (e.g. ``c_score`` -1..1, ``ue_score`` 0..2) so the axes are comparable.
    """
    keys = _board_keys(board) + ["model", "profile"]
    if board.empty:
        return pd.DataFrame(columns=keys + list(RADAR_ASPECTS))
    means = _means(board)
    out = means.reset_index()[keys].copy()
    for aspect, metric in RADAR_ASPECTS.items():
        values = means[metric].to_numpy(dtype="float64") if metric in means.columns else np.full(len(means), np.nan)
        if normalize:
            info = _info(metric)
            lo, hi = info.range if info is not None else (0.0, None)
            if hi is not None and hi > lo:
                values = (values - lo) / (hi - lo)
        out[aspect] = values
    return out.reset_index(drop=True)


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

def _paired_values(results: pd.DataFrame, run_id: str, metric: str, invalid: str) -> pd.Series:
    rows = results[results["run_id"] == run_id]
    if rows.empty:
        known = ", ".join(sorted(results["run_id"].unique())[:10]) or "(none)"
        raise ConfigurationError(f"no results for run {run_id!r}; runs: {known}")
    samples = rows.drop_duplicates("sample_id").set_index("sample_id")["status"]
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
    if invalid not in INVALID_POLICIES:
        raise ConfigurationError(f"unknown invalid-reply policy {invalid!r}; expected one of {', '.join(INVALID_POLICIES)}")
    if metric == "instructability":
        raise ConfigurationError("instructability is a run-level number; it has no per-sample values to pair")
    a = _paired_values(results_table(results), run_a, metric, invalid)
    b = _paired_values(results_table(results), run_b, metric, invalid)
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
                  invalid: str = "worst") -> pd.DataFrame:
    """Per-sample values (model, sample_id, value) of one metric in one dataset and mode, with the
    invalid-reply policy applied as :func:`leaderboard` does; samples left without a value are dropped."""
    results = results_table(results)
    rows = results[(results["dataset"] == dataset) & (results["mode"] == mode) & (results["metric"] == metric)]
    values = score_invalid(rows["value"], (rows["status"] == OK).to_numpy(), metric, invalid)
    frame = rows[["model", "sample_id"]].assign(value=values)
    return frame.dropna(subset=["value"]).reset_index(drop=True)


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
    rows, skipped = [], []
    for metric in metrics:
        try:
            c = compare_models(results, run_a, run_b, metric, invalid=invalid, level=level,
                               n_resamples=n_resamples, seed=seed)
        except ConfigurationError as exc:
            skipped.append((metric, str(exc)))
            continue
        rows.append([metric, c.n, c.mean_a, c.mean_b, c.mean_diff, c.ci_low, c.ci_high, c.t_pvalue,
                     c.wilcoxon_pvalue, c.bootstrap_pvalue, c.wins, c.ties, c.losses,
                     "higher" if c.higher_is_better else "lower"])
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS), skipped


# --- export ------------------------------------------------------------------------------------

def _fmt(value: float, digits: int = 2) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _cell(metric: str, row: Mapping[str, Any]) -> str:
    if row is None or row.get("n", 0) == 0 and math.isnan(row.get("mean", math.nan)):
        return "n/a"
    if metric == "failure_ratio":
        return _fmt(row["mean"], 3)
    if metric == "instructability" or math.isnan(row["std"]):
        return _fmt(row["mean"])
    return f"{_fmt(row['mean'])} ± {_fmt(row['std'])}"


def _blocks(board: pd.DataFrame) -> list[dict[str, Any]]:
    """Display blocks, one per board (dataset, mode, protocol) and profile: models (ranked), metrics,
    cells, sample counts, notes."""
    overall = overall_table(board)
    order = {m: i for i, m in enumerate(_metric_order())}
    if "board" not in board.columns:
        board = board.assign(board="?", run_n=board["n"])
    blocks = []
    for (dataset, mode, board_name, profile), group in board.groupby(["dataset", "mode", "board", "profile"],
                                                                      sort=True):
        available = group[group["status"] != "unavailable"]
        metrics = sorted(available["metric"].unique(), key=lambda m: (order.get(m, len(order)), m))
        ov = overall[(overall["dataset"] == dataset) & (overall["mode"] == mode) & (overall["board"] == board_name)
                     & (overall["profile"] == profile)]
        models = list(ov["model"])
        models += sorted(set(group["model"]) - set(models))
        cells = {(r["model"], r["metric"]): r for r in group.to_dict("records")}
        counts = group[group["metric"] == "failure_ratio"]
        sizes = {r["model"]: (int(r["n"]), int(r["run_n"])) for r in counts.to_dict("records")}
        notes = sample_notes(sizes)
        if note := structured_note(group):
            notes.append(note)
        unavailable = group[group["status"] == "unavailable"].drop_duplicates("metric")
        for r in unavailable.to_dict("records"):
            notes.append(f"{r['metric']}: unavailable ({r['reason'] or 'no reason recorded'})")
        degraded = group[group["status"] == "degraded"].drop_duplicates("metric")
        for r in degraded.to_dict("records"):
            notes.append(f"{r['metric']}*: degraded ({r['reason'] or 'no reason recorded'})")
        for metric, sub in available.groupby("metric"):
            ids = sorted({m for m in sub["model_id"] if m})
            if len(ids) > 1:
                notes.append(f"warning: {metric} was computed with different models across runs: {', '.join(ids)}")
        reasons = {r for r in ov["reason"] if r}
        for reason in sorted(reasons):
            notes.append(f"overall: n/a, {reason}")
        ov_rows = {r["model"]: r for r in ov.to_dict("records")}
        degraded_names = set(degraded["metric"])
        blocks.append({"dataset": dataset, "mode": mode, "board": board_name, "profile": profile, "models": models,
                       "metrics": metrics, "cells": cells, "overall": ov_rows, "notes": notes,
                       "degraded": degraded_names, "sizes": sizes,
                       "invalid": group["invalid"].iloc[0] if "invalid" in group else ""})
    return blocks


def sample_notes(sizes: Mapping[str, tuple[int, int]]) -> list[str]:
    """Say when runs answered different sample sets and what was compared."""
    if not sizes:
        return []
    compared = {n for n, _ in sizes.values()}
    own = sorted({run_n for _, run_n in sizes.values()})
    if len(compared) > 1:
        return [f"runs answered different samples and share no sample id: each row is over its own samples "
                f"(n = {', '.join(str(n) for n in sorted(compared))})"]
    n = compared.pop()
    if own != [n]:
        return [f"compared on the {n} sample ids common to all {len(sizes)} runs (runs have "
                f"{', '.join(str(k) for k in own)} samples; --all-samples uses every run's own samples)"]
    return []


def structured_note(board: pd.DataFrame) -> str | None:
    """The note a board needs when some of its runs asked for structured output (their
    instructability is not measured), else None."""
    from persobench.protocol import Protocol
    from persobench.structured import BOARD_NOTE

    for label in board["protocol"].unique() if "protocol" in board.columns else ():
        try:
            if Protocol.from_label(str(label)).structured:
                return BOARD_NOTE
        except ValueError:
            continue
    return None


def protocol_heading(board_name: str, mode: str) -> str:
    """What a board header says about its protocol."""
    if board_name == SIDE_BY_SIDE:
        return f"{mode} · protocols side by side (each in its row label)"
    return f"protocol {board_name}"


def _title(block: Mapping[str, Any]) -> str:
    policy = {"worst": "invalid replies scored worst (paper)", "exclude": "invalid replies excluded"}.get(
        block["invalid"], f"invalid replies: {block['invalid']}")
    return (f"{block['dataset']} · {protocol_heading(block['board'], block['mode'])} · profile {block['profile']}"
            f" · {policy}")


def _grid(block: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows (models as rows, n, metrics then overall columns) of one block."""
    header = ["model", "n"] + [m + ("*" if m in block["degraded"] else "") for m in block["metrics"]]
    header += ["overall", "overall_paper", "rank"]
    rows = []
    for model in block["models"]:
        n = block["sizes"].get(model, (None, None))[0]
        row = [model, "–" if n is None else str(n)]
        row += [_cell(m, block["cells"].get((model, m))) for m in block["metrics"]]
        ov = block["overall"].get(model, {})
        rank = ov.get("rank")
        row += [_fmt(ov.get("overall", math.nan)), _fmt(ov.get("overall_paper", math.nan)),
                "–" if rank is None or pd.isna(rank) else str(int(rank))]
        rows.append(row)
    return header, rows


def _text_table(board: pd.DataFrame) -> str:
    out = []
    for block in _blocks(board):
        header, rows = _grid(block)
        # Metrics as rows, models as columns: fits a terminal with many metrics.
        table = [[header[0].replace("model", "metric")] + [r[0] for r in rows]]
        for j in range(1, len(header)):
            table.append([header[j]] + [r[j] for r in rows])
        widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
        out.append(f"== {_title(block)} ==")
        for k, line in enumerate(table):
            out.append("  ".join(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(line)))
            if k == 0:
                out.append("  ".join("-" * w for w in widths))
        out.extend(f"  {note}" for note in block["notes"])
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n" if out else "(no results)\n"


def _markdown(board: pd.DataFrame) -> str:
    out = []
    for block in _blocks(board):
        header, rows = _grid(block)
        out.append(f"### {_title(block)}\n")
        out.append("| " + " | ".join(header) + " |")
        out.append("|" + "|".join([" --- "] + [" ---: "] * (len(header) - 1)) + "|")
        for row in rows:
            out.append("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
        if block["notes"]:
            out.append("")
            out.extend(f"- {note}" for note in block["notes"])
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n" if out else "(no results)\n"


_LATEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def _latex_escape(text: str) -> str:
    return "".join(_LATEX_ESCAPES.get(ch, ch) for ch in text).replace("±", r"$\pm$").replace("–", "--")


def _latex(board: pd.DataFrame) -> str:
    out = []
    for block in _blocks(board):
        header, rows = _grid(block)
        out.append(f"% {_title(block)}")
        out.append(r"\begin{table}[ht]")
        out.append(r"\centering")
        out.append(r"\caption{" + _latex_escape(_title(block)) + "}")
        out.append(r"\begin{tabular}{l" + "r" * (len(header) - 1) + "}")
        out.append(r"\hline")
        out.append(" & ".join(_latex_escape(h) for h in header) + r" \\")
        out.append(r"\hline")
        for row in rows:
            out.append(" & ".join(_latex_escape(c) for c in row) + r" \\")
        out.append(r"\hline")
        out.append(r"\end{tabular}")
        out.append(r"\end{table}")
        out.extend(f"% {note}" for note in block["notes"])
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n" if out else "% (no results)\n"


def _jsonable(value: Any) -> Any:
    if value is None or value is pd.NA:
        return None
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) else float(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    return value


def _csv(board: pd.DataFrame) -> str:
    from persobench.csv_io import csv_text  # model names come from imported file names: never a formula

    return csv_text(board[board["n"] > 0][CSV_COLUMNS])


def _protocol_fields(label: str) -> dict[str, Any]:
    """``protocol_<field>`` of a protocol label (all None for a label that is not one)."""
    from persobench.protocol import Protocol

    try:
        fields = Protocol.from_label(str(label)).to_dict()
    except ValueError:
        fields = {}
    return {f"protocol_{name}": fields.get(name) for name in PROTOCOL_FIELDS}


def _json(board: pd.DataFrame) -> str:
    overall = overall_table(board)
    labels = {label: _protocol_fields(label) for label in board["protocol"].unique()} if "protocol" in board else {}
    payload = {
        "profiles": sorted(board["profile"].unique().tolist()) if len(board) else [],
        "invalid": sorted(board["invalid"].unique().tolist()) if len(board) else [],
        "protocols": sorted(labels),
        "metrics": [{k: _jsonable(v) for k, v in row.items()} | labels.get(row.get("protocol"), {})
                    for row in board.to_dict("records")],
        "overall": [{k: _jsonable(v) for k, v in row.items()} for row in overall.to_dict("records")],
    }
    return json.dumps(payload, indent=2, ensure_ascii=False) + "\n"


EXPORT_FORMATS = {"table": _text_table, "csv": _csv, "markdown": _markdown, "latex": _latex, "json": _json}


def export_board(board: pd.DataFrame, fmt: str = "table") -> str:
    """Render a board: ``table`` (terminal text), ``csv`` (long: exactly :data:`CSV_COLUMNS`, numbers
    unrounded, unavailable metrics left out), ``markdown``, ``latex`` (models as rows, "mean ± std"
    at 2 decimals, failure ratio at 3, plus overall, overall_paper and rank) or ``json`` (every
    board column and the overall table; NaN as null)."""
    try:
        render = EXPORT_FORMATS[fmt]
    except KeyError:
        raise ConfigurationError(f"unknown format {fmt!r}; expected one of {', '.join(EXPORT_FORMATS)}") from None
    return render(board)
