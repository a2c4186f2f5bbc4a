"""The store's aggregated tables, cached on disk in the store: ``<home>/aggregate/*.parquet``.

Building the per-sample results of a store reads every run's tables (58 published runs: 116
Parquet files, about three seconds); a fresh process (a just-started app, a CLI ``leaderboard``)
reads one cached file instead. Each file carries, in its Parquet metadata, the key it was built
for:

- the store's fingerprint (:meth:`persobench.store.run_store.RunStore.fingerprint`): every entry of ``runs/`` with the inode,
  size, modification and change times of each file in it, so adding, rescoring, re-importing,
  damaging or deleting a run changes it (an atomic rewrite always makes a new inode, and an
  in-place write moves the change time, which no tool can set back);
- the arguments the table was built with (profile, incomplete runs or not);
- the code that builds it (:func:`code_fingerprint`): a changed aggregate module never reads a
  table an older one wrote.

A reader whose key differs rebuilds the table; a file that cannot be read (missing, truncated, not
Parquet, unexpected columns or row count) is ignored and rebuilt the same way. Writes are atomic
(temp file, rename) but not synced to disk: a power cut may lose or damage a cached table, which
is then only rebuilt, while the two fsyncs per table (1-6 ms each on this project's machine) held
up the landing step a command ends with. Writes happen only when the store did not change while the
table was built, and are skipped silently when the store is read-only: the cache never fails a
caller and never serves a table built from another state.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence
from persobench.store.run_store import RunStore
from persobench import __version__
from persobench.store.files import atomic_write_bytes, module_sources

if TYPE_CHECKING:
    import pandas as pd


log = logging.getLogger(__name__)

#: Folder of the store holding the cached tables.
CACHE_DIR = "aggregate"
#: Bumped when the file layout changes.
FORMAT_VERSION = 1
_METADATA_KEY = b"persobench.cache"
#: Modules whose code decides what a cached table holds (every module of this package counts too).
#: Named by module, so a module that moves is still found, and one that vanishes fails loudly.
BUILDERS = ("persobench.prompts.protocol", "persobench.store.run_records", "persobench.store.run_store", "persobench.aggregate.stats")


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """Digest of the package version and the source of the modules that build cached tables."""

    digest = hashlib.sha1(f"{FORMAT_VERSION} {__version__}".encode())
    package = Path(__file__).parent
    for path in [*sorted(package.glob("*.py")), *module_sources(BUILDERS)]:
        try:
            digest.update(path.name.encode() + path.read_bytes())
        except OSError:
            digest.update(path.name.encode())
    return digest.hexdigest()[:16]


def cache_key(store: "RunStore", table: str, **arguments: Any) -> dict[str, Any]:
    """The key of ``table`` built with ``arguments`` from the store as it is now."""
    return {"table": table, "arguments": arguments, "code": code_fingerprint(), "state": store.fingerprint()}


def cache_path(store: "RunStore", table: str, **arguments: Any) -> Path:
    """Where ``table`` built with ``arguments`` is cached (one file per table and arguments)."""
    readable = "-".join(re.sub(r"[^A-Za-z0-9_.]+", "_", str(v))[:40] for v in arguments.values()
                        if isinstance(v, (str, int, float)))
    digest = hashlib.sha1(json.dumps(arguments, sort_keys=True, default=str).encode()).hexdigest()[:8]
    return store.home / CACHE_DIR / f"{table}-{readable}-{digest}.parquet"


def cached_table(store: "RunStore", table: str, arguments: Mapping[str, Any],
                 build: "Callable[[], tuple[pd.DataFrame, Mapping[str, Any]]]",
                 columns: Sequence[str] | None = None) -> "tuple[pd.DataFrame, dict]":
    """(frame, notes) of ``table`` built with ``arguments``: read from the store's cache when it was
    built from the store as it is now, otherwise ``build()`` and written to the cache (only when the
    store did not change meanwhile; empty tables are not cached). ``arguments`` must be JSON."""
    path = cache_path(store, table, **arguments)
    key = cache_key(store, table, **arguments)
    hit = read_cached(path, key, columns)
    if hit is not None:
        return hit
    frame, notes = build()
    if len(frame) and cache_key(store, table, **arguments) == key:
        write_cached(path, key, frame, notes)
    return frame, dict(notes)


def read_cached(path: Path, key: Mapping[str, Any],
                columns: Sequence[str] | None = None) -> "tuple[pd.DataFrame, dict] | None":
    """(the cached frame, the notes written with it) when ``path`` holds a readable table built
    for exactly ``key`` (with ``columns``, when given); ``None`` otherwise (absent, stale, damaged)."""
    import pyarrow.parquet as pq

    try:
        if not path.is_file():
            return None
        table = pq.read_table(path)
        stored = json.loads((table.schema.metadata or {})[_METADATA_KEY])
        if stored.get("key") != json.loads(json.dumps(key, default=str)):
            return None
        if (columns is not None and table.column_names != list(columns)) or table.num_rows != stored.get("rows"):
            raise ValueError(f"columns {table.column_names} or {table.num_rows} rows do not match the metadata")
        return table.to_pandas(), dict(stored.get("notes") or {})
    except Exception as exc:  # noqa: BLE001 - any damage means: rebuild
        log.info("%s: ignored, rebuilding (%s: %s)", path, type(exc).__name__, exc)
        return None


def write_cached(path: Path, key: Mapping[str, Any], frame: "pd.DataFrame", notes: Mapping[str, Any]) -> bool:
    """Write ``frame`` with its key and notes to ``path`` atomically; False (and nothing written)
    when the store cannot take it (read-only, full)."""
    import pyarrow as pa
    import pyarrow.parquet as pq


    try:
        table = pa.Table.from_pandas(frame, preserve_index=False)
        meta = json.dumps({"key": key, "rows": len(frame), "notes": notes}, default=str).encode()
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), _METADATA_KEY: meta})
        buffer = io.BytesIO()
        pq.write_table(table, buffer)
        atomic_write_bytes(path, buffer.getvalue(), durable=False)  # a lost table is rebuilt (module docstring)
        return True
    except Exception as exc:  # noqa: BLE001 - a cache that cannot be written is only slower
        log.info("%s: not cached (%s: %s)", path, type(exc).__name__, exc)
        return False
