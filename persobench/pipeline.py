"""The library's front door: typed calls for the whole pipeline, used by the CLI, the background
jobs, the demo and the app alike.

::

    from persobench import pipeline
    from persobench.generation import GenerationConfig

    run = pipeline.generate(GenerationConfig(dataset="sample", model="baseline:reference", limit=8), home="cache")
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
import importlib
import os
import threading
import types
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from persobench.errors import ConfigurationError, StoreError  # noqa: F401 - the front door's errors
from persobench.scoring.outcome import RunScore, ScoreReport  # noqa: F401 - the front door's types
from persobench.scoring.score_config import EXECUTORS, INPUT_LAYOUTS, SCORE_FLAGS, ScoreConfig  # noqa: F401
from persobench.metrics.unieval import UNIEVAL_SCORERS  # noqa: F401 - score --unieval-scorer choices
from persobench.store.run_store import Run, RunStore

# --- What the front ends use besides the calls below ---------------------------------------------------
# The CLI, the jobs, the demo and the app import the library only through this module (plus the record
# types and the registries; tests/test_architecture.py checks it), so these names are its public surface.
# The aggregate stage loads pandas: its names are handed out on first use (``__getattr__`` below), which
# keeps the CLI's start-up light.
from persobench.llm.response_cache import default_cache_dir  # noqa: F401
from persobench.core.console import EscapingStream, ProgressBar, is_terminal, printable  # noqa: F401
from persobench.store.csv_io import csv_text  # noqa: F401
from persobench.datasets import (  # noqa: F401
    DatasetError, dataset_names, get_dataset_info, load_all, load_dataset, reference_dir, samples_by_id)
from persobench.datasets.tables import tables_dir  # noqa: F401
from persobench.datasets.paper_archive import (  # noqa: F401
    PAPER_ARCHIVE, ArchiveLimits, download_progress, fetched_reference, paper_manifest)
from persobench.store.files import atomic_write_json, atomic_write_text, utc_now, write_output, write_refused  # noqa: F401
from persobench.generation import (  # noqa: F401
    COLUMNS, TABLE, GenerationConfig, RetryPolicy, read_progress, request_cancel)
from persobench.generation.config import RUN_FLAGS, public_config  # noqa: F401
from persobench.generation.progress import STARTING, every_reply_failed, run_state  # noqa: F401
from persobench.generation.demo import (  # noqa: F401
    DEFAULT_LIMIT, DEMO_DATASET, DEMO_PROFILE, demo_configs, demo_runs)
from persobench.generation.batch_run import BatchPending, batch_notes, waiting_batch  # noqa: F401
from persobench.generation.lock import interruption  # noqa: F401
from persobench.generation.numbers import check_number, number_argument  # noqa: F401
from persobench.generation.plan import default_template_for, messages_for  # noqa: F401
from persobench.generation.rows import EXIT_NO_SAMPLE_SUCCEEDED, no_sample_succeeded  # noqa: F401
from persobench.llm.batch_driver import (  # noqa: F401
    BatchSettings, batch_cost, estimated_max_batch_cost, pending_batches)
from persobench.llm.batch_driver import FALLBACKS, BatchFailed, batch_listing  # noqa: F401
from persobench.generation.importer import dataset_for_folder, find_response_files  # noqa: F401
from persobench.store.locks import lock_holder  # noqa: F401
from persobench.metrics import METRICS, metric_names, validate_metric_names  # noqa: F401
from persobench.metrics.backends import get_profile  # noqa: F401
from persobench.metrics.judge.labeller import JUDGE_TIMEOUT_FLAG, JudgeLabeller, make_judge  # noqa: F401
from persobench.metrics.judge.judge_batch import pending_note as judge_batch_note  # noqa: F401
from persobench.scoring.judge_estimate import (  # noqa: F401
    JUDGED_METRICS, JUDGED_METRICS_TEXT, estimate_new_runs, estimate_runs)
from persobench.metrics.judge.judge_config import JUDGE_FLAGS, Judge, resolve_judge  # noqa: F401
from persobench.config import JudgeConfig  # noqa: F401
from persobench.metrics.judge.judge_prompt import load_template  # noqa: F401
from persobench.metrics.persona import COVERAGE_SIMILARITY_THRESHOLD  # noqa: F401
from persobench.scoring.ray_executor import import_ray  # noqa: F401
from persobench.providers.models_registry import find_registry_file, load_registry, resolve_model  # noqa: F401
from persobench.providers.presets import PAPER_PRESETS  # noqa: F401
from persobench.core.processes import pid_alive  # noqa: F401
from persobench.prompts.templates import DEFAULT_TEMPLATE, TemplateError, build_messages, get_template  # noqa: F401
from persobench.prompts.protocol import paper_protocol, protocol_of  # noqa: F401
from persobench.providers import PROVIDERS, key_requirement, missing_key_env  # noqa: F401
from persobench.providers.batch_api import supports_batch  # noqa: F401
from persobench.core.secrets import (  # noqa: F401
    credentials_environment, is_secret_name, key_allowed, public_address, public_text, public_url, redact,
    remember_url,
    secret_environment, url_with_credentials)
from persobench.store.run_store import StoreProblem, default_home  # noqa: F401
from persobench.core.structured import LABEL_SUFFIX, structured_label  # noqa: F401
from persobench.generation import GenerationPlan, ProgressInfo
from persobench.metrics.backends import Profile
from persobench.records import Sample
from persobench.generation import plan_generation
from persobench.generation import run_generation
from persobench.scoring.work_plan import run_samples as _run_samples
from persobench.scoring.score_pass import score, score_runs  # noqa: F401 - the front door's scoring
from persobench.scoring.executors import ScoreProgress  # noqa: F401
from persobench.store.run_lookup import open_store, resolve_run, resolve_runs  # noqa: F401
from persobench.datasets.paper_archive import fetch_paper
from persobench.generation.importer import import_persobench

if TYPE_CHECKING:
    import pandas as pd


#: The stages whose names the front door hands out on first use: they load pandas (and the report,
#: plotly), and the CLI's start-up must not. ``leaderboard`` is this module's own call, so the
#: aggregate's table builder of that name is ``board_table`` here.
_LAZY_MODULES = ("persobench.aggregate", "persobench.aggregate.disk_cache", "persobench.aggregate.exports",
                 "persobench.aggregate.story", "persobench.aggregate.ranking",
                 "persobench.aggregate.published_ranking", "persobench.aggregate.landing",
                 "persobench.aggregate.finding", "persobench.aggregate.failures", "persobench.aggregate.instances",
                 "persobench.report",
                 "persobench.report.charts")
_LAZY_ALIASES = {"board_table": "leaderboard"}


def __getattr__(name: str) -> Any:
    """A public name of the aggregate or report stage, imported when first asked for."""
    if name.startswith("_"):  # the import system probes dunders (``__path__``): never load pandas for them
        raise AttributeError(f"module 'persobench.pipeline' has no attribute {name!r}")
    target = _LAZY_ALIASES.get(name, name)
    for module_name in _LAZY_MODULES:
        module = importlib.import_module(module_name)
        public = getattr(module, "__all__", None)
        if public is not None:
            if target in public:
                return getattr(module, target)
            continue
        found = getattr(module, target, None)
        # Only what the module itself defines: never its own imports (``pd``, ``Path``, a stage's helper).
        if found is not None and not isinstance(found, types.ModuleType) \
                and getattr(found, "__module__", module_name) == module_name:
            return found
    raise AttributeError(f"module 'persobench.pipeline' has no attribute {name!r}")


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

    (:func:`score` itself is not wrapped: it is called as it is on the judge's path from the app to
    its requests, docs/development.md.)"""
    store = RunStore(home) if home is not None else RunStore()
    before = store.fingerprint()
    yield
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
