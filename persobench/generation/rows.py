"""One row of ``generations.parquet`` per finished sample, from a completion or a failed request.

Post-processing happens here, as each reply arrives: the row carries the parsed reply and its
status ("ok", "invalid_json", "api_error", "refused" ...), so the table on disk is always readable
on its own.
"""

from __future__ import annotations

import functools
import json
import operator
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from persobench.providers.base import Completion

from persobench.errors import ProviderError
from persobench.generation.plan import GenerationPlan
from persobench.generation.postprocess import Status, parse_output

if TYPE_CHECKING:
    import pandas as pd


#: Columns of ``generations.parquet``, in order. The app and the metrics stage read these.
COLUMNS = (
    "sample_id", "status", "response", "reasoning", "raw_text", "finish_reason", "latency",
    "prompt_tokens", "completion_tokens", "error", "attempts", "cached", "prompt",
)
TABLE = "generations"
_ROW_VALUES = operator.itemgetter(*COLUMNS)

#: Provider stop reasons that mean the provider itself declined to answer.
REFUSAL_REASONS = frozenset({"refusal", "content_filter"})


def build_row(
    plan: "GenerationPlan", i: int, completion: Completion | None, error: ProviderError | None, *,
    latency: float, attempts: int, cached: bool,
) -> dict[str, Any]:
    """The table row of sample ``i`` of ``plan``: its reply post-processed, or the request's error."""

    row: dict[str, Any] = {
        "sample_id": plan.samples[i].id, "latency": float(latency), "attempts": attempts, "cached": cached,
        "prompt": next((m["content"] for m in reversed(plan.messages[i]) if m["role"] == "user"), ""),
    }
    if completion is None:
        assert error is not None
        # a too-large reply keeps its start (error.head) for the Failures page
        row.update(status=Status.API_ERROR.value, response=None, reasoning=None, raw_text=error.head,
                   finish_reason=None, prompt_tokens=None, completion_tokens=None, error=error.describe())
        return row
    parsed = parse_output(
        completion.text, policy=plan.policy, finish_reason=completion.finish_reason,
        require_reasoning=plan.template.requires_reasoning, paper_style=plan.paper_style,
    )
    status, err = parsed.status, parsed.error
    if status != Status.OK.value and completion.finish_reason in REFUSAL_REASONS:
        status, err = Status.REFUSED.value, f"the provider declined (finish_reason={completion.finish_reason!r})"
    row.update(
        status=status, response=parsed.response, reasoning=parsed.reasoning, raw_text=completion.text,
        finish_reason=completion.finish_reason, prompt_tokens=completion.prompt_tokens,
        completion_tokens=completion.completion_tokens, error=err if err is not None else parsed.note,
    )
    return row


#: ``run``'s exit status when the run completed but every sample's request failed (HTTP 500 throughout,
#: a reply over the size cap ...): nothing to score, and a script or a job should notice.
EXIT_NO_SAMPLE_SUCCEEDED = 3


def no_sample_succeeded(counts: Mapping[str, int]) -> bool:
    """True when a run's status counts hold failed requests and not one reply (any other status,
    even invalid JSON, is a reply the model gave)."""
    replies = sum(n for status, n in counts.items() if status not in ("api_error", "pending"))
    return replies == 0 and counts.get("api_error", 0) > 0


class RowTable(dict):
    """Sample position -> row, the rows of a run being generated. It keeps count of the rows that
    failed and of those served from the cache as rows are set: progress reads both after every
    reply, and counting them over all rows each time made a run quadratic in its size. Rows are
    only ever set (a sample's row replaced by a newer one), never removed."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = 0
        """Rows whose status is not "ok"."""
        self.cached = 0
        """Rows served from the response cache."""
        self.fresh: list[int] = []
        """Positions set since :class:`CheckpointTable` last took them."""
        self.replaced = False
        """Whether a row was set again since then (its old version is in the checkpoint table)."""

    def __setitem__(self, i: int, row: dict[str, Any]) -> None:
        old = self.get(i)
        if old is not None:
            self.failed -= old["status"] != "ok"
            self.cached -= bool(old["cached"])
            self.replaced = True
        self.fresh.append(i)
        super().__setitem__(i, row)
        self.failed += row["status"] != "ok"
        self.cached += bool(row["cached"])

    def _uncounted(self, *_args: Any, **_kwargs: Any) -> Any:
        raise TypeError("a RowTable's rows are only set one at a time (table[i] = row), so its counts stay right")

    update = setdefault = pop = popitem = clear = __delitem__ = _uncounted


def rows_frame(rows: Mapping[int, Mapping[str, Any]]) -> "pd.DataFrame":
    """The table of ``rows`` (sample position -> row), in sample order, with stable dtypes.
    Built column by column: a frame from a list of dicts costs ~35 us a row, and the table is
    rebuilt at every checkpoint."""
    import pandas as pd

    ordered = [rows[i] for i in sorted(rows)]
    values: list[Sequence[Any]]
    try:  # one C-level pass per row; a row lacking a column (none built here does) takes the slow path
        values = list(zip(*map(_ROW_VALUES, ordered))) or [() for _ in COLUMNS]
    except KeyError:
        values = [[row.get(column) for row in ordered] for column in COLUMNS]
    frame = pd.DataFrame({column: list(column_values) for column, column_values in zip(COLUMNS, values)},
                         columns=list(COLUMNS))
    for column in ("prompt_tokens", "completion_tokens", "attempts"):
        frame[column] = frame[column].astype("Int64")
    frame["latency"] = frame["latency"].astype(float)
    frame["cached"] = frame["cached"].astype(bool)
    return frame


class CheckpointTable:
    """The table of a :class:`RowTable` for its checkpoints, built from the rows set since the last one.

    Rebuilding the whole table from its rows at every checkpoint made a run quadratic in its size
    (at 2,000 rows every 100, the checkpoints cost as much CPU as the rest of a run's own work per
    reply). Here each checkpoint converts only its new rows, straight to Arrow with the types and
    pandas metadata :func:`rows_frame` gives (:func:`_arrow_rows`; through :func:`rows_frame` itself
    for a value of another type), and merges them into the table of the previous one: a column that
    was all empty before (Arrow's null type) takes the type and pandas metadata of the rows that
    fill it, as :func:`rows_frame` over all rows would give. A row set again (replaced) rebuilds the
    table from every row."""

    def __init__(self) -> None:
        self._table: Any = None
        self._positions: Any = None

    def table(self, rows: RowTable) -> Any:
        """The ``pyarrow.Table`` of every row in ``rows``, in sample order (what ``rows_frame(rows)``
        written to Parquet reads back as)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        fresh, rows.fresh = rows.fresh, []
        if rows.replaced or self._table is None:
            rows.replaced, fresh, self._table, self._positions = False, list(rows), None, None
        if not fresh and self._table is not None:
            return self._table
        fresh.sort()
        part = [rows[i] for i in fresh]
        chunk = _arrow_rows(part)
        if chunk is None:  # a value of a type rows never hold: let pandas convert it as it would
            chunk = pa.Table.from_pandas(rows_frame(dict(enumerate(part))), preserve_index=False, nthreads=1)
        positions = pa.array(fresh, type=pa.int64())
        if self._table is not None:
            chunk = _merged(self._table, chunk)
            positions = pa.concat_arrays([self._positions, positions])
            if len(self._positions) and fresh[0] < self._positions[-1].as_py():
                # some new rows come before old ones: put every row in its place
                order = pc.sort_indices(positions)
                chunk, positions = chunk.take(order), positions.take(order)
        self._table, self._positions = chunk.combine_chunks(), positions
        return self._table


def _merged(old: Any, new: Any) -> Any:
    """``old`` then ``new`` (two tables of the same columns, as ``from_pandas`` makes them) as one
    table, each column of the type and pandas metadata of the part where it is not all empty."""
    import pyarrow as pa

    old_meta, new_meta = json.loads(old.schema.metadata[b"pandas"]), json.loads(new.schema.metadata[b"pandas"])
    columns, fields = [], []
    for k, field in enumerate(old.schema):
        source, meta = (new, new_meta) if pa.types.is_null(field.type) else (old, old_meta)
        fields.append(source.schema.field(k))
        columns.append(meta["columns"][k])
    schema = pa.schema(fields, metadata={b"pandas": json.dumps({**old_meta, "columns": columns}).encode()})
    return pa.concat_tables([old.cast(schema), new.cast(schema)])


#: How :func:`rows_frame` types each column: text (str or None), whole numbers (Int64), latency, cached.
_KINDS = {**{c: str for c in COLUMNS}, "latency": float, "prompt_tokens": int, "completion_tokens": int,
          "attempts": int, "cached": bool}


@functools.cache
def _column_forms() -> tuple[dict[tuple[str, bool], tuple[Any, dict[str, Any]]], dict[str, Any]]:
    """(column, has a value) -> (Arrow field, pandas metadata entry) as ``from_pandas(rows_frame(...))``
    gives them, and the rest of its pandas metadata: learned once, from a row with every column set
    and one with none, so they follow the installed pandas and Arrow."""
    import pyarrow as pa

    filled = {c: {str: "x", int: 1, float: 0.5, bool: True}[kind] for c, kind in _KINDS.items()}
    empty = {c: (None if kind in (str, int) else filled[c]) for c, kind in _KINDS.items()}
    forms: dict[tuple[str, bool], tuple[Any, dict[str, Any]]] = {}
    base: dict[str, Any] = {}
    for has_value, row in ((True, filled), (False, empty)):
        table = pa.Table.from_pandas(rows_frame({0: row}), preserve_index=False, nthreads=1)
        meta = json.loads(table.schema.metadata[b"pandas"])
        base = {k: v for k, v in meta.items() if k != "columns"}
        for k, column in enumerate(COLUMNS):
            forms[column, has_value] = (table.schema.field(k), meta["columns"][k])
    return forms, base


def _arrow_rows(part: list[dict[str, Any]]) -> Any:
    """The Arrow table ``from_pandas(rows_frame(...))`` gives for the rows ``part`` (in this order),
    built column by column without pandas (a DataFrame's fixed cost was most of a checkpoint);
    ``None`` when a value is not of its column's type (then pandas converts it, as before)."""
    import pyarrow as pa

    try:
        values = list(zip(*map(_ROW_VALUES, part)))
    except KeyError:
        return None
    forms, base = _column_forms()
    fields, metas, arrays = [], [], []
    for column, column_values in zip(COLUMNS, values):
        kind = _KINDS[column]
        if kind is float:  # rows_frame casts latency to float: ints become floats there too
            if not all(type(v) in (float, int) for v in column_values):
                return None
            column_values = tuple(float(v) for v in column_values)
        elif not all(type(v) is kind or (v is None and kind is not bool) for v in column_values):
            return None
        has_value = kind is not str or any(v is not None for v in column_values)
        field, meta = forms[column, has_value]
        fields.append(field)
        metas.append(meta)
        arrays.append(pa.array(column_values, type=field.type))
    schema = pa.schema(fields, metadata={b"pandas": json.dumps({**base, "columns": metas}).encode()})
    return pa.Table.from_arrays(arrays, schema=schema)
