"""The landing page's first view, built into the store's disk cache by the command that changed the
store (``aggregate.landing.warm_landing`` through ``pipeline.landing_kept_current``): the first app
process reads it and builds nothing; it is never served for another store state (a run written
afterwards, by the CLI or by anything else, shows); a damaged or half-written file is rebuilt, with no
traceback, and never read."""

from __future__ import annotations

import gc
import json
import os
import shutil

import pandas as pd
import pyarrow.parquet as pq
import pytest
from streamlit.testing.v1 import AppTest

from persobench import pipeline
from persobench.aggregate import disk_cache, landing
from persobench.core import gc_pace
from persobench.cli import main
from persobench.store.run_store import RunStore
from tests.test_app import APP, TIMEOUT, ranking

REFERENCE, ECHO = "baseline:reference", "baseline:persona-echo"


def cli(home, *args: str) -> None:
    assert main(["--home", str(home), *args]) == 0


def landing_files(home) -> dict[str, "pd.DataFrame"]:
    """table name -> the cached landing table, for the files written for the store as it is now."""
    state = RunStore(home).fingerprint()
    found = {}
    for path in sorted((home / disk_cache.CACHE_DIR).glob("*.parquet")):
        table = pq.read_table(path)
        key = json.loads(table.schema.metadata[b"persobench.cache"])["key"]
        if key["state"] == state:
            found[key["table"]] = table.to_pandas()
    return found


@pytest.fixture()
def home(tmp_path):
    """A store made with the CLI: the reference baseline on the built-in sample, scored (lexical)."""
    home = tmp_path / "home"
    cli(home, "run", "--dataset", "sample", "--model", REFERENCE, "--mode", "vanilla")
    assert not (home / disk_cache.CACHE_DIR).exists()  # nothing scored yet: no board to prepare
    cli(home, "score", "--profile", "offline", "--metrics", "dist1,bleu")
    return home


def refuse_building(monkeypatch) -> None:
    """From now on, any board or overall table built in this process fails the page (it must be read)."""

    def refuse(*args, **kwargs):
        raise AssertionError("the landing page built a table the command should have prepared")

    monkeypatch.setattr(landing, "leaderboard", refuse)
    monkeypatch.setattr(landing, "overall_with_ci", refuse)
    monkeypatch.setattr(landing, "comparison_table", refuse)


def landing_page(home, monkeypatch) -> AppTest:
    monkeypatch.setenv("PERSOBENCH_HOME", str(home))
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def test_a_command_that_changes_the_store_prepares_the_landing_view(home, monkeypatch):
    tables = landing_files(home)
    assert set(tables) == {"results", "board", "overall"}
    assert set(tables["board"]["model"]) == {REFERENCE}
    assert landing.landing_view(RunStore(home)) == ("offline", "sample")
    refuse_building(monkeypatch)
    at = landing_page(home, monkeypatch)  # reads the prepared files, builds nothing
    assert list(ranking(at)["model"]) == [REFERENCE]
    assert at.selectbox(key="lb_dataset").value == "sample" and at.selectbox(key="lb_profile").value == "offline"


def test_the_compare_pages_first_comparison_is_prepared_too(home, monkeypatch):
    cli(home, "run", "--dataset", "sample", "--model", ECHO, "--mode", "vanilla")
    cli(home, "score", "--profile", "offline", "--metrics", "dist1,bleu")
    prepared = landing_files(home)["comparison"]
    assert set(prepared["metric"]) == {"bleu", "dist1", "failure_ratio", "response_time"}
    refuse_building(monkeypatch)
    at = landing_page(home, monkeypatch)
    at.switch_page("pages/compare.py").run()
    assert not at.exception and not at.error, [e.message for e in at.exception] + [e.value for e in at.error]
    shown = next(f.value for f in at.dataframe if "A - B" in f.value.columns)
    assert sorted(shown["metric"]) == sorted(prepared["metric"])


def test_preparing_the_view_reads_each_manifest_once_and_syncs_no_cache_file(home, monkeypatch):
    """The view and its results share one scan of the runs; the tables are written atomically but not
    fsynced (a table lost in a power cut is only rebuilt: the step ends every command)."""
    shutil.rmtree(home / disk_cache.CACHE_DIR)
    reads, syncs = [], []
    real_get, real_fsync = RunStore.get, os.fsync
    monkeypatch.setattr(RunStore, "get", lambda self, run_id: reads.append(run_id) or real_get(self, run_id))
    monkeypatch.setattr(os, "fsync", lambda fd: syncs.append(fd) or real_fsync(fd))
    assert landing.warm_landing(RunStore(home))
    assert set(landing_files(home)) == {"results", "board", "overall"}
    assert len(reads) == 1 and syncs == []


def test_the_view_is_built_at_the_scoring_passs_collector_pace(home, monkeypatch):
    """After a pass, the default pace's first older-generation collection walked everything the pass
    had made (40-60 ms of a lexical score's end): the step after a block runs at the pass's pace,
    then the pace is back."""
    paces, real = [], landing.leaderboard
    monkeypatch.setattr(landing, "leaderboard", lambda *a, **k: paces.append(gc.get_threshold()[0]) or real(*a, **k))
    before = gc.get_threshold()
    with pipeline.landing_kept_current(home):
        (RunStore(home).runs()[0].path / "manifest.json").touch()  # the store changed: the board is built again
    assert paces and paces[0] >= gc_pace.PASS_THRESHOLD and gc.get_threshold() == before


def test_a_command_that_changes_nothing_leaves_the_cache_as_it_is(home):
    before = sorted(p.name for p in (home / disk_cache.CACHE_DIR).iterdir())
    for path in (home / disk_cache.CACHE_DIR).iterdir():
        path.unlink()
    cli(home, "runs")
    assert not any((home / disk_cache.CACHE_DIR).iterdir())
    assert before  # the score command had written them


def test_a_run_the_cli_writes_later_shows_on_the_landing_page(home, monkeypatch):
    cli(home, "run", "--dataset", "sample", "--model", ECHO, "--mode", "vanilla")
    cli(home, "score", "--profile", "offline", "--metrics", "dist1,bleu")
    assert set(landing_files(home)["board"]["model"]) == {REFERENCE, ECHO}
    refuse_building(monkeypatch)
    assert set(ranking(landing_page(home, monkeypatch))["model"]) == {REFERENCE, ECHO}


def test_a_run_written_without_the_cli_is_never_hidden_by_the_prepared_board(home, monkeypatch):
    from persobench.generation import run_generation
    from persobench.datasets import samples_by_id
    from persobench.scoring import score_run

    store = RunStore(home)
    run = run_generation(dataset="sample", model=ECHO, mode="vanilla", store=store)  # no CLI: nothing prepared
    score_run(store.get(run.run_id), samples_by_id("sample"), profile="offline", metrics=["dist1", "bleu"])
    assert landing_files(home) == {}  # the prepared tables are for the state before this run
    assert set(ranking(landing_page(home, monkeypatch))["model"]) == {REFERENCE, ECHO}
    assert set(landing_files(home)) >= {"board", "overall"}  # the app wrote them for the new state


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_a_damaged_landing_file_is_rebuilt_without_a_traceback(home, monkeypatch, damage):
    expected = landing_files(home)["board"]
    [board_file] = (home / disk_cache.CACHE_DIR).glob("board-*.parquet")
    data = board_file.read_bytes()
    board_file.write_bytes({"truncated": data[: len(data) // 2], "garbage": b"not parquet at all",
                            "empty": b""}[damage])
    (home / disk_cache.CACHE_DIR / ".board-half-written.tmp").write_bytes(data[:100])  # a writer that died
    at = landing_page(home, monkeypatch)
    assert list(ranking(at)["model"]) == [REFERENCE]
    pd.testing.assert_frame_equal(landing_files(home)["board"], expected)  # rewritten whole


def test_a_store_that_cannot_take_the_cache_still_completes_the_command(tmp_path):
    home = tmp_path / "home"
    cli(home, "run", "--dataset", "sample", "--model", REFERENCE, "--mode", "vanilla")
    home.joinpath(disk_cache.CACHE_DIR).write_text("a file where the cache folder goes")
    cli(home, "score", "--profile", "offline", "--metrics", "dist1")  # exit 0: the scores are written
    assert RunStore(home).runs()[0].has_table("scores")


def test_the_prepared_view_is_the_one_the_landing_page_opens_on(tmp_path):
    """Issue 37: the dataset with the most runs, ties broken by the paper's order (FoCus first), then
    by name (the alphabetical first read blended-skill-talk on the paper's store); ``offline`` first."""
    assert landing.landing_dataset({"blended-skill-talk": 16, "focus": 16, "it-convai2": 16, "pec": 10}) == "focus"
    assert landing.landing_dataset({"focus": 16, "sample": 24}) == "sample"
    assert landing.landing_dataset({"pec": 3, "it-convai2": 3, "zeta.csv": 3}) == "it-convai2"
    assert landing.landing_dataset(["b.csv", "a.csv"]) == "a.csv"
    assert landing.landing_view(RunStore(tmp_path / "empty")) is None


def test_the_python_api_and_the_apps_jobs_prepare_it_too(tmp_path, monkeypatch):
    """Python API calls inside landing_kept_current and the app's background jobs (the job process
    around its steps) prepare the view once the store changed; a CLI command prepares once."""
    from persobench import pipeline
    from persobench.aggregate import landing as landing_module
    from persobench.jobs import JobManager
    from persobench.jobs.planning import _score_steps, launch_steps
    from tests.test_app import wait_for

    home = tmp_path / "home"
    with pipeline.landing_kept_current(home):
        pipeline.generate(pipeline.GenerationConfig(dataset="sample", model=REFERENCE, mode="vanilla"), home=home)
        pipeline.score(None, pipeline.ScoreConfig(profile="offline", metrics=("dist1",)), home=home)
    assert set(landing_files(home)) >= {"board", "overall"}

    in_job = tmp_path / "job-home"
    jobs = JobManager(in_job)
    plans = [{"dataset": "sample", "model": REFERENCE, "mode": "vanilla"}]
    jobs.launch("prepared by the job", [*launch_steps(plans, limit=None, profile=None), *_score_steps("lexical")])
    job = wait_for(lambda: (s := jobs.jobs()) and not s[0].active and s[0], timeout=240)
    assert job.state == "completed", job.message
    # The job is marked done first, then its process prepares the view before it exits.
    assert wait_for(lambda: {"board", "overall"} <= set(landing_files(in_job)), timeout=120)

    prepared: list[str] = []
    monkeypatch.setattr(landing_module, "warm_landing", lambda store: prepared.append(str(store.home)))
    cli(home, "run", "--dataset", "sample", "--model", ECHO, "--mode", "vanilla")  # calls pipeline.generate
    assert prepared == [str(home)]
