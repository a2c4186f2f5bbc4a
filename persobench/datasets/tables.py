"""Loader for the paper's prepared prompt tables (``Prompts/<dataset>.csv``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Collection

from persobench.datasets.prompt_tables import parse_prompt_row
from persobench.records import Sample
from persobench.datasets.paper_archive import reference_dir
from persobench.store.csv_io import CSVFormatError, read_csv_rows
from persobench.errors import DatasetError


def tables_dir() -> Path:
    """``$PERSOBENCH_PROMPTS``, else ``$PERSOBENCH_REFERENCE/Prompts``."""
    explicit = os.environ.get("PERSOBENCH_PROMPTS")
    if explicit:
        return Path(explicit)

    return reference_dir() / "Prompts"


def prompt_table_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a prompt-table CSV as dicts, read strictly (see :mod:`persobench.store.csv_io`).

    Raises :class:`~persobench.datasets.DatasetError` naming the file (and row) when it cannot be
    read, lacks a column or has a quote that would swallow rows.
    """

    try:
        with open(path, newline="", encoding="utf-8") as handle:
            text = handle.read()
        records = read_csv_rows(text, str(path))
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read prompt table ({exc})") from None
    except CSVFormatError as exc:
        raise DatasetError(str(exc)) from None
    header = records[0][1] if records else []
    missing = {"personas", "context", "act_response"} - set(header)
    if missing:
        raise DatasetError(f"{path}: missing column(s) {', '.join(sorted(missing))}")
    rows: list[dict[str, str]] = []
    for line_number, values in records[1:]:
        if not values:  # blank line, skipped as csv.DictReader does
            continue
        if len(values) != len(header):
            raise DatasetError(f"{path}: row {len(rows) + 1} (line {line_number}): {len(values)} fields, "
                               f"header has {len(header)}")
        rows.append(dict(zip(header, values)))
    return rows


def read_prompt_table(
    path: Path, *, dataset: str, unlabelled_owner: str, labels_name_owner: bool = True,
    rows: Collection[int] | None = None,
) -> list[Sample]:
    """Annotate every row of one prompt-table CSV (``rows``: only the rows of these source indices);
    the row index is the sample's source index."""
    return [
        parse_prompt_row(row, dataset=dataset, index=index, source=str(path), unlabelled_owner=unlabelled_owner,
                         labels_name_owner=labels_name_owner)
        for index, row in enumerate(prompt_table_rows(path)) if rows is None or index in rows
    ]


def load_paper_table(
    *, dataset: str, file_stem: str, unlabelled_owner: str, labels_name_owner: bool = True, source: str | None = None,
    rows: Collection[int] | None = None,
) -> list[Sample]:

    path = Path(source) if source else tables_dir() / f"{file_stem}.csv"
    if not path.exists():
        raise DatasetError(
            f"{path}: not found. The paper's prompt tables come from its repository "
            "(salehafzoon/PersoBench, folder Prompts/): set PERSOBENCH_REFERENCE to a checkout of it, "
            "or PERSOBENCH_PROMPTS to the Prompts folder."
        )
    return read_prompt_table(
        path, dataset=dataset, unlabelled_owner=unlabelled_owner, labels_name_owner=labels_name_owner, rows=rows
    )
