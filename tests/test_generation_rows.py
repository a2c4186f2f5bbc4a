"""The rows of a run being generated: the table built from them at every checkpoint, and the counts
progress reads after every reply (kept as rows are set, not recounted)."""

from __future__ import annotations

import pandas as pd
import pytest

from persobench.generation.rows import COLUMNS, RowTable, rows_frame


def _row(i: int, status: str = "ok", cached: bool = False) -> dict:
    failed = status == "api_error"
    return {"sample_id": f"s{i}", "status": status, "response": None if failed else f"reply {i}",
            "reasoning": None, "raw_text": None if failed else f'{{"response": "reply {i}"}}',
            "finish_reason": None if failed else "stop", "latency": 0.5 * i,
            "prompt_tokens": None if failed else 12, "completion_tokens": None if failed else 7,
            "error": "HTTP 500" if failed else None, "attempts": 0 if cached else 2, "cached": cached,
            "prompt": f"prompt {i}"}


def test_the_table_is_the_one_a_frame_of_records_gives_in_sample_order():
    rows = {3: _row(3), 0: _row(0, cached=True), 2: _row(2, "api_error"), 1: _row(1, "invalid_json")}
    frame = rows_frame(rows)
    expected = pd.DataFrame([rows[i] for i in sorted(rows)], columns=list(COLUMNS))
    for column in ("prompt_tokens", "completion_tokens", "attempts"):
        expected[column] = expected[column].astype("Int64")
    expected["latency"] = expected["latency"].astype(float)
    expected["cached"] = expected["cached"].astype(bool)
    pd.testing.assert_frame_equal(frame, expected)
    assert list(frame["sample_id"]) == ["s0", "s1", "s2", "s3"]
    assert frame["prompt_tokens"].isna().tolist() == [False, False, True, False]


def test_row_table_counts_failed_and_cached_rows_as_they_are_set():
    table = RowTable()
    table[0] = _row(0, cached=True)
    table[1] = _row(1, "api_error")
    table[2] = _row(2, "invalid_json")
    assert (table.failed, table.cached, len(table)) == (2, 1, 3)
    table[1] = _row(1)  # a retried sample's row replaced
    table[0] = _row(0)
    assert (table.failed, table.cached) == (1, 0)
    assert table.failed == sum(r["status"] != "ok" for r in table.values())
    with pytest.raises(TypeError):
        table.update({3: _row(3)})  # would bypass the counts
    with pytest.raises(TypeError):
        del table[0]
