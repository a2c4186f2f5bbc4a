"""A scoring pass runs with fewer garbage-collector passes (issue 27 item 1), and leaves the
process's pace as it found it: after the pass, after a failing pass, and when passes overlap."""

from __future__ import annotations

import gc
import os
from pathlib import Path
import sys
import subprocess
import threading

import pandas as pd
import pytest

from persobench import pipeline
from persobench.datasets import load_dataset
from persobench.core.gc_pace import PASS_THRESHOLD, fewer_collections, give_back_memory
from persobench.metrics import MetricInfo, lexical, register_family, unregister_family
from persobench.metrics.family import FamilyBatch, FamilyResult, MetricFamily
from persobench.store.run_store import RunManifest, RunStore


@pytest.fixture()
def default_pace():
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*before)


@pytest.mark.usefixtures("default_pace")
def test_the_block_collects_less_often_and_the_pace_comes_back_even_on_an_error():
    with fewer_collections():
        assert gc.get_threshold() == (PASS_THRESHOLD, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)
    with pytest.raises(RuntimeError), fewer_collections():
        raise RuntimeError("boom")
    assert gc.get_threshold() == (700, 10, 10)
    gc.set_threshold(90_000, 10, 10)  # a process already slower than the pass's pace keeps its own
    with fewer_collections():
        assert gc.get_threshold()[0] == 90_000
    assert gc.get_threshold()[0] == 90_000


@pytest.mark.usefixtures("default_pace")
def test_overlapping_blocks_restore_the_pace_when_the_last_one_ends():
    entered, release = threading.Event(), threading.Event()

    def other_pass() -> None:
        with fewer_collections():
            entered.set()
            release.wait(10)

    thread = threading.Thread(target=other_pass)
    thread.start()
    assert entered.wait(10)
    with fewer_collections():
        pass
    assert gc.get_threshold()[0] == PASS_THRESHOLD  # the other pass still runs
    release.set()
    thread.join(10)
    assert gc.get_threshold() == (700, 10, 10)


class PaceSeen(MetricFamily):
    """Records the collector's pace while it scores; fails when asked to."""

    name = "toy_pace"
    seen: list[int] = []
    fail = False

    def score(self, batch: FamilyBatch) -> FamilyResult:
        PaceSeen.seen.append(gc.get_threshold()[0])
        if PaceSeen.fail:
            raise RuntimeError("toy family failed")
        result = FamilyResult()
        for it in batch.items:
            result.add(it.sid, "toy_pace", 1.0)
        result.record("toy_pace", "ok", version="toy_pace/1", backend="python", n=len(batch.items))
        return result


@pytest.fixture()
def pace_family():
    register_family(PaceSeen(), [MetricInfo("toy_pace", "diversity", "test metric", (0.0, None), True, 0.0, "none",
                                            family="toy_pace")])
    PaceSeen.seen, PaceSeen.fail = [], False
    yield
    unregister_family("toy_pace")


def _store(home) -> RunStore:
    store = RunStore(home)
    samples = load_dataset("sample")
    run = store.create(RunManifest(run_id="sample__pace__vanilla__0", dataset="sample",
                                   sample_ids=tuple(s.id for s in samples), model={"label": "pace"},
                                   mode="vanilla", template="t", template_hash="h"))
    run.record_samples(samples)
    run.write_table("generations", pd.DataFrame([(s.id, "ok", f"reply {i}", 0.5) for i, s in enumerate(samples)],
                                                 columns=["sample_id", "status", "response", "latency"]))
    return store


@pytest.mark.usefixtures("pace_family", "default_pace")
def test_a_local_pass_scores_at_the_pass_pace_and_gives_the_pace_back(tmp_path):
    store = _store(tmp_path)
    report = pipeline.score(None, store=store, metrics=["toy_pace"])
    assert PaceSeen.seen == [PASS_THRESHOLD] and report.failures == 0 and report.new_values > 0
    assert gc.get_threshold() == (700, 10, 10)

    PaceSeen.fail = True  # a family failing with an error of its own ends the pass
    with pytest.raises(RuntimeError, match="toy family failed"):
        pipeline.score(None, store=_store(tmp_path / "failing"), metrics=["toy_pace"])
    assert PaceSeen.seen[-1] == PASS_THRESHOLD
    assert gc.get_threshold() == (700, 10, 10)


def test_the_lexical_worker_processes_score_at_the_pass_pace():
    with lexical.worker_pool(lexical.PARALLEL_MIN_REPLIES, workers=2) as started:
        assert started
        pool = lexical._ACTIVE_POOL.get()
        assert pool.executor.submit(gc.get_threshold).result(timeout=60)[0] >= PASS_THRESHOLD


def test_the_command_line_exits_with_its_code_and_its_objects_frozen(tmp_path, capsys, monkeypatch):
    from persobench import cli

    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)  # run() sets it for its process
    try:
        with pytest.raises(SystemExit) as listed:
            cli.run(["--home", str(tmp_path), "runs"])
        assert listed.value.code == 0 and gc.get_freeze_count() > 0  # shutdown only frees them
        gc.unfreeze()
        with pytest.raises(SystemExit) as refused:
            cli.run(["--home", str(tmp_path), "show", "no-such-dataset"])
        assert refused.value.code == 2 and "unknown dataset 'no-such-dataset'" in capsys.readouterr().err
    finally:
        gc.unfreeze()


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux's /proc/self/status")
def test_memory_freed_between_datasets_goes_back_to_the_system():
    def resident_mb() -> float:
        status = open("/proc/self/status", encoding="utf-8").read()
        return int(status.split("RssAnon:")[1].split()[0]) / 1024

    blocks = [bytearray(64 * 1024) for _ in range(3_000)]  # 190 MB below glibc's mmap threshold
    kept = blocks[::50]  # what survives keeps the heap from shrinking by itself
    del blocks
    before = resident_mb()
    give_back_memory()
    assert before - resident_mb() > 100
    assert len(kept) == 60


def test_an_encoder_released_between_datasets_gives_memory_back(monkeypatch):
    from persobench.metrics.encoders import encoder as encoder_module
    from persobench.metrics.backends import get_profile

    calls = []
    monkeypatch.setattr(encoder_module, "give_back_memory", lambda: calls.append(1))
    encoder = encoder_module.TextEncoder(get_profile("offline"))
    encoder.release()
    assert calls == []  # held nothing (a lexical pass releases its unused encoder after every run)
    encoder.prepare((), ["I have two cats."])
    encoder.release()
    assert calls == [1]


@pytest.mark.parametrize("chosen, expected", [(None, "system"), ("mimalloc", "mimalloc")])
def test_a_command_keeps_arrow_tables_in_the_process_heap_unless_the_user_chose_a_pool(tmp_path, chosen, expected):
    """``python -m persobench`` gives Arrow the system allocator (mimalloc mapped 50 MB of its own in
    a lexical score); a pool named in ARROW_DEFAULT_MEMORY_POOL is the user's and is kept."""
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if chosen:
        env["ARROW_DEFAULT_MEMORY_POOL"] = chosen
    probe = ("import atexit, sys\n"
             "atexit.register(lambda: print('pool', __import__('pyarrow').default_memory_pool().backend_name))\n"
             "sys.argv = ['persobench', '--home', sys.argv[1], 'runs']\n"
             "import runpy; runpy.run_module('persobench', run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[1], env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == f"pool {expected}"
