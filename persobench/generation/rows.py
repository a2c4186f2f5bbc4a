"""One row of ``generations.parquet`` per finished sample, from a completion or a failed request.

Post-processing happens here, as each reply arrives: the row carries the parsed reply and its
status ("ok", "invalid_json", "api_error", "refused" ...), so the table on disk is always readable
on its own.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, Mapping

from persobench.providers.base import Completion

from persobench.errors import ProviderError
from persobench.generation.plan import GenerationPlan
from persobench.postprocess import Status, parse_output

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
        completion.text, policy=plan.config.policy, finish_reason=completion.finish_reason,
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

    def __setitem__(self, i: int, row: dict[str, Any]) -> None:
        old = self.get(i)
        if old is not None:
            self.failed -= old["status"] != "ok"
            self.cached -= bool(old["cached"])
        super().__setitem__(i, row)
        self.failed += row["status"] != "ok"
        self.cached += bool(row["cached"])

    def _uncounted(self, *_args: Any, **_kwargs: Any) -> Any:
        raise TypeError("a RowTable's rows are only set one at a time (table[i] = row), so its counts stay right")

    update = setdefault = pop = popitem = clear = __delitem__ = _uncounted  # type: ignore[assignment]


def rows_frame(rows: Mapping[int, Mapping[str, Any]]) -> "pd.DataFrame":
    """The table of ``rows`` (sample position -> row), in sample order, with stable dtypes.
    Built column by column: a frame from a list of dicts costs ~35 us a row, and the table is
    rebuilt at every checkpoint."""
    import pandas as pd

    ordered = [rows[i] for i in sorted(rows)]
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
