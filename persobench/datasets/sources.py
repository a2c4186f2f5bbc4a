"""Raw public sources turned into :class:`Sample` lists the way the paper built its prompt tables.

Five sources, each with a pure ``*_record_to_sample`` function (one source record -> one sample)
and a loader that reads the records with the real code path. Which turn becomes the reference
mirrors the paper's notebooks and published prompt tables:

* Blended Skill Talk, ``datasets.load_dataset("blended_skill_talk", split=...)`` or a local
  parquet/json/csv file or hub-layout folder: the first guided reply; context = the two seed
  turns (``previous_utterance``) + the first free message.
* Synthetic-Persona-Chat, ``datasets.load_dataset("google/Synthetic-Persona-Chat", ...)`` or its
  CSV files: the turn before the final exchange (the last two turns, usually goodbyes, are dropped).
* PEC, ``datasets.load_dataset("pec", "all", split=...)`` or a local json/jsonl/parquet file: the
  record's own response to its Reddit thread.
* FoCus, ``valid_focus.json`` from a local path or URL: the machine's last answer of each dialogue.
* IT-ConvAI2, ``data_valid_v2.json`` from a local path or URL: ``label`` answering ``input``.

Speakers are canonical: ``User1`` opens the conversation (BST free worker, FoCus human, the asker
in IT-ConvAI2 and PEC) and ``User2`` answers; personas are attached to the speaker they describe,
which is not always how the paper labelled them (its BST table says "User 1 persona" for the
persona the hub gives to the guided, i.e. responding, speaker).

Sample ids are ``"<dataset>:<record>/<target turn>"`` where ``<record>`` is the record's index in the
source split (FoCus: its ``dialogID``) and ``<target turn>`` the 0-based position of the reference in
the full dialogue, so ids never depend on filtering or sampling.

``datasets`` is imported only inside the loaders. The pure record conversions live in
:mod:`persobench.datasets.source_records` and are importable from here too.
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.client
import json
import os
import re
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Callable

from persobench.datasets.json_numbers import find_huge, load as load_json
from persobench.errors import DatasetError
from persobench.datasets.source_records import (SPC_TRAILING_TURNS_DROPPED, SourceFormatError, bst_record_to_sample,
                                                focus_record_to_sample, it_convai2_record_to_sample,
                                                parse_spc_conversation, pec_record_to_sample, spc_record_to_sample)
from persobench.records import Sample
from persobench.store.run_store import default_home
from persobench import __version__

__all__ = [
    "SPC_TRAILING_TURNS_DROPPED",
    "parse_spc_conversation",
    "SourceFormatError",
    "bst_record_to_sample",
    "spc_record_to_sample",
    "pec_record_to_sample",
    "focus_record_to_sample",
    "it_convai2_record_to_sample",
    "load_blended_skill_talk",
    "load_synthetic_personachat",
    "load_pec",
    "load_focus",
    "load_it_convai2",
    "fetch_source",
]


#: Builders of the ``datasets`` library for single local files, by suffix.
_FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}


# ---------------------------------------------------------------------------------------------
# Loading through the datasets library (hub name, local file or local folder)
# ---------------------------------------------------------------------------------------------


def _looks_like_path(source: str) -> bool:
    hub_name = re.fullmatch(r"[\w.-]+(/[\w.-]+)?", source) is not None  # "name" or "owner/name"
    return (
        source.startswith((".", "/", "~"))
        or (os.sep in source and not hub_name)
        or Path(source).suffix.lower() in _FILE_BUILDERS
    )


def _load_with_datasets(source: str, *, split: str, config: str | None = None) -> tuple[Any, str]:
    """Records of ``split`` via ``datasets.load_dataset``, and the source's name (path or hub name).

    A local file is read with the builder for its suffix, a local folder like a hub repository
    (split names inferred from file names), anything else is a hub name.
    """
    import datasets

    path = Path(source).expanduser()
    if path.is_file():
        builder = _FILE_BUILDERS.get(path.suffix.lower())
        if builder is None:
            known = ", ".join(sorted(_FILE_BUILDERS))
            raise DatasetError(f"{path}: unsupported file type {path.suffix!r}; expected one of {known}")
        loader: Callable[[], Any] = lambda: datasets.load_dataset(builder, data_files={split: str(path)}, split=split)  # noqa: E731
        label = str(path)
    elif path.is_dir():
        folder = path / config if config and (path / config).is_dir() else path
        loader = lambda: datasets.load_dataset(str(folder), split=split)  # noqa: E731
        label = str(folder)
    elif _looks_like_path(source):
        raise DatasetError(f"{source}: no such file or folder")
    else:
        args = (source, config) if config else (source,)
        try:
            return datasets.load_dataset(*args, split=split), source
        except Exception as exc:  # keep the library's error type and message, add what to try
            exc.add_note(
                f"PersoBench: loading {source!r} (config {config!r}, split {split!r}) from the Hugging Face hub "
                "failed. Without hub access, or for datasets that still need a loading script (which "
                "datasets>=4 no longer runs), download the data files and pass their local path instead."
            )
            raise
    try:
        return loader(), label
    except DatasetError:
        raise
    except Exception as exc:
        raise DatasetError(f"{label} [{split}]: the datasets library could not read it: {exc}") from exc


def _convert_all(records: Iterable[Mapping[str, Any]], convert: Callable[[Mapping[str, Any], int], Sample]) -> list[Sample]:
    return [convert(record, index) for index, record in enumerate(records)]


def load_blended_skill_talk(
    source: str = "blended_skill_talk", *, split: str = "test", dataset: str = "blended-skill-talk-hub"
) -> list[Sample]:
    """Blended Skill Talk from the hub (or a local file/folder in the hub's schema), one sample per dialogue."""
    records, label = _load_with_datasets(source, split=split)
    return _convert_all(records, lambda r, i: bst_record_to_sample(r, i, dataset, source=label, split=split))


def load_synthetic_personachat(
    source: str = "google/Synthetic-Persona-Chat", *, split: str = "test", dataset: str = "synthetic-personachat-hub"
) -> list[Sample]:
    """Synthetic-Persona-Chat from the hub (or its CSV files), one sample per dialogue."""
    records, label = _load_with_datasets(source, split=split)
    return _convert_all(records, lambda r, i: spc_record_to_sample(r, i, dataset, source=label, split=split))


#: The paper's PEC sample: one record per distinct ``context_speakers``, then this many, both
#: drawn with ``random_state=42`` (``pre_processing.ipynb``).
PEC_PAPER_SIZE = 1000
PEC_PAPER_SEED = 42


def paper_pec_selection(speaker_lists: Sequence[Sequence[str]], *, size: int = PEC_PAPER_SIZE,
                        seed: int = PEC_PAPER_SEED) -> list[int]:
    """Record positions the paper's PEC sampling picks, in the order it lists them.

    The notebook grouped the test split by ``context_speakers`` (the list's text, groups in sorted
    order), took ``x.sample(n=1, random_state=42)`` from each group, then ``sample(n=1000,
    random_state=42)`` of those rows. pandas' ``sample`` is ``RandomState(seed).choice(n, k,
    replace=False)`` with a fresh state per call, which is what this does without pandas. With
    ``size`` or fewer groups, every group's pick is kept (in group order).
    """
    import numpy as np

    groups: dict[str, list[int]] = {}
    for position, speakers in enumerate(speaker_lists):
        groups.setdefault(str(list(speakers)), []).append(position)
    picks = [rows[int(np.random.RandomState(seed).choice(len(rows), 1, replace=False)[0])]
             for _, rows in sorted(groups.items())]
    if len(picks) <= size:
        return picks
    chosen = np.random.RandomState(seed).choice(len(picks), size, replace=False)
    return [picks[int(i)] for i in chosen]


def load_pec(
    source: str = "pec", *, split: str = "test", dataset: str = "pec-hub", subset: str = "all",
    paper_sample: bool = True,
) -> list[Sample]:
    """PEC (``subset`` "happy", "offmychest" or "all") from the hub or a local file.

    By default the paper's split (test) and its sample (:func:`paper_pec_selection`, 1,000 records);
    ``paper_sample=False`` keeps one sample per record. Sample ids keep the record's index in the
    split, so they do not depend on the sampling.
    """
    records, label = _load_with_datasets(source, split=split, config=subset)
    samples = _convert_all(
        records, lambda r, i: pec_record_to_sample(r, i, dataset, source=label, split=split, subset=subset)
    )
    if not paper_sample:
        return samples
    return [samples[i] for i in paper_pec_selection([s.metadata["context_speakers"] for s in samples])]


# ---------------------------------------------------------------------------------------------
# JSON files from a local path or a URL (FoCus, IT-ConvAI2)
# ---------------------------------------------------------------------------------------------


def _downloads_dir() -> Path:

    return default_home() / "downloads"


def _github_raw(url: str) -> str:
    """github.com/<owner>/<repo>/blob/<ref>/<path> -> the raw file, which is what users mean."""
    parts = urllib.parse.urlsplit(url)
    pieces = parts.path.split("/")
    if parts.netloc == "github.com" and len(pieces) > 4 and pieces[3] == "blob":
        return f"https://raw.githubusercontent.com/{pieces[1]}/{pieces[2]}/{'/'.join(pieces[4:])}"
    return url


def fetch_source(url: str, *, timeout: float = 60.0, refresh: bool = False) -> Path:
    """Download ``url`` once into ``$PERSOBENCH_HOME/downloads`` and return the cached file.

    The file name is a hash of the URL plus its base name. The body is streamed into a temporary
    file in the same folder, checked against Content-Length, fsynced and renamed, so an interrupted
    download never leaves a truncated file that a later run would trust.
    """
    url = _github_raw(url)
    base = Path(urllib.parse.urlsplit(url).path).name or "download"
    base = re.sub(r"[^\w.-]", "_", base)
    target = _downloads_dir() / f"{hashlib.sha256(url.encode('utf-8')).hexdigest()[:16]}-{base}"
    if target.exists() and not refresh:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)

    request = urllib.request.Request(url, headers={"User-Agent": f"persobench/{__version__}"})
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            try:
                with urllib.request.urlopen(request, timeout=timeout) as response:
                    expected = response.headers.get("Content-Length")
                    shutil.copyfileobj(response, out, length=1 << 20)
            except urllib.error.HTTPError as exc:
                raise DatasetError(f"{url}: download failed: HTTP {exc.code} {exc.reason}") from exc
            except http.client.IncompleteRead as exc:  # the server closed before Content-Length bytes
                raise DatasetError(f"{url}: download incomplete: {exc}") from exc
            except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                raise DatasetError(f"{url}: download failed: {reason}") from exc
            out.flush()
            size = out.tell()
            if expected is not None and expected.isdigit() and int(expected) != size:
                raise DatasetError(f"{url}: download incomplete: got {size} of {expected} bytes")
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def _resolve_source(source: str | None, source_env: str | None, what: str) -> tuple[Path, str]:
    """Local path of the JSON file (downloading a URL first) and the label used in messages."""
    if not source and source_env:
        source = os.environ.get(source_env) or None
    if not source:
        hint = f" or set {source_env}" if source_env else ""
        raise DatasetError(f"{what}: no source given; pass a local path or an http(s) URL{hint}")
    if urllib.parse.urlsplit(source).scheme in ("http", "https"):
        return fetch_source(source), source
    path = Path(source).expanduser()
    if not path.is_file():
        raise DatasetError(f"{path}: no such file ({what})")
    return path, str(path)


def _read_json_records(path: Path, label: str) -> list[Any]:
    """The record list of a ``{"data": [...]}`` file (a bare list is accepted too)."""
    try:
        with open(path, encoding="utf-8") as handle:
            payload = load_json(handle)
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{label}: not UTF-8 text (byte offset {exc.start})") from exc
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{label}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from exc
    records = payload.get("data") if isinstance(payload, dict) else payload
    if not isinstance(records, list):
        raise DatasetError(f"{label}: expected an object with a \"data\" list of records")
    huge = find_huge(records)
    if huge is not None:
        (row, *inside), number = huge
        field = ".".join(str(part) for part in inside) or "(the record itself)"
        record = row + 1 if isinstance(row, int) else row  # records is a list: row is its position
        raise DatasetError(f"{label}: record {record}, field {field}: {number.problem()}")
    return records


def load_focus(
    source: str | None = None, *, dataset: str = "focus-raw", source_env: str | None = "PERSOBENCH_FOCUS_SOURCE"
) -> list[Sample]:
    """FoCus ``valid_focus.json`` (local path or http(s) URL), one sample per dialogue.

    Without ``source``, the path or URL is read from the environment variable ``source_env``.
    """
    path, label = _resolve_source(source, source_env, "FoCus")
    samples = _convert_all(_read_json_records(path, label), lambda r, i: focus_record_to_sample(r, i, dataset, source=label))
    seen: dict[str, int] = {}
    for sample in samples:  # ids come from dialogID, so a repeated one would make ids ambiguous
        row = sample.metadata["row"]
        if sample.id in seen:
            raise SourceFormatError(label, row, "dialogID", f"repeats record {seen[sample.id]}")
        seen[sample.id] = row
    return samples


def load_it_convai2(
    source: str | None = None,
    *,
    dataset: str = "it-convai2-raw",
    source_env: str | None = "PERSOBENCH_IT_CONVAI2_SOURCE",
    drop_duplicates: bool = True,
) -> list[Sample]:
    """IT-ConvAI2 ``data_valid_v2.json`` (local path or http(s) URL), one sample per record.

    The file repeats a question/answer pair once per removed persona sentence; like the paper
    (1,595 records -> 1,183 rows) the repeats are dropped by default, keeping the first record,
    whose metadata lists the dropped rows under ``duplicate_rows``.
    """
    path, label = _resolve_source(source, source_env, "IT-ConvAI2")
    samples = _convert_all(
        _read_json_records(path, label), lambda r, i: it_convai2_record_to_sample(r, i, dataset, source=label)
    )
    if not drop_duplicates:
        return samples
    first: dict[tuple[Any, ...], Sample] = {}
    repeats: dict[str, list[int]] = {}
    for sample in samples:
        key = (sample.personas, sample.context, sample.reference)
        if key in first:
            repeats.setdefault(first[key].id, []).append(sample.metadata["row"])
        else:
            first[key] = sample
    kept = []
    for sample in first.values():
        if sample.id in repeats:
            sample = dataclasses.replace(sample, metadata=dict(sample.metadata, duplicate_rows=repeats[sample.id]))
        kept.append(sample)
    return kept
