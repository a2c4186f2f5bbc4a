"""Prompt tables parsed once per version of the file and kept in the store, so that scoring the
runs imported from a table does not parse it again (:func:`table_samples`).

Parsing a prompt table (the strict CSV read, then the speaker annotation of every row) cost more
than the lexical metrics of its runs: the four tables of the 58 published runs took 0.26 s of CPU,
plus 0.05 s for the samples' input hashes, in a lexical ``score`` pass of about 4 s. The import
(:func:`persobench.generation.importer.import_persobench`) keeps each table's samples, input hashes included,
as JSON in ``<home>/samples/<key>.json``; a pass reads them in a third of the time.

The key is the SHA-256 of the table's bytes, the dataset's name and the source of the modules that
parse it, so an edited table or a changed parser is parsed anew, never read from an old file. What
is read back is checked before it is trusted: the file's first line names its key and the SHA-256
and length of the samples' JSON below it, so a kept file edited by hand, cut short, damaged on disk
or copied from another version of the table is parsed again and replaced, never read (hashing the
JSON costs a few milliseconds, against a tenth of a second to decode it). The file is a cache: one
that is missing, damaged or unwritable is parsed again (and written when it can be), and the command
goes on; samples that would not come back from JSON exactly as parsed are not kept.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

from persobench.datasets import parse_all
from persobench.errors import PersoBenchError
from persobench.store.files import atomic_write_bytes, file_version, module_sources, sha256_file
from persobench.records import Sample

__all__ = ["SAMPLES_DIR", "table_samples", "tables_dir_of_store"]

log = logging.getLogger(__name__)

#: The store's folder of parsed prompt tables (``<home>/samples``).
SAMPLES_DIR = "samples"
#: The layout of a kept file: a header line (this format, the key, the body's length and SHA-256),
#: then the body (the samples as JSON). Files of another format are parsed again and replaced.
_FORMAT = 2

#: Modules whose code decides what a table parses to (their source is part of every key). Named by
#: module, so a module that moves is still found, and one that vanishes fails loudly.
PARSERS = ("persobench.records", "persobench.store.csv_io", "persobench.datasets", "persobench.datasets.tables",
           "persobench.datasets.prompt_tables", "persobench.datasets.paper_cells")

_LOADED: dict[str, list[Sample]] = {}
_KEYS: dict[tuple[str, int, int, str], str] = {}
_LOCK = threading.Lock()


def tables_dir_of_store(home: str | Path) -> Path:
    """Where the store at ``home`` keeps its parsed prompt tables."""
    return Path(home) / SAMPLES_DIR


def table_samples(dataset: str, prompts_file: str | Path, cache_dir: Path | None) -> list[Sample]:
    """The samples of ``dataset`` in ``prompts_file`` (those of ``load_all(dataset, source=...)``),
    read from ``cache_dir`` when this version of the table was parsed before, else parsed and kept
    there (``cache_dir`` None: parsed, nothing kept). The same objects for every call of a process
    on the same table (the runs of a dataset share them, and the scorer's caches key on them)."""
    path = Path(prompts_file)
    key = _key(path, dataset)
    with _LOCK:
        if key in _LOADED:
            return list(_LOADED[key])
    samples = _read(cache_dir / f"{key}.json", dataset) if cache_dir is not None else None
    if samples is None:
        samples = parse_all(dataset, source=str(path))
        if cache_dir is not None:
            _write(cache_dir / f"{key}.json", dataset, samples)
    with _LOCK:
        _LOADED[key] = samples
    return list(samples)


@lru_cache(maxsize=1)
def _parser_digest() -> str:
    digest = hashlib.sha256()
    for name, path in zip(PARSERS, module_sources(PARSERS)):
        digest.update(name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _key(path: Path, dataset: str) -> str:
    """The table's key: of its bytes, hashed once per process for each version of the file."""
    seen = (*file_version(path), dataset)
    with _LOCK:
        key = _KEYS.get(seen)
    if key is None:
        parts = (sha256_file(path), dataset, _parser_digest())
        key = hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:40]
        with _LOCK:
            _KEYS[seen] = key
    return key


def _read(file: Path, dataset: str) -> list[Sample] | None:
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.info("%s: parsed prompt table not read, parsing again (%s: %s)", file, type(exc).__name__, exc)
        return None
    body = _checked_body(data, file.stem)
    samples = _decode(body, dataset) if body is not None else None
    if samples is None:
        log.info("%s: parsed prompt table damaged, edited or of another table; parsing again", file)
    return samples


def _checked_body(data: bytes, key: str) -> bytes | None:
    """The samples' JSON of a kept file whose header line vouches for it (this format, this key, the
    body's length and SHA-256), else None."""
    head, newline, body = data.partition(b"\n")
    try:
        header = json.loads(head) if newline else None
    except ValueError:
        return None
    if not isinstance(header, dict) or header.get("format") != _FORMAT or header.get("key") != key:
        return None
    if header.get("bytes") != len(body) or header.get("sha256") != hashlib.sha256(body).hexdigest():
        return None
    return body


def _decode(body: bytes | str, dataset: str) -> list[Sample] | None:
    """The samples of a kept table (input hashes set as their cached property keeps them), or None
    when ``body`` is not one of ``dataset``."""
    try:
        stored = json.loads(body)
        if stored["dataset"] != dataset:
            return None
        samples = []
        for entry in stored["samples"]:
            sample = Sample.from_dict(entry["sample"])
            sample.__dict__["input_hash"] = str(entry["input_hash"])
            samples.append(sample)
        return samples
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _write(file: Path, dataset: str, samples: list[Sample]) -> None:
    entries: list[dict[str, Any]] = [{"input_hash": s.input_hash, "sample": s.to_dict()} for s in samples]
    # ASCII (non-ASCII characters escaped): read back four times faster than UTF-8 text.
    body = json.dumps({"dataset": dataset, "samples": entries}, ensure_ascii=True).encode("ascii")
    back = _decode(body, dataset)
    if back != samples or any(a.metadata != b.metadata for a, b in zip(back, samples)):
        log.info("%s: samples of %s do not come back from JSON as parsed; not kept", file, dataset)
        return
    header = json.dumps({"format": _FORMAT, "key": file.stem, "bytes": len(body),
                         "sha256": hashlib.sha256(body).hexdigest()}).encode("ascii")
    try:
        # a cache: losing it to a power cut costs one parse
        atomic_write_bytes(file, header + b"\n" + body, durable=False)
    except PersoBenchError as exc:
        log.info("%s: parsed prompt table not kept (%s)", file, exc)
