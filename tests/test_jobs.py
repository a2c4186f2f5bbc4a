"""Unit tests of persobench.jobs: job ids, the detached runner's failure report, launch planning."""

from __future__ import annotations

import time

import pytest

from persobench.generation import GenerationConfig
from persobench.jobs import JobManager, JobStep, LaunchChoice, RunRequest, job_id_for, plan_launch
from tests.fakes.fixtures import QUERY_TOKEN
from tests.fakes.fixtures import URL_PASSWORD
from tests.cli_checks import all_bytes
from tests.fakes import error
import json
from tests.fakes.fixtures import openai_server  # noqa: F401 - fixture
import os


def test_job_ids_are_deterministic_and_safe():
    step = JobStep("x", RunRequest(config=GenerationConfig(dataset="sample", model="baseline:reference")))
    assert job_id_for("t", [step]) == job_id_for("t", [step])
    assert job_id_for("t", [step]) != job_id_for("u", [step])
    with pytest.raises(ValueError):
        JobManager("/tmp").job_dir("../escape")


def test_failed_step_is_reported_with_a_redacted_log(tmp_path, monkeypatch):
    monkeypatch.setenv("SOME_API_KEY", "sk-supersecretvalue123")
    jobs = JobManager(tmp_path / "home")
    step = JobStep("bad model", RunRequest(config=GenerationConfig(dataset="sample", model="nosuchprovider:x", limit=1)))
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


# ---------------------------------------------------------------------------------------------
# Hardening, second round (issue 17): the edges a fault sweep found, against real parts


def test_base_url_credentials_never_reach_job_files_or_card(openai_server, tmp_path, monkeypatch):
    from persobench.jobs import JobManager, LaunchChoice, launch_steps, plan_launch
    from tests.test_app import wait_for

    monkeypatch.delenv("PERSOBENCH_KEY_HOSTS", raising=False)
    openai_server.script = lambda info: error(401, f"bad credentials {info.headers.get('authorization', '')}")
    host = openai_server.base_url.split("://", 1)[1]
    # user info (sent as HTTP Basic), and a query token (the SDK keeps it in the path: the fake answers 404)
    urls = [f"http://persouser:{URL_PASSWORD}@{host}", f"http://{host}/?api-key={QUERY_TOKEN}"]
    home = tmp_path / "home"
    env = dict(os.environ)
    plans = plan_launch(home, [LaunchChoice("sample", "openai:fake", mode, url)
                               for url, mode in zip(urls, ("vanilla", "cot"))], limit=2, env=env)
    assert URL_PASSWORD not in json.dumps(plans, default=str) and QUERY_TOKEN not in json.dumps(plans, default=str)
    jobs = JobManager(home)
    job_id, started = jobs.launch("typed url", launch_steps(plans, limit=2, profile=None), env=env)
    assert started
    status = wait_for(lambda: (s := jobs.status(job_id)) and not s.active and s)
    assert status.state == "failed"
    # the child got the credentials (through its environment): the server saw them
    assert openai_server.requests, status.log_tail
    import base64

    basic = base64.b64encode(f"persouser:{URL_PASSWORD}".encode()).decode()
    assert all(basic in r.headers.get("authorization", "") for r in openai_server.requests)
    card = status.message + status.log_tail + json.dumps([s.to_dict() for s in status.steps])
    stored = all_bytes(home)
    for secret in (URL_PASSWORD, QUERY_TOKEN, basic):
        assert secret not in card, secret
        assert secret.encode() not in stored, secret
    assert "api-key=[redacted]" in status.log_tail  # the child had the query token, the card does not show it
