"""A run's stored scores: the ``scores.parquet`` columns and the basis that ties a value to what it scored."""

from __future__ import annotations

from typing import TYPE_CHECKING
from persobench.records import Sample
from persobench.store.run_store import Run
from persobench.store.files import read_parquet_lists
import hashlib

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd



def empty_scores() -> "pd.DataFrame":
    import pandas as pd

    return pd.DataFrame({"sample_id": pd.Series(dtype=str), "metric": pd.Series(dtype=str),
                         "value": pd.Series(dtype="float64"), "profile": pd.Series(dtype=str),
                         "basis": pd.Series(dtype=str)})


#: Columns of a run's ``scores.parquet``: ``basis`` is :func:`score_basis` of what the value scored.
STORED_SCORE_COLUMNS = ("sample_id", "metric", "value", "profile", "basis")


def stored_keys(run: "Run", profile: str) -> list[tuple[str, str, "str | None"]]:
    """(metric, sample id, basis) of every value the run stores under ``profile`` (basis None for
    values stored before bases were), read as lists: planning only looks these up."""
    if not run.has_table("scores"):
        return []
    table = read_parquet_lists(run.table_path("scores"), ("sample_id", "metric", "profile", "basis"))
    sids, metrics, profiles = table["sample_id"], table["metric"], table["profile"]
    bases = table.get("basis") or [None] * len(sids)
    return [(str(metric), str(sid), basis)
            for sid, metric, prof, basis in zip(sids, metrics, profiles, bases) if prof == profile]


def score_basis(sample: "Sample", reply: str, reference: str) -> str:
    """What a value was computed from: the sample's inputs (:attr:`Sample.input_hash`), the
    reference it was scored against and the reply. A stored value whose basis differs from the
    current one (the reply was generated again, the inputs changed) is computed again."""

    text = "\0".join((sample.input_hash, reference, reply))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
