"""Cached tables for the pages, read through the run store: runs, dialogues, failures, datasets, imports.

Each loader takes ``(home, signature)`` (see :mod:`persobench.app.page_cache`) so its result is reused
until a run changes on disk. Text that could hold a credential is redacted here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from persobench.app.page_cache import cache_data, cache_resource
from persobench.app.text import natural_key
from persobench.core import redact
from persobench.store import RunStore
from persobench.store import Run, StoreProblem
from persobench.errors import StoreError
from persobench.datasets import samples_by_id
from persobench.aggregate import cached_table
from persobench.app.page_cache import current_home
from persobench import __version__
from persobench.datasets import tables_dir
from persobench.datasets import dataset_names, get_dataset_info
from persobench.generation import dataset_for_folder, find_response_files
from persobench.generation import interruption
from persobench.llm import batch_listing  # noqa: F401 - the New run page's batches, read from the store
from persobench.aggregate import FAILURE_STATUSES, latest_rows, stated_error, truncation_cause  # noqa: F401
from persobench.prompts import protocol_of  # noqa: F401
from persobench.aggregate import run_row_labels

if TYPE_CHECKING:  # pandas is imported inside the functions that need it
    import pandas as pd



@cache_resource(show_spinner=False, max_entries=4)
def store_scan(home: str, signature: str) -> "tuple[list[Run], list[StoreProblem]]":  # noqa: ARG001
    """``RunStore.scan()`` once per store state for every loader (58 manifests take a tenth of a
    second to read); shared, read-only."""
    return RunStore(home).scan()


@cache_data(show_spinner=False, max_entries=8)
def runs_table(home: str, signature: str) -> "pd.DataFrame":
    """One row per readable run: id, dataset, mode, model, template, protocol (label and token limit),
    source, status, size, scored profiles."""
    import pandas as pd

    runs, _ = store_scan(home, signature)
    rows = []
    for run in runs:
        m = run.manifest
        scores = m.details.scores or {}
        killed = None
        if m.status == "running":  # only a "running" run can have been killed: the landing page of a

            killed = interruption(run)
        protocol = protocol_of(m)
        rows.append({
            "run_id": m.run_id, "dataset": m.dataset, "mode": m.mode, "model": m.model_label,
            "template": m.template, "protocol": protocol.label, "max_tokens": protocol.max_tokens,
            "baseline": m.is_baseline,
            "source": m.source, "status": "interrupted" if killed else m.status, "samples": len(m.sample_ids),
            "note": killed.describe() if killed else "",
            "has_generations": run.has_table("generations"), "has_scores": run.has_table("scores"),
            "profiles": ", ".join(sorted(scores)),
            "created_at": m.created_at, "updated_at": m.updated_at,
        })
    columns = ["run_id", "dataset", "mode", "model", "template", "protocol", "max_tokens", "baseline", "source",
               "status", "samples", "note", "has_generations", "has_scores", "profiles", "created_at", "updated_at"]
    return pd.DataFrame(rows, columns=columns)


@cache_data(show_spinner=False, max_entries=8)
def store_problems(home: str, signature: str) -> list[tuple[str, str]]:
    _, problems = store_scan(home, signature)
    return [(str(p.path), redact(p.reason)) for p in problems]


@cache_data(show_spinner=False, max_entries=4)
def manifests(home: str, signature: str) -> dict[str, dict[str, Any]]:
    """run id -> manifest dict (secrets already stripped by the store)."""
    runs, _ = store_scan(home, signature)
    return {r.run_id: r.manifest.to_dict() for r in runs}


def read_columns(path: Path, columns: Sequence[str] | None) -> "pd.DataFrame":
    """Read the wanted columns of a Parquet table (those that exist)."""
    import pyarrow.parquet as pq


    try:
        if columns is not None:
            names = set(pq.read_schema(path).names)
            columns = [c for c in columns if c in names]
        return pq.read_table(path, columns=columns).to_pandas()
    except FileNotFoundError as exc:
        raise StoreError(f"{path}: table not found") from exc
    except Exception as exc:  # noqa: BLE001 - pyarrow raises unrelated types for damaged files
        raise StoreError(f"{path}: unreadable or corrupt Parquet table ({type(exc).__name__})") from exc


@cache_resource(show_spinner=False, max_entries=16)
def dataset_samples(name: str) -> dict[str, Any]:
    """sample id -> Sample for a registered dataset; ``{}`` when it cannot be loaded here."""

    try:
        return samples_by_id(name)
    except Exception:  # noqa: BLE001 - a dataset whose source is absent still has runs to show
        return {}


@cache_data(show_spinner=False, max_entries=16)
def dataset_error(name: str) -> str:
    """Why a dataset cannot be loaded here ('' when it can)."""

    try:
        samples_by_id(name)
    except Exception as exc:  # noqa: BLE001
        return redact(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    return ""


REPLY_COLUMNS = ("sample_id", "status", "response", "reasoning", "raw_text", "finish_reason", "completion_tokens",
                 "error", "prompt")


@cache_data(show_spinner="Loading dialogues…", max_entries=6)
def dialogue_data(home: str, signature: str, dataset: str, profile: str | None) -> dict[str, Any]:
    """Everything the Explore page needs of one dataset's replies, in long tables keyed by run and sample
    (the scores are the board's: :func:`persobench.app.boards.dialogue_values`).

    ``replies``: run_id, model, mode, template, label (model · mode, what tells the run apart when
    they share one), sample_id, status, response, reasoning, raw_text, error, prompt ...
    ``details``: the per-persona-sentence rows (run_id, sample_id, ...) of ``profile``, when the run has them.
    ``order``: sample ids in dataset order; ``search``: sample id -> lower-cased text to search.
    """
    import pandas as pd

    runs = runs_table(home, signature)
    runs = runs[(runs["dataset"] == dataset) & runs["has_generations"]]
    labels = run_row_labels(runs)  # model · mode, never the run's hash where a name tells runs apart
    replies, details = [], []
    for run in runs.itertuples():
        store = RunStore(home)
        try:
            g = latest_rows(read_columns(store.table_path(run.run_id, "generations"), list(REPLY_COLUMNS)))
        except Exception:  # noqa: BLE001 - a broken table is reported on the Data page, not fatal here
            continue
        replies.append(g.assign(run_id=run.run_id, model=run.model, mode=run.mode, template=run.template,
                                label=labels[run.run_id], error=stated_errors(g, run.max_tokens)))
        if store.table_path(run.run_id, "persona_details").exists():
            try:
                d = read_columns(store.table_path(run.run_id, "persona_details"), None)
                if profile is not None and "profile" in d.columns:
                    d = d[d["profile"] == profile]
                details.append(d.assign(run_id=run.run_id))
            except Exception:  # noqa: BLE001
                pass
    reply_frame = pd.concat(replies, ignore_index=True) if replies else pd.DataFrame(
        columns=[*REPLY_COLUMNS, "run_id", "model", "mode", "template", "label"])
    for column in REPLY_COLUMNS:
        if column not in reply_frame.columns:
            reply_frame[column] = None
    detail_frame = pd.concat(details, ignore_index=True) if details else pd.DataFrame(columns=["sample_id", "run_id"])
    samples = dataset_samples(dataset)
    ids = set(reply_frame["sample_id"].astype(str))
    order = sorted(ids, key=natural_key)
    text: dict[str, list[str]] = {i: [] for i in order}
    answered = reply_frame[["sample_id", "response"]].dropna()  # one pass, not a dropna per sample
    for sample_id, response in zip(answered["sample_id"].astype(str), answered["response"].astype(str)):
        text[sample_id].append(response)
    for sample_id in order:
        sample = samples.get(sample_id)
        if sample is not None:
            text[sample_id].extend(sample.persona_sentences())
            text[sample_id].extend(t.text for t in sample.context)
            text[sample_id].append(sample.reference)
    search = {i: " \n".join(parts).lower() for i, parts in text.items()}
    return {"replies": reply_frame, "details": detail_frame, "order": order, "search": search}


def stated_errors(generations: "pd.DataFrame", max_tokens: Any) -> list[Any]:
    """A generations table's errors with a truncated reply's guessed cause replaced by the one its
    stored token count shows, or "unknown" (``aggregate.failures.stated_error``)."""
    column = generations.get
    return [stated_error(error, status, truncation_cause(reason, tokens, max_tokens)) if status == "truncated" else error
            for error, status, reason, tokens in zip(column("error", [None] * len(generations)), generations["status"],
                                                     column("finish_reason", [None] * len(generations)),
                                                     column("completion_tokens", [None] * len(generations)))]


@cache_data(show_spinner=False, max_entries=16)
def run_replies(home: str, signature: str, run_id: str) -> "pd.DataFrame":  # noqa: ARG001
    """``sample_id, status, response`` of one run (empty when its table cannot be read): what the
    Compare page shows of two runs, without loading a whole dataset's dialogues."""
    import pandas as pd

    columns = ["sample_id", "status", "response"]
    try:
        frame = read_columns(RunStore(home).table_path(run_id, "generations"), columns)
    except Exception:  # noqa: BLE001 - unreadable tables are listed in the sidebar
        return pd.DataFrame(columns=columns)
    return frame.reindex(columns=columns)


def profiles_in_store(home: str, signature: str) -> list[str]:
    """Score profiles recorded in any run's manifest, ``offline`` first. Read from the scanned runs'
    typed records: a manifest as a dict copies every sample id (a quarter of a second for 58 runs)."""
    found: set[str] = set()
    for run in store_scan(home, signature)[0]:
        found.update(run.manifest.details.scores or {})
    return sorted(found, key=lambda p: (p != "offline", p))


#: Bumped when a table :func:`_on_disk` caches changes what it holds (the disk cache keys on the
#: aggregate package's code, not on this module's).
LOADER_TABLES_VERSION = 2


def _on_disk(home: str, table: str, build: "Callable[[], pd.DataFrame]", **arguments: Any) -> "pd.DataFrame":
    """``build()`` through the store's disk cache of aggregated tables
    (:mod:`persobench.aggregate.disk_cache`): a just-started app reads one small file instead of a
    column of every run's generations table."""

    store = RunStore(home)
    if not store.runs_dir.is_dir():  # no store here yet: nothing to key on, and no folder is created
        return build()
    arguments = {**arguments, "loader_version": LOADER_TABLES_VERSION}
    return cached_table(store, table, arguments, lambda: (build(), {}))[0]


@cache_data(show_spinner="Counting reply statuses…", max_entries=4)
def status_counts(home: str, signature: str) -> "pd.DataFrame":
    """One row per run and status: run_id, dataset, mode, protocol, model, status, count (a run's last
    row per sample, as the boards count)."""
    return _on_disk(home, "status_counts", lambda: _status_counts(home, signature))


STATUS_COUNT_COLUMNS = ["run_id", "dataset", "mode", "protocol", "model", "status", "count"]


@cache_data(show_spinner=False, max_entries=16)
def run_status_counts(home: str, signature: str, run_ids: tuple[str, ...]) -> "pd.DataFrame":
    """:func:`status_counts` of the given runs only (the landing page's finding reads one board's
    runs, not every run of the store)."""
    return _status_counts(home, signature, run_ids)


def _status_counts(home: str, signature: str, run_ids: tuple[str, ...] | None = None) -> "pd.DataFrame":
    import pandas as pd

    runs = runs_table(home, signature)
    runs = runs[runs["has_generations"] & (runs["run_id"].isin(run_ids) if run_ids is not None else True)]
    parts = []
    for run in runs.itertuples():
        try:
            g = latest_rows(read_columns(RunStore(home).table_path(run.run_id, "generations"), ["sample_id", "status"]))
        except Exception:  # noqa: BLE001 - unreadable tables are listed in the sidebar
            continue
        counts = g["status"].astype(str).value_counts()
        parts.append(pd.DataFrame({"run_id": run.run_id, "dataset": run.dataset, "mode": run.mode,
                                   "protocol": run.protocol, "model": run.model, "status": counts.index,
                                   "count": counts.values}))
    if not parts:
        return pd.DataFrame(columns=STATUS_COUNT_COLUMNS)
    return pd.concat(parts, ignore_index=True)[STATUS_COUNT_COLUMNS]


FAILED_COLUMNS = ["run_id", "model", "mode", "protocol", "template", "dataset", "sample_id", "status", "error",
                  "cause", "finish_reason", "completion_tokens", "raw_text", "prompt"]


@cache_data(show_spinner="Loading failed replies…", max_entries=4)
def failed_replies(home: str, signature: str, run_ids: tuple[str, ...]) -> "pd.DataFrame":
    """The invalid replies of the given runs (a run's last row per sample): run_id, model, mode,
    protocol, template, dataset, sample_id, status, error (a truncated reply's guessed cause replaced
    by ``cause``), cause (why a truncated reply stopped, from the stored token count; "" for other
    statuses), finish_reason, completion_tokens, raw_text, prompt (None when the run did not store it)."""
    return _on_disk(home, "failed_replies", lambda: _failed_replies(home, signature, run_ids), runs=list(run_ids))


def _failed_replies(home: str, signature: str, run_ids: tuple[str, ...]) -> "pd.DataFrame":
    import pandas as pd

    runs = runs_table(home, signature).set_index("run_id")
    parts = []
    for run_id in run_ids:
        if run_id not in runs.index:
            continue
        try:
            g = latest_rows(read_columns(RunStore(home).table_path(run_id, "generations"),
                                         ["sample_id", "status", "error", "finish_reason", "completion_tokens",
                                          "raw_text", "prompt"]))
        except Exception:  # noqa: BLE001
            continue
        g = g[g["status"].astype(str) != "ok"].reindex(columns=[*g.columns, *(
            c for c in ("error", "finish_reason", "completion_tokens", "raw_text", "prompt") if c not in g.columns)])
        if g.empty:
            continue
        info = runs.loc[run_id]
        causes = [truncation_cause(reason, tokens, info["max_tokens"]) if status == "truncated" else ""
                  for status, reason, tokens in zip(g["status"], g["finish_reason"], g["completion_tokens"])]
        parts.append(g.assign(run_id=run_id, model=info["model"], mode=info["mode"], protocol=info["protocol"],
                              template=info["template"], dataset=info["dataset"],
                              error=stated_errors(g, info["max_tokens"]), cause=causes))
    if not parts:
        return pd.DataFrame(columns=FAILED_COLUMNS)
    return pd.concat(parts, ignore_index=True)[FAILED_COLUMNS]


@cache_data(show_spinner="Measuring datasets…", max_entries=2)
def dataset_table() -> "pd.DataFrame":
    """Every registered dataset: name, kind, samples (when loadable here), description, note.

    Counting the samples parses every row of the paper's five tables (half a second): the table is
    kept in the store's disk cache, keyed on the prompt tables' files (name, size, modification time)."""

    return _on_disk(current_home(), "dataset_table", _dataset_table, sources=_dataset_sources())


def _dataset_sources() -> list[Any]:
    """What the dataset sizes depend on: the package version (the built-in sample) and every prompt
    table file."""

    folder = tables_dir()
    files: list[Any]
    try:
        files = [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in sorted(folder.glob("*.csv"))]
    except OSError as exc:
        files = [f"unreadable: {exc.errno}"]
    return [__version__, str(folder), files]


def _dataset_table() -> "pd.DataFrame":
    import pandas as pd


    rows = []
    for name in dataset_names():
        info = get_dataset_info(name)
        size: int | None = None
        note = ""
        if info.kind in ("hub", "file"):
            note = "loaded on demand (hub or file)"
        else:
            samples = dataset_samples(name)
            if samples:
                size = len(samples)
            else:
                note = "unavailable here: " + dataset_error(name)
        rows.append({"dataset": name, "kind": info.kind, "samples": size, "description": info.description,
                     "note": note})
    return pd.DataFrame(rows, columns=["dataset", "kind", "samples", "description", "note"])


@cache_data(show_spinner=False, ttl=10)
def import_preview(folder: str) -> tuple["pd.DataFrame", str]:
    """(what an import of ``folder`` would bring in, a problem message or '')."""
    import pandas as pd

    path = Path(folder).expanduser()
    if not path.is_dir():
        return pd.DataFrame(), f"{path}: no such folder"
    if not (path / "Prompts").is_dir():
        return pd.DataFrame(), f"{path}: no Prompts/ folder (expected the paper's layout: Prompts/, Responses/, Raw Responses/)"
    try:

        entries = find_response_files(path)
    except Exception as exc:  # noqa: BLE001
        return pd.DataFrame(), redact(str(exc))
    rows = [{"folder": e["dataset_folder"], "dataset": dataset_for_folder(e["dataset_folder"]) or "(unknown)",
             "model": e["model"], "mode": e["mode"],
             "replies from": "Raw Responses (paper policy)" if e["raw"] else "Responses (processed)"}
            for e in entries]
    if not rows:
        return pd.DataFrame(), f"{path}: no response files under Responses/ or Raw Responses/"
    return pd.DataFrame(rows), ""
