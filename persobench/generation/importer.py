"""Import published replies laid out like the paper's repository into the run store.

The paper's repository (salehafzoon/PersoBench) holds::

    Prompts/<Dataset>.csv                      personas, context, act_response (one row per sample)
    Responses/<Dataset>/<model>[-COT].csv      gen_response, [reasoning,] response_time (processed)
    Raw Responses/<Dataset>/<model>[-COT].csv  gen_response = the model's raw text, response_time

:func:`import_persobench` makes one run per dataset, model and mode (``vanilla``; ``cot`` for the
``-COT`` files) with ``source="imported"``, recorded with the template the paper's notebook used
(``paper`` for the closed-source models, ``paper-open`` for the open-source ones): the paper protocol. Replies come from ``Raw Responses/`` parsed with the
paper's post-processing policy when that file exists, otherwise from the processed twin, where an
empty ``gen_response`` is an invalid reply (as the paper's evaluation read it). Row ``i`` of a
response file answers prompt row ``i``; the sample id is ``"<dataset>:<i>"``, the id the dataset
loader gives the same prompt row, so replies join samples by id, never by position.

Importing is idempotent: a run's id depends only on dataset, model, mode and sample ids, so
importing again finds the same runs; an unchanged file is skipped, a changed one replaces the
replies and drops the run's now stale scores.
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from persobench.errors import DatasetError, PersoBenchError, StoreError
from persobench.store.run_records import ImportRecord, RunExtra
from persobench.store.run_store import RunManifest, RunStore, make_run_id
from persobench.store.files import file_version, sha256_file
from persobench.records import Sample
from persobench.store.run_store import Run
from persobench.datasets import PAPER_TABLES
from persobench.datasets.tables import prompt_table_rows
from persobench.datasets.parsed_tables import table_samples, tables_dir_of_store
from persobench.generation.postprocess import Status, parse_output
from persobench.datasets.tables import tables_dir
from persobench.datasets import samples_by_id
from persobench.datasets.published_references import RAW, PublishedReference, published_reference

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


__all__ = [
    "GENERATION_COLUMNS", "ImportFolderError", "ImportReport", "ImportedRun", "IMPORTED_TEMPLATES",
    "dataset_for_folder", "find_response_files", "import_persobench", "paper_references", "run_reference_note", "run_references",
    "samples_for_run",
]

#: Columns of the public generations table, in order.
GENERATION_COLUMNS = (
    "sample_id", "status", "response", "reasoning", "raw_text", "finish_reason", "latency",
    "prompt_tokens", "completion_tokens", "error", "attempts", "cached", "prompt",
)

#: Seeds of the template hash in imported runs' ids, by mode: fixed, so that re-importing after a
#: change to the built-in templates (or to the recorded template name) still finds the same runs.
IMPORTED_TEMPLATES = {"vanilla": "paper-vanilla", "cot": "paper-cot"}
#: Model-name prefixes of the paper's closed-source (chat API) models; the others are open-source.
CLOSED_SOURCE_PREFIXES = ("gpt", "gemini", "claude")

#: Bumped when the way replies are read from the files changes (forces a re-import).
IMPORT_VERSION = 1

COT_SUFFIX = "-COT"


class ImportFolderError(DatasetError):
    """The folder is not in the paper's layout, or a file is malformed; the message names the files."""


@dataclass(frozen=True)
class ImportedRun:
    """One run made (or found) by an import."""

    run_id: str
    dataset: str
    model: str
    mode: str
    n: int
    """Samples (prompt rows)."""
    invalid: int
    """Replies that are not usable (status other than ``ok``)."""
    source: str
    """``"raw"`` (parsed from ``Raw Responses/``) or ``"processed"`` (``Responses/``)."""
    responses_file: str
    """The file the replies came from."""
    action: str
    """``"created"``, ``"updated"`` (file changed since the last import) or ``"unchanged"``."""


@dataclass
class ImportReport:
    """What an import did."""

    folder: Path
    runs: list[ImportedRun] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(path, reason) of folders and files that were not imported."""
    prompts_differ: list[str] = field(default_factory=list)
    """Datasets whose prompt table differs from the one the dataset loader reads (scoring would
    use the loader's rows; point ``PERSOBENCH_PROMPTS`` at ``<folder>/Prompts``)."""


def _paper_tables() -> dict[str, tuple[str, str]]:
    """Folder/file stem -> (registered dataset name, unlabelled persona owner)."""

    return {stem: (name, owner) for name, (stem, owner, _desc) in PAPER_TABLES.items()}


def dataset_for_folder(folder_name: str) -> str | None:
    """The registered dataset name for a folder of the paper's layout ("FoCus" -> "focus")."""
    entry = _paper_tables().get(folder_name)
    return entry[0] if entry else None


def _readable_file_sha(path: Path) -> str:
    """The file's sha256; a folder, a symlink loop or an unreadable file is an :class:`ImportFolderError`."""
    try:
        return sha256_file(path)
    except IsADirectoryError:
        raise ImportFolderError(f"{path}: is a folder, expected a CSV file") from None
    except OSError as exc:
        raise ImportFolderError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _count_prompt_rows(path: Path) -> int:
    """Rows as the dataset loader enumerates them (the same strict reader, quoted newlines allowed)."""

    try:
        return len(prompt_table_rows(path))
    except DatasetError as exc:
        raise ImportFolderError(f"{exc} (not a readable prompt table)") from None


def find_response_files(folder: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every (dataset folder, model, mode) in ``folder`` with the file its replies come from.

    Each entry: ``dataset_folder``, ``model``, ``mode``, ``raw`` (path or None), ``processed``
    (path or None). Sorted by dataset folder, model, mode.
    """
    root = Path(folder)
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    for kind, sub in (("processed", "Responses"), ("raw", "Raw Responses")):
        base = root / sub
        if not base.is_dir():
            continue
        for ds_dir in sorted(p for p in base.iterdir() if p.is_dir()):
            for path in sorted(ds_dir.glob("*.csv")):
                stem = path.stem
                mode = "cot" if stem.endswith(COT_SUFFIX) else "vanilla"
                model = stem[: -len(COT_SUFFIX)] if mode == "cot" else stem
                entry = found.setdefault(
                    (ds_dir.name, model, mode),
                    {"dataset_folder": ds_dir.name, "model": model, "mode": mode, "raw": None, "processed": None},
                )
                entry[kind] = path
    return [found[key] for key in sorted(found)]


def _read_responses(path: Path, *, raw: bool) -> "pd.DataFrame":
    import pandas as pd

    try:
        # Response times exactly as written (float() of the text; some pandas parsers are off by
        # an ulp). Processed files keep pandas' default missing-value reading, which is how the
        # paper's evaluation told invalid replies (NaN) from valid ones.
        frame = pd.read_csv(path, keep_default_na=not raw, na_values=[""] if raw else None,
                            converters={"response_time": _parse_seconds})
    except Exception as exc:  # pandas raises several parser error types
        raise ImportFolderError(f"{path}: cannot read response file ({type(exc).__name__}: {exc})") from exc
    if "gen_response" not in frame.columns:
        raise ImportFolderError(f"{path}: no 'gen_response' column (columns: {', '.join(map(str, frame.columns))})")
    return frame


def _parse_seconds(text: str) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def _float_or_none(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def _text_or_none(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    return str(value)


def build_generations(frame: "pd.DataFrame", sample_ids: list[str], *, raw: bool) -> "pd.DataFrame":
    """The generations table of one imported run (one row per sample id, in order)."""
    import pandas as pd


    rows = []
    has_reasoning = "reasoning" in frame.columns
    has_time = "response_time" in frame.columns
    for i, sample_id in enumerate(sample_ids):
        text = _text_or_none(frame["gen_response"].iat[i])
        latency = _float_or_none(frame["response_time"].iat[i]) if has_time else None
        if raw:
            parsed = parse_output(text, policy="paper")
            status, response, reasoning, error = parsed.status, parsed.response, parsed.reasoning, parsed.error
            raw_text = text
        else:
            ok = text is not None and text != ""
            status = Status.OK.value if ok else Status.EMPTY.value
            response = text if ok else None
            reasoning = _text_or_none(frame["reasoning"].iat[i]) if has_reasoning else None
            error = None if ok else "no reply in the published processed file (empty gen_response)"
            raw_text = None
        rows.append({
            "sample_id": sample_id, "status": status, "response": response, "reasoning": reasoning,
            "raw_text": raw_text, "finish_reason": None, "latency": latency, "prompt_tokens": None,
            "completion_tokens": None, "error": error, "attempts": None, "cached": False, "prompt": None,
        })
    table = pd.DataFrame(rows, columns=list(GENERATION_COLUMNS))
    for column in ("status", "response", "reasoning", "raw_text", "finish_reason", "error", "prompt"):
        table[column] = table[column].astype(object)
    table["latency"] = table["latency"].astype("float64")
    for column in ("prompt_tokens", "completion_tokens", "attempts"):  # not recorded by the paper
        table[column] = table[column].astype("Int64")
    table["cached"] = table["cached"].astype(bool)
    return table


def imported_template(model: str) -> str:
    """The paper template a published model was prompted with: ``paper`` (the closed-source notebook:
    gpt-*, gemini-*) or ``paper-open`` (the open-source notebook: Mistral, Qwen, Gemma, Llama).
    Both are the paper protocol (:func:`persobench.prompts.protocol.protocol_of`)."""
    return "paper" if model.lower().startswith(CLOSED_SOURCE_PREFIXES) else "paper-open"


def _template_hash(template: str) -> str:
    return hashlib.sha256(template.encode("utf-8")).hexdigest()[:12]


def _loader_prompts_sha(file_stem: str) -> str | None:
    """sha256 of the prompt table the dataset loader would read, or None when it has none."""

    path = tables_dir() / f"{file_stem}.csv"
    return sha256_file(path) if path.exists() else None


def import_persobench(
    store: RunStore,
    folder: str | os.PathLike[str],
    *,
    datasets: Iterable[str] | None = None,
    models: Iterable[str] | None = None,
    modes: Iterable[str] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> ImportReport:
    """Import every response file of ``folder`` (the paper's layout) into ``store``.

    ``datasets`` (registered names such as ``"focus"``), ``models`` and ``modes`` restrict what is
    imported. ``progress(label, done, total)`` is called after each file. Raises
    :class:`ImportFolderError` when the folder has no prompt tables or response files, or when a
    response file's length differs from its prompt table (the message names both files).
    """
    root = Path(folder)
    if not root.is_dir():
        raise ImportFolderError(f"{root}: no such folder")
    prompts_dir = root / "Prompts"
    if not prompts_dir.is_dir():
        raise ImportFolderError(f"{root}: no Prompts/ folder (expected the paper's layout: Prompts/, Responses/, Raw Responses/)")
    entries = find_response_files(root)
    if not entries:
        raise ImportFolderError(f"{root}: no response files under Responses/ or Raw Responses/")
    tables = _paper_tables()
    wanted_datasets = set(datasets) if datasets is not None else None
    wanted_models = set(models) if models is not None else None
    wanted_modes = set(modes) if modes is not None else None
    if wanted_datasets is not None:
        known = {name for name, _owner in tables.values()}
        unknown = sorted(wanted_datasets - known)
        if unknown:
            raise ImportFolderError(f"unknown dataset(s) {', '.join(unknown)}; the paper's datasets: {', '.join(sorted(known))}")

    report = ImportReport(folder=root)
    selected = []
    for entry in entries:
        where = str(entry["raw"] or entry["processed"])
        table = tables.get(entry["dataset_folder"])
        if table is None:
            report.skipped.append((str(Path(where).parent), f"unknown dataset folder {entry['dataset_folder']!r}; "
                                   f"known: {', '.join(sorted(tables))}"))
            continue
        if wanted_datasets is not None and table[0] not in wanted_datasets:
            continue
        if wanted_models is not None and entry["model"] not in wanted_models:
            continue
        if wanted_modes is not None and entry["mode"] not in wanted_modes:
            continue
        selected.append((entry, table))

    prompt_info: dict[str, tuple[Path, int, str]] = {}
    for done, (entry, (dataset, _owner)) in enumerate(selected, start=1):
        stem = entry["dataset_folder"]
        if stem not in prompt_info:
            prompt_path = prompts_dir / f"{stem}.csv"
            if not prompt_path.exists() and not prompt_path.is_symlink():
                raise ImportFolderError(
                    f"{prompt_path}: prompt table missing for the responses in {Path(entry['raw'] or entry['processed']).parent}"
                )
            prompt_sha = _readable_file_sha(prompt_path)
            prompt_info[stem] = (prompt_path, _count_prompt_rows(prompt_path), prompt_sha)
            _keep_parsed(store, dataset, prompt_path)
            if _loader_prompts_sha(stem) != prompt_sha:
                report.prompts_differ.append(dataset)
        prompt_path, n_rows, prompt_sha = prompt_info[stem]
        report.runs.append(_import_one(store, entry, dataset, prompt_path, n_rows, prompt_sha, root))
        if progress is not None:
            progress(f"{dataset} {entry['model']} {entry['mode']}", done, len(selected))
    return report


def _import_one(store: RunStore, entry: Mapping[str, Any], dataset: str, prompt_path: Path, n_rows: int,
                prompt_sha: str, root: Path) -> ImportedRun:
    raw = entry["raw"] is not None
    path: Path = entry["raw"] if raw else entry["processed"]
    model_name, mode = entry["model"], entry["mode"]
    file_sha = _readable_file_sha(path)
    frame = _read_responses(path, raw=raw)
    if len(frame) != n_rows:
        raise ImportFolderError(
            f"{path} has {len(frame)} replies but {prompt_path} has {n_rows} prompt rows; "
            "row i of a response file must answer prompt row i"
        )
    sample_ids = [f"{dataset}:{i}" for i in range(n_rows)]
    model = {"provider": "imported", "model": model_name, "label": model_name}
    template = imported_template(model_name)
    template_hash = _template_hash(IMPORTED_TEMPLATES[mode])
    parameters: dict[str, Any] = {}
    run_id = make_run_id(dataset=dataset, model=model, mode=mode, template_hash=template_hash,
                         sample_ids=sample_ids, parameters=parameters)
    source = "raw" if raw else "processed"
    provenance = ImportRecord(
        folder=str(root.resolve()),
        responses_file=str(path.resolve()),
        source=source,
        policy="paper" if raw else None,
        sha256=file_sha,
        processed_twin=str(entry["processed"].resolve()) if raw and entry["processed"] else None,
        prompts_file=str(prompt_path.resolve()),
        prompts_sha256=prompt_sha,
        import_version=IMPORT_VERSION,
    )
    action = "created"
    existing = None
    try:
        existing = store.get(run_id)
    except StoreError:  # missing or unreadable: import afresh
        existing = None
    if existing is not None:
        old = existing.manifest.details
        same = (old.imported is not None and old.imported.sha256 == file_sha
                and old.imported.prompts_sha256 == prompt_sha and old.imported.import_version == IMPORT_VERSION
                and existing.has_table("generations"))
        if same:
            if existing.manifest.template != template:  # recorded before templates were named per notebook
                existing.update(template=template)
            return ImportedRun(run_id, dataset, model_name, mode, n_rows, int((old.counts or {}).get("invalid", 0)),
                               source, str(path), "unchanged")
        action = "updated"
    generations = build_generations(frame, sample_ids, raw=raw)
    invalid = int((generations["status"] != "ok").sum())
    counts = {"total": n_rows, "ok": n_rows - invalid, "invalid": invalid}
    if existing is None:
        manifest = RunManifest(
            run_id=run_id, dataset=dataset, sample_ids=tuple(sample_ids), model=model, mode=mode,
            template=template, template_hash=template_hash, parameters=parameters, status="running",
            source="imported", extra=RunExtra(imported=provenance, counts=counts).to_extra(),
        )
        run = store.create(manifest)
    else:
        run = existing
        run.drop_scores()  # replies changed: scores of the old replies no longer describe the run
        run.update(status="running")
    run.write_table("generations", generations)
    run.update(status="completed", extra=RunExtra(imported=provenance, counts=counts).to_extra())
    return ImportedRun(run_id, dataset, model_name, mode, n_rows, invalid, source, str(path), action)


def _keep_parsed(store: RunStore, dataset: str, prompt_path: Path) -> None:
    """Parse the table now and keep its samples in the store (:mod:`persobench.datasets.parsed_tables`),
    so scoring the runs imported from it does not parse it again. A table that does not parse is
    left to the command that reads its samples, which says why."""
    try:
        table_samples(dataset, prompt_path, tables_dir_of_store(store.home))
    except (PersoBenchError, OSError, ValueError, KeyError):
        pass


def samples_for_run(run: "Run") -> dict[str, "Sample"]:
    """The samples of ``run`` by id; an imported run reads the prompt table it was imported with."""

    imported = run.manifest.details.imported
    prompts_file = imported.prompts_file if imported is not None else None
    if prompts_file and Path(prompts_file).exists():
        parsed = tables_dir_of_store(run.path.parent.parent)
        everything = {s.id: s for s in table_samples(run.manifest.dataset, prompts_file, parsed)}
        return {i: everything[i] for i in run.manifest.sample_ids}
    return samples_by_id(run.manifest.dataset, list(run.manifest.sample_ids))


def paper_references(prompts_file: str | os.PathLike[str], dataset: str) -> dict[str, str]:
    """Sample id -> the ``act_response`` cell exactly as published (speaker label included).

    The loader strips the responder's label ("User2: ...") from references. Most of the paper's
    published FoCus fluency figures were computed against the unstripped cell; this mapping lets a
    reproduction pass those references to the scorer (``score_run(..., references=...)``).
    """

    # Each FoCus run of a store asks for the same table's cells: read once per version of the file.
    key = (*file_version(prompts_file), dataset)
    cells = _REFERENCE_CELLS.get(key)
    if cells is None:
        cells = {f"{dataset}:{i}": row["act_response"] for i, row in enumerate(prompt_table_rows(Path(prompts_file)))}
        _REFERENCE_CELLS.clear()  # one table's cells at a time: a pass walks the runs dataset by dataset
        _REFERENCE_CELLS[key] = cells
    return dict(cells)


_REFERENCE_CELLS: dict[tuple[str, int, int, str], dict[str, str]] = {}


def run_references(run: "Run", samples_by_id: Mapping[str, "Sample"] | None = None) -> dict[str, str] | None:
    """The references ``run`` is scored against by default when they are not ``Sample.reference``:
    for an imported published run recorded as scored against the raw ``act_response`` cell
    (:data:`persobench.datasets.published_references.PUBLISHED_REFERENCES`), sample id -> that cell
    (of the samples in ``samples_by_id`` when given); None for every other run (the label-free
    reference)."""

    recorded = _published_record(run)
    imported = run.manifest.details.imported  # not None, with a prompts file, when recorded is not None
    if recorded is None or recorded.reference != RAW or imported is None or not imported.prompts_file:
        return None
    cells = paper_references(imported.prompts_file, run.manifest.dataset)
    return cells if samples_by_id is None else {sid: cells[sid] for sid in samples_by_id if sid in cells}


def run_reference_note(run: "Run") -> str | None:
    """What the reference-based metrics of ``run`` read, and why, for their provenance: for an
    imported published run in :data:`~persobench.datasets.published_references.PUBLISHED_REFERENCES`,
    the reference chosen there (stripped or raw) with its evidence; None for every other run (its
    samples' own, label-free reference)."""
    recorded = _published_record(run)
    if recorded is None:
        return None
    labelled = recorded.dataset != "blended-skill-talk"  # its cells carry no speaker label
    if recorded.reference == RAW:
        what = ("the act_response cell as published, speaker label ('User2:') kept" if labelled
                else "the act_response cell as published, surrounding white space kept")
    else:
        what = "stripped 'User2:' label" if labelled else "stripped surrounding white space"
    return f"published run: {what}, per datasets/published_references.py ({recorded.why})"


def _published_record(run: "Run") -> "PublishedReference | None":
    """The recorded reference of ``run`` when it is an imported published run the table lists."""
    imported = run.manifest.details.imported
    if imported is None or not imported.prompts_file or run.manifest.model.get("provider") != "imported":
        return None
    return published_reference(run.manifest.dataset, run.manifest.mode, str(run.manifest.model.get("model")))
