"""The library's front door: typed calls for the whole pipeline, used by the CLI, the background
jobs, the demo and the app alike.

::

    from persobench import pipeline
    from persobench.generation import GenerationConfig

    run = pipeline.generate(GenerationConfig(dataset="sample", model="baseline:reference", limit=8), home="cache")
    report = pipeline.score([run.run_id], profile="offline", home="cache")
    board = pipeline.leaderboard(home="cache", dataset="sample")
    print(board.table)

Every call takes the store as ``home`` (a folder) or ``store`` (a :class:`~persobench.store.RunStore`);
every change it makes to a run is a read-merge-write under the run's state lock
(:meth:`persobench.store.Run.update`), so a ``score`` beside a running generation, or two scores
at once, never lose each other's values.
"""

from __future__ import annotations

import importlib
import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from persobench.errors import ConfigurationError, PersoBenchError, StoreError
from persobench.store import Run, RunStore

# --- What the front ends use besides the calls below ---------------------------------------------------
# The CLI, the jobs, the demo and the app import the library only through this module (plus the record
# types and the registries; tests/test_architecture.py checks it), so these names are its public surface.
# The aggregate stage loads pandas: its names are handed out on first use (``__getattr__`` below), which
# keeps the CLI's start-up light.
from persobench.llm.response_cache import default_cache_dir  # noqa: F401
from persobench.console import EscapingStream, ProgressBar, is_terminal, printable  # noqa: F401
from persobench.csv_io import csv_text  # noqa: F401
from persobench.datasets import (  # noqa: F401
    DatasetError, dataset_names, get_dataset_info, load_all, load_dataset, reference_dir, samples_by_id)
from persobench.datasets.tables import tables_dir  # noqa: F401
from persobench.datasets.paper_archive import (  # noqa: F401
    PAPER_ARCHIVE, ArchiveLimits, download_progress, fetched_reference, paper_manifest)
from persobench.files import atomic_write_json, atomic_write_text, utc_now, write_refused  # noqa: F401
from persobench.generation import (  # noqa: F401
    COLUMNS, TABLE, GenerationConfig, RetryPolicy, read_progress, request_cancel)
from persobench.generation.config import RUN_FLAGS, public_config  # noqa: F401
from persobench.generation.demo import (  # noqa: F401
    DEFAULT_LIMIT, DEMO_DATASET, DEMO_PROFILE, demo_configs, demo_runs)
from persobench.generation.batch_run import BatchPending  # noqa: F401
from persobench.generation.lock import interruption  # noqa: F401
from persobench.generation.numbers import check_number  # noqa: F401
from persobench.generation.plan import default_template_for, messages_for  # noqa: F401
from persobench.generation.rows import EXIT_NO_SAMPLE_SUCCEEDED, no_sample_succeeded  # noqa: F401
from persobench.llm.batch_driver import (  # noqa: F401
    BatchSettings, batch_cost, estimated_max_batch_cost, pending_batches)
from persobench.importer import dataset_for_folder, find_response_files  # noqa: F401
from persobench.locks import lock_holder  # noqa: F401
from persobench.metrics import METRICS, metric_names, validate_metric_names  # noqa: F401
from persobench.metrics.backends import get_profile  # noqa: F401
from persobench.metrics.judge import JUDGE_TIMEOUT_FLAG, judge_labeller, make_judge  # noqa: F401
from persobench.metrics.judge_plan import JUDGED_METRICS, estimate_new_runs, estimate_runs  # noqa: F401
from persobench.metrics.persona import COVERAGE_SIMILARITY_THRESHOLD  # noqa: F401
from persobench.metrics.ray_executor import import_ray  # noqa: F401
from persobench.models_registry import find_registry_file, load_registry, resolve_model  # noqa: F401
from persobench.presets import PAPER_PRESETS  # noqa: F401
from persobench.processes import pid_alive  # noqa: F401
from persobench.prompts import DEFAULT_TEMPLATE, TemplateError, build_messages, get_template  # noqa: F401
from persobench.protocol import paper_protocol  # noqa: F401
from persobench.providers import PROVIDERS, key_requirement, missing_key_env  # noqa: F401
from persobench.providers.batch_api import supports_batch  # noqa: F401
from persobench.secrets import (  # noqa: F401
    credentials_environment, is_secret_name, key_allowed, public_address, public_text, public_url, redact,
    remember_url,
    secret_environment, url_with_credentials)
from persobench.store import StoreProblem, default_home  # noqa: F401
from persobench.structured import LABEL_SUFFIX, structured_label  # noqa: F401

if TYPE_CHECKING:
    import pandas as pd

    from persobench.generation import GenerationConfig, GenerationPlan, ProgressInfo
    from persobench.metrics.backends import Profile
    from persobench.metrics.scoring import RunScoreSummary
    from persobench.records import Sample

#: The stages whose names the front door hands out on first use: they load pandas (and the report,
#: plotly), and the CLI's start-up must not. ``leaderboard`` is this module's own call, so the
#: aggregate's table builder of that name is ``board_table`` here.
_LAZY_MODULES = ("persobench.aggregate", "persobench.aggregate.disk_cache", "persobench.aggregate.exports",
                 "persobench.aggregate.story", "persobench.aggregate.ranking", "persobench.report",
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
        if (target in public) if public is not None else hasattr(module, target):
            return getattr(module, target)
    raise AttributeError(f"module 'persobench.pipeline' has no attribute {name!r}")


#: Where :func:`score` computes: in this process, or on a Ray cluster.
EXECUTORS = ("local", "ray")
#: ``progress(stage, done, total)`` of a scoring pass; ``stage`` names the run (or dataset) and step.
ScoreProgress = Callable[[str, int, int], None]


def open_store(home: str | os.PathLike[str] | None = None, store: RunStore | None = None) -> RunStore:
    """``store`` itself, or the store at ``home`` (default ``$PERSOBENCH_HOME`` or ``./cache``)."""
    return store if store is not None else RunStore(home)


# --- Generation ------------------------------------------------------------------------------------


def plan(config: "GenerationConfig", *, home: str | os.PathLike[str] | None = None,
         store: RunStore | None = None) -> "GenerationPlan":
    """What ``generate(config)`` would do: run id, samples, requests to send, cache hits, estimates.
    Sends nothing and needs no key."""
    from persobench.generation import plan_generation

    return plan_generation(config, store=open_store(home, store))


def generate(config: "GenerationConfig", *, home: str | os.PathLike[str] | None = None,
             store: RunStore | None = None, progress: "Callable[[ProgressInfo], None] | None" = None,
             cancel: threading.Event | None = None, api_key: str | None = None) -> Run:
    """Generate (or resume) a run and post-process its replies; returns the run.

    Raises :class:`~persobench.errors.ConfigurationError` before sending anything for a bad
    configuration, :class:`~persobench.errors.RunAborted` when the first requests all fail for one
    reason, and :class:`~persobench.errors.StoreWriteError` when the disk refuses a write (every
    reply received is kept: see :func:`persobench.generation.run_generation`)."""
    from persobench.generation import run_generation

    return run_generation(config, store=open_store(home, store), progress=progress, cancel=cancel,
                          api_key=api_key)


# --- Scoring ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunScore:
    """What one scoring pass did to one run."""

    run_id: str
    """The run."""
    summary: "RunScoreSummary | None" = None
    """New and cached values per metric and the provenance; ``None`` when the run was not scored."""
    error: str = ""
    """Why the run was not scored (one line), or ``""``."""

    @property
    def ok(self) -> bool:
        return self.summary is not None


@dataclass(frozen=True)
class ScoreReport:
    """What :func:`score` did."""

    profile: str
    """The profile key the numbers were stored under."""
    device: str
    """Where the models ran ("cpu", "cuda" ...; "ray" for the Ray executor's actors)."""
    runs: tuple[RunScore, ...] = ()
    """One entry per run asked for, in order."""
    unavailable: Mapping[str, str] = field(default_factory=dict)
    """Metric -> why it has no number (its model is not available in this profile)."""
    degraded: Mapping[str, str] = field(default_factory=dict)
    """Metric -> why its numbers come from a fallback (stored, labelled in the provenance)."""

    @property
    def failures(self) -> int:
        """Runs that could not be scored."""
        return sum(1 for r in self.runs if not r.ok)

    @property
    def new_values(self) -> int:
        """Values computed by this pass, over all runs."""
        return sum(sum(r.summary.computed.values()) for r in self.runs if r.summary is not None)


def run_samples(run: Run, *, datasets: dict[str, dict[str, "Sample"]] | None = None) -> dict[str, "Sample"]:
    """Sample id -> the inputs ``run``'s replies answer, which is what its scores are computed against.

    A run records its samples when it is generated (``samples.parquet``), so an edited, moved or
    replaced dataset file never changes its scores. An imported run reads the prompt table it was
    imported with. A run made before runs recorded their samples reads its dataset, and is refused
    (:class:`~persobench.errors.StoreError` naming the file) when that dataset is a file whose
    checksum no longer matches the one recorded at generation time. ``datasets``: a per-call cache
    of loaded registered datasets."""
    recorded = run.recorded_samples()
    if recorded is not None:
        return recorded
    details = run.manifest.details
    if details.imported is not None and details.imported.prompts_file:
        from persobench.importer import samples_for_run

        try:
            return samples_for_run(run)
        except (PersoBenchError, KeyError, ValueError, OSError) as exc:
            raise StoreError(f"run {run.run_id}: cannot read its imported prompt table "
                             f"{details.imported.prompts_file}: {exc}") from None
    _check_dataset_file(run)

    name = run.manifest.dataset
    cache = datasets if datasets is not None else {}
    try:
        if name not in cache:
            cache[name] = samples_by_id(name)
        everything = cache[name]
        return {sid: everything[sid] for sid in run.manifest.sample_ids}
    except KeyError as exc:
        raise StoreError(f"run {run.run_id}: sample {exc.args[0]!r} is not in dataset {name!r} any more") from None
    except (PersoBenchError, ValueError, OSError) as exc:
        raise StoreError(f"run {run.run_id}: cannot load the samples of dataset {name!r}: {exc}") from None


def _check_dataset_file(run: Run) -> None:
    """Refuse to read a user file that changed or moved since the run was generated from it."""
    from persobench.files import sha256_file

    record = run.manifest.details.dataset_file
    if record is None or not record.path:
        return
    try:
        digest = sha256_file(record.path)
    except OSError:
        raise StoreError(f"{record.path}: the dataset file run {run.run_id} was generated from is gone; put it "
                         "back to score the run") from None
    if digest != record.sha256:
        raise StoreError(f"{record.path}: the dataset file changed since run {run.run_id} was generated from it "
                         "(checksum differs); its scores would no longer match its replies. Restore the file, or "
                         "generate the run again")


def _by_dataset(runs: Iterable[Run]) -> list[list[Run]]:
    """Runs grouped by dataset, in order of first appearance (the runs of a dataset share texts)."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(str(run.manifest.dataset), []).append(run)
    return list(groups.values())


def _valid_replies(run: Run) -> int:
    """The run's valid replies as its manifest counts them (0 when it does not say)."""
    counts = run.manifest.extra.get("counts") or {}
    try:
        return int(counts.get("ok", 0))
    except (TypeError, ValueError):
        return 0


def resolve_runs(store: RunStore, names: Sequence[str] | None) -> list[Run]:
    """Runs by id or unique id prefix; every readable run with generations when ``names`` is empty."""
    if not names:
        return [r for r in store.runs() if r.has_table("generations")]
    return [resolve_run(store, name) for name in names]


def resolve_run(store: RunStore, name: str) -> Run:
    """A run by id or unique id prefix (:class:`ConfigurationError` naming the candidates otherwise)."""
    try:
        return store.get(name)
    except StoreError:
        if _run_folder_exists(store, name):  # the run is there but unreadable: say so, not "no run"
            raise
    matches = [r for r in store.runs() if r.run_id.startswith(name)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise ConfigurationError(f"no run {name!r} in {store.runs_dir}")
    raise ConfigurationError(f"{name!r} matches {len(matches)} runs: {', '.join(r.run_id for r in matches[:5])}")


def _run_folder_exists(store: RunStore, name: str) -> bool:
    try:
        return bool(store.run_path(name).is_dir())
    except StoreError:  # not even a valid run id
        return False


def score(runs: Sequence[str | Run] | None = None, *, profile: "str | Profile" = "offline",
          metrics: Sequence[str] | None = None, overrides: Mapping[str, str] | None = None,
          precision: str = "float32", home: str | os.PathLike[str] | None = None, store: RunStore | None = None,
          progress: ScoreProgress | None = None,
          on_run: "Callable[[RunScore], None] | None" = None, executor: str = "local",
          ray_address: str | None = None) -> ScoreReport:
    """Score runs (ids, prefixes or handles; default every run with generations) with a profile.

    Only values a run lacks are computed: a (sample, metric, profile) already stored from the same
    reply and inputs is kept; one whose reply was generated again is computed again. The runs of a
    dataset are embedded in one pass (their shared references and persona sentences once), cached
    in the store. Each run's values are merged into what is stored under its lock. ``on_run`` is
    called after each run (the CLI prints a line per run).

    ``executor``: ``"local"`` (this process) or ``"ray"``: the values are computed by Ray actors
    (:mod:`persobench.metrics.ray_executor`) on the cluster at ``ray_address`` (``"auto"``, an
    address, or None: the cluster this process already joined, ``$RAY_ADDRESS``, else a new local
    one), and written here exactly as the local executor writes them. Without Ray installed, a
    :class:`~persobench.errors.ConfigurationError` says what to install."""
    from persobench.metrics import lexical
    from persobench.metrics.backends import Profile
    from persobench.metrics.encoder import TextEncoder, store_cache_root
    from persobench.metrics.judge import JudgeError
    from persobench.metrics.scoring import score_run

    if executor not in EXECUTORS:
        raise ConfigurationError(f"unknown executor {executor!r}; known: {', '.join(EXECUTORS)}")
    if executor == "ray":
        from persobench.metrics.ray_executor import import_ray

        import_ray()  # before any work: without Ray, one line saying what to install
    requested = validate_metric_names(list(metrics)) if metrics is not None else None
    prof = profile if isinstance(profile, Profile) else get_profile(profile, dict(overrides or {}),
                                                                     precision=precision)
    store = open_store(home, store)
    chosen = (resolve_runs(store, None) if not runs
              else [r if isinstance(r, Run) else resolve_run(store, r) for r in runs])
    results: list[RunScore] = []
    unavailable: dict[str, str] = {}
    degraded: dict[str, str] = {}
    datasets: dict[str, dict[str, Sample]] = {}
    lexical_wanted = requested is None or any(m in requested for m in (*lexical.REFERENCE_LEXICAL,
                                                                       *lexical.REPLY_LEXICAL))
    expected = sum(_valid_replies(run) for run in chosen) if lexical_wanted else 0

    def finish(result: RunScore) -> None:
        results.append(result)
        if result.summary is not None:
            for metric, prov in result.summary.provenance.items():
                if prov.get("status") == "unavailable":
                    unavailable.setdefault(metric, prov.get("reason", ""))
                elif prov.get("status") == "degraded":
                    degraded.setdefault(metric, prov.get("reason", ""))
        if on_run is not None:
            on_run(result)

    if executor == "ray":
        _score_on_ray(chosen, prof, requested, store, ray_address, datasets, progress, finish)
        order = {run.run_id: k for k, run in enumerate(r for group in _by_dataset(chosen) for r in group)}
        results.sort(key=lambda result: order[result.run_id])  # the local executor's order
        return ScoreReport(prof.key, "ray", tuple(results), unavailable, degraded)

    # One encoder for the whole call: the runs of a dataset are embedded together, cached in the
    # store, and the memory is given back after each dataset.
    encoder = TextEncoder(prof, store_cache_root(store.home))
    with lexical.worker_pool(expected):  # both cores for the lexical metrics of a large job
        for group in _by_dataset(chosen):
            ready = _embed_group(group, encoder, prof, requested, datasets, progress)
            for run in group:
                samples = ready.get(run.run_id)
                if isinstance(samples, str):
                    finish(RunScore(run.run_id, error=samples))
                    continue
                try:
                    summary = score_run(run, samples, profile=prof, metrics=requested, encoder=encoder,
                                        progress=_staged(progress, run.run_id[:48]))
                except JudgeError:
                    raise  # no key, or a judge failing every request: one line, not one per run
                except PersoBenchError as exc:
                    finish(RunScore(run.run_id, error=str(exc)))
                    continue
                finish(RunScore(run.run_id, summary))
            encoder.release()
    return ScoreReport(prof.key, prof.device, tuple(results), unavailable, degraded)


def _score_on_ray(chosen: list[Run], prof: "Profile", requested: Sequence[str] | None, store: RunStore,
                  address: str | None, datasets: dict[str, dict[str, "Sample"]],
                  progress: ScoreProgress | None, finish: Callable[[RunScore], None]) -> None:
    """The Ray executor: plan each run here, compute on the actors, write here as runs complete."""
    from persobench.metrics.encoder import store_cache_root
    from persobench.metrics.ray_executor import RayScoring
    from persobench.metrics.scoring import plan_run, write_run

    chosen = list({run.run_id: run for run in chosen}.values())  # a run named twice is scored once
    if not chosen:
        return  # nothing to score: no cluster to start
    wanted = validate_metric_names(list(requested) if requested is not None else None)
    runs = {run.run_id: run for run in chosen}

    def write(run: Run, work: Any, result: Any, error: str = "") -> None:
        try:
            summary = write_run(run, work, result)  # what came back is kept, even beside an error
        except PersoBenchError as exc:
            finish(RunScore(run.run_id, error=str(exc)))
            return
        finish(RunScore(run.run_id, error=error) if error else RunScore(run.run_id, summary))

    with RayScoring(prof, wanted, address=address, cache_root=store_cache_root(store.home),
                    runs=len(chosen)) as pool:
        for group in _by_dataset(chosen):
            works = []
            for run in group:
                if not run.has_table("generations"):
                    finish(RunScore(run.run_id, error="no generations table"))
                    continue
                try:
                    works.append(plan_run(run, run_samples(run, datasets=datasets), profile=prof,
                                          metrics=requested))
                except PersoBenchError as exc:
                    finish(RunScore(run.run_id, error=str(exc)))
            for work in pool.submit(works):
                write(runs[work.run_id], work, None)
        label = f"ray {pool.describe()}"
        report = (lambda done, total: progress(label, done, total)) if progress is not None else None
        for done in pool.finished(report):
            write(runs[done.work.run_id], done.work, done.result, done.error)


def _staged(progress: ScoreProgress | None, label: str) -> ScoreProgress | None:
    if progress is None:
        return None
    return lambda stage, done, total: progress(f"{label} {stage}", done, total)


def _embed_group(group: list[Run], encoder: Any, profile: "Profile", requested: Sequence[str] | None,
                 datasets: dict[str, dict[str, "Sample"]], progress: ScoreProgress | None) -> dict[str, Any]:
    """Embed every text the runs of ``group`` need, in one pass; returns run id -> its samples, or
    run id -> the one-line reason it cannot be scored."""
    from persobench.metrics.encoder import EmbeddingRequest
    from persobench.metrics.family import Progress
    from persobench.metrics.scoring import prepare_embeddings, run_embedding_request

    ready: dict[str, Any] = {}
    pairs: dict[tuple[str, str], None] = {}
    sentences: dict[str, None] = {}
    for run in group:
        if not run.has_table("generations"):
            ready[run.run_id] = "no generations table"
            continue
        try:
            samples = run_samples(run, datasets=datasets)
            request = run_embedding_request(run, samples, profile=profile, metrics=requested)
        except PersoBenchError as exc:
            ready[run.run_id] = str(exc)
            continue
        ready[run.run_id] = samples
        pairs.update(dict.fromkeys(request.pairs))
        sentences.update(dict.fromkeys(request.sentences))
    if pairs or sentences:
        label = f"{group[0].manifest.dataset} ({len(group)} run{'s' if len(group) != 1 else ''})"
        prepare_embeddings(encoder, EmbeddingRequest(tuple(pairs), tuple(sentences)),
                           Progress(_staged(progress, label[:48])))
    return ready


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

    @property
    def overall(self) -> "pd.DataFrame":
        """One row per run: the overall score and its rank (:func:`persobench.aggregate.overall_table`)."""
        from persobench import aggregate

        return aggregate.overall_table(self.table)

    def export(self, fmt: str) -> str:
        """The board as text: table, csv, markdown, latex or json."""
        from persobench import aggregate

        return aggregate.export_board(self.table, fmt)


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
    return Board(table, profile, invalid, tuple((str(p), str(r)) for p, r in results.skipped_runs))


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
    from persobench.datasets.paper_archive import fetch_paper

    return fetch_paper(open_store(home, store).home, url=url, sha256=sha256, size=size, timeout=timeout,
                       progress=progress, manifest=manifest, trust_unpinned=trust_unpinned, limits=limits)


def import_published(folder: str | os.PathLike[str], *, home: str | os.PathLike[str] | None = None,
                     store: RunStore | None = None, datasets: Sequence[str] | None = None,
                     models: Sequence[str] | None = None, modes: Sequence[str] | None = None) -> Any:
    """Import published replies laid out like the paper's repository: one run per dataset, model
    and mode (idempotent); returns the :class:`~persobench.importer.ImportReport`."""
    from persobench.importer import import_persobench

    return import_persobench(open_store(home, store), folder, datasets=datasets, models=models, modes=modes)
