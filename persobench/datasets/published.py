"""The paper's published evaluation tables (``Evaluations/<Dataset>[-COT]-results.xlsx``), read as numbers.

``evaluation.ipynb`` appends one row per model to ``Evaluations/{Dataset}{-COT}-results.xlsx``
(``existing_df.to_excel(output_path, index=False)``): a ``Model`` column, then one column per
metric holding the text ``"mean ± std"`` (pandas' ``.round(2)`` of both; the failure ratio as
``"0.448 ± 0.00"``). Some cells carry a trailing tab from hand edits. The repository holds these
tables as ``.xlsx`` only, so a copy fetched with ``python -m persobench fetch-paper`` has no CSV;
:func:`published_table` reads the ``.xlsx`` (openpyxl) and falls back to a ``.csv`` of the same
name (a hand-converted copy) when there is no workbook.

Every cell becomes a :class:`PublishedCell`; a blank cell is ``None``. A cell that is neither is a
:class:`PublishedTableError` naming the file, row and column.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from persobench.errors import DatasetError
import zipfile

__all__ = ["PublishedCell", "PublishedTableError", "published_table", "published_table_path", "read_published_table"]

#: "0.12 ± 0.1", "-0.22 ± 0.87", "0.448 ± 0.00"; surrounding whitespace (tabs from hand edits) allowed.
_CELL = re.compile(r"\s*(-?\d+(?:\.\d+)?)\s*±\s*(-?\d+(?:\.\d+)?)\s*")


class PublishedTableError(DatasetError):
    """A published table is missing or has a cell that is not ``"mean ± std"``; one line naming where."""


@dataclass(frozen=True)
class PublishedCell:
    """One published figure."""

    mean: float
    """The published mean, as rounded in the table (2 decimals; 3 for the failure ratio)."""
    std: float | None
    """The published population std (2 decimals); None when the cell is a bare number."""


def published_table_path(folder: str | Path, stem: str, mode: str) -> Path:
    """``Evaluations/<stem>[-COT]-results.xlsx`` under ``folder`` (``stem`` as the notebook's ``Dataset``
    variable: ``"FoCus"``, ``"IT-ConvAI2"``, ``"Blended Skill Talk"``), else the ``.csv`` of that name;
    :class:`PublishedTableError` when neither exists."""
    if mode not in ("vanilla", "cot"):
        raise PublishedTableError(f"unknown mode {mode!r}; expected 'vanilla' or 'cot'")
    base = Path(folder) / "Evaluations" / f"{stem}{'-COT' if mode == 'cot' else ''}-results"
    for suffix in (".xlsx", ".csv"):
        if base.with_suffix(suffix).is_file():
            return base.with_suffix(suffix)
    raise PublishedTableError(f"{base}.xlsx: no published table (nor a .csv of that name)")


def published_table(folder: str | Path, stem: str, mode: str) -> dict[str, dict[str, PublishedCell | None]]:
    """Model -> published column -> figure, for one dataset (file stem, e.g. ``"FoCus"``) and mode."""
    return read_published_table(published_table_path(folder, stem, mode))


def read_published_table(path: str | Path) -> dict[str, dict[str, PublishedCell | None]]:
    """Model -> column -> :class:`PublishedCell` (``None`` for a blank cell) of one ``.xlsx`` or ``.csv`` table."""
    path = Path(path)
    rows = _xlsx_rows(path) if path.suffix.lower() == ".xlsx" else _csv_rows(path)
    header = next(rows, None)
    if not header or str(header[0] or "").strip() != "Model":
        raise PublishedTableError(f"{path}: row 1: the first column must be 'Model', got {header[:1] if header else []}")
    columns = [str(c or "").strip() for c in header]
    table: dict[str, dict[str, PublishedCell | None]] = {}
    for number, row in enumerate(rows, start=2):
        values = list(row) + [None] * (len(columns) - len(row))
        model = str(values[0] or "").strip()
        if not model:
            continue  # a blank row (spreadsheets keep them)
        table[model] = {column: _cell(path, number, column, value)
                        for column, value in zip(columns[1:], values[1:]) if column}
    return table


def _cell(path: Path, row: int, column: str, value: Any) -> PublishedCell | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return PublishedCell(float(value), None)
    match = _CELL.fullmatch(str(value))
    if match is None:
        raise PublishedTableError(f"{path}: row {row}, column {column!r}: expected 'mean ± std', got {str(value)[:40]!r}")
    return PublishedCell(float(match.group(1)), float(match.group(2)))


def _csv_rows(path: Path) -> Iterator[list[Any]]:
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            yield from csv.reader(handle)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise PublishedTableError(f"{path}: cannot read the table ({exc})") from None


def _xlsx_rows(path: Path) -> Iterator[list[Any]]:
    """The first sheet's rows as cell values (pandas' ``to_excel`` writes one sheet)."""

    from openpyxl import load_workbook

    try:
        workbook = load_workbook(path, read_only=True, data_only=True)
    except (OSError, zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise PublishedTableError(f"{path}: not a readable .xlsx workbook ({type(exc).__name__}: {exc})") from None
    try:
        for row in workbook.worksheets[0].iter_rows(values_only=True):
            yield list(row)
    finally:
        workbook.close()
