"""The app's first views, kept in the store's disk cache when a command changes the store.

The app opens on the leaderboard of one dataset in one scoring profile (:func:`landing_view`:
``offline`` first, the dataset with the most runs (ties: the paper's order, FoCus first), invalid
replies scored worst, one board per protocol, runs compared on their common samples). Building that
board and its overall scores reads every run of the dataset and bootstraps every metric's CI
(about half a second of CPU for the 16 runs of a published dataset), more than the landing
page's whole budget once Python, pandas and Streamlit are loaded. So the command that changed the
store (``import-paper``, ``run``, ``score``, ... through :func:`persobench.pipeline.landing_kept_current`)
builds them into ``<home>/aggregate/`` before it exits, and the first app process reads two small
files. The Compare page's first comparison (same dataset and profile, :func:`compare_pair`) is
prepared with it (eight metrics' paired tests and bootstraps, a tenth of a second).

The tables are the disk cache's (:mod:`persobench.aggregate.disk_cache`): keyed by the store's
fingerprint, written atomically and only when the store did not change while they were built.
A run written afterwards by anything else changes the fingerprint, so the app never reads a stale
board: it builds the board itself, as it did before. :func:`cached_board` and
:func:`cached_overall` are the one place these tables' keys are made, for the app and for
:func:`warm_landing` alike.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from typing import Any, Callable, Iterable, Mapping, Sequence

import pandas as pd

from persobench.aggregate.board import leaderboard
from persobench.aggregate.disk_cache import cached_table
from persobench.aggregate.ranking import comparison_table, overall_with_ci
from persobench.aggregate.results import Results, available_profiles, load_results
from persobench.metrics import METRICS
from persobench.core.secrets import redact
from persobench.store.run_store import Run, RunStore

log = logging.getLogger(__name__)

#: The paper's datasets in the order the paper presents them (it leads with FoCus): the landing
#: page's choice between datasets with as many runs.
PAPER_DATASET_ORDER = ("focus", "it-convai2", "blended-skill-talk", "pec", "synthetic-personachat")
#: The invalid-reply policy the landing page opens with (the paper's).
LANDING_INVALID = "worst"


def metric_rules() -> list[list[Any]]:
    """What a board's numbers depend on in the metric registry: names in order, worst values, ranges
    (part of every cached board's key)."""
    return [[name, info.worst_value, list(info.range), info.higher_is_better] for name, info in METRICS.items()]


def landing_datasets(runs: Iterable[Run]) -> dict[str, int]:
    """The datasets the landing page offers, by name, with their run counts: those of completed runs
    with replies."""
    counts = Counter(run.manifest.dataset for run in runs
                     if run.manifest.status == "completed" and run.has_table("generations"))
    return dict(sorted(counts.items()))


def landing_dataset(datasets: Mapping[str, int] | Sequence[str]) -> str:
    """The dataset the landing page opens on, of ``datasets`` (not empty; dataset -> its runs, or
    names counted once each): the one with the most runs, ties broken by the paper's order
    (:data:`PAPER_DATASET_ORDER`), then by name."""
    counts = datasets if isinstance(datasets, Mapping) else dict.fromkeys(datasets, 1)
    paper = {name: index for index, name in enumerate(PAPER_DATASET_ORDER)}
    return min(counts, key=lambda name: (-counts[name], paper.get(name, len(paper)), name))


def landing_view(store: RunStore, runs: list[Run] | None = None) -> tuple[str, str] | None:
    """(profile, dataset) the landing page opens on; None when it shows no board (no scored run)."""
    runs = store.runs() if runs is None else runs
    profiles = available_profiles(store, runs=runs)
    datasets = landing_datasets(runs)
    if not profiles or not datasets:
        return None
    return profiles[0], landing_dataset(datasets)


def cached_board(store: RunStore, results: Callable[[], Results], *, profile: str, dataset: str, invalid: str,
                 side_by_side: bool, all_samples: bool) -> pd.DataFrame:
    """The leaderboards of one dataset (:func:`persobench.aggregate.leaderboard`, both modes, every
    protocol) through the store's disk cache; ``results()`` is called only when it is built."""

    def build() -> tuple[pd.DataFrame, dict[str, Any]]:
        return leaderboard(results(), dataset=dataset, invalid=invalid, profile=profile, side_by_side=side_by_side,
                           all_samples=all_samples), {}

    arguments = {"profile": profile, "dataset": dataset, "invalid": invalid, "side_by_side": side_by_side,
                 "all_samples": all_samples, "metrics": metric_rules()}
    return cached_table(store, "board", arguments, build)[0]


def cached_overall(store: RunStore, results: Callable[[], Results], board: Callable[[], pd.DataFrame], *,
                   profile: str, dataset: str, invalid: str, side_by_side: bool, all_samples: bool) -> pd.DataFrame:
    """:func:`persobench.aggregate.overall_with_ci` of one dataset on the boards of
    :func:`cached_board` (``board()``, same arguments), through the store's disk cache."""

    def build() -> tuple[pd.DataFrame, dict[str, Any]]:
        return overall_with_ci(results().frame, dataset=dataset, invalid=invalid, profile=profile,
                               side_by_side=side_by_side, all_samples=all_samples, board=board()), {}

    arguments = {"profile": profile, "dataset": dataset, "invalid": invalid, "side_by_side": side_by_side,
                 "all_samples": all_samples, "metrics": metric_rules()}
    return cached_table(store, "overall", arguments, build)[0]


def compare_pair(results: pd.DataFrame) -> tuple[str, str] | None:
    """(A, B) the Compare page opens on, of one dataset's results: the first run by model label and
    mode, and the next one in that order of the same mode (else the next one); None for fewer than
    two runs."""
    runs = results.drop_duplicates("run_id")[["run_id", "mode", "model"]].sort_values(["model", "mode"])
    ids, modes = [str(i) for i in runs["run_id"]], [str(m) for m in runs["mode"]]
    if len(ids) < 2:
        return None
    same_mode = [i for i, mode in zip(ids[1:], modes[1:]) if mode == modes[0]]
    return ids[0], (same_mode or ids[1:])[0]


def compared_metrics(results: pd.DataFrame, run_a: str, run_b: str) -> tuple[str, ...]:
    """The metrics the Compare page tests for two runs: those either has, in the registry's order
    (instructability is a board's, not a run's), and the failure ratio."""
    present = set(results.loc[results["run_id"].isin([run_a, run_b]), "metric"])
    return tuple(m for m in METRICS if m in present and m != "instructability") + ("failure_ratio",)


def cached_comparison(store: RunStore, results: Callable[[], pd.DataFrame], *, profile: str, run_a: str, run_b: str,
                      invalid: str, metrics: tuple[str, ...]) -> tuple[pd.DataFrame, list[tuple[str, str]]]:
    """:func:`persobench.aggregate.comparison_table` of two runs (paired tests per metric, [(metric,
    why skipped)], reasons redacted) through the store's disk cache."""

    def build() -> tuple[pd.DataFrame, dict[str, Any]]:
        table, skipped = comparison_table(results(), run_a, run_b, metrics, invalid=invalid)
        return table, {"skipped": [(metric, redact(why)) for metric, why in skipped]}

    arguments = {"profile": profile, "run_a": run_a, "run_b": run_b, "invalid": invalid, "compared": list(metrics),
                 "metrics": metric_rules()}
    table, notes = cached_table(store, "comparison", arguments, build)
    return table, [(str(metric), str(why)) for metric, why in notes.get("skipped") or ()]


def warm_landing(store: RunStore) -> bool:
    """Build the landing page's first view (:func:`landing_view`) into the store's disk cache, so the
    first app process reads it instead of building it. True when the store has a view to build.
    Never raises: a cache that cannot be built or written only leaves the app to build it."""
    try:
        # Every manifest read once for the view and the results (a scan is a tenth of this step):
        # the results take the scan only while the store is as it was before it, else scan again
        # (the tables are keyed by the store's state when they are built).
        state = store.fingerprint()
        scanned = store.scan()
        view = landing_view(store, scanned[0])
        if view is None:
            return False
        profile, dataset = view
        results = functools.cache(lambda: load_results(
            store, profile=profile, dataset=dataset, scanned=scanned if store.fingerprint() == state else None))
        options: dict[str, Any] = {"profile": profile, "dataset": dataset, "invalid": LANDING_INVALID, "side_by_side": False,
                   "all_samples": False}
        board = cached_board(store, results, **options)
        cached_overall(store, results, lambda: board, **options)
        pair = compare_pair(results().frame)  # the Compare page's first view: same dataset and profile
        if pair is not None:
            cached_comparison(store, lambda: results().frame, profile=profile, run_a=pair[0], run_b=pair[1],
                              invalid=LANDING_INVALID, metrics=compared_metrics(results().frame, *pair))
        return True
    except Exception as exc:  # noqa: BLE001 - the command's own work is done: never fail it here
        log.info("%s: the landing page's tables were not prepared (%s: %s)", store.home, type(exc).__name__, exc)
        return False
