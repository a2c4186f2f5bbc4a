"""Progress off a terminal: a line every few seconds or one final line, never one per item."""

from __future__ import annotations

import csv
import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from persobench.core.console import ProgressBar
from tests.fakes import error
from tests.fakes.fixtures import openai_server  # noqa: F401 - fixture

REPO = Path(__file__).resolve().parents[1]


def _lines(text: str) -> list[str]:
    """What a log viewer shows: tqdm's carriage-return redraws count as lines too."""
    return [line for line in re.split(r"[\r\n]+", text) if line.strip()]


def test_a_fast_job_off_a_terminal_prints_one_final_line():
    stream = io.StringIO()  # not a terminal
    bar = ProgressBar(total=10_000, desc="scoring", unit="reply", stream=stream)
    for done in range(1, 10_001):
        bar.update_to(done, failed=0)
    bar.close()
    assert _lines(stream.getvalue()) == ["scoring: 10000/10000 reply (100%), failed 0"]


def test_a_slow_job_off_a_terminal_prints_at_most_one_line_per_interval():
    stream = io.StringIO()
    bar = ProgressBar(total=400, desc="gen", stream=stream, interval=0.1)
    start = time.monotonic()
    for done in range(1, 401):
        bar.update_to(done)
        time.sleep(0.002)
    bar.close()
    elapsed = time.monotonic() - start
    lines = _lines(stream.getvalue())
    assert 2 <= len(lines) <= elapsed / 0.1 + 2  # periodic lines plus the final one, not 400
    assert lines[-1] == "gen: 400/400 item (100%)"
    counts = [int(re.search(r": (\d+)/", line).group(1)) for line in lines]
    assert counts == sorted(counts)


def test_cli_run_and_score_write_a_few_lines_to_a_pipe(tmp_path: Path):
    dataset = tmp_path / "many.csv"
    with dataset.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["personas", "context", "act_response"])
        for i in range(300):
            writer.writerow([f"I have {i} cats. I like tea.", f"User1: how many cats do you have? ({i})",
                             f"User2: I have {i} cats and I drink tea."])
    env = {**os.environ, "PERSOBENCH_HOME": str(tmp_path / "home")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        # stderr is a pipe here, as in the app's job log or CI.
        return subprocess.run([sys.executable, "-m", "persobench", *args], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=300)

    run = cli("run", "--dataset", str(dataset), "--model", "baseline:persona-echo")
    assert run.returncode == 0, run.stderr
    run_lines = _lines(run.stderr)
    assert 1 <= len(run_lines) <= 3, run.stderr
    assert "300/300 sample" in run_lines[-1]

    score = cli("score", "--metrics", "bleu,rouge1,dist1")
    assert score.returncode == 0, score.stderr
    score_lines = _lines(score.stderr)
    assert 1 <= len(score_lines) <= 3, score.stderr
    assert "300/300 item" in score_lines[-1]


# ---------------------------------------------------------------------------------------------
# Hardening, second round (issue 17): the edges a fault sweep found, against real parts


def test_progress_json_says_the_run_waits(openai_server, tmp_path):
    from persobench.generation import run_generation

    openai_server.script = lambda info: (error(429, "slow down", headers={"Retry-After": "1"})
                                         if info.attempt == 1 else None)
    seen: list[str] = []
    run_generation(dataset="sample", model="openai:fake", base_url=openai_server.base_url, limit=1,
                   home=tmp_path / "home", progress=lambda info: seen.append(info.note))
    assert any("waiting 1 s" in note and "Retry-After" in note for note in seen), seen
    assert seen[-1] == ""  # cleared once the wait is over
