"""Loader for the paper's prepared prompt tables (``Prompts/<dataset>.csv``)."""

from __future__ import annotations

import csv
import os
from pathlib import Path

from persobench.datasets.prompt_tables import parse_prompt_row
from persobench.records import Sample


def tables_dir() -> Path:
    """``$PERSOBENCH_PROMPTS``, else ``$PERSOBENCH_REFERENCE/Prompts``."""
    explicit = os.environ.get("PERSOBENCH_PROMPTS")
    if explicit:
        return Path(explicit)
    from persobench.datasets import reference_dir

    return reference_dir() / "Prompts"


def read_prompt_table(path: Path, *, dataset: str, unlabelled_owner: str) -> list[Sample]:
    """Annotate every row of one prompt-table CSV; the row index is the sample's source index."""
    from persobench.datasets import DatasetError

    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = {"personas", "context", "act_response"} - set(reader.fieldnames or [])
        if missing:
            raise DatasetError(f"{path}: missing column(s) {', '.join(sorted(missing))}")
        return [
            parse_prompt_row(row, dataset=dataset, index=index, source=str(path), unlabelled_owner=unlabelled_owner)
            for index, row in enumerate(reader)
        ]


def load_paper_table(*, dataset: str, file_stem: str, unlabelled_owner: str, source: str | None = None) -> list[Sample]:
    from persobench.datasets import DatasetError

    path = Path(source) if source else tables_dir() / f"{file_stem}.csv"
    if not path.exists():
        raise DatasetError(
            f"{path}: not found. The paper's prompt tables come from its repository "
            "(salehafzoon/PersoBench, folder Prompts/): set PERSOBENCH_REFERENCE to a checkout of it, "
            "or PERSOBENCH_PROMPTS to the Prompts folder."
        )
    return read_prompt_table(path, dataset=dataset, unlabelled_owner=unlabelled_owner)
