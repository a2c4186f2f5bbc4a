"""The rows of a run being generated: the table built from them at every checkpoint, and the counts
progress reads after every reply (kept as rows are set, not recounted)."""

from __future__ import annotations

import random

import numpy as np
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


def _random_row(i: int, rng: random.Random) -> dict:
    failed = rng.random() < 0.2
    return {
        "sample_id": f"d:{i}", "status": "api_error" if failed else rng.choice(["ok", "invalid_json"]),
        "response": None if failed else f"reply {i}", "reasoning": rng.choice([None, None, f"why {i}"]),
        "raw_text": rng.choice([None, f"raw {i}"]) if failed else f"raw {i}",
        "finish_reason": None if failed else "stop", "latency": rng.random(),
        "prompt_tokens": None if failed or rng.random() < 0.1 else i, "completion_tokens": None if failed else 3,
        "error": f"HTTP 500 ({i})" if failed else None, "attempts": rng.randint(0, 3), "cached": rng.random() < 0.3,
        "prompt": f"prompt {i} " * rng.randint(1, 5),
    }


@pytest.mark.parametrize("seed", range(6))
def test_checkpoint_tables_read_back_as_the_whole_rows_frame(tmp_path, seed):
    """Each checkpoint converts only its new rows (without pandas) and merges them into the previous
    table; written to Parquet it reads back exactly as rows_frame over every row did: values, order,
    dtypes, a column empty at first and filled later, rows arriving out of order, a row set again,
    values pandas converts (an int latency; a numpy count, which takes pandas' own path)."""

    from persobench.store.files import atomic_write_parquet
    from persobench.generation.rows import CheckpointTable, RowTable, rows_frame

    rng = random.Random(seed)
    order = list(range(60))
    rng.shuffle(order)
    rows, table = RowTable(), CheckpointTable()
    checked = 0
    for n, i in enumerate(order, start=1):
        # the first rows leave "reasoning" and "error" empty, so their Arrow type starts as null
        row = _random_row(i, rng) if n > 8 else {**_random_row(i, rng), "reasoning": None, "error": None, "status": "ok"}
        if seed >= 4 and n % 7 == 0:  # values rows_frame converts: a whole-number latency, a numpy count
            row = {**row, "latency": 0, "prompt_tokens": np.int64(n) if seed == 5 else row["prompt_tokens"]}
        rows[i] = row
        if seed % 2 and rng.random() < 0.1:
            rows[rng.choice(list(rows))] = _random_row(i, rng)  # a row set again
        if rng.random() < 0.3 or n == len(order):
            atomic_write_parquet(tmp_path / "checkpoint.parquet", table.table(rows))
            atomic_write_parquet(tmp_path / "whole.parquet", rows_frame(rows))
            got, want = pd.read_parquet(tmp_path / "checkpoint.parquet"), pd.read_parquet(tmp_path / "whole.parquet")
            pd.testing.assert_frame_equal(got, want, check_exact=True)
            checked += 1
    assert checked >= 3
