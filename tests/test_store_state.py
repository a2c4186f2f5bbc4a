"""The store owns a run's state: every change is a read-merge-write under the run's lock, scores are
tied to the reply and inputs they scored, and a refused write loses nothing paid for.

Each interleaving is forced with gates (threading events), never with sleeps."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest

from persobench import pipeline
from persobench.errors import StoreError
from persobench.generation import GenerationConfig
from persobench.metrics import score_samples
from persobench.store.locks import hold_state_lock
from persobench.store.run_store import RunStore
from tests.fakes.fixtures import openai_server  # noqa: F401
from tests.fakes.servers import reply

REPO = Path(__file__).resolve().parents[1]


def _gate_on_progress(entered: threading.Event, release: threading.Event):
    """A scoring progress callback that stops the scorer (mid-computation, before it writes) until released."""
    def progress(stage: str, done: int, total: int) -> None:
        entered.set()
        assert release.wait(60), "the gate was never released"
    return progress


def _values(run, metric: str, profile: str = "offline") -> pd.Series:
    scores = run.read_table("scores")
    mine = scores[(scores["metric"] == metric) & (scores["profile"] == profile)]
    return mine.set_index("sample_id")["value"].sort_index()


def test_two_scores_at_once_lose_nothing(tmp_path):
    store = RunStore(tmp_path)
    run = pipeline.generate(GenerationConfig(dataset="sample", model="baseline:persona-echo", limit=6), store=store)
    entered, release = threading.Event(), threading.Event()
    slow: dict = {}
    first = threading.Thread(target=lambda: slow.update(report=pipeline.score(
        [run.run_id], metrics=["bleu"], store=store, progress=_gate_on_progress(entered, release))))
    first.start()
    assert entered.wait(60)
    # While the first pass holds its (stale) copy, a second pass with another metric completes.
    second = pipeline.score([run.run_id], metrics=["dist1"], store=store)
    release.set()
    first.join(60)
    assert second.new_values == 6 and slow["report"].new_values == 6
    run = store.get(run.run_id)
    assert len(_values(run, "bleu")) == 6 and len(_values(run, "dist1")) == 6
    recorded = run.manifest.details.profile_scores("offline").metrics
    assert recorded["bleu"].n == 6 and recorded["dist1"].n == 6


def test_a_score_during_generation_keeps_the_run_completed_and_every_value(openai_server, tmp_path):
    store = RunStore(tmp_path)
    settled, release = threading.Event(), threading.Event()

    def script(info):
        if info.index == 4:  # four replies are in the table (one at a time, a checkpoint each)
            settled.set()
            assert release.wait(60)
        return None

    openai_server.script = script
    config = GenerationConfig(dataset="sample", model="openai:fake", base_url=openai_server.base_url, limit=8,
                              concurrency=1, checkpoint_every=1)
    done: dict = {}
    generating = threading.Thread(target=lambda: done.update(run=pipeline.generate(config, store=store)))
    generating.start()
    assert settled.wait(60)
    run_id = pipeline.plan(config, store=store).run_id
    during = pipeline.score([run_id], metrics=["dist1", "bleu"], store=store)
    assert during.runs[0].summary.computed == {"dist1": 4, "bleu": 4}
    release.set()
    generating.join(60)
    run = store.get(run_id)
    assert run.manifest.status == "completed"
    assert set(run.manifest.details.profile_scores("offline").metrics) == {"dist1", "bleu"}
    after = pipeline.score([run_id], metrics=["dist1", "bleu"], store=store)
    assert after.runs[0].summary.computed == {"dist1": 4, "bleu": 4}
    assert after.runs[0].summary.cached == {"dist1": 4, "bleu": 4}
    run = store.get(run_id)
    assert len(_values(run, "dist1")) == 8
    assert run.manifest.details.profile_scores("offline").metrics["dist1"].n == 8
    assert run.manifest.status == "completed"


def test_a_score_that_read_the_run_while_it_generated_never_reverts_it(openai_server, tmp_path):
    store = RunStore(tmp_path)
    settled, release = threading.Event(), threading.Event()

    def script(info):
        if info.index == 3:
            settled.set()
            assert release.wait(60)
        return None

    openai_server.script = script
    config = GenerationConfig(dataset="sample", model="openai:fake", base_url=openai_server.base_url, limit=6,
                              concurrency=1, checkpoint_every=1)
    generating = threading.Thread(target=lambda: pipeline.generate(config, store=store))
    generating.start()
    assert settled.wait(60)
    run = store.get(pipeline.plan(config, store=store).run_id)  # read while "running"
    assert run.manifest.status == "running"
    entered, scoring_release = threading.Event(), threading.Event()
    scorer = threading.Thread(target=lambda: pipeline.score(
        [run], metrics=["dist1"], store=store, progress=_gate_on_progress(entered, scoring_release)))
    scorer.start()
    assert entered.wait(60)
    release.set()  # generation finishes while the scorer holds its copy of the manifest
    generating.join(60)
    assert store.get(run.run_id).manifest.status == "completed"
    scoring_release.set()
    scorer.join(60)
    final = store.get(run.run_id)
    assert final.manifest.status == "completed"
    assert final.manifest.details.generation.finished
    assert "dist1" in final.manifest.details.profile_scores("offline").metrics


def test_the_state_lock_is_honoured_across_processes(tmp_path):
    """A process holding a run's state lock makes another process's change wait for it."""
    store = RunStore(tmp_path)
    run = pipeline.generate(GenerationConfig(dataset="sample", model="baseline:reference", limit=2), store=store)
    code = ("import sys; from persobench.store.run_store import RunStore\n"
            f"run = RunStore({str(tmp_path)!r}).get({run.run_id!r})\n"
            "print('waiting', flush=True)\n"
            "run.update(extra={'note': 'child'})\n"
            "print('written', flush=True)\n")
    with hold_state_lock(run.path):
        child = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "waiting"
        run.update(extra={"note": "parent"})  # re-entrant inside this process
        assert json.loads((run.path / "manifest.json").read_text())["extra"]["note"] == "parent"
    assert child.stdout.readline().strip() == "written"
    child.wait(60)
    manifest = store.get(run.run_id).manifest
    assert manifest.extra["note"] == "child"
    assert manifest.status == "completed"


def _write_csv(path: Path, rows: list[tuple[str, str, str]]) -> None:
    frame = pd.DataFrame(rows, columns=["personas", "context", "act_response"])
    frame.to_csv(path, index=False)


ROWS = [("I love hiking.", "User1: What do you do on weekends?", "I go hiking in the hills."),
        ("I am a chef.", "User1: What is your job?", "I cook at a small bistro."),
        ("I have two cats.", "User1: Any pets?", "Two cats, both very lazy.")]


def test_a_changed_dataset_file_never_changes_a_finished_runs_scores(tmp_path, monkeypatch):
    data = tmp_path / "work" / "data.csv"
    data.parent.mkdir()
    _write_csv(data, ROWS)
    monkeypatch.chdir(data.parent)
    store = RunStore(tmp_path / "home")
    run = pipeline.generate(GenerationConfig(dataset="data.csv", model="baseline:reference"), store=store)
    record = store.get(run.run_id).manifest.details.dataset_file
    assert record.path == str(data.resolve()) and len(record.sha256) == 64
    # A row added at the top shifts every positional id; scored later, the run keeps its own inputs.
    _write_csv(data, [("I race cars.", "User1: Fast?", "Very fast indeed, always."), *ROWS])
    pipeline.score([run.run_id], metrics=["bleu"], store=store)
    assert _values(store.get(run.run_id), "bleu").tolist() == pytest.approx([1.0, 1.0, 1.0])
    # The same relative name from another folder that has its own data.csv.
    other = tmp_path / "elsewhere"
    other.mkdir()
    _write_csv(other / "data.csv", [(p, c, "something else entirely") for p, c, _ in ROWS])
    monkeypatch.chdir(other)
    store.get(run.run_id).drop_scores()
    pipeline.score([run.run_id], metrics=["bleu"], store=store)
    assert _values(store.get(run.run_id), "bleu").tolist() == pytest.approx([1.0, 1.0, 1.0])


def test_a_run_without_recorded_inputs_refuses_a_changed_file_in_one_line(tmp_path, monkeypatch):
    data = tmp_path / "data.csv"
    _write_csv(data, ROWS)
    monkeypatch.chdir(tmp_path)
    store = RunStore(tmp_path / "home")
    run = pipeline.generate(GenerationConfig(dataset=str(data), model="baseline:reference"), store=store)
    (run.path / "samples.parquet").unlink()  # as a run made before runs recorded their samples
    _write_csv(data, [*ROWS, ("I sing.", "User1: Hobbies?", "Singing, mostly in the shower.")])
    report = pipeline.score([run.run_id], metrics=["bleu"], store=store)
    assert report.failures == 1
    error = report.runs[0].error
    assert str(data.resolve()) in error and "changed" in error and "\n" not in error
    assert not store.get(run.run_id).has_table("scores")
    data.unlink()
    error = pipeline.score([run.run_id], metrics=["bleu"], store=store).runs[0].error
    assert str(data.resolve()) in error and "gone" in error


def test_a_regenerated_reply_is_scored_again(openai_server, tmp_path):
    store = RunStore(tmp_path)
    openai_server.script = lambda info: reply(json.dumps({"response": "the first reply, short"}))
    config = GenerationConfig(dataset="sample", model="openai:fake", base_url=openai_server.base_url, limit=4)
    run = pipeline.generate(config, store=store)
    first = pipeline.score([run.run_id], metrics=["dist1", "bleu"], store=store)
    assert first.new_values == 8
    # The response cache is deleted and the same run repeated: every reply is sent again, and differs.
    import shutil

    shutil.rmtree(tmp_path / "responses")
    openai_server.script = lambda info: reply(json.dumps({"response": f"another answer for {info.prompt_id} now"}))
    run = pipeline.generate(config, store=store)
    again = pipeline.score([run.run_id], metrics=["dist1", "bleu"], store=store)
    assert again.runs[0].summary.computed == {"dist1": 4, "bleu": 4}
    assert again.runs[0].summary.cached == {"dist1": 0, "bleu": 0}
    generations = run.read_table("generations")
    samples = pipeline.run_samples(store.get(run.run_id))
    fresh = score_samples([samples[s] for s in generations["sample_id"]],
                          dict(zip(generations["sample_id"], generations["response"])), metrics=["bleu"])
    stored = _values(store.get(run.run_id), "bleu")
    assert stored.tolist() == pytest.approx(fresh.scores.set_index("sample_id")["value"].sort_index().tolist())
    assert len(run.read_table("scores")) == 8  # the stale values are gone, not kept beside the new ones
    assert store.get(run.run_id).manifest.details.profile_scores("offline").metrics["bleu"].n == 4


def _limited(limit_bytes: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
    return apply


def _run_command(home: Path, base_url: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "persobench", "--home", str(home), "run", "--dataset", "sample", "--model",
            "openai:fake", "--base-url", base_url, "--concurrency", "1", "--no-progress", "--limit", "12", *extra]


def test_a_full_disk_during_a_run_is_one_line_and_loses_no_paid_reply(openai_server, tmp_path):
    """A file size limit (as `ulimit -f`) stops the response cache mid-run: the run stops sending,
    keeps the replies it received, says so in one line; the next run sends only what is missing."""
    big = "x" * 3000
    openai_server.script = lambda info: reply(json.dumps({"response": f"{info.prompt_id} {big}"}))
    home = tmp_path / "home"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    limited = subprocess.run(_run_command(home, openai_server.base_url), cwd=REPO, env=env, capture_output=True,
                             text=True, timeout=300, preexec_fn=_limited(250_000))
    assert limited.returncode == 2, limited.stdout + limited.stderr
    lines = [line for line in limited.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), limited.stderr
    assert "Traceback" not in limited.stderr and "cannot write" in lines[0]
    assert "kept in" in lines[0] or "responses" in lines[0]
    paid = len(openai_server.requests)
    assert 0 < paid < 12, "the limit should stop the run part-way"
    assert max(openai_server.counts.values()) == 1
    openai_server.reset_records()
    resumed = subprocess.run(_run_command(home, openai_server.base_url), cwd=REPO, env=env, capture_output=True,
                             text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert len(openai_server.requests) == 12 - paid, "a reply paid for before the failure was requested again"
    table = RunStore(home).get(resumed.stdout.split()[1].rstrip(":")).read_table("generations")
    assert (table["status"] == "ok").sum() == 12


def test_export_to_a_full_disk_exits_non_zero(tmp_path):
    store = RunStore(tmp_path / "home")
    run = pipeline.generate(GenerationConfig(dataset="sample", model="baseline:reference"), store=store)
    target = tmp_path / "out.csv"
    with open(target, "wb") as out:
        done = subprocess.run([sys.executable, "-m", "persobench", "--home", str(store.home), "export", run.run_id],
                              cwd=REPO, stdout=out, stderr=subprocess.PIPE, text=True, timeout=120,
                              preexec_fn=_limited(2_000))
    assert done.returncode != 0
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    # to a file (-o), a refused write leaves the previous good file in place
    good = tmp_path / "good.csv"
    good.write_text("previous export\n")
    done = subprocess.run([sys.executable, "-m", "persobench", "--home", str(store.home), "export", run.run_id,
                           "-o", str(good)], cwd=REPO, capture_output=True, text=True, timeout=120,
                          preexec_fn=_limited(2_000))
    assert done.returncode == 2 and str(good) in done.stderr and "Traceback" not in done.stderr
    assert good.read_text() == "previous export\n"


def test_recorded_samples_name_the_row_and_field_when_damaged(tmp_path):
    store = RunStore(tmp_path)
    run = pipeline.generate(GenerationConfig(dataset="sample", model="baseline:reference", limit=2), store=store)
    frame = run.read_table("samples")
    frame.loc[1, "sample"] = "{not json"
    run.write_table("samples", frame)
    with pytest.raises(StoreError, match=r"samples.parquet: row 2, field 'sample'"):
        pipeline.run_samples(store.get(run.run_id))
