"""A real ``python -m persobench run`` subprocess killed with SIGKILL at a random point, then started
again: no reply it had received is lost and none is requested twice."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from persobench.llm.response_cache import ResponseCache
from persobench.generation import read_progress
from persobench.store.run_store import RunStore
from tests.fakes.fixtures import OPENAI_SECRET, openai_server  # noqa: F401

REPO = Path(__file__).resolve().parents[1]
TOTAL = 30  # the built-in sample dataset
K = 4


def _command(home: Path, base_url: str) -> list[str]:
    return [sys.executable, "-m", "persobench", "--home", str(home), "run", "--dataset", "sample",
            "--model", "openai:fake", "--base-url", base_url, "--concurrency", str(K), "--no-progress",
            "--checkpoint-every", "7"]


@pytest.mark.parametrize("attempt", [1, 2])
def test_sigkill_then_resume_loses_nothing_and_repeats_nothing(openai_server, tmp_path, attempt):
    seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    why = f"(random seed {seed})"
    openai_server.latency = 0.08
    home = tmp_path / "home"
    env = {**os.environ, "OPENAI_API_KEY": OPENAI_SECRET}

    # 1. start the run and kill it after a random number of requests reached the server
    target = rng.randint(K + 4, TOTAL - 6)
    proc = subprocess.Popen(_command(home, openai_server.base_url), cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while len(openai_server.requests) < target:
        assert proc.poll() is None, f"run ended before the kill point {why}: {proc.stderr.read().decode()[-500:]}"
        assert time.monotonic() < deadline, f"server never saw {target} requests {why}"
        time.sleep(0.002)
    time.sleep(rng.uniform(0, 0.1))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    time.sleep(0.2)  # let the server finish writing replies nobody will read
    sent_before_kill = openai_server.replies_sent
    requests_before_kill = len(openai_server.requests)

    with ResponseCache(home / "responses") as cache:
        stored = len(cache)
    # every reply the client had read is stored; at most the K in flight were lost in transit
    assert sent_before_kill - K <= stored <= sent_before_kill, why
    assert stored < TOTAL, f"the kill came too late to test anything {why}"
    [killed] = RunStore(home).runs()
    assert killed.manifest.status == "running"  # the manifest was never finished ...
    progress = read_progress(killed.path)
    assert progress is None or progress["alive"] is False  # ... and the progress file shows a dead pid

    # 2. start it again: only the replies not stored are requested
    openai_server.reset_records()
    result = subprocess.run(_command(home, openai_server.base_url), cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-800:]
    assert len(openai_server.requests) == TOTAL - stored, (
        f"{why} killed after {requests_before_kill} requests with {stored} stored; "
        f"the resume sent {len(openai_server.requests)}"
    )
    assert max(openai_server.counts.values()) == 1, why  # no prompt asked twice during the resume

    run = RunStore(home).get(killed.run_id)
    frame = run.read_table("generations")
    assert run.manifest.status == "completed"
    assert len(frame) == TOTAL and (frame["status"] == "ok").all(), why
    assert int(frame["cached"].sum()) == stored, why
    assert json.loads((run.path / "progress.json").read_text())["done"] == TOTAL
    leaked = [p for p in home.rglob("*") if p.is_file() and OPENAI_SECRET.encode() in p.read_bytes()]
    assert leaked == []


def test_sigterm_cancels_cleanly_and_resumes(openai_server, tmp_path):
    openai_server.latency = 0.08
    home = tmp_path / "home"
    env = {**os.environ, "OPENAI_API_KEY": OPENAI_SECRET}
    proc = subprocess.Popen(_command(home, openai_server.base_url), cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while len(openai_server.requests) < 10:
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.002)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "cancelled" in err and "resume" in err
    [run] = RunStore(home).runs()
    done = len(run.read_table("generations"))
    assert run.manifest.status == "cancelled" and 10 - K <= done < TOTAL
    assert read_progress(run.path)["status"] == "cancelled"

    openai_server.reset_records()
    result = subprocess.run(_command(home, openai_server.base_url), cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-800:]
    assert len(openai_server.requests) == TOTAL - done
    assert RunStore(home).get(run.run_id).manifest.status == "completed"
