"""The run store: one folder per run under ``PERSOBENCH_HOME`` (default ``./cache``).

Layout (every file inspectable with ordinary tools)::

    <home>/runs/<run_id>/manifest.json      what was run: dataset, sample ids, model, template, params
    <home>/runs/<run_id>/generations.parquet one row per sample (written by the generation stage)
    <home>/runs/<run_id>/scores.parquet      per-sample metric values (written by the metrics stage)

Every write goes to a temporary file in the same folder, is fsynced and then renamed over the
target, so a crash mid-write leaves the previous good file in place, never a half-written one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence

from persobench.errors import StoreError
from persobench.store.files import atomic_write_json, atomic_write_parquet, canonical_json, read_parquet, sha256_hex, \
    utc_now
from persobench.store.locks import RUN_LOCK, hold_state_lock, lock_holder
from persobench.store.run_records import SCHEMA_VERSION, RunExtra
from persobench.core.secrets import strip_secrets
from persobench.records import Sample
from persobench import __version__
from persobench.core.structured import structured_label
import hashlib

if TYPE_CHECKING:  # pandas is imported lazily: listing runs must stay cheap
    import pandas as pd
    import pyarrow as pa


MANIFEST = "manifest.json"
#: The run's samples as generated (``sample_id, input_hash, sample``: the sample's JSON), so scoring
#: reads the inputs the replies answered, whatever happens to the dataset file later.
SAMPLES_TABLE = "samples"
#: The tables the metrics stage writes into a run folder.
SCORE_TABLES = ("scores", "persona_details")
RUN_STATUSES = ("pending", "running", "completed", "failed", "cancelled")


def default_home() -> Path:
    """``$PERSOBENCH_HOME`` or ``./cache``."""
    return Path(os.environ.get("PERSOBENCH_HOME") or "cache")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:60] or "x"


@dataclass(frozen=True)
class RunManifest:
    """Everything needed to know what a run is and to reproduce it."""

    run_id: str
    """Folder name; derived from the configuration, so the same configuration maps to the same run."""
    dataset: str
    """Registered dataset name."""
    sample_ids: tuple[str, ...]
    """The stable ids of the samples in this run, in run order."""
    model: Mapping[str, Any]
    """Model spec (provider, model, base_url, options) with every secret removed."""
    mode: str
    """Prompt mode: "vanilla" or "cot"."""
    template: str
    """Prompt template name."""
    template_hash: str
    """Version hash of the template's text; changes whenever the wording changes."""
    parameters: Mapping[str, Any] = field(default_factory=dict)
    """Generation parameters (temperature, max_tokens, seed, limit, ...)."""
    package_version: str = ""
    """persobench version that created the run."""
    created_at: str = ""
    """UTC ISO-8601 creation time."""
    updated_at: str = ""
    """UTC ISO-8601 time of the last manifest change."""
    status: str = "pending"
    """One of pending, running, completed, failed, cancelled."""
    source: str = "generated"
    """"generated" for runs made here, "imported" for published results imported from a folder."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Stage-specific notes: counts, usage and cost, import provenance, the failure reason, scoring
    provenance. The JSON form; read it typed through :attr:`details`."""
    template_family: str = ""
    """Family of the prompt template ("paper" for ``paper`` and ``paper-open``); "" in manifests written
    before families existed (:func:`persobench.prompts.protocol.template_family` derives it from the name)."""
    chat_template: bool | None = None
    """Local models: whether the prompt was wrapped in the tokenizer's chat template (``False``: sent as
    raw text, the paper's open-source protocol); ``None`` for chat APIs and baselines (not applicable)
    and for older manifests."""

    schema_version: int = SCHEMA_VERSION
    """Layout version of this manifest and its ``extra`` (:data:`persobench.store.run_records.SCHEMA_VERSION`);
    manifests written before the field existed read as 1."""

    @property
    def details(self) -> RunExtra:
        """``extra`` as typed records (generation, counts, import, scoring provenance)."""
        return RunExtra.from_extra(self.extra)

    @property
    def is_baseline(self) -> bool:
        """True for a ``baseline:`` run (a floor or ceiling, not a model): the one rule every table
        and board uses."""
        return bool(self.model.get("baseline")) or self.model.get("provider") == "baseline"

    @property
    def model_label(self) -> str:
        """Short display name of the model ("provider:model", or the imported model's name), marked
        ``+structured`` when the run asked for structured output (a different configuration)."""

        label = self.model.get("label") or f"{self.model.get('provider', '?')}:{self.model.get('model', '?')}"
        return structured_label(str(label), bool((self.parameters or {}).get("structured")))

    def to_dict(self) -> dict[str, Any]:
        # asdict deep-copies every field; the ids (a thousand strings) are listed below instead.
        data = dataclasses.asdict(dataclasses.replace(self, sample_ids=()))
        data["sample_ids"] = list(self.sample_ids)
        data["model"] = strip_secrets(dict(self.model))
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RunManifest":
        names = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(data, Mapping):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        missing = {"run_id", "dataset", "sample_ids", "model", "mode", "template", "template_hash"} - set(data)
        if missing:
            raise ValueError(f"manifest lacks {', '.join(sorted(missing))}")
        check_manifest_types(data)
        version = data.get("schema_version", 1)
        if version > SCHEMA_VERSION:
            raise ValueError(f"schema_version {version} was written by a newer PersoBench; this version reads "
                             f"up to {SCHEMA_VERSION} (upgrade persobench)")
        values = {k: v for k, v in data.items() if k in names}
        values["sample_ids"] = tuple(values["sample_ids"])
        values["model"] = strip_secrets(dict(values["model"]))
        return cls(**values)


#: The JSON type each manifest field must have (a wrong type makes the run unreadable, not a crash later).
MANIFEST_TYPES: dict[str, type] = {
    "run_id": str, "dataset": str, "sample_ids": list, "model": dict, "mode": str, "template": str,
    "template_hash": str, "parameters": dict, "package_version": str, "created_at": str, "updated_at": str,
    "status": str, "source": str, "extra": dict, "schema_version": int,
}
_JSON_NAMES = {str: "text", list: "a list", dict: "an object", int: "a whole number"}


def check_manifest_types(data: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming the first manifest field whose JSON type is wrong."""
    for name, expected in MANIFEST_TYPES.items():
        if name in data and not isinstance(data[name], expected):
            raise ValueError(f"field {name!r} must be {_JSON_NAMES.get(expected, expected)}, "
                             f"got {type(data[name]).__name__} {str(data[name])[:40]!r}")
    # the types of every id at C speed: a published run has a thousand ids, and the app's start-up
    # reads every manifest (a per-id isinstance loop was a third of the store's scan)
    if not all(issubclass(kind, str) for kind in set(map(type, data.get("sample_ids", [])))):
        raise ValueError("field 'sample_ids' must be a list of text")
    if data.get("status", "pending") not in RUN_STATUSES:
        raise ValueError(f"field 'status' must be one of {', '.join(RUN_STATUSES)}, got {data['status']!r}")


def make_run_id(
    *, dataset: str, model: Mapping[str, Any], mode: str, template_hash: str,
    sample_ids: Iterable[str], parameters: Mapping[str, Any],
) -> str:
    """A readable, deterministic run id: the same configuration always names the same folder."""
    digest = sha256_hex(
        {
            "dataset": dataset, "model": strip_secrets(dict(model)), "mode": mode,
            "template_hash": template_hash, "sample_ids": list(sample_ids), "parameters": dict(parameters),
        }
    )[:10]
    model_name = str(model.get("label") or f"{model.get('provider', '')}-{model.get('model', '')}")
    return f"{_slug(dataset)}__{_slug(model_name)}__{_slug(mode)}__{digest}"


def merge_extra(current: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """``current`` manifest ``extra`` with ``changes`` applied key by key; ``scores`` merges per
    profile and, within a profile, per metric, so two scoring passes never erase each other."""
    merged = {**dict(current), **dict(changes)}
    if "scores" in changes and isinstance(current.get("scores"), Mapping) and isinstance(changes["scores"], Mapping):
        scores = dict(current["scores"])
        for profile, entry in changes["scores"].items():
            before = scores.get(profile)
            if isinstance(before, Mapping) and isinstance(entry, Mapping) and isinstance(
                    before.get("metrics"), Mapping) and isinstance(entry.get("metrics"), Mapping):
                entry = {**before, **entry, "metrics": {**before["metrics"], **entry["metrics"]}}
            scores[profile] = entry
        merged["scores"] = scores
    return merged


class Run:
    """A handle on one run folder.

    Every change goes through :meth:`update` or :meth:`merge_table`, which read what is on disk,
    merge and write under the run's state lock (:func:`hold_state_lock`): a handle read before
    another process's change never writes an older state over it."""

    def __init__(self, path: Path, manifest: RunManifest) -> None:
        self.path = Path(path)
        self.manifest = manifest

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    def table_path(self, name: str) -> Path:
        return self.path / f"{name}.parquet"

    def has_table(self, name: str) -> bool:
        return self.table_path(name).exists()

    def write_table(self, name: str, frame: "pd.DataFrame | pa.Table") -> Path:
        """Replace a table the caller alone writes (generation's ``generations``, an import's tables);
        ``frame`` may be an Arrow table made from a DataFrame (generation's checkpoints)."""
        target = self.table_path(name)
        with self.locked(reload=False):
            atomic_write_parquet(target, frame)
        return target

    def read_table(self, name: str, columns: "Sequence[str] | None" = None) -> "pd.DataFrame":
        """Table ``name`` (``columns``: only those of them it has)."""
        return read_parquet(self.table_path(name), columns)

    @contextlib.contextmanager
    def locked(self, *, reload: bool = True) -> Iterator["Run"]:
        """Hold the run's state lock; ``reload``: first re-read the manifest from disk, so a change
        made in the block starts from the newest state."""
        with hold_state_lock(self.path):
            if reload:
                self.reload()
            yield self

    def reload(self) -> RunManifest:
        """Re-read the manifest from disk (it may have been changed by another process)."""
        path = self.path / MANIFEST
        try:
            self.manifest = RunManifest.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise StoreError(f"{path}: the run's manifest is gone") from None
        except (OSError, json.JSONDecodeError, UnicodeDecodeError, ValueError, TypeError, RecursionError) as exc:
            raise StoreError(f"{path}: corrupt manifest ({exc})") from exc
        return self.manifest

    def merge_table(self, name: str,
                    merge: "Callable[[pd.DataFrame | None], pd.DataFrame | None]") -> "pd.DataFrame | None":
        """Read table ``name`` (``None`` when absent), ``merge`` it with the caller's new rows and write
        the result, all under the state lock: rows another process wrote meanwhile are kept. When
        ``merge`` returns ``None`` nothing changes and the table as read is returned."""
        with self.locked(reload=False):
            current = self.read_table(name) if self.has_table(name) else None
            frame = merge(current)
            if frame is None:
                return current
            atomic_write_parquet(self.table_path(name), frame)
        return frame

    def damaged_table(self) -> str | None:
        """Why a table of this run is not a Parquet file (checked by its magic bytes, cheaply), or None."""
        for path in sorted(self.path.glob("*.parquet")):
            try:
                with open(path, "rb") as handle:
                    head = handle.read(4)
                    handle.seek(max(0, path.stat().st_size - 4))
                    tail = handle.read(4)
            except OSError as exc:
                return f"{path}: unreadable ({exc.strerror or exc})"
            if head != b"PAR1" or tail != b"PAR1":
                return f"{path}: not a Parquet file (damaged or overwritten)"
        return None

    def update(self, **changes: Any) -> RunManifest:
        """Apply ``changes`` to the manifest on disk (``extra`` merged key by key, see
        :func:`merge_extra`), stamp ``updated_at`` and write it, under the state lock."""
        if "status" in changes and changes["status"] not in RUN_STATUSES:
            raise ValueError(f"unknown run status {changes['status']!r}; expected one of {RUN_STATUSES}")
        with self.locked():
            if "extra" in changes:
                changes["extra"] = merge_extra(self.manifest.extra, changes["extra"])
            manifest = dataclasses.replace(self.manifest, updated_at=utc_now(), **changes)
            atomic_write_json(self.path / MANIFEST, manifest.to_dict())
            self.manifest = manifest
        return self.manifest

    def record_samples(self, samples: "Iterable[Sample]") -> None:
        """Keep the inputs of this run's samples (:data:`SAMPLES_TABLE`): what its replies answer."""
        import pandas as pd

        rows = [{"sample_id": s.id, "input_hash": s.input_hash, "sample": canonical_json(s.to_dict())}
                for s in samples]
        self.write_table(SAMPLES_TABLE, pd.DataFrame(rows, columns=["sample_id", "input_hash", "sample"]))

    def recorded_samples(self) -> "dict[str, Sample] | None":
        """Sample id -> the inputs recorded when the run was generated, or ``None`` for a run that
        recorded none (made before runs recorded their inputs)."""

        if not self.has_table(SAMPLES_TABLE):
            return None
        frame = self.read_table(SAMPLES_TABLE)
        samples: dict[str, Sample] = {}
        for position, (sid, text) in enumerate(zip(frame["sample_id"], frame["sample"])):
            try:
                samples[str(sid)] = Sample.from_dict(json.loads(text))
            except (TypeError, ValueError, KeyError) as exc:
                raise StoreError(f"{self.table_path(SAMPLES_TABLE)}: row {position + 1}, field 'sample': "
                                 f"not a recorded sample ({type(exc).__name__}: {exc})") from None
        return samples

    def drop_scores(self) -> None:
        """Remove every stored score and its provenance (the replies changed), under the state lock."""
        with self.locked():
            for name in SCORE_TABLES:
                self.table_path(name).unlink(missing_ok=True)
            if self.manifest.extra.get("scores"):
                manifest = dataclasses.replace(self.manifest, updated_at=utc_now(),
                                               extra={**dict(self.manifest.extra), "scores": {}})
                atomic_write_json(self.path / MANIFEST, manifest.to_dict())
                self.manifest = manifest

    def __repr__(self) -> str:
        return f"Run({self.run_id!r}, status={self.manifest.status!r})"


@dataclass(frozen=True)
class StoreProblem:
    """A run folder that could not be read."""

    path: Path
    """The folder or file at fault."""
    reason: str
    """What is wrong with it."""


def _stat(path: str) -> tuple[int, ...]:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return ()
    return (st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


#: How to get past a run whose manifest cannot be read (its tables may well be fine).
_MANIFEST_REPAIR = ("restore manifest.json from a backup, or move the folder aside (mv {path} {path}.broken) and "
                    "run the same command again to generate the run anew (replies still in the response cache are "
                    "not requested again)")


class RunStore:
    """All runs under one home folder."""

    def __init__(self, home: str | os.PathLike[str] | None = None) -> None:
        self.home = Path(home) if home is not None else default_home()
        self.runs_dir = self.home / "runs"

    def run_path(self, run_id: str) -> Path:
        """The folder of ``run_id``: a real folder directly inside ``runs/``, never a path or symlink
        that leads elsewhere (:class:`StoreError` otherwise), so no command reads or writes outside."""
        if (not isinstance(run_id, str) or not run_id or run_id in (".", "..") or run_id.startswith(".")
                or "/" in run_id or os.sep in run_id or "\0" in run_id):
            raise StoreError(f"{run_id!r}: not a run id (run ids are folder names inside {self.runs_dir})")
        path = self.runs_dir / run_id
        if path.is_symlink():
            raise StoreError(f"{path}: is a symbolic link; runs are folders directly inside {self.runs_dir}")
        if path.exists() and path.resolve().parent != self.runs_dir.resolve():
            raise StoreError(f"{path}: resolves outside {self.runs_dir}")
        return path

    def table_path(self, run_id: str, name: str) -> Path:
        """The file of table ``name`` of run ``run_id`` (for readers that skip the manifest)."""
        return self.run_path(run_id) / f"{name}.parquet"

    def create(self, manifest: RunManifest, *, exist_ok: bool = True) -> Run:
        """Create the run folder and manifest; an existing run with the same id is returned as is."""
        path = self.run_path(manifest.run_id)
        if (path / MANIFEST).exists():
            if not exist_ok:
                raise StoreError(f"{path}: run already exists")
            return self.get(manifest.run_id)
        now = utc_now()
        manifest = dataclasses.replace(
            manifest,
            created_at=manifest.created_at or now,
            updated_at=now,
            package_version=manifest.package_version or _package_version(),
        )
        path.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path / MANIFEST, manifest.to_dict())
        return Run(path, manifest)

    def get(self, run_id: str) -> Run:
        path = self.run_path(run_id)
        manifest_path = path / MANIFEST
        try:
            if not os.access(path, os.R_OK | os.X_OK) and path.is_dir():
                raise PermissionError(13, "Permission denied", str(path))
            text = manifest_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            known = ", ".join(sorted(p.name for p in self._entries() if p.is_dir())[:20]) or "(none)"
            raise StoreError(f"{manifest_path}: no such run {run_id!r}; runs in {self.runs_dir}: {known}") from None
        except OSError as exc:
            raise StoreError(f"{manifest_path}: unreadable ({exc.strerror or exc})") from None
        try:
            return Run(path, RunManifest.from_dict(json.loads(text)))
        except (json.JSONDecodeError, UnicodeDecodeError, ValueError, TypeError, RecursionError) as exc:
            what = "the manifest is empty" if not text.strip() else f"corrupt manifest ({exc})"
            raise StoreError(f"{manifest_path}: unreadable, {what}; {_MANIFEST_REPAIR.format(path=path)}") from exc

    def _entries(self) -> list[Path]:
        try:
            return sorted(p for p in self.runs_dir.iterdir() if not p.name.startswith("."))
        except OSError:
            return []

    def scan(self) -> tuple[list[Run], list[StoreProblem]]:
        """Every readable run (newest first) and every entry of ``runs/`` that could not be read.

        A run is unreadable when its folder is a symlink or cannot be opened, its manifest is
        missing, corrupt or has a field of the wrong type, or one of its tables is not Parquet; such
        a run is reported here with the reason and left out of every listing, never raising.
        """
        runs: list[Run] = []
        problems: list[StoreProblem] = []
        if not self.runs_dir.exists():
            return runs, problems
        try:
            entries = self._entries() if os.access(self.runs_dir, os.R_OK | os.X_OK) else None
        except OSError:
            entries = None
        if entries is None:
            return runs, [StoreProblem(self.runs_dir, "the runs folder cannot be read (permission denied)")]
        for path in entries:
            if not path.is_dir() and not path.is_symlink():
                continue  # stray files (notes, archives) are not runs
            try:
                run = self.get(path.name)
                damaged = run.damaged_table()
                if damaged:
                    raise StoreError(damaged)
                runs.append(run)
            except StoreError as exc:
                problems.append(StoreProblem(path, str(exc)))
        runs.sort(key=lambda r: (r.manifest.created_at, r.run_id), reverse=True)
        return runs, problems

    def runs(self) -> list[Run]:
        return self.scan()[0]

    def fingerprint(self) -> str:
        """A digest of the store's state, for every cache of tables read from it (the app's and the
        aggregate's): each entry of ``runs/`` and each file in a run folder (inode, mode, size,
        times), and whether a run's generation lock is held (a killed run changes no file).
        Hidden entries (temporary files of atomic writes) are skipped; a folder's own times still
        change when one is renamed into place. One ``stat`` per file: milliseconds for hundreds of runs."""

        digest = hashlib.sha1()
        try:
            entries = sorted(os.scandir(self.runs_dir), key=lambda e: e.name)
        except OSError:
            return "no-runs"
        for entry in entries:
            if entry.name.startswith("."):
                continue
            digest.update(b"\0" + entry.name.encode("utf-8", "surrogateescape"))
            digest.update(repr(_stat(entry.path)).encode())
            if not entry.is_dir(follow_symlinks=False):
                continue
            try:
                files = sorted(os.scandir(entry.path), key=lambda e: e.name)
            except OSError as exc:
                digest.update(f"unreadable {exc.errno}".encode())
                continue
            for item in files:
                if not item.name.startswith("."):
                    digest.update(f"\1{item.name}{_stat(item.path)!r}".encode("utf-8", "surrogateescape"))
                if item.name == RUN_LOCK:
                    digest.update(b"held" if lock_holder(entry.path) is not None else b"free")
        return digest.hexdigest()

    def delete(self, run_id: str) -> None:
        """Remove a run folder; refused while a process generates it (its run lock is held)."""
        path = self.run_path(run_id)
        holder = lock_holder(path)
        if holder is not None:
            raise StoreError(f"{path}: run {run_id} is being generated by process {holder or '?'}; cancel it first")
        with hold_state_lock(path):
            shutil.rmtree(path)


def _package_version() -> str:

    return __version__
