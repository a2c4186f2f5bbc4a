"""The top-level Python API: a few typed calls that run the whole pipeline (generate, score,
evaluate, leaderboard, the paper's published data), for a Python user as for the CLI, the background
jobs and the app. Everything else is imported from the package that owns it (each package's
``__init__`` lists its public names in ``__all__``: ``persobench.datasets``, ``persobench.aggregate``, ...).

::

    from persobench import pipeline

    run = pipeline.generate(pipeline.GenerationConfig(dataset="sample", model="baseline:reference", limit=8),
                            home="cache")
    report = pipeline.score([run.run_id], profile="offline", home="cache")
    board = pipeline.leaderboard(home="cache", dataset="sample")
    print(board.table)

Every call takes the store as ``home`` (a folder) or ``store`` (a :class:`~persobench.store.run_store.RunStore`);
every change it makes to a run is a read-merge-write under the run's state lock
(:meth:`persobench.store.run_store.Run.update`), so a ``score`` beside a running generation, or two scores
at once, never lose each other's values.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from persobench.core.gc_pace import fewer_collections
from persobench.datasets import fetch_paper
from persobench.errors import ConfigurationError
from persobench.generation import GenerationConfig, GenerationPlan, ProgressInfo, import_persobench, plan_generation, run_generation
from persobench.metrics import JudgeConfig, Profile
from persobench.records import Sample
from persobench.scoring import RunScore, ScoreConfig, ScoreReport, score, score_runs
from persobench.scoring.work_plan import run_samples as _run_samples
from persobench.store import Run, RunStore, open_store

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    # the calls
    "plan", "generate", "score", "score_runs", "evaluate", "leaderboard", "landing_kept_current", "fetch_published",
    "import_published", "run_samples",
    # what they take and return
    "Board", "Evaluation", "GenerationConfig", "JudgeConfig", "Run", "RunScore", "RunStore", "ScoreConfig",
    "ScoreReport",
]


# --- Generation ------------------------------------------------------------------------------------


def plan(config: "GenerationConfig", *, home: str | os.PathLike[str] | None = None,
         store: RunStore | None = None) -> "GenerationPlan":
    """What ``generate(config)`` would do: run id, samples, requests to send, cache hits, estimates.
    Sends nothing and needs no key."""

    return plan_generation(config, store=open_store(home, store))


def generate(config: "GenerationConfig", *, home: str | os.PathLike[str] | None = None,
             store: RunStore | None = None, progress: "Callable[[ProgressInfo], None] | None" = None,
             cancel: threading.Event | None = None, api_key: str | None = None) -> Run:
    """Generate (or resume) a run and post-process its replies; returns the run.

    Raises :class:`~persobench.errors.ConfigurationError` before sending anything for a bad
    configuration, :class:`~persobench.errors.RunAborted` when the first requests all fail for one
    reason, and :class:`~persobench.errors.StoreWriteError` when the disk refuses a write (every
    reply received is kept: see :func:`persobench.generation.run_generation`)."""

    return run_generation(config, store=open_store(home, store), progress=progress, cancel=cancel,
                          api_key=api_key)


# --- Scoring ---------------------------------------------------------------------------------------


def run_samples(run: Run, *, datasets: dict[str, dict[str, "Sample"]] | None = None) -> dict[str, "Sample"]:
    """Sample id -> the inputs ``run``'s replies answer (:func:`persobench.scoring.work_plan.run_samples`)."""

    return _run_samples(run, datasets=datasets)


@dataclass(frozen=True)
class Evaluation:
    """What :func:`evaluate` did: the run it generated and the scoring pass over it."""

    run: Run
    """The generated (or resumed) run."""
    report: ScoreReport
    """Its scores."""


def evaluate(config: "GenerationConfig", *, profile: "str | Profile" = "offline",
             metrics: Sequence[str] | None = None, home: str | os.PathLike[str] | None = None,
             store: RunStore | None = None, progress: "Callable[[ProgressInfo], None] | None" = None,
             cancel: threading.Event | None = None, api_key: str | None = None) -> Evaluation:
    """:func:`generate`, then :func:`score` the run."""
    store = open_store(home, store)
    run = generate(config, store=store, progress=progress, cancel=cancel, api_key=api_key)
    return Evaluation(run, score([run], profile=profile, metrics=metrics, store=store))


# --- Boards ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Board:
    """A leaderboard: the long table of :func:`persobench.aggregate.leaderboard` and how it was made."""

    table: "pd.DataFrame"
    """One row per run and metric (:data:`persobench.aggregate.BOARD_COLUMNS`): mean, std, n, CI as numbers."""
    profile: str
    """The scoring profile whose numbers the board holds."""
    invalid: str
    """How invalid replies count: "worst" (the paper's) or "exclude"."""
    skipped_runs: tuple[tuple[str, str], ...] = ()
    """(folder, reason) of runs that could not be read and were left out."""
    overall_ci: "pd.DataFrame | None" = None
    """:func:`persobench.aggregate.overall_with_ci` of the table (the overall scores with their CIs)."""

    @property
    def overall(self) -> "pd.DataFrame":
        """One row per run: the overall score and its rank (:func:`persobench.aggregate.overall_table`)."""
        from persobench import aggregate

        return aggregate.overall_table(self.table)

    def export(self, fmt: str, *, rank_by: str | None = None) -> str:
        """The board as text: table, csv, markdown, latex, html or json, models in rank order."""
        from persobench import aggregate

        return aggregate.export_board(self.table, fmt, overall=self.overall_ci, rank_by=rank_by)


def leaderboard(*, home: str | os.PathLike[str] | None = None, store: RunStore | None = None,
                dataset: str | None = None, mode: str | None = None, profile: str = "offline",
                invalid: str = "worst", include_incomplete: bool = False, side_by_side: bool = False,
                all_samples: bool = False) -> Board:
    """The leaderboard of the store's scored runs (one board per dataset, mode and protocol)."""
    from persobench import aggregate

    store = open_store(home, store)
    results = aggregate.load_results(store, profile=profile, include_incomplete=include_incomplete)
    if results.empty:
        raise ConfigurationError(f"no completed runs with generations in {store.runs_dir}; "
                                 "import (import-persobench) or generate runs first")
    for column, value in (("dataset", dataset), ("mode", mode)):
        if value is not None and value not in set(results.frame[column]):
            known = ", ".join(sorted(set(results.frame[column])))
            raise ConfigurationError(f"{column} {value!r}: no runs; runs exist for: {known}")
    table = aggregate.leaderboard(results, dataset=dataset, mode=mode, invalid=invalid, profile=profile,
                                  side_by_side=side_by_side, all_samples=all_samples)
    overall = aggregate.overall_with_ci(results, dataset=dataset, mode=mode, invalid=invalid, profile=profile,
                                        side_by_side=side_by_side, all_samples=all_samples, board=table)
    return Board(table, profile, invalid, tuple((str(p), str(r)) for p, r in results.skipped_runs), overall)


@contextlib.contextmanager
def landing_kept_current(home: str | os.PathLike[str] | None = None) -> Iterator[None]:
    """Run the block; when it changed the store (a run written, scored, imported or deleted), build
    the app's first views for the new state into the store's disk cache
    (:func:`persobench.aggregate.landing.warm_landing`), so the first app process opened on the store
    reads them instead of building them. A block that raises leaves the cache alone (the app builds
    what it needs); the check costs one ``stat`` per run file when nothing changed. Used by the CLI
    around every command and by the job process around a job's steps; a Python API user writing a
    store the app will open puts the calls inside it::

        with pipeline.landing_kept_current(home):
            pipeline.generate(config, home=home)
            pipeline.score(None, profile="offline", home=home)

    (:func:`score` itself does not prepare the views: the caller decides which block of work ends with
    the store in the state the app should open on.)"""
    store = RunStore(home) if home is not None else RunStore()
    before = store.fingerprint()
    yield
    # At a scoring pass's collector pace (fewer_collections): at the default one, the first older-
    # generation collection after a lexical pass walked everything it had left in the young
    # generations (40-60 ms, on one core, at the command's end), while nothing here makes cycles.
    with fewer_collections():
        if store.fingerprint() != before:
            from persobench.aggregate.landing import warm_landing

            try:
                warm_landing(store)
            except KeyboardInterrupt:  # the block's work is done: Ctrl-C only skips preparing the views
                pass


# --- The paper's published data --------------------------------------------------------------------


def fetch_published(*, home: str | os.PathLike[str] | None = None, store: RunStore | None = None,
                    url: str | None = None, sha256: str | None = None, size: int | None = None,
                    timeout: float = 60.0, progress: Callable[[str, int, int | None], None] | None = None,
                    manifest: str | os.PathLike[str] | None = None, trust_unpinned: bool = False,
                    limits: Any = None) -> Any:
    """Download the paper's repository archive (pinned commit, or a mirror ``url``) and unpack its
    data into ``<home>/reference``, every file checked against the content ``manifest`` (default:
    the packaged one for the pinned archive; an incomplete one needs ``trust_unpinned``); returns
    the :class:`~persobench.datasets.paper_archive.FetchResult`. ``limits`` caps the archive and
    what it unpacks (:class:`~persobench.datasets.paper_archive.ArchiveLimits`; None: its defaults)."""

    return fetch_paper(open_store(home, store).home, url=url, sha256=sha256, size=size, timeout=timeout,
                       progress=progress, manifest=manifest, trust_unpinned=trust_unpinned, limits=limits)


def import_published(folder: str | os.PathLike[str], *, home: str | os.PathLike[str] | None = None,
                     store: RunStore | None = None, datasets: Sequence[str] | None = None,
                     models: Sequence[str] | None = None, modes: Sequence[str] | None = None) -> Any:
    """Import published replies laid out like the paper's repository: one run per dataset, model
    and mode (idempotent); returns the :class:`~persobench.generation.importer.ImportReport`."""

    return import_persobench(open_store(home, store), folder, datasets=datasets, models=models, modes=modes)
