"""Dataset registry: every dataset is registered by name and loaded lazily into :class:`Sample` lists.

Kinds of dataset:

* ``sample``: the built-in dataset shipped inside the package (the embedded default).
* the paper's prepared prompt tables (``blended-skill-talk``, ``focus``, ``it-convai2``, ``pec``,
  ``synthetic-personachat``), read from ``$PERSOBENCH_REFERENCE/Prompts`` (a checkout of the paper's
  repository), or from the folder in ``$PERSOBENCH_PROMPTS``.
* raw public sources (``*-hub``, ``*-raw``) through the ``datasets`` library or a JSON file/URL.
* user files: any path to a ``.csv`` or ``.jsonl`` file with the prompt-table columns.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from persobench.errors import DatasetError
from persobench.records import Sample
from persobench.core.registry import Registry, UnknownNameError
from persobench.datasets.paper_archive import (PAPER_ARCHIVE, ArchiveLimits, FetchResult, download_progress,
                                               fetch_paper, fetched_reference, paper_manifest, reference_dir)
from persobench.datasets.tables import tables_dir
from persobench.datasets.user_files import load_user_file
from persobench.core.registry import load_object

__all__ = [
    "DatasetInfo", "DatasetError", "PAPER_TABLES", "REGISTRY", "dataset_names", "get_dataset_info", "load_dataset",
    "select_samples", "reference_dir", "is_file_dataset", "load_all", "parse_all", "samples_by_id",
    "some_samples", "tables_dir", "PAPER_ARCHIVE", "ArchiveLimits", "FetchResult", "download_progress", "fetch_paper",
    "fetched_reference", "paper_manifest",
]


@dataclass(frozen=True)
class DatasetInfo:
    """How to load one registered dataset."""

    name: str
    """Registry name, as typed on the command line."""
    description: str
    """One line for listings."""
    loader: str
    """``"module:function"`` returning ``list[Sample]``; imported on first use."""
    kind: str
    """"builtin", "paper-table", "hub", "file"."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Keyword arguments passed to the loader."""


REGISTRY: Registry[DatasetInfo] = Registry("dataset")

#: The paper's table file name and who owns unlabelled persona text in it.
PAPER_TABLES = {
    "blended-skill-talk": ("Blended Skill Talk", "responder", "Blended Skill Talk (paper's prompt table, 980 rows)"),
    "focus": ("FoCus", "partner", "FoCus (paper's prompt table, 1000 rows; personas are the user's)"),
    "it-convai2": ("IT-ConvAI2", "responder", "IT-ConvAI2 (paper's prompt table, 1183 rows)"),
    "pec": ("PEC", "responder", "PEC, persona-based empathetic conversations (paper's prompt table, 1000 rows)"),
    "synthetic-personachat": ("Synthetic-PersonaChat", "responder", "Synthetic-PersonaChat (paper's prompt table, 966 rows)"),
}

#: Tables whose persona label does not name the persona's owner. Blended Skill Talk: the hub's
#: ``personas`` field is ``row["personas"][1]`` of the ParlAI data, the *guided* worker's persona, and
#: the guided worker writes ``guided_messages[0]``, the table's ``act_response`` (User2). The paper's
#: ``pre_processing.ipynb`` labels it "[User 1 persona]" for every row regardless, and the table's
#: own User2 turns match it ("i like canning and whittling" / "User2: ... i enjoy canning"), so
#: every BST persona belongs to the responder.
LABELS_NOT_OWNERS = frozenset({"blended-skill-talk"})


def _register_builtins() -> None:
    REGISTRY.register(
        "sample",
        DatasetInfo("sample", "Built-in sample: 30 original dialogues shipped with PersoBench",
                    "persobench.datasets.builtin:load_sample", "builtin"),
    )
    for name, (file_stem, owner, description) in PAPER_TABLES.items():
        options: dict[str, Any] = {"file_stem": file_stem, "unlabelled_owner": owner}
        if name in LABELS_NOT_OWNERS:
            options["labels_name_owner"] = False
        REGISTRY.register(
            name,
            DatasetInfo(name, description, "persobench.datasets.tables:load_paper_table", "paper-table", options),
        )
    hub = {
        "blended-skill-talk-hub": ("load_blended_skill_talk", "Blended Skill Talk from the Hugging Face hub"),
        "synthetic-personachat-hub": ("load_synthetic_personachat", "Synthetic-Persona-Chat from the Hugging Face hub"),
        "pec-hub": ("load_pec", "PEC from the Hugging Face hub"),
    }
    for name, (function, description) in hub.items():
        REGISTRY.register(name, DatasetInfo(name, description, f"persobench.datasets.sources:{function}", "hub"))
    raw = {
        "focus-raw": ("load_focus", "FoCus valid_focus.json (set PERSOBENCH_FOCUS_SOURCE to a path or URL)", "PERSOBENCH_FOCUS_SOURCE"),
        "it-convai2-raw": ("load_it_convai2", "IT-ConvAI2 data_valid_v2.json (set PERSOBENCH_IT_CONVAI2_SOURCE)", "PERSOBENCH_IT_CONVAI2_SOURCE"),
    }
    for name, (function, description, env) in raw.items():
        REGISTRY.register(
            name, DatasetInfo(name, description, f"persobench.datasets.sources:{function}", "file", {"source_env": env})
        )


_register_builtins()


def dataset_names() -> list[str]:
    return REGISTRY.names()


def is_file_dataset(name: str) -> bool:
    """True when ``name`` is a path to a user file rather than a registry name."""
    return name not in REGISTRY and (name.endswith((".csv", ".jsonl")) or os.sep in name)


def get_dataset_info(name: str) -> DatasetInfo:
    try:
        return REGISTRY.get(name)
    except UnknownNameError as exc:
        raise DatasetError(f"{exc}; or give a path to a .csv/.jsonl file") from None


_CACHE: dict[tuple[str, tuple[tuple[str, Any], ...]], list[Sample]] = {}


def load_all(name: str, **options: Any) -> list[Sample]:
    """Every sample of a dataset, in source order (parsed once per process)."""
    key = (name, tuple(sorted(options.items())))
    if key not in _CACHE:
        _CACHE[key] = parse_all(name, **options)
    return list(_CACHE[key])


def parse_all(name: str, **options: Any) -> list[Sample]:
    """Every sample of a dataset, in source order, parsed now (:func:`load_all` keeps them)."""
    if is_file_dataset(name):

        samples = load_user_file(name, **options)
    else:
        info = get_dataset_info(name)

        loader: Callable[..., list[Sample]] = load_object(info.loader)
        samples = loader(dataset=name, **{**info.options, **options})
    ids = [s.id for s in samples]
    if len(set(ids)) != len(ids):
        raise DatasetError(f"dataset {name!r}: duplicate sample ids")
    return samples


def select_samples(samples: list[Sample], *, limit: int | None = None, seed: int = 0) -> list[Sample]:
    """A deterministic subset: the ``limit`` samples whose ``sha256(seed:id)`` is smallest.

    Depends only on ids and seed, so every machine picks the same samples; they keep source order.
    """
    if limit is None or limit >= len(samples):
        return list(samples)
    if limit < 0:
        raise DatasetError(f"limit must be >= 0, got {limit}")

    def rank(sample: Sample) -> str:
        return hashlib.sha256(f"{seed}:{sample.id}".encode()).hexdigest()

    chosen = {s.id for s in sorted(samples, key=rank)[:limit]}
    return [s for s in samples if s.id in chosen]


def load_dataset(name: str, *, limit: int | None = None, seed: int = 0, **options: Any) -> list[Sample]:
    """Load a registered dataset (or a user file) and take a deterministic sample of it."""
    return select_samples(load_all(name, **options), limit=limit, seed=seed)


def some_samples(name: str, ids: Sequence[str]) -> dict[str, Sample]:
    """Sample id -> Sample for those of ``ids`` that dataset ``name`` has (an id it lacks is left out).

    A paper table not parsed yet in this process parses only the rows of ``ids`` (a report shows a
    few dialogues of each thousand-row table: parsing all four tables of the published runs was a
    tenth of its time and 20 MB kept); any other dataset is loaded whole once (:func:`load_all`)."""
    info = None if is_file_dataset(name) else get_dataset_info(name)
    if info is not None and info.kind == "paper-table" and (name, ()) not in _CACHE:
        rows = {int(index) for dataset, _, index in (i.partition(":") for i in ids)
                if dataset == name and index.isdigit()}
        loader: Callable[..., list[Sample]] = load_object(info.loader)
        return {s.id: s for s in loader(dataset=name, rows=rows, **info.options)}
    everything = {s.id: s for s in load_all(name)}
    return {i: everything[i] for i in ids if i in everything}


def samples_by_id(name: str, ids: list[str] | tuple[str, ...] | None = None) -> dict[str, Sample]:
    """Map sample id -> Sample for a dataset (restricted to ``ids`` when given)."""
    everything = {s.id: s for s in load_all(name)}
    if ids is None:
        return everything
    missing = [i for i in ids if i not in everything]
    if missing:
        raise DatasetError(f"dataset {name!r} has no sample(s) {', '.join(missing[:5])}")
    return {i: everything[i] for i in ids}
