"""User datasets: CSV or JSONL files with the prompt-table columns.

Validation collects every problem in the file before failing, so one error message lists them all
(file, row, column); a file with any problem loads nothing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from persobench.datasets.json_numbers import find_huge, loads as loads_json
from persobench.errors import DatasetError
from persobench.store.files import jsonl_lines
from persobench.datasets.prompt_tables import PromptTableError, parse_prompt_row
from persobench.records import Sample
from persobench.store.csv_io import CSVFormatError, read_csv_rows
from dataclasses import replace

REQUIRED_COLUMNS = ("personas", "context", "act_response")
OPTIONAL_COLUMNS = ("query", "id")
#: Default size limit; large enough for every published table (the biggest is ~3 MB).
DEFAULT_MAX_BYTES = 50 * 1024 * 1024
MAX_REPORTED_PROBLEMS = 50


class DatasetFileError(DatasetError):
    """A user file has problems; ``problems`` lists each as "file: row N, column C: what"."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        shown = problems[:MAX_REPORTED_PROBLEMS]
        more = f"\n... and {len(problems) - len(shown)} more" if len(problems) > len(shown) else ""
        if len(problems) == 1:  # one problem: one line (it already names the file)
            super().__init__(f"{problems[0]}; nothing was loaded")
            return
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

    try:
        rows = read_csv_rows(text, str(path))
    except CSVFormatError as exc:
        problems.append(str(exc))
        return []
    if not rows:
        problems.append(f"{path}: the file is empty (expected a header with {', '.join(REQUIRED_COLUMNS)})")
        return []
    header = [h.strip() for h in rows[0][1]]
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        problems.append(f"{path}: header: missing column(s) {', '.join(missing)} (found: {', '.join(header)})")
        return []
    records = []
    for row_number, (line_number, values) in enumerate(rows[1:], start=1):
        if not values:
            continue
        if len(values) != len(header):
            problems.append(
                f"{path}: row {row_number} (line {line_number}): {len(values)} fields, header has {len(header)}"
            )
            continue
        records.append((row_number, dict(zip(header, values))))
    return records


def _jsonl_records(path: Path, text: str, problems: list[str]) -> list[tuple[int, dict[str, Any]]]:
    records = []
    for row_number, line in enumerate(jsonl_lines(text), start=1):
        if not line.strip():
            continue
        try:
            record = loads_json(line)
        except json.JSONDecodeError as exc:
            problems.append(f"{path}: row {row_number}: invalid JSON ({exc.msg} at column {exc.colno})")
            continue
        except RecursionError:
            problems.append(f"{path}: row {row_number}: JSON nested too deeply to read")
            continue
        if not isinstance(record, dict):
            problems.append(f"{path}: row {row_number}: expected a JSON object, got {type(record).__name__}")
            continue
        huge = find_huge(record)
        if huge is not None:
            (column, *inside), number = huge
            where = f" (item {inside[0] + 1})" if inside and isinstance(inside[0], int) else ""
            problems.append(f"{path}: row {row_number}, column {column}{where}: {number.problem()}")
            continue
        missing = [c for c in REQUIRED_COLUMNS if c not in record]
        if missing:
            problems.append(f"{path}: row {row_number}, column {missing[0]}: missing"
                            + (f" (also {', '.join(missing[1:])})" if missing[1:] else ""))
            continue
        wrong = [f"{path}: row {row_number}, column {column}: {problem}"
                 for column, value in record.items() if column in KNOWN_COLUMNS
                 for problem in [_type_problem(column, value)] if problem]
        if wrong:
            problems.extend(wrong)
            continue
        records.append((row_number, record))
    return records


KNOWN_COLUMNS = REQUIRED_COLUMNS + OPTIONAL_COLUMNS


def _type_problem(column: str, value: Any) -> str | None:
    """Why a JSONL cell has the wrong type (text, or a list of text for personas/context), or None."""
    if value is None or isinstance(value, str):
        return None
    if column == "id":
        if isinstance(value, int) and not isinstance(value, bool):
            return None
        return f"expected text or an integer, got {_json_type(value)}"
    if column in ("personas", "context") and isinstance(value, list):
        if all(isinstance(item, str) for item in value):
            return None
        return "expected a list of text, found a non-text item"
    allowed = "text or a list of text" if column in ("personas", "context") else "text"
    return f"expected {allowed}, got {_json_type(value)}"


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", bool: "a boolean", int: "a number", float: "a number"}
    return names.get(type(value), type(value).__name__)


#: A NUL byte or a lone UTF-16 surrogate (valid JSON as ``"\ud800"``, but no character: it cannot be
#: printed or written as UTF-8, so a later ``show`` or ``run`` would end in a traceback).
_BAD_CHARACTER = re.compile("[\x00\ud800-\udfff]")


def bad_character(text: str) -> str | None:
    """Why ``text`` cannot be used as dataset text (a NUL byte, a lone surrogate), or None."""
    found = _BAD_CHARACTER.search(text)
    if found is None:
        return None
    char, where = found.group(0), found.start() + 1
    if char == "\x00":
        return f"NUL byte (0x00) at character {where}; remove it"
    return (f"lone surrogate \\u{ord(char):04x} at character {where} (half of a UTF-16 pair, not a character); "
            "fix the escape or remove it")


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
    if path.is_dir():
        raise DatasetFileError(path, [f"{path}: is a folder, not a .csv or .jsonl file"])
    size = path.stat().st_size
    if size > max_bytes:
        raise DatasetFileError(path, [f"{path}: {size} bytes is over the limit of {max_bytes} bytes"])
    if path.suffix.lower() not in (".csv", ".jsonl"):
        raise DatasetFileError(path, [f"{path}: unsupported file type {path.suffix!r}; use .csv or .jsonl"])
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DatasetFileError(path, [f"{path}: cannot read ({exc.strerror or exc})"]) from None
    text = _decode(path, data)
    problems: list[str] = []
    records = (_csv_records if path.suffix.lower() == ".csv" else _jsonl_records)(path, text, problems)
    id_prefix = re.sub(r"[^A-Za-z0-9._-]+", "-", path.stem)
    samples: list[Sample] = []
    seen_ids: dict[str, int] = {}
    for row_number, record in records:
        cells = {k: _flatten(v) for k, v in record.items()}
        bad = [f"{path}: row {row_number}, column {column}: {why}"
               for column, value in cells.items() for why in [bad_character(value)] if why]
        if bad:
            problems.extend(bad)
            continue
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

    return replace(sample, id=sample_id, metadata={**sample.metadata, "row": row_number})
