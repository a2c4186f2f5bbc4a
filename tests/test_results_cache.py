"""The on-disk cache of the store's results table: served only for the store state it was built from,
rebuilt when a run is added, rescored, re-imported or deleted, and when the file is damaged."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pyarrow.parquet as pq
import pytest

from persobench import aggregate
from persobench.aggregate import disk_cache
from persobench.store import RunStore
from tests.test_aggregate import make_run

SCORES = {"dist1": [0.5, 1.0, 0.75, None], "c_score": [1, 0, 1, None]}


@pytest.fixture()
def store(tmp_path):
    s = RunStore(tmp_path / "home")
    make_run(s, model="A", statuses=["ok", "ok", "ok", "empty"], latency=[1.0, 2.0, 3.0, 4.0], scores=SCORES)
    make_run(s, model="B", statuses=["ok"] * 4, latency=[1.0] * 4,
             scores={"dist1": [0.2, 0.4, 0.6, 0.8], "c_score": [0, -1, 1, 0]})
    return s


def cache_files(store: RunStore) -> list:
    return sorted((store.home / disk_cache.CACHE_DIR).glob("results-*.parquet"))


def cached(path) -> tuple[pd.DataFrame, dict]:
    """The table of a cache file and the key it was written for."""
    table = pq.read_table(path)
    return table.to_pandas(), json.loads(table.schema.metadata[b"persobench.cache"])["key"]


def assert_fresh(store: RunStore, results: aggregate.Results) -> None:
    """``results`` equal what reading every run's tables gives now (nothing stale)."""
    fresh = aggregate.load_results(store, cache=False)
    pd.testing.assert_frame_equal(results.frame, fresh.frame)
    assert results.metric_status == fresh.metric_status and results.skipped_runs == fresh.skipped_runs


def dist1(results: aggregate.Results, model: str) -> list[float]:
    frame = results.frame
    rows = frame[(frame["model"] == model) & (frame["metric"] == "dist1")]
    return rows["value"].fillna(-9).tolist()


def test_a_fresh_process_reads_the_cached_table_built_for_this_state(store):
    first = aggregate.load_results(store)
    [path] = cache_files(store)
    frame, key = cached(path)
    assert key["state"] == store.fingerprint()  # written for the state as it is
    assert key["arguments"]["profile"] == "offline"
    pd.testing.assert_frame_equal(frame, first.frame)
    second = aggregate.load_results(store)
    assert_fresh(store, second)
    assert second.metric_status == first.metric_status
    assert str(second.frame["model"].dtype) == "category"  # labels are categories, cached or not
    # Another profile or include_incomplete is another file.
    aggregate.load_results(store, include_incomplete=True)
    assert len(cache_files(store)) == 2


def test_adding_a_run_invalidates_the_cache(store):
    aggregate.load_results(store)
    make_run(store, model="C", statuses=["ok"] * 4, latency=[1.0] * 4, scores={"dist1": [0.1, 0.1, 0.1, 0.1]})
    results = aggregate.load_results(store)
    assert dist1(results, "C") == [0.1] * 4
    assert_fresh(store, results)


def test_rescoring_a_run_invalidates_the_cache(store):
    aggregate.load_results(store)
    # Same run id, same table sizes, new values: what `score` does when a run is scored again.
    make_run(store, model="A", statuses=["ok", "ok", "ok", "empty"], latency=[1.0, 2.0, 3.0, 4.0],
             scores={"dist1": [0.25, 0.5, 0.5, None], "c_score": [1, 0, 1, None]})
    results = aggregate.load_results(store)
    assert dist1(results, "A") == [0.25, 0.5, 0.5, -9]
    assert_fresh(store, results)


def test_a_run_changing_status_or_being_deleted_invalidates_the_cache(store):
    before = aggregate.load_results(store)
    run_b = next(r for r in store.runs() if r.manifest.model_label == "B")
    run_b.update(status="failed")  # no longer a completed run
    assert set(aggregate.load_results(store).frame["model"]) == {"A"}
    run_b.update(status="completed")
    assert set(aggregate.load_results(store).frame["model"]) == {"A", "B"}
    store.delete(run_b.run_id)
    results = aggregate.load_results(store)
    assert set(results.frame["model"]) == {"A"} and len(results.frame) < len(before.frame)
    assert_fresh(store, results)


def test_a_run_becoming_unreadable_is_reported_not_served_from_the_cache(store):
    aggregate.load_results(store)
    run_a = next(r for r in store.runs() if r.manifest.model_label == "A")
    run_a.table_path("scores").write_bytes(b"not parquet at all")  # damaged in place
    results = aggregate.load_results(store)
    assert set(results.frame["model"]) == {"B"}
    assert [folder for folder, _ in results.skipped_runs] == [str(run_a.path)]


@pytest.mark.parametrize("damage", [
    b"",  # emptied
    b"PAR1 garbage PAR1",  # magic bytes, no valid footer
    "truncate",  # a write cut short
], ids=["empty", "garbage", "truncated"])
def test_a_damaged_cache_file_is_ignored_and_rebuilt(store, damage):
    aggregate.load_results(store)
    [path] = cache_files(store)
    good = path.read_bytes()
    path.write_bytes(good[: len(good) // 2] if damage == "truncate" else damage)
    results = aggregate.load_results(store)  # never raises
    assert_fresh(store, results)
    frame, key = cached(path)  # rebuilt
    assert key["state"] == store.fingerprint()
    pd.testing.assert_frame_equal(frame, results.frame)


def test_a_cache_file_from_another_state_is_never_served(store, tmp_path):
    aggregate.load_results(store)
    [path] = cache_files(store)
    stale = tmp_path / "stale.parquet"
    shutil.copy(path, stale)
    make_run(store, model="A", statuses=["ok", "ok", "ok", "empty"], latency=[1.0, 2.0, 3.0, 4.0],
             scores={"dist1": [0.9, 0.9, 0.9, None], "c_score": [1, 0, 1, None]})
    aggregate.load_results(store)
    shutil.copy(stale, path)  # the old table, a valid Parquet file, put back (a restored backup, a race)
    results = aggregate.load_results(store)
    assert dist1(results, "A") == [0.9, 0.9, 0.9, -9]
    assert_fresh(store, results)


def test_a_cache_that_cannot_be_written_costs_nothing_but_time(store):
    (store.home / disk_cache.CACHE_DIR).write_text("a file where the cache folder should be")
    results = aggregate.load_results(store)
    assert_fresh(store, results)
    assert (store.home / disk_cache.CACHE_DIR).is_file()  # left alone


def test_store_state_changes_with_every_run_file(store):
    state = store.fingerprint()
    assert store.fingerprint() == state  # reading changes nothing
    run = store.runs()[0]
    run.update(status="completed")  # a manifest rewrite
    assert store.fingerprint() != state
    state = store.fingerprint()
    (run.path / "persona_details.parquet").write_bytes(b"x")
    assert store.fingerprint() != state
