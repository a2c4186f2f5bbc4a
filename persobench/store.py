"""The run store: one folder per run under ``PERSOBENCH_HOME`` (default ``./cache``).

Layout (every file inspectable with ordinary tools)::

    <home>/runs/<run_id>/manifest.json      what was run: dataset, sample ids, model, template, params
    <home>/runs/<run_id>/generations.parquet one row per sample (written by the generation stage)
    <home>/runs/<run_id>/scores.parquet      per-sample metric values (written by the metrics stage)

Every write goes to a temporary file in the same folder, is fsynced and then renamed over the
target, so a crash mid-write leaves the previous good file in place, never a half-written one.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from persobench.errors import StoreError
from persobench.run_records import SCHEMA_VERSION, RunExtra
from persobench.secrets import SECRET_KEYS, strip_secrets, url_without_credentials  # noqa: F401 - re-exported

if TYPE_CHECKING:  # pandas is imported lazily: listing runs must stay cheap
    import pandas as pd

MANIFEST = "manifest.json"
RUN_STATUSES = ("pending", "running", "completed", "failed", "cancelled")


def default_home() -> Path:
    """``$PERSOBENCH_HOME`` or ``./cache``."""
    return Path(os.environ.get("PERSOBENCH_HOME") or "cache")


def utc_now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def canonical_json(value: Any) -> str:
    """Deterministic JSON used for hashing (sorted keys, no whitespace)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def sha256_hex(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # some filesystems do not allow opening directories
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see either the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, value: Any) -> None:
    atomic_write_text(path, json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n")


def atomic_write_parquet(path: Path, frame: "pd.DataFrame") -> None:
    """Write a DataFrame as Parquet atomically (temp file + fsync + rename)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def read_parquet(path: Path) -> "pd.DataFrame":
    """Read a Parquet table, turning any failure into a :class:`StoreError` that names the file."""
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise StoreError(f"{path}: table not found")
    try:
        return pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several unrelated types for damaged files
        raise StoreError(f"{path}: unreadable or corrupt Parquet table ({type(exc).__name__}: {exc})") from exc


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
    before families existed (:func:`persobench.protocol.template_family` derives it from the name)."""
    chat_template: bool | None = None
    """Local models: whether the prompt was wrapped in the tokenizer's chat template (``False``: sent as
    raw text, the paper's open-source protocol); ``None`` for chat APIs and baselines (not applicable)
    and for older manifests."""

    schema_version: int = SCHEMA_VERSION
    """Layout version of this manifest and its ``extra`` (:data:`persobench.run_records.SCHEMA_VERSION`);
    manifests written before the field existed read as 1."""

    @property
    def details(self) -> RunExtra:
        """``extra`` as typed records (generation, counts, import, scoring provenance)."""
        return RunExtra.from_extra(self.extra)

    @property
    def model_label(self) -> str:
        """Short display name of the model ("provider:model", or the imported model's name), marked
        ``+structured`` when the run asked for structured output (a different configuration)."""
        from persobench.structured import structured_label

        label = self.model.get("label") or f"{self.model.get('provider', '?')}:{self.model.get('model', '?')}"
        return structured_label(str(label), bool((self.parameters or {}).get("structured")))

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
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
MANIFEST_TYPES: dict[str, type | tuple[type, ...]] = {
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
    if not all(isinstance(i, str) for i in data.get("sample_ids", [])):
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


class Run:
    """A handle on one run folder."""

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

    def write_table(self, name: str, frame: "pd.DataFrame") -> Path:
        target = self.table_path(name)
        atomic_write_parquet(target, frame)
        return target

    def read_table(self, name: str) -> "pd.DataFrame":
        return read_parquet(self.table_path(name))

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
        """Replace manifest fields, stamp ``updated_at`` and write the manifest atomically."""
        if "status" in changes and changes["status"] not in RUN_STATUSES:
            raise ValueError(f"unknown run status {changes['status']!r}; expected one of {RUN_STATUSES}")
        if "extra" in changes:
            changes["extra"] = {**dict(self.manifest.extra), **dict(changes["extra"])}
        self.manifest = dataclasses.replace(self.manifest, updated_at=utc_now(), **changes)
        atomic_write_json(self.path / MANIFEST, self.manifest.to_dict())
        return self.manifest

    def __repr__(self) -> str:
        return f"Run({self.run_id!r}, status={self.manifest.status!r})"


@dataclass(frozen=True)
class StoreProblem:
    """A run folder that could not be read."""

    path: Path
    """The folder or file at fault."""
    reason: str
    """What is wrong with it."""


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

    def delete(self, run_id: str) -> None:
        shutil.rmtree(self.run_path(run_id))


def _package_version() -> str:
    from persobench import __version__

    return __version__
