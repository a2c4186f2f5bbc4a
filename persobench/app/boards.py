"""Cached leaderboards, overall scores, per-sample values and comparisons for the pages, and which
backend produced the stored numbers. The statistics are :mod:`persobench.aggregate`'s; this module
only caches them per store state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from persobench.app.page_cache import cache_data, cache_resource
from persobench.core import redact
from persobench.aggregate import Results
from persobench.aggregate import DemoStory
from persobench.aggregate import load_metric_status
from persobench.store import RunStore
from persobench.aggregate import load_results
from persobench.aggregate import available_profiles as _available
from persobench.app.loaders import run_status_counts, store_scan
from persobench.aggregate import PAPER_RANKED_DATASET, published_ranks
from persobench.aggregate import INSTANCE_COLUMNS, instance_values
from persobench.metrics import METRICS
from persobench.aggregate import cached_table
from persobench.aggregate import cached_board, cached_comparison, cached_overall, metric_rules
from persobench.generation import DEMO_DATASET, DEMO_PROFILE, demo_runs
from persobench.aggregate import demo_story
from persobench.prompts import paper_protocol
from persobench.aggregate import sample_values as values
from persobench.aggregate import paired_values
from persobench.app.text import cell_text
from persobench.metrics import get_profile

if TYPE_CHECKING:  # pandas is imported inside the functions that need it
    import pandas as pd



@cache_data(show_spinner=False, max_entries=4)
def backend_counts(home: str, signature: str) -> "pd.DataFrame":  # noqa: ARG001 (signature is the cache key)
    """One row per (profile, metric, backend state) across the store's runs, with the run count:
    :func:`persobench.aggregate.load_metric_status` of every profile and run, counted.

    Columns: profile, metric, status (ok, degraded, unavailable), model_id, revision, backend,
    metric_version, reason, runs.
    """

    status = load_metric_status(RunStore(home), profile=None, include_incomplete=True)
    status["reason"] = status["reason"].map(redact)
    columns = ["profile", "metric", "status", "model_id", "revision", "backend", "metric_version", "reason"]
    return status.groupby(columns, sort=False).size().rename("runs").reset_index()


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

        described = get_profile(name).describe()
    except Exception as exc:  # noqa: BLE001
        return pd.DataFrame([{"slot": "?", "model": "", "source": "", "note": redact(str(exc))}])
    rows = []
    for slot, info in (described.get("slots") or {}).items():
        rows.append({"slot": slot, "model": info.get("model_id") or "", "source": info.get("source") or "",
                     "note": redact(info.get("unavailable_reason") or "")})
    return pd.DataFrame(rows, columns=["slot", "model", "source", "note"])


@cache_resource(show_spinner="Loading scores…", max_entries=6)
def loaded_results(home: str, signature: str, profile: str, dataset: str | None = None) -> "Results":  # noqa: ARG001
    """``aggregate.load_results`` for one profile (and one dataset, when given: a board of it reads
    only its runs' tables): shared, read-only (never modify the frame)."""

    return load_results(RunStore(home), profile=profile, dataset=dataset, scanned=store_scan(home, signature))


def results_frame(home: str, signature: str, profile: str, dataset: str | None = None) -> "pd.DataFrame":
    """The per-sample table of :func:`loaded_results` (shared, read-only)."""
    return loaded_results(home, signature, profile, dataset).frame


@cache_data(show_spinner=False, max_entries=4)
def available_profiles(home: str, signature: str) -> list[str]:

    return _available(RunStore(home), runs=store_scan(home, signature)[0])


def _stored(home: str, table: str, build: "Callable[[], pd.DataFrame]", **arguments: Any) -> "pd.DataFrame":
    """``build()``, through the store's on-disk cache of aggregated tables: a just-started app reads
    the table a previous process built from the same store state instead of aggregating again."""
    return _stored_with_notes(home, table, lambda: (build(), {}), **arguments)[0]


def _stored_with_notes(home: str, table: str, build: "Callable[[], tuple[pd.DataFrame, dict[str, Any]]]",
                       **arguments: Any) -> "tuple[pd.DataFrame, dict[str, Any]]":
    """:func:`_stored` for a table that comes with JSON notes."""

    return cached_table(RunStore(home), table, {**arguments, "metrics": metric_rules()}, build)


@cache_data(show_spinner="Aggregating…", max_entries=48)
def board_for(home: str, signature: str, profile: str, dataset: str, invalid: str, side_by_side: bool = False,
              all_samples: bool = False) -> "pd.DataFrame":
    """The leaderboards of one dataset (both modes, every protocol): one row per run and metric; the
    ``board`` column tells the boards apart (see :func:`persobench.aggregate.leaderboard`). Read from
    the store's disk cache, where the command that last changed the store left the landing page's
    (:func:`persobench.aggregate.landing.warm_landing`)."""

    return cached_board(RunStore(home), lambda: loaded_results(home, signature, profile, dataset), profile=profile,
                        dataset=dataset, invalid=invalid, side_by_side=side_by_side, all_samples=all_samples)


@cache_data(show_spinner=False, max_entries=4)
def demo_story_for(home: str, signature: str) -> "DemoStory | None":
    """:func:`persobench.aggregate.story.demo_story` when the store holds the demo's runs (recognised
    from their manifests, :func:`persobench.generation.demo.demo_runs`), else None. A store without
    them costs one look at the manifests the app has already read."""

    manifests = [run.manifest for run in store_scan(home, signature)[0]]
    # The demo answers the built-in sample dataset (generation.demo.DEMO_DATASET): a store without a
    # run of it (the published runs) is not the demo's, and never imports the generation stage.
    if not any(m.dataset == "sample" for m in manifests):
        return None

    runs = demo_runs(manifests)
    if not runs:
        return None

    return demo_story(loaded_results(home, signature, DEMO_PROFILE, DEMO_DATASET), runs, profile=DEMO_PROFILE)


def board_choices(board: "pd.DataFrame", mode: str) -> list[str]:
    """The boards (protocol labels) of one mode, the paper protocol's first."""

    names = sorted(set(board.loc[board["mode"] == mode, "board"]))
    paper = paper_protocol(mode).label
    return sorted(names, key=lambda name: (name != paper, name))


@cache_data(show_spinner=False, max_entries=48)
def overall_with_ci(home: str, signature: str, profile: str, dataset: str, invalid: str, side_by_side: bool = False,
                    all_samples: bool = False) -> "pd.DataFrame":
    """:func:`persobench.aggregate.overall_with_ci` of one dataset (both modes), on the same boards and
    samples as :func:`board_for`."""

    return cached_overall(RunStore(home), lambda: loaded_results(home, signature, profile, dataset),
                          lambda: board_for(home, signature, profile, dataset, invalid, side_by_side, all_samples),
                          profile=profile, dataset=dataset, invalid=invalid, side_by_side=side_by_side,
                          all_samples=all_samples)


@cache_data(show_spinner=False, max_entries=32)
def sample_values(home: str, signature: str, profile: str, dataset: str, mode: str, metric: str,
                  invalid: str, board: str | None = None, side_by_side: bool = False,
                  all_samples: bool = False) -> "pd.DataFrame":
    """:func:`persobench.aggregate.sample_values`: model, sample_id, value of one metric, on the runs
    and sample ids of one board (as :func:`board_for` with the same arguments)."""

    def build() -> "pd.DataFrame":
        return values(results_frame(home, signature, profile, dataset), dataset=dataset, mode=mode, metric=metric,
                      invalid=invalid, profile=profile, board=board, side_by_side=side_by_side,
                      all_samples=all_samples)

    return _stored(home, "sample_values", build, profile=profile, dataset=dataset, mode=mode, metric=metric,
                   invalid=invalid, board=board, side_by_side=side_by_side, all_samples=all_samples)


@cache_data(show_spinner="Comparing…", max_entries=32)
def comparison_table(home: str, signature: str, profile: str, run_a: str, run_b: str, invalid: str,
                     metrics: tuple[str, ...], dataset: str | None = None) -> tuple["pd.DataFrame", list[tuple[str, str]]]:
    """:func:`persobench.aggregate.comparison_table`: (paired tests per metric, [(metric, why skipped)]).
    ``dataset``: the two runs' (only its runs' results are loaded; the table is the same)."""

    return cached_comparison(RunStore(home), lambda: results_frame(home, signature, profile, dataset), profile=profile,
                             run_a=run_a, run_b=run_b, invalid=invalid, metrics=metrics)


@cache_data(show_spinner=False, max_entries=32)
def paired_sample_values(home: str, signature: str, profile: str, run_a: str, run_b: str, metric: str,
                         invalid: str, dataset: str | None = None) -> "pd.DataFrame":
    """:func:`persobench.aggregate.paired_values` (sample_id, A, B, difference); empty when not comparable.
    ``dataset``: the two runs' (only its runs' results are loaded)."""
    import pandas as pd


    try:
        return paired_values(results_frame(home, signature, profile, dataset), run_a, run_b, metric,
                             invalid=invalid)
    except ValueError:
        return pd.DataFrame(columns=["sample_id", "A", "B", "difference"])


# -- shaping a board for display (no caching: cheap, on the filtered board) ----------------------


def metric_cells(board: "pd.DataFrame", models: "Sequence[str]", metrics: "Sequence[str]") -> "pd.DataFrame":
    """One row per model, one text cell ``mean ± std [95% CI]`` per metric (``n/a`` when absent)."""
    import pandas as pd


    wide = pd.DataFrame({"model": list(models)})
    first = board.drop_duplicates(["metric", "model"])
    numbers = {(metric, model): (mean, std, low, high) for metric, model, mean, std, low, high in zip(
        first["metric"], first["model"], first["mean"], first["std"], first["ci_low"], first["ci_high"])}
    for metric in metrics:
        wide[metric] = [cell_text(*numbers[metric, m]) if (metric, m) in numbers else "n/a" for m in wide["model"]]
    return wide


def unavailable_by_reason(board: "pd.DataFrame") -> dict[str, list[str]]:
    """reason -> the metrics of the board that have no number for it (status ``unavailable``)."""
    found: dict[str, list[str]] = {}
    for row in board[board["status"] == "unavailable"].drop_duplicates("metric").itertuples():
        found.setdefault(str(row.reason or "no model for it in this profile"), []).append(str(row.metric))
    return found


def mode_differences(board: "pd.DataFrame", metric: str) -> "pd.DataFrame":
    """model, the metric's mean per mode and, with both modes, ``cot - vanilla``."""
    pick = board[board["metric"] == metric].pivot_table(index="model", columns="mode", values="mean")
    if {"vanilla", "cot"} <= set(pick.columns):
        pick["cot - vanilla"] = pick["cot"] - pick["vanilla"]
    pick.columns.name = None
    return pick.reset_index()


def board_statuses(home: str, signature: str, board: "pd.DataFrame") -> dict[str, dict[str, int]]:
    """model label of the board -> its run's reply status counts (the sentence's "how it fails")."""
    counts = run_status_counts(home, signature, tuple(sorted(board["run_id"].unique())))
    by_run = {run_id: dict(zip(group["status"], group["count"].astype(int)))
              for run_id, group in counts.groupby("run_id", sort=False)}
    pairs = board.drop_duplicates("run_id")[["model", "run_id"]]
    return {str(model): by_run.get(run_id, {}) for model, run_id in zip(pairs["model"], pairs["run_id"])}


def paper_ranks_for(board: "pd.DataFrame", dataset: str, mode: str, protocol: str) -> dict[str, int]:
    """The paper's own rank of the board's models (``aggregate.published_ranks``) when the board is
    the paper's: its ranked dataset under the paper's protocol, holding at least two of its models."""
    if dataset != PAPER_RANKED_DATASET or protocol != paper_protocol(mode).label:
        return {}
    ranks = published_ranks(mode)
    shown = {str(m): ranks[str(m)] for m in board["model"].unique() if str(m) in ranks}
    return shown if len(shown) >= 2 else {}


@cache_data(show_spinner=False, max_entries=32)
def dialogue_values(home: str, signature: str, profile: str | None, dataset: str, samples: tuple[str, ...] | None = None,
                    metric: str | None = None) -> "pd.DataFrame":
    """The values the board averages, per run and dialogue of ``dataset`` (``aggregate.instances.
    instance_values``: run_id, sample_id, metric, value, scored_worst; an invalid reply takes the
    metric's worst value, marked), from the same results as :func:`board_for`: of the given dialogues
    (all: None) and of one metric (all: None). Empty without a profile."""
    import pandas as pd

    if profile is None:
        return pd.DataFrame(columns=INSTANCE_COLUMNS)
    frame = results_frame(home, signature, profile, dataset)
    return instance_values(frame, list(frame["run_id"].unique()), samples, metric=metric)


def dialogue_metrics(home: str, signature: str, profile: str | None, dataset: str) -> list[str]:
    """The metrics :func:`dialogue_values` has for ``dataset``, in the registry's order."""
    if profile is None:
        return []
    present = set(results_frame(home, signature, profile, dataset)["metric"].unique())
    return [m for m in METRICS if m in present]
