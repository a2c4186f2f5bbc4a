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
from persobench.providers.base import Completion
from persobench.generation.config import GenerationConfig
from persobench.cli import main as cli_main
from persobench.generation.recovery import keep_reply
from persobench.generation.plan import plan_generation
from persobench.generation.recovery import recovery_paths
from persobench.generation.recovery import restore_replies
import shutil
import tempfile
import stat

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


# ---------------------------------------------------------------------------------------------
# Hardening, third round (issue 25): the edges a fault sweep found, against real parts


@pytest.fixture
def temp_dir(tmp_path, monkeypatch) -> Path:
    """A temp dir of the test's own (what ``tempfile.gettempdir()`` answers), world-writable like /tmp."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    folder.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def private_dir() -> Path:
    """The per-user fallback folder the recovery module must use (and check) in the temp dir."""
    return Path(tempfile.gettempdir()) / f"persobench-{os.geteuid()}"


def planted_line(run_id: str, key: str, text: str = "PLANTED") -> str:
    return json.dumps({"run": run_id, "key": key, "completion": Completion(text=json.dumps({"response": text})).to_dict(),
                       "latency": 0.0}) + "\n"


def _plan(home: Path, server, limit: int = 2):
    config = GenerationConfig(model="openai:fake", base_url=server.base_url, limit=limit)
    return plan_generation(config, store=RunStore(home))


def _run(home: Path, server, limit: int = 2) -> int:
    return cli_main(["--home", str(home), "run", "--model", "openai:fake", "--base-url", server.base_url,
                     "--limit", str(limit), "--no-progress"])


def _responses(home: Path, run_id: str) -> list[str]:
    return RunStore(home).get(run_id).read_table("generations")["response"].astype(str).tolist()


def test_replies_planted_in_the_shared_temp_dir_are_never_imported(openai_server, tmp_path, temp_dir):
    home = tmp_path / "home"
    plan = _plan(home, openai_server)
    # the old fallback's predictable name, and the new private folder made by someone else
    (temp_dir / f"persobench-recovered-{plan.run_id}.jsonl").write_text(
        "".join(planted_line(plan.run_id, key) for key in plan.keys), encoding="utf-8")
    if os.geteuid() == 0:  # only root can give a folder away: the private folder made by another user
        foreign = private_dir()
        foreign.mkdir(mode=0o700)
        (foreign / f"recovered-{plan.run_id}.jsonl").write_text(
            "".join(planted_line(plan.run_id, key) for key in plan.keys), encoding="utf-8")
        os.chown(foreign, 65534, 65534)
        os.chown(foreign / f"recovered-{plan.run_id}.jsonl", 65534, 65534)
    assert _run(home, openai_server) == 0
    assert len(openai_server.requests) == 2, "a planted reply replaced a request"
    assert not any("PLANTED" in r for r in _responses(home, plan.run_id))


def test_a_private_folder_open_to_others_or_a_symlink_is_not_used(openai_server, tmp_path, temp_dir):
    home = tmp_path / "home"
    plan = _plan(home, openai_server)
    elsewhere = tmp_path / "attacker"
    elsewhere.mkdir(mode=0o700)
    (elsewhere / f"recovered-{plan.run_id}.jsonl").write_text(planted_line(plan.run_id, plan.keys[0]))
    private_dir().symlink_to(elsewhere)
    assert _run(home, openai_server) == 0
    assert not any("PLANTED" in r for r in _responses(home, plan.run_id))
    private_dir().unlink()
    private_dir().mkdir(mode=0o700)
    private_dir().chmod(0o777)  # anybody could have put a file in it
    (private_dir() / f"recovered-{plan.run_id}.jsonl").write_text(planted_line(plan.run_id, plan.keys[0]))
    shutil.rmtree(plan.cache_dir)  # the replies must come from the server again, not from the planted file
    openai_server.reset_records()
    assert _run(home, openai_server) == 0
    assert len(openai_server.requests) == 2
    assert not any("PLANTED" in r for r in _responses(home, plan.run_id))


def test_a_planted_symlink_never_redirects_the_fallback_write(tmp_path, temp_dir):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    run_path = tmp_path / "home" / "runs" / "run-abc"  # missing: the run folder refuses the write
    (temp_dir / "persobench-recovered-run-abc.jsonl").symlink_to(victim)  # the old fallback name
    private_dir().mkdir(mode=0o700)
    (private_dir() / "recovered-run-abc.jsonl").symlink_to(victim)  # even inside a good private folder
    kept = keep_reply(run_path, "a" * 64, Completion(text="reply"), 0.1)
    assert victim.read_text() == "precious\n"
    assert kept is None
    (private_dir() / "recovered-run-abc.jsonl").unlink()
    kept = keep_reply(run_path, "a" * 64, Completion(text="reply"), 0.1)
    assert kept == private_dir() / "recovered-run-abc.jsonl"
    assert victim.read_text() == "precious\n"
    assert (kept.stat().st_mode & 0o777) == 0o600 and (private_dir().stat().st_mode & 0o777) == 0o700


def test_only_lines_of_the_run_and_its_keys_are_restored(tmp_path, temp_dir):
    run_path = tmp_path / "home" / "runs" / "run-abc"
    cache_dir = tmp_path / "home" / "responses"
    mine, foreign = "a" * 64, "b" * 64
    assert keep_reply(run_path, mine, Completion(text="mine"), 0.1) == private_dir() / "recovered-run-abc.jsonl"
    with open(private_dir() / "recovered-run-abc.jsonl", "a", encoding="utf-8") as handle:
        handle.write(planted_line("run-other", mine))  # another run's line
        handle.write(planted_line("run-abc", foreign))  # a key the run does not request (a judge answer)
        handle.write(planted_line("run-abc", "not-a-key"))
    assert restore_replies(run_path, cache_dir, keys=[mine]) == 1
    with ResponseCache(cache_dir) as cache:
        assert cache.get(mine)[0].text == "mine"
        assert foreign not in cache
    assert not (private_dir() / "recovered-run-abc.jsonl").exists()


def test_a_failed_recovery_write_leaves_no_empty_file(tmp_path, temp_dir):
    """A write refused after the file was created (a file size limit, as on a full disk) leaves no
    empty recovered.jsonl in the run folder and no cut line anywhere."""
    run_path = tmp_path / "home" / "runs" / "run-abc"
    run_path.mkdir(parents=True)
    script = (
        "import resource, sys, tempfile; tempfile.tempdir = sys.argv[2]\n"
        "from persobench.generation.recovery import keep_reply\n"
        "from persobench.providers.base import Completion\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (200, 200))\n"
        "print(keep_reply(sys.argv[1], 'a' * 64, Completion(text='x' * 5000), 0.1))\n")
    done = subprocess.run([sys.executable, "-c", script, str(run_path), str(temp_dir)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"
    assert not (run_path / "recovered.jsonl").exists()
    assert not any(p.is_file() for p in temp_dir.rglob("*"))
    assert recovery_paths(run_path)[0] == run_path / "recovered.jsonl"


# ---------------------------------------------------------------------------------------------
# Hardening, fourth round (issue 39): files and inputs


def _child_env(temp: Path) -> dict[str, str]:
    return {**os.environ, "OPENAI_API_KEY": OPENAI_SECRET, "PYTHONPATH": str(REPO), "TMPDIR": str(temp)}


@pytest.mark.parametrize("where", ["run folder", "private folder"])
def test_a_fifo_planted_as_the_recovery_file_is_ignored_and_the_run_goes_on(openai_server, tmp_path, where):
    home, temp = tmp_path / "home", tmp_path / "tmp"
    temp.mkdir()
    argv = [sys.executable, "-m", "persobench", "--home", str(home), "run", "--model", "openai:fake",
            "--base-url", openai_server.base_url, "--limit", "3", "--no-progress"]
    first = subprocess.run(argv, cwd=REPO, env=_child_env(temp), capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    [run] = RunStore(home).runs()
    if where == "run folder":
        fifo = run.path / "recovered.jsonl"
    else:
        private = temp / f"persobench-{os.geteuid()}"
        private.mkdir(mode=0o700)
        fifo = private / f"recovered-{run.run_id}.jsonl"
    os.mkfifo(fifo, 0o600)
    started = time.monotonic()
    try:
        again = subprocess.run(argv, cwd=REPO, env=_child_env(temp), capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"run hung on the FIFO at {fifo}")
    assert again.returncode == 0, again.stderr
    assert time.monotonic() - started < 60 and stat.S_ISFIFO(os.lstat(fifo).st_mode)  # left alone, not read


def test_a_reply_is_never_written_into_a_fifo(tmp_path):
    """A refused cache write keeps the reply in a recovery file: a FIFO there (nobody reading it)
    must neither block the run nor take the reply; the reply goes to the next place."""
    temp, run_path = tmp_path / "tmp", tmp_path / "home" / "runs" / "run-fifo"
    temp.mkdir()
    run_path.mkdir(parents=True)
    os.mkfifo(run_path / "recovered.jsonl", 0o600)
    script = ("from persobench.generation.recovery import keep_reply; from persobench.providers.base import Completion; "
              f"print(keep_reply({str(run_path)!r}, 'a' * 64, Completion(text='kept'), 0.5))")
    try:
        done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=_child_env(temp), capture_output=True,
                              text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("keeping a reply blocked on a FIFO")
    assert done.returncode == 0, done.stderr
    kept = Path(done.stdout.strip())
    assert kept == temp / f"persobench-{os.geteuid()}" / "recovered-run-fifo.jsonl"
    assert '"kept"' in kept.read_text(encoding="utf-8") and stat.S_ISFIFO(os.lstat(run_path / "recovered.jsonl").st_mode)


#: Characters ``str.splitlines`` breaks on that JSON allows raw inside a string.
NOT_LINE_BREAKS = "\u2028\u2029\u0085"


def test_a_recovered_reply_holding_a_raw_line_separator_is_restored(tmp_path, monkeypatch):
    import tempfile

    from persobench.generation.recovery import keep_reply, restore_replies
    from persobench.llm.response_cache import ResponseCache
    from persobench.providers.base import Completion

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    run_path = tmp_path / "home" / "runs" / "run-ls"
    run_path.mkdir(parents=True)
    text = json.dumps({"response": f"one{NOT_LINE_BREAKS}two"}, ensure_ascii=False)
    assert keep_reply(run_path, "b" * 64, Completion(text=text), 0.25) == run_path / "recovered.jsonl"
    assert "\u2028" in (run_path / "recovered.jsonl").read_text(encoding="utf-8")
    assert restore_replies(run_path, tmp_path / "cache", keys=["b" * 64]) == 1
    with ResponseCache(tmp_path / "cache") as cache:
        assert cache.get("b" * 64)[0].text == text
