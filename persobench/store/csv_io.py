"""CSV in and out, safely: the one place that reads user CSV text and writes CSV for spreadsheets.

Reading (:func:`read_csv_rows`):

* Fields may be as large as a whole user file (the csv module's default limit of 128 KiB is raised
  to :data:`FIELD_SIZE_LIMIT`, the size limit of user files), so a big field is data, not a crash.
* Quotes are parsed strictly. A quote that is opened and never closed makes Python's csv module
  silently swallow every following row into one field; here it is an error naming the row and line
  where the quote opens. The same error is raised for a quoted field that spans lines when one of its
  continuation lines would on its own be a complete row and no other field in the file spans lines
  (the signature of a stray quote closed by a later one), so rows are never hidden.

Writing (:func:`csv_text`, :func:`neutralize_cell`): cells that a spreadsheet would read as a formula
(text starting with ``=``, ``+``, ``-``, ``@``, tab or carriage return) get a leading ``'`` as OWASP
recommends for CSV injection. Numbers (numeric columns, and text that is a plain decimal number such
as ``-0.5``) are left as they are, so they stay numeric.
"""

from __future__ import annotations

import csv
import io
import re
from typing import TYPE_CHECKING, Any

from persobench.errors import DatasetError

if TYPE_CHECKING:
    import pandas as pd

#: Largest field accepted when reading: the size limit of a user file (50 MB).
FIELD_SIZE_LIMIT = 50 * 1024 * 1024

#: First characters that make a spreadsheet treat a cell as a formula (OWASP CSV injection).
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")

_PLAIN_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


class CSVFormatError(DatasetError):
    """CSV text that cannot be read without losing rows; the message names the origin, row and line."""


def raise_field_limit() -> None:
    """Allow fields up to :data:`FIELD_SIZE_LIMIT` in every csv reader of this process."""
    if csv.field_size_limit() < FIELD_SIZE_LIMIT:
        csv.field_size_limit(FIELD_SIZE_LIMIT)


def read_csv_rows(text: str, origin: str) -> list[tuple[int, list[str]]]:
    """Every record of ``text`` as ``(first line number, fields)``, header included.

    Raises :class:`CSVFormatError` for an unclosed quote or a stray quote that would hide rows.
    """
    raise_field_limit()
    records: list[tuple[int, list[str]]] = []
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    start = 1
    while True:
        try:
            values = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            row = len(records)  # the header is record 0, so this is the data row number
            raise CSVFormatError(
                f"{origin}: row {row} (line {start}): a quote opened in this row is never properly closed "
                f"({exc}); every following row would be lost. Close the quote or double it (\"\")"
            ) from None
        records.append((start, values))
        start = reader.line_num + 1
    _check_multiline_records(records, text, reader.line_num, origin)
    return records


def _check_multiline_records(records: list[tuple[int, list[str]]], text: str, line_count: int, origin: str) -> None:
    """Reject a lone multi-line record whose continuation lines are complete rows on their own.
    ``line_count``: the lines of ``text`` (the reader's count once it has read them all); the lines
    themselves are split only for that lone record (a copy of a 4 MB table held beside it otherwise)."""
    spans = []
    for index, (first_line, _values) in enumerate(records):
        last_line = records[index + 1][0] - 1 if index + 1 < len(records) else line_count
        if last_line > first_line:
            spans.append((index, first_line, last_line))
    if len(spans) != 1 or not records:
        return
    lines = io.StringIO(text, newline="").readlines()
    width = len(records[0][1])
    index, first_line, last_line = spans[0]
    for line_number in range(first_line + 1, last_line + 1):
        line = lines[line_number - 1]
        try:
            fields = next(csv.reader([line.rstrip("\r\n")], strict=True))
        except (csv.Error, StopIteration):
            continue
        if width > 1 and len(fields) == width:
            raise CSVFormatError(
                f"{origin}: row {index} (line {first_line}): a quote opened in this row runs to line {last_line} "
                f"and swallows line {line_number}, which looks like a row of its own; close the quote or "
                "double it (\"\")"
            )


def neutralize_cell(value: Any) -> Any:
    """``value`` with a leading ``'`` when a spreadsheet would run it as a formula; other values as is."""
    if isinstance(value, str) and value.startswith(FORMULA_PREFIXES) and not _PLAIN_NUMBER.fullmatch(value):
        return "'" + value
    return value


def neutralize_frame(frame: "pd.DataFrame") -> "pd.DataFrame":
    """A copy of ``frame`` whose text cells (and column names) are neutralised; numeric columns untouched."""
    out = frame.copy()
    for column in out.columns:
        if out[column].dtype == object or str(out[column].dtype) in ("string", "str"):
            out[column] = out[column].map(neutralize_cell)
    out.columns = [neutralize_cell(c) for c in out.columns]
    return out


def csv_text(frame: "pd.DataFrame") -> str:
    """``frame`` as CSV text for spreadsheets: no index, ``\\n`` line ends, formula cells neutralised."""
    return neutralize_frame(frame).to_csv(index=False, lineterminator="\n")
