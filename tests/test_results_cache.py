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
from persobench.store.run_store import RunStore
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


# --- the app's tables kept in the same disk cache (a just-started app reads one file each) ---------


def _app_tables(monkeypatch, store):
    from persobench.app import loaders

    monkeypatch.setenv("PERSOBENCH_HOME", str(store.home))
    return loaders, str(store.home), store.fingerprint()


def test_status_counts_are_served_from_the_disk_cache_until_a_run_changes(store, monkeypatch):
    loaders, home, sig = _app_tables(monkeypatch, store)
    first = loaders.status_counts.__wrapped__(home, sig)
    assert sorted(first.loc[first["status"] == "empty", "model"]) == ["A"]
    assert list((store.home / disk_cache.CACHE_DIR).glob("status_counts-*.parquet"))

    def no_rebuild(*_):
        raise AssertionError("rebuilt although the store did not change")

    monkeypatch.setattr(loaders, "_status_counts", no_rebuild)
    again = loaders.status_counts.__wrapped__(home, store.fingerprint())
    pd.testing.assert_frame_equal(again, first, check_dtype=False)

    monkeypatch.undo()
    monkeypatch.setenv("PERSOBENCH_HOME", str(store.home))
    make_run(store, model="C", statuses=["ok", "truncated", "ok", "ok"], latency=[1.0] * 4, scores={})
    changed = loaders.status_counts.__wrapped__(home, store.fingerprint())
    assert ("C", "truncated") in set(zip(changed["model"], changed["status"]))


def test_failed_replies_are_served_from_the_disk_cache(store, monkeypatch):
    loaders, home, sig = _app_tables(monkeypatch, store)
    runs = tuple(loaders.runs_table.__wrapped__(home, sig)["run_id"])
    first = loaders.failed_replies.__wrapped__(home, sig, runs)
    assert list(first["status"]) == ["empty"] and list(first["model"]) == ["A"]
    monkeypatch.setattr(loaders, "_failed_replies", lambda *_: pd.DataFrame())
    again = loaders.failed_replies.__wrapped__(home, sig, runs)
    assert list(again["sample_id"]) == list(first["sample_id"])
    # another selection of runs is another table
    assert loaders.failed_replies.__wrapped__(home, sig, runs[1:]).empty


def test_dataset_sizes_are_cached_on_the_prompt_tables_files(store, monkeypatch, tmp_path):
    loaders, _, _ = _app_tables(monkeypatch, store)
    prompts = tmp_path / "Prompts"
    prompts.mkdir()
    (prompts / "FoCus.csv").write_text("personas,context,act_response\n", encoding="utf-8")
    monkeypatch.setenv("PERSOBENCH_PROMPTS", str(prompts))
    first = loaders.dataset_table.__wrapped__()
    assert first.set_index("dataset").loc["sample", "samples"] == 30
    assert list((store.home / disk_cache.CACHE_DIR).glob("dataset_table-*.parquet"))
    marker = first.assign(note="rebuilt")
    monkeypatch.setattr(loaders, "_dataset_table", lambda: marker)
    assert set(loaders.dataset_table.__wrapped__()["note"]) != {"rebuilt"}  # unchanged files: from disk
    (prompts / "FoCus.csv").write_text("personas,context,act_response\n\n", encoding="utf-8")
    assert set(loaders.dataset_table.__wrapped__()["note"]) == {"rebuilt"}  # a changed table: rebuilt


def test_a_missing_store_gets_no_cache_folder(tmp_path, monkeypatch):
    from persobench.app import loaders

    home = tmp_path / "nothing-here"
    monkeypatch.setenv("PERSOBENCH_HOME", str(home))
    assert "sample" in set(loaders.dataset_table.__wrapped__()["dataset"])
    assert not home.exists()


def test_profiles_in_store_come_from_the_scanned_runs(store, monkeypatch):
    loaders, home, sig = _app_tables(monkeypatch, store)
    assert loaders.profiles_in_store(home, sig) == ["offline"]


def test_the_landing_page_of_a_store_without_the_demo_never_imports_generation(store):
    """The published runs' landing page loads no model library: the demo check and the runs table
    leave the providers' SDKs, torch, transformers and Ray unimported (seconds of a cold start). The
    library's own modules come through the front door (persobench.pipeline), which imports none of them."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    code = (
        "import sys, logging; logging.disable(logging.WARNING)\n"
        "from streamlit.testing.v1 import AppTest\n"
        f"at = AppTest.from_file({str(root / 'app.py')!r}, default_timeout=120); at.run()\n"
        "print('exceptions', [e.message for e in at.exception])\n"
        "print('titles', [t.value for t in at.title])\n"
        "heavy = ('openai', 'anthropic', 'torch', 'transformers', 'ray', 'bert_score', 'llguidance')\n"
        "print('heavy', [m for m in heavy if m in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PERSOBENCH_HOME": str(store.home)})
    lines = done.stdout.splitlines()
    assert "exceptions []" in lines and "titles ['Leaderboard']" in lines, done.stdout + done.stderr[-2000:]
    assert "heavy []" in lines


def test_the_demo_check_names_the_demos_dataset():
    """persobench/app/boards.py:demo_story_for looks for runs of "sample" before importing the demo's
    module: that must stay the demo's dataset."""
    from persobench.generation.demo import DEMO_DATASET

    assert DEMO_DATASET == "sample"


def test_one_datasets_results_are_the_whole_tables_rows_of_it(store):
    """A board of one dataset reads only its runs (the app's cold landing page): the rows are those of
    the whole store's table, and the leaderboard made from them is the same."""
    make_run(store, model="A", statuses=["ok"] * 3, latency=[1.0] * 3, scores={"dist1": [0.1, 0.2, 0.3]},
             dataset="sample")
    whole = aggregate.load_results(store)
    focus = aggregate.load_results(store, dataset="focus")
    assert set(focus.frame["dataset"]) == {"focus"} and set(whole.frame["dataset"]) == {"focus", "sample"}
    columns = list(whole.frame.columns)
    expected = whole.frame[whole.frame["dataset"] == "focus"].astype(str).sort_values(columns)
    pd.testing.assert_frame_equal(focus.frame.astype(str).sort_values(columns).reset_index(drop=True),
                                  expected.reset_index(drop=True))
    pd.testing.assert_frame_equal(aggregate.leaderboard(focus, dataset="focus"),
                                  aggregate.leaderboard(whole, dataset="focus"))
    names = sorted(p.name for p in (store.home / disk_cache.CACHE_DIR).glob("results-*.parquet"))
    assert len(names) == 2 and any("focus" in n for n in names)  # its own file; the whole table's is kept
    assert aggregate.load_results(store, dataset="focus", cache=False).frame.shape == focus.frame.shape


@pytest.fixture()
def fresh_code_key():
    """code_fingerprint() is worked out once per process: forgotten before and after the test."""
    disk_cache.code_fingerprint.cache_clear()
    yield
    disk_cache.code_fingerprint.cache_clear()


@pytest.mark.usefixtures("fresh_code_key")
def test_the_code_key_reads_each_builder_module_and_fails_loudly_when_one_moved(monkeypatch, scratch_module):
    from persobench.store.files import module_sources

    assert [p.name for p in module_sources(disk_cache.BUILDERS)] == ["protocol.py", "run_records.py", "run_store.py",
                                                                     "stats.py"]
    monkeypatch.setattr(disk_cache, "BUILDERS", (*disk_cache.BUILDERS, scratch_module("WORST = 0\n")))
    before = disk_cache.code_fingerprint()
    scratch_module("WORST = 1\n")
    disk_cache.code_fingerprint.cache_clear()
    assert disk_cache.code_fingerprint() != before  # a changed builder: tables built before are stale

    monkeypatch.setattr(disk_cache, "BUILDERS", ("persobench.stats_moved_away",))
    disk_cache.code_fingerprint.cache_clear()
    with pytest.raises(ModuleNotFoundError, match="persobench.stats_moved_away"):
        disk_cache.code_fingerprint()
