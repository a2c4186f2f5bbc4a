"""Per-sample results of many runs loaded from the store, and the one invalid-reply rule
(:func:`score_invalid`). Part of :mod:`persobench.aggregate`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from persobench.errors import ConfigurationError
from persobench.store.files import read_arrow
from persobench.store.run_store import Run, RunStore, StoreProblem
from persobench.metrics import METRICS, MetricInfo
from persobench.prompts.protocol import protocol_of
from persobench.store.run_store import StoreError


RESULT_COLUMNS = ["run_id", "dataset", "mode", "model", "source", "protocol", "sample_id", "status", "metric",
                  "value", "profile"]
INVALID_POLICIES = ("worst", "exclude")
OK = "ok"


def _metric_order() -> list[str]:

    return list(METRICS)


def _info(metric: str) -> MetricInfo | None:

    return METRICS.get(metric)


def worst_value(metric: str) -> float | None:
    """The value an invalid reply takes under the ``worst`` policy (None when the metric has none)."""
    info = _info(metric)
    return None if info is None else info.worst_value


def worst_and_best(metric: str) -> tuple[float, float] | None:
    """(worst, best) value of ``metric`` for charts that put metrics on one scale: the worst is the
    value an invalid reply takes (0, -1 for ``c_score``; a run-level metric's worse end of its range),
    the best the better end of its range. None when the metric is unknown or unbounded on its better
    side (``response_time``, ``unieval_engagingness``)."""
    info = _info(metric)
    if info is None:
        return None
    low, high = info.range
    best = high if info.higher_is_better else low
    worst = info.worst_value if info.worst_value is not None else (low if info.higher_is_better else high)
    if best is None or worst is None or best == worst:
        return None
    return float(worst), float(best)


def scaled_worst_to_best(metric: str, values: Sequence[float] | np.ndarray) -> np.ndarray:
    """``values`` of ``metric`` on [0, 1]: 0 is the metric's worst value (what an invalid reply
    scores), 1 its best (:func:`worst_and_best`), values beyond clipped; NaN when it has no such scale.
    A model whose every reply was invalid sits at 0 on every axis, whatever the metric's range."""
    out = np.array(values, dtype="float64", copy=True)
    scale = worst_and_best(metric)
    if scale is None:
        return np.full(out.shape, np.nan)
    worst, best = scale
    return np.clip((out - worst) / (best - worst), 0.0, 1.0)


def score_invalid(values: Sequence[float] | np.ndarray | pd.Series, ok: Sequence[bool] | np.ndarray | pd.Series,
                  metric: str,
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


def label_stem(label: str, run_id: str) -> str:
    """A run's display label (:func:`_unique_labels`) without the run-id suffix it gets when two runs
    share a label."""
    return str(label).removesuffix(f" [{str(run_id).rsplit('__', 1)[-1]}]")


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
    """Provenance of each metric scored for ``profile`` (:class:`~persobench.store.run_records.ProfileScores`)."""
    metrics = run.manifest.details.profile_scores(profile).metrics
    return [{"run_id": run.run_id, "profile": str(profile), "metric": metric, "status": record.status,
             "reason": record.note, "model_id": record.model_id, "revision": record.revision_or_hash or "",
             "backend": record.backend, "metric_version": record.metric_version or ""}
            for metric, record in metrics.items()]


def available_profiles(store: "RunStore", *, include_incomplete: bool = False,
                       runs: "Iterable[Run] | None" = None) -> list[str]:
    """Profile keys that have scores in at least one completed run (``offline`` first); ``runs``: the
    store's runs when already listed."""
    keys: set[str] = set()
    for run in _completed_runs(store, include_incomplete, runs):
        keys.update(run.manifest.details.scores or {})
    return sorted(keys, key=lambda k: (k != "offline", k))


def run_samples(run: "Run") -> pd.DataFrame:
    """``sample_id, status, latency`` of a run's generations, in run order (a sample written twice:
    its last row)."""
    ids, status, latency = _generation_columns(run)
    return pd.DataFrame({"sample_id": ids, "status": status, "latency": latency})


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


#: Columns of the results table held as categories: few distinct labels repeated on every row, so
#: filtering compares integer codes and the cached table reads back without building strings.
LABEL_COLUMNS = [c for c in RESULT_COLUMNS if c != "value"]


def load_results(store: "RunStore", *, profile: str = "offline", include_incomplete: bool = False,
                 cache: bool = True, dataset: str | None = None,
                 scanned: "tuple[Sequence[Run], Sequence[StoreProblem]] | None" = None) -> Results:
    """Every per-sample value of every completed run, for one scoring profile.

    Long format, columns :data:`RESULT_COLUMNS` (:data:`LABEL_COLUMNS` as categories, ``value``
    float): one row per sample and metric the run was scored
    on (its ``scores`` rows of ``profile``), plus ``response_time`` from the generation latency;
    ``protocol`` is the run's protocol label (:attr:`persobench.prompts.protocol.Protocol.label`).
    Samples whose reply was invalid (``status`` not ``ok``) are present with ``value`` NaN: no
    invalid-reply policy is applied here (see :func:`leaderboard`). The :class:`Results` also hold
    the provenance rows of :func:`load_metric_status`, the profile and the runs that were skipped.

    With ``cache`` (the default) the table is read from the store's on-disk cache when it was built
    from the store exactly as it is now, and written there otherwise
    (:mod:`persobench.aggregate.disk_cache`): a fresh process reads one file, not every run's tables.
    ``dataset`` keeps the runs of one dataset only (their rows are the same as in the whole table):
    a board of one dataset reads only its runs' tables. ``scanned``: :meth:`RunStore.scan` of the
    store as it is now, when the caller has it (the app reads every manifest once per state).
    """
    if not cache:
        return _build_results(store, profile=profile, include_incomplete=include_incomplete, dataset=dataset,
                              scanned=scanned)
    from persobench.aggregate.disk_cache import cached_table

    def build() -> tuple[pd.DataFrame, dict[str, Any]]:
        built = _build_results(store, profile=profile, include_incomplete=include_incomplete, dataset=dataset,
                               scanned=scanned)
        return built.frame, {"metric_status": list(built.metric_status), "skipped_runs": list(built.skipped_runs)}

    arguments = {"profile": profile, "include_incomplete": include_incomplete, "metrics": _metric_order()}
    if dataset is not None:  # the whole store's table keeps the key (and the file) it always had
        arguments["dataset"] = dataset
    frame, notes = cached_table(store, "results", arguments, build, RESULT_COLUMNS)
    return Results(frame, tuple(notes.get("metric_status") or ()), profile,
                   tuple(tuple(pair) for pair in notes.get("skipped_runs") or ()))


def _build_results(store: "RunStore", *, profile: str, include_incomplete: bool, dataset: str | None = None,
                   scanned: "tuple[Sequence[Run], Sequence[StoreProblem]] | None" = None) -> Results:
    """:func:`load_results` read from every run's tables (of ``dataset`` only, when given).

    Reads only the columns it uses (a generations table's replies and raw outputs are most of its
    bytes) and builds each run's rows as numpy arrays, one frame for all runs at the end: a store
    the app opens for the first time pays this on its landing page."""

    readable, problems = store.scan() if scanned is None else scanned
    if dataset is not None:
        readable = [run for run in readable if run.manifest.dataset == dataset]
    runs = _completed_runs(store, include_incomplete, readable)
    labels = _unique_labels(runs)
    order = {m: i for i, m in enumerate(_metric_order())}
    pieces: list[tuple[tuple[str, ...], np.ndarray, np.ndarray, list[str], np.ndarray]] = []
    status_rows = []
    skipped: list[tuple[str, str]] = [(str(p.path), p.reason) for p in problems]
    for run in runs:
        m = run.manifest
        try:
            ids, status, latency = _generation_columns(run)
            wide = _scores_matrix(run, profile, ids)
        except StoreError as exc:  # damaged beyond what the store's scan can see: skip, say so
            skipped.append((str(run.path), str(exc)))
            continue
        provenance = _provenance_rows(run, profile)
        # A metric the run was scored on but that has no value for any sample (every reply invalid)
        # still needs its rows, or the "worst" policy would have nothing to fill and show n/a.
        scored = {r["metric"] for r in provenance if r["status"] != "unavailable"}
        metrics = sorted(set(wide) | scored, key=lambda name: (order.get(name, len(order)), name))
        valid = status == OK
        values = [latency]
        values += [np.where(valid, wide[metric], np.nan) if metric in wide else np.full(len(ids), np.nan)
                   for metric in metrics]
        labels_of_run = (run.run_id, m.dataset, m.mode, labels[run.run_id], m.source, protocol_of(m).label)
        pieces.append((labels_of_run, ids, status, ["response_time", *metrics], np.concatenate(values)))
        status_rows.extend(provenance)
    return Results(_results_frame(pieces, profile), tuple(status_rows), profile, tuple(skipped))


#: The columns of a scores table the results read (long layout; ``profile`` when it has one).
SCORE_COLUMNS = ["sample_id", "metric", "value", "profile"]


def _generation_columns(run: "Run") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sample ids, statuses, latencies) of a run's generations in run order (a sample written twice:
    its last row), read as Arrow columns: the results of a published dataset's 16 runs spent a
    third of their time building and converting DataFrames."""
    table = read_arrow(run.table_path("generations"), ["sample_id", "status", "latency"])
    missing = {"sample_id", "status"} - set(table.column_names)
    if missing:
        raise StoreError(f"{run.table_path('generations')}: missing column(s) {', '.join(sorted(missing))}")
    ids = table["sample_id"].to_numpy(zero_copy_only=False).astype(object)
    status = table["status"].to_numpy(zero_copy_only=False).astype(object)
    latency = (np.asarray(table["latency"].to_numpy(zero_copy_only=False), dtype="float64")
               if "latency" in table.column_names else np.full(len(ids), np.nan))
    if len(set(ids.tolist())) < len(ids):  # a resumed run may have written a sample twice: the last wins
        last = ~pd.Series(ids).duplicated(keep="last").to_numpy()
        ids, status, latency = ids[last], status[last], latency[last]
    return ids, status, latency


def _scores_matrix(run: "Run", profile: str, ids: np.ndarray) -> dict[str, np.ndarray]:
    """metric -> its values in the order of ``ids`` (NaN where a sample has none) from a run's long
    scores table (none: no metric): the last row of a repeated (sample, metric) pair wins, rows of
    other profiles, of samples not in ``ids`` and without a metric are ignored, a metric with rows
    only for those still gets a column. Done in Arrow and numpy: no DataFrame, no string per row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not run.has_table("scores"):
        return {}
    path = run.table_path("scores")
    scores = read_arrow(path, SCORE_COLUMNS)
    missing = {"sample_id", "metric", "value"} - set(scores.column_names)
    if missing and scores.num_rows:  # an empty table may have been written without columns
        raise StoreError(f"{path}: missing column(s) {', '.join(sorted(missing))}")
    if missing:
        return {}
    if "profile" in scores.column_names:
        scores = scores.filter(pc.equal(scores["profile"], profile))
    scores = scores.filter(pc.is_valid(scores["metric"]))
    if not scores.num_rows:
        return {}
    metric = scores["metric"].combine_chunks().dictionary_encode()
    metric_codes, metric_names = metric.indices.to_numpy(), metric.dictionary.to_pylist()
    sample_ids = scores["sample_id"]
    if pa.types.is_string(sample_ids.type) or pa.types.is_large_string(sample_ids.type):
        where = pc.index_in(sample_ids, value_set=pa.array(ids.tolist(), type=sample_ids.type))
        rows = where.fill_null(-1).to_numpy(zero_copy_only=False)
    else:  # ids of another type name no sample of the run
        rows = np.full(scores.num_rows, -1)
    known = rows >= 0
    column = scores["value"]
    if pa.types.is_null(column.type):  # every value missing: Parquet keeps no type for the column
        column = column.cast(pa.float64())
    try:
        values = np.asarray(column.to_numpy(zero_copy_only=False), dtype="float64")[known]
    except (TypeError, ValueError) as exc:
        raise StoreError(f"{path}: column value holds non-numbers ({exc})") from exc
    cells = rows[known].astype(np.int64) * len(metric_names) + metric_codes[known]  # (sample, metric) -> its cell
    # The last row of each cell: a numpy assignment to a repeated index keeps no stated one.
    _, first_from_end = np.unique(cells[::-1], return_index=True)
    last = len(cells) - 1 - first_from_end
    matrix = np.full((len(ids), len(metric_names)), np.nan)
    matrix.flat[cells[last]] = values[last]
    return {str(name): matrix[:, j] for j, name in enumerate(metric_names)}


def _results_frame(pieces: Sequence[tuple[tuple[str, ...], np.ndarray, np.ndarray, list[str], np.ndarray]],
                   profile: str) -> pd.DataFrame:
    """The results table (columns :data:`RESULT_COLUMNS`, labels as categories) of each run's
    ``(labels, sample ids, statuses, metrics, values metric by metric)``, built in one go."""
    if not pieces:
        empty = pd.DataFrame({c: pd.Series(dtype="float64" if c == "value" else object) for c in RESULT_COLUMNS})
        return empty.astype({c: "category" for c in LABEL_COLUMNS})
    sizes = np.array([len(ids) * len(metrics) for _, ids, _, metrics, _ in pieces])
    columns: dict[str, Any] = {}
    for position, name in enumerate(["run_id", "dataset", "mode", "model", "source", "protocol"]):
        columns[name] = _repeated([labels[position] for labels, *_ in pieces], sizes)
    columns["sample_id"] = _tiled([ids for _, ids, *_ in pieces], [len(metrics) for *_, metrics, _ in pieces])
    columns["status"] = _tiled([status for _, _, status, *_ in pieces], [len(metrics) for *_, metrics, _ in pieces])
    columns["metric"] = pd.Categorical(np.concatenate([np.repeat(np.array(metrics, dtype=object), len(ids))
                                                       for _, ids, _, metrics, _ in pieces]))
    columns["value"] = np.concatenate([values for *_, values in pieces])
    columns["profile"] = _repeated([profile], np.array([sizes.sum()]))
    return pd.DataFrame(columns)[RESULT_COLUMNS]


def _tiled(arrays: Sequence[np.ndarray], times: Sequence[int]) -> pd.Categorical:
    """A categorical column holding each of ``arrays`` (strings) ``times[i]`` times over, categories
    sorted as ``pd.Categorical`` sorts them. Each run's ids are encoded once, then their codes are
    tiled: building the categorical from the tiled strings converted every row to a string array
    first (a fifth of a second for a published dataset's 16 runs)."""
    codes, categories = pd.factorize(np.concatenate(arrays), sort=True)
    bounds = np.cumsum([0, *(len(a) for a in arrays)])
    tiled = np.concatenate([np.tile(codes[start:stop], n) for start, stop, n in zip(bounds, bounds[1:], times)])
    return pd.Categorical.from_codes(tiled, categories=pd.Index(categories, dtype="str"))


def _repeated(values: Sequence[str], sizes: np.ndarray) -> pd.Categorical:
    """A categorical column holding ``values[i]`` ``sizes[i]`` times in a row (codes, not strings)."""
    categories, codes = np.unique(np.array(values, dtype=object), return_inverse=True)
    return pd.Categorical.from_codes(np.repeat(codes, sizes), categories=pd.Index(categories, dtype="str"))
