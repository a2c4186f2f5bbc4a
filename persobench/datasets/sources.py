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

``datasets`` is imported only inside the loaders.
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

from persobench.datasets import DatasetError
from persobench.records import USER1, USER2, PersonaSet, Sample, Turn

__all__ = [
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

#: Synthetic-Persona-Chat: how many turns at the end of a dialogue are not used. The paper's table
#: ends each context one exchange before the end of the conversation (its first notebook split off
#: the last two lines as query/response, the published table then took the line before them as
#: the reference), which avoids scoring models on "Bye." / "You too, bye!".
SPC_TRAILING_TURNS_DROPPED = 2

#: Builders of the ``datasets`` library for single local files, by suffix.
_FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}

#: "User 1:", "User2:", "**User 1:**", "user 2 :" at the start of a Synthetic-Persona-Chat line.
_SPC_LABEL = re.compile(r"^[\s*_]*user\s*([12])[\s*_]*:[\s*_]*(.*)$", re.IGNORECASE | re.DOTALL)


class SourceFormatError(DatasetError):
    """A source record lacks a field or has one of the wrong shape.

    The message names the file (or hub name and split), the record index and the field.
    """

    def __init__(self, source: str, row: int, field: str, problem: str) -> None:
        self.source = source
        self.row = row
        self.field = field
        super().__init__(f"{source}: record {row}: field {field!r}: {problem}")


# ---------------------------------------------------------------------------------------------
# Field access with errors that say where the problem is
# ---------------------------------------------------------------------------------------------


def _get(record: Mapping[str, Any], field: str, source: str, row: int, name: str | None = None) -> Any:
    """``record[field]``; ``name`` is how the field is called in messages (e.g. a nested path)."""
    name = name or field
    if not isinstance(record, Mapping):
        raise SourceFormatError(source, row, name, f"record is a {type(record).__name__}, expected an object")
    value = record.get(field)
    if value is None:  # the datasets library fills a key missing from one row with None
        raise SourceFormatError(source, row, name, "missing")
    return value


def _text(
    record: Mapping[str, Any], field: str, source: str, row: int, *, allow_empty: bool = False, name: str | None = None
) -> str:
    name = name or field
    value = _get(record, field, source, row, name)
    if not isinstance(value, str):
        raise SourceFormatError(source, row, name, f"expected text, got {type(value).__name__}")
    value = _clean(value)
    if not value and not allow_empty:
        raise SourceFormatError(source, row, name, "empty")
    return value


def _texts(
    record: Mapping[str, Any], field: str, source: str, row: int, *, min_items: int = 0, name: str | None = None
) -> list[str]:
    """A list of strings, each whitespace-trimmed (empty items kept so positions stay meaningful)."""
    name = name or field
    value = _get(record, field, source, row, name)
    # Lists from the datasets library, tuples or numpy arrays from pandas: any non-text iterable.
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise SourceFormatError(source, row, name, f"expected a list of texts, got {type(value).__name__}")
    items: list[str] = []
    for position, item in enumerate(value):
        if not isinstance(item, str):
            raise SourceFormatError(source, row, f"{name}[{position}]", f"expected text, got {type(item).__name__}")
        items.append(_clean(item))
    if len(items) < min_items:
        raise SourceFormatError(source, row, name, f"needs at least {min_items} item(s), has {len(items)}")
    return items


def _clean(text: str) -> str:
    # Sources mix \r\n and \n and pad utterances with spaces; the text itself is kept verbatim
    # (the paper's apostrophe stripping was a CSV workaround, not something to reproduce).
    return text.replace("\r\n", "\n").replace("\r", "\n").strip()


def _persona_set(speaker: str, sentences: Iterable[str]) -> tuple[PersonaSet, ...]:
    kept = tuple(s for s in (_clean(x) for x in sentences) if s)
    return (PersonaSet(speaker, kept),) if kept else ()


def _alternating(texts: Sequence[str], first: str = USER1) -> list[Turn]:
    second = USER2 if first == USER1 else USER1
    return [Turn(first if i % 2 == 0 else second, t) for i, t in enumerate(texts)]


# ---------------------------------------------------------------------------------------------
# Pure conversions: one source record -> one Sample
# ---------------------------------------------------------------------------------------------


def bst_record_to_sample(
    record: Mapping[str, Any], index: int, dataset: str, *, source: str = "blended_skill_talk", split: str = ""
) -> Sample:
    """One Blended Skill Talk dialogue -> the sample the paper used: its first guided reply.

    Hub schema: ``previous_utterance`` = [free worker's seed turn, guided worker's seed turn],
    then ``free_messages[i]`` and ``guided_messages[i]`` alternate. ``personas`` is the guided
    worker's persona (the hub keeps ``personas[1]`` of the ParlAI data), so it belongs to User2,
    the responder. Context = seed turns + ``free_messages[0]``; reference = ``guided_messages[0]``.
    """
    where = f"{source} [{split}]" if split else source  # record indices count within the split
    personas = _texts(record, "personas", where, index)
    seeds = _texts(record, "previous_utterance", where, index)
    free = _texts(record, "free_messages", where, index, min_items=1)
    guided = _texts(record, "guided_messages", where, index, min_items=1)
    if not free[0]:
        raise SourceFormatError(where, index, "free_messages[0]", "empty")
    if not guided[0]:
        raise SourceFormatError(where, index, "guided_messages[0]", "empty")
    # Seed turns keep their role-based speaker even if one of them is empty and dropped.
    context = [t for t in _alternating(seeds) if t.text] + [Turn(USER1, free[0])]
    target_turn = len(seeds) + 1
    metadata: dict[str, Any] = {"source": source, "split": split, "row": index, "target_turn": target_turn,
                                "paper_form": "bst"}
    context_dataset = record.get("context")
    if isinstance(context_dataset, str) and context_dataset:
        metadata["context_dataset"] = context_dataset
    topic = record.get("additional_context")
    if isinstance(topic, str) and topic.strip():
        metadata["topic"] = topic.strip()
    return Sample(
        id=f"{dataset}:{index}/{target_turn}",
        dataset=dataset,
        personas=_persona_set(USER2, personas),
        context=tuple(context),
        responder=USER2,
        reference=guided[0],
        metadata=metadata,
    )


def parse_spc_conversation(text: str) -> tuple[list[Turn], int]:
    """Split a "Best Generated Conversation" into turns; also return how many lines were dropped.

    Each turn starts with a "User 1:" / "User 2:" label (sometimes in ``**bold**``). A line
    without a label continues the previous turn; unlabelled lines before the first label and
    separator lines such as ``* * *`` are dropped.
    """
    turns: list[Turn] = []
    dropped = 0
    for line in _clean(text).split("\n"):
        stripped = line.strip()
        if not stripped.strip("*_- "):
            continue
        match = _SPC_LABEL.match(stripped)
        if match:
            speaker = USER1 if match.group(1) == "1" else USER2
            turns.append(Turn(speaker, match.group(2).strip().strip("*").strip()))
        elif turns:
            previous = turns[-1]
            turns[-1] = Turn(previous.speaker, f"{previous.text} {stripped}".strip())
        else:
            dropped += 1
    return [t for t in turns if t.text], dropped


def spc_record_to_sample(
    record: Mapping[str, Any],
    index: int,
    dataset: str,
    *,
    source: str = "google/Synthetic-Persona-Chat",
    split: str = "",
) -> Sample:
    """One Synthetic-Persona-Chat dialogue -> one sample with both speakers' personas.

    The target is the turn just before the final exchange (see :data:`SPC_TRAILING_TURNS_DROPPED`);
    dialogues too short for that use their last turn. The reference keeps no "User N:" label.
    """
    where = f"{source} [{split}]" if split else source  # record indices count within the split
    field = "Best Generated Conversation"
    conversation = _text(record, field, where, index)
    user1 = _text(record, "user 1 personas", where, index, allow_empty=True)
    user2 = _text(record, "user 2 personas", where, index, allow_empty=True)
    turns, dropped = parse_spc_conversation(conversation)
    if len(turns) < 2:
        raise SourceFormatError(where, index, field, f"needs at least 2 'User N:' turns, found {len(turns)}")
    if len(turns) >= SPC_TRAILING_TURNS_DROPPED + 2:
        target_turn = len(turns) - 1 - SPC_TRAILING_TURNS_DROPPED
    else:
        target_turn = len(turns) - 1
    target = turns[target_turn]
    metadata: dict[str, Any] = {
        "source": source, "split": split, "row": index, "target_turn": target_turn, "dialogue_turns": len(turns),
        "paper_form": "spc",
    }
    if dropped:
        metadata["unlabelled_lines_dropped"] = dropped
    return Sample(
        id=f"{dataset}:{index}/{target_turn}",
        dataset=dataset,
        personas=_persona_set(USER1, user1.split("\n")) + _persona_set(USER2, user2.split("\n")),
        context=tuple(turns[:target_turn]),
        responder=target.speaker,
        reference=target.text,
        metadata=metadata,
    )


def pec_record_to_sample(
    record: Mapping[str, Any], index: int, dataset: str, *, source: str = "pec", split: str = "", subset: str = ""
) -> Sample:
    """One PEC record (a Reddit thread and one reply) -> one sample.

    The replier (``response_speaker``) is User2 and owns ``personas``; every other poster in the
    thread is User1 (the benchmark is two-party); their user names stay in the metadata.
    """
    where = f"{source} [{split}]" if split else source  # record indices count within the split
    personas = _texts(record, "personas", where, index)
    context_texts = _texts(record, "context", where, index, min_items=1)
    speakers = _texts(record, "context_speakers", where, index)
    if len(speakers) != len(context_texts):
        raise SourceFormatError(
            where, index, "context_speakers", f"has {len(speakers)} names for {len(context_texts)} context turns"
        )
    response = _text(record, "response", where, index)
    responder_name = _text(record, "response_speaker", where, index)
    context = tuple(
        Turn(USER2 if name == responder_name else USER1, text)
        for name, text in zip(speakers, context_texts)
        if text
    )
    if not context:
        raise SourceFormatError(where, index, "context", "all turns are empty")
    target_turn = len(context_texts)
    metadata: dict[str, Any] = {
        "source": source, "split": split, "row": index, "target_turn": target_turn,
        "response_speaker": responder_name, "context_speakers": speakers, "paper_form": "pec",
    }
    if subset:
        metadata["subset"] = subset
    return Sample(
        id=f"{dataset}:{index}/{target_turn}",
        dataset=dataset,
        personas=_persona_set(USER2, personas),
        context=context,
        responder=USER2,
        reference=response,
        metadata=metadata,
    )


def focus_record_to_sample(record: Mapping[str, Any], index: int, dataset: str, *, source: str = "valid_focus.json") -> Sample:
    """One FoCus dialogue -> the sample the paper used: the machine's last answer.

    ``utterance[k]["dialogue{k+1}"]`` holds the whole history up to round k+1 (human question,
    machine answer, ...), so the last entry is the full dialogue. The persona is the human's
    (User1); the machine (User2) answers with it in mind.
    """
    dialog_id = _text(record, "dialogID", source, index)
    persona = _texts(record, "persona", source, index)
    rounds = _get(record, "utterance", source, index)
    if not isinstance(rounds, list) or not rounds:
        raise SourceFormatError(source, index, "utterance", "expected a non-empty list of rounds")
    last = rounds[-1]
    last_field = f"utterance[{len(rounds) - 1}]"
    if not isinstance(last, Mapping):
        raise SourceFormatError(source, index, last_field, f"expected an object, got {type(last).__name__}")
    key = f"dialogue{len(rounds)}"
    if key not in last:  # tolerate renumbered rounds, but only one dialogue key per round
        keys = [k for k in last if str(k).startswith("dialogue")]
        if len(keys) != 1:
            raise SourceFormatError(source, index, f"{last_field}.{key}", "missing")
        key = keys[0]
    history = _texts(last, key, source, index, min_items=2, name=f"{last_field}.{key}")
    turns = _alternating(history)  # the human always opens a FoCus round
    target_turn = len(turns) - 1
    target = turns[target_turn]
    if not target.text:
        raise SourceFormatError(source, index, f"{last_field}.{key}[{target_turn}]", "empty")
    metadata: dict[str, Any] = {"source": source, "row": index, "dialog_id": dialog_id, "target_turn": target_turn,
                                "paper_form": "focus"}
    link = record.get("landmark_link")
    if isinstance(link, str) and link:
        metadata["landmark_link"] = link
    return Sample(
        id=f"{dataset}:{dialog_id}/{target_turn}",
        dataset=dataset,
        personas=_persona_set(USER1, persona),
        context=tuple(t for t in turns[:target_turn] if t.text),
        responder=target.speaker,
        reference=target.text,
        metadata=metadata,
    )


def it_convai2_record_to_sample(
    record: Mapping[str, Any], index: int, dataset: str, *, source: str = "data_valid_v2.json"
) -> Sample:
    """One IT-ConvAI2 record -> a single-question sample: User1 asks ``input``, User2 answers ``label``.

    ``full_personas`` is the answering speaker's persona (the paper used the full set, not the
    deliberately reduced ``insuf_personas``).
    """
    question = _text(record, "input", source, index)
    answer = _text(record, "label", source, index)
    personas = _texts(record, "full_personas", source, index, min_items=1)
    metadata: dict[str, Any] = {"source": source, "row": index, "target_turn": 1, "paper_form": "it-convai2"}
    removed = record.get("rm_persona")
    if isinstance(removed, str) and removed:
        metadata["rm_persona"] = removed
    return Sample(
        id=f"{dataset}:{index}/1",
        dataset=dataset,
        personas=_persona_set(USER2, personas),
        context=(Turn(USER1, question),),
        responder=USER2,
        reference=answer,
        metadata=metadata,
    )


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
    from persobench.store import default_home

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
    from persobench import __version__

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
            payload = json.load(handle)
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{label}: not UTF-8 text (byte offset {exc.start})") from exc
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{label}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from exc
    records = payload.get("data") if isinstance(payload, dict) else payload
    if not isinstance(records, list):
        raise DatasetError(f"{label}: expected an object with a \"data\" list of records")
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
