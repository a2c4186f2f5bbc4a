"""User datasets: CSV or JSONL files with the prompt-table columns.

Validation collects every problem in the file before failing, so one error message lists them all
(file, row, column); a file with any problem loads nothing.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

from persobench.datasets.prompt_tables import PromptTableError, parse_prompt_row
from persobench.records import Sample

REQUIRED_COLUMNS = ("personas", "context", "act_response")
OPTIONAL_COLUMNS = ("query", "id")
#: Default size limit; large enough for every published table (the biggest is ~3 MB).
DEFAULT_MAX_BYTES = 50 * 1024 * 1024
MAX_REPORTED_PROBLEMS = 50


class DatasetFileError(ValueError):
    """A user file has problems; ``problems`` lists each as "file: row N, column C: what"."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        shown = problems[:MAX_REPORTED_PROBLEMS]
        more = f"\n... and {len(problems) - len(shown)} more" if len(problems) > len(shown) else ""
        super().__init__(f"{path}: {len(problems)} problem(s); nothing was loaded:\n" + "\n".join(shown) + more)


def dataset_name_for(path: str | Path) -> str:
    return str(path)


def _decode(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        problems = []
        for line_number, line in enumerate(data.split(b"\n"), start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as exc:
                problems.append(
                    f"{path}: line {line_number}: non-UTF-8 byte 0x{line[exc.start]:02x} at column {exc.start + 1}; "
                    "save the file as UTF-8"
                )
        raise DatasetFileError(path, problems) from None


def _csv_records(path: Path, text: str, problems: list[str]) -> list[tuple[int, dict[str, Any]]]:
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        problems.append(f"{path}: the file is empty (expected a header with {', '.join(REQUIRED_COLUMNS)})")
        return []
    header = [h.strip() for h in header]
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        problems.append(f"{path}: header: missing column(s) {', '.join(missing)} (found: {', '.join(header)})")
        return []
    records = []
    for row_number, values in enumerate(reader, start=1):
        if not values:
            continue
        if len(values) != len(header):
            problems.append(
                f"{path}: row {row_number} (line {reader.line_num}): {len(values)} fields, header has {len(header)}"
            )
            continue
        records.append((row_number, dict(zip(header, values))))
    return records


def _jsonl_records(path: Path, text: str, problems: list[str]) -> list[tuple[int, dict[str, Any]]]:
    records = []
    for row_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"{path}: row {row_number}: invalid JSON ({exc.msg} at column {exc.colno})")
            continue
        if not isinstance(record, dict):
            problems.append(f"{path}: row {row_number}: expected a JSON object, got {type(record).__name__}")
            continue
        missing = [c for c in REQUIRED_COLUMNS if c not in record]
        if missing:
            problems.append(f"{path}: row {row_number}, column {missing[0]}: missing"
                            + (f" (also {', '.join(missing[1:])})" if missing[1:] else ""))
            continue
        records.append((row_number, record))
    return records


def _flatten(value: Any) -> str:
    """JSONL cells may hold lists (persona sentences, context lines): join them as the tables do."""
    if isinstance(value, list):
        return "\n".join(str(v) for v in value)
    return "" if value is None else str(value)


def load_user_file(
    path: str | Path, *, dataset: str | None = None, max_bytes: int = DEFAULT_MAX_BYTES,
    unlabelled_owner: str = "responder",
) -> list[Sample]:
    """Load and validate a user CSV/JSONL file. Raises :class:`DatasetFileError` listing every problem."""
    path = Path(path)
    dataset = dataset or dataset_name_for(path)
    if not path.exists():
        raise DatasetFileError(path, [f"{path}: file not found"])
    size = path.stat().st_size
    if size > max_bytes:
        raise DatasetFileError(path, [f"{path}: {size} bytes is over the limit of {max_bytes} bytes"])
    if path.suffix.lower() not in (".csv", ".jsonl"):
        raise DatasetFileError(path, [f"{path}: unsupported file type {path.suffix!r}; use .csv or .jsonl"])
    text = _decode(path, path.read_bytes())
    problems: list[str] = []
    records = (_csv_records if path.suffix.lower() == ".csv" else _jsonl_records)(path, text, problems)
    id_prefix = re.sub(r"[^A-Za-z0-9._-]+", "-", path.stem)
    samples: list[Sample] = []
    seen_ids: dict[str, int] = {}
    for row_number, record in records:
        cells = {k: _flatten(v) for k, v in record.items()}
        for column in ("context", "act_response"):
            if not cells.get(column, "").strip():
                problems.append(f"{path}: row {row_number}, column {column}: empty")
        if problems and problems[-1].startswith(f"{path}: row {row_number},"):
            continue
        index = cells.get("id", "").strip() or str(row_number - 1)
        if index in seen_ids:
            problems.append(f"{path}: row {row_number}, column id: duplicate id {index!r} (first at row {seen_ids[index]})")
            continue
        seen_ids[index] = row_number
        try:
            sample = parse_prompt_row(cells, dataset=dataset, index=row_number - 1, source=str(path),
                                      unlabelled_owner=unlabelled_owner)
        except PromptTableError as exc:
            problems.append(f"{path}: row {row_number}: {exc}")
            continue
        samples.append(_with_id(sample, f"{id_prefix}:{index}", row_number))
    if problems:
        raise DatasetFileError(path, problems)
    if not samples:
        raise DatasetFileError(path, [f"{path}: no data rows"])
    return samples


def _with_id(sample: Sample, sample_id: str, row_number: int) -> Sample:
    from dataclasses import replace

    return replace(sample, id=sample_id, metadata={**sample.metadata, "row": row_number})
