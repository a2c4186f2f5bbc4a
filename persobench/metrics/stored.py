"""A run's stored scores: the ``scores.parquet`` columns and the basis that ties a value to what it scored."""

from __future__ import annotations

from typing import TYPE_CHECKING
from persobench.records import Sample
from persobench.store import Run
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


def stored_scores(run: "Run") -> "pd.DataFrame":
    """The run's scores table (empty with the right columns when none is stored)."""
    if not run.has_table("scores"):
        return empty_scores()
    frame = run.read_table("scores")
    return frame if "basis" in frame.columns else frame.assign(basis=None)


def score_basis(sample: "Sample", reply: str, reference: str) -> str:
    """What a value was computed from: the sample's inputs (:attr:`Sample.input_hash`), the
    reference it was scored against and the reply. A stored value whose basis differs from the
    current one (the reply was generated again, the inputs changed) is computed again."""

    text = "\0".join((sample.input_hash, reference, reply))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
