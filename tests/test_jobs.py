"""Unit tests of persobench.jobs: job ids, the detached runner's failure report, launch planning."""

from __future__ import annotations

import time

import pytest

from persobench.jobs import JobManager, JobStep, LaunchChoice, job_id_for, plan_launch


def test_job_ids_are_deterministic_and_safe():
    step = JobStep("x", "run", {"dataset": "sample"})
    assert job_id_for("t", [step]) == job_id_for("t", [step])
    assert job_id_for("t", [step]) != job_id_for("u", [step])
    with pytest.raises(ValueError):
        JobManager("/tmp").job_dir("../escape")


def test_failed_step_is_reported_with_a_redacted_log(tmp_path, monkeypatch):
    monkeypatch.setenv("SOME_API_KEY", "sk-supersecretvalue123")
    jobs = JobManager(tmp_path / "home")
    step = JobStep("bad model", "run", {"dataset": "sample", "model": "nosuchprovider:x", "limit": 1})
    job_id, started = jobs.launch("bad", [step])
    assert started
    deadline = time.monotonic() + 60
    while (status := jobs.status(job_id)).active and time.monotonic() < deadline:
        time.sleep(0.2)
    # a configuration error: its line, not "exited with status 2", and no Resume (issue 37)
    assert status.state == "failed" and not status.resumable
    assert "bad model: unknown provider" in status.message
    assert "unknown provider" in status.log_tail
    assert "sk-supersecretvalue123" not in status.log_tail


def test_plan_launch_checks_keys_against_the_given_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    choice = [LaunchChoice("sample", "openai:gpt-4o-mini", "vanilla", None)]
    without = plan_launch(tmp_path, choice, limit=2)
    assert "OPENAI_API_KEY" in without[0]["problem"]
    with_key = plan_launch(tmp_path, choice, limit=2, env={"OPENAI_API_KEY": "sk-test-0000000000"})
    assert with_key[0]["problem"] == ""


def test_a_score_step_shows_its_progress_in_the_job_log_in_a_few_lines(tmp_path):
    from persobench.jobs.manager import tail_text
    from persobench.jobs.planning import _score_steps, launch_steps

    plans = [{"dataset": "sample", "model": "baseline:reference", "mode": "vanilla"}]
    steps = [*launch_steps(plans, limit=None, profile=None), *_score_steps("lexical")]
    jobs = JobManager(tmp_path / "home")
    job_id, _ = jobs.launch("score progress", steps)
    deadline = time.monotonic() + 240
    while (status := jobs.status(job_id)).active and time.monotonic() < deadline:
        time.sleep(0.3)
    log = tail_text(jobs.job_dir(job_id) / "log.txt")  # what the job card shows when a job fails
    assert status.state == "completed", log
    progress = [line for line in log.splitlines() if " item (" in line]
    assert progress and progress[-1].endswith("30/30 item (100%)")  # the log says how scoring went ...
    assert len(progress) <= 3  # ... in a line every few seconds at most, not one per reply

