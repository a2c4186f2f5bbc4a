"""Honest progress (issue 37 item 8): a run and a background job say "starting (loading the model)",
"running", "cancelled", "failed: <the error line>" or "done" with a link to the results; the ETA
waits for a few replies; times are local; a run whose every reply failed never looks like success;
a configuration error offers no Resume. Real jobs (detached processes), a real fake server on
127.0.0.1, real Streamlit (AppTest) for the job card."""

from __future__ import annotations

import json
import os
import time

import pytest
from streamlit.testing.v1 import AppTest

from persobench.generation.progress import ETA_AFTER_REPLIES, STARTING
from persobench.generation import GenerationConfig
from persobench.jobs import JobManager, JobStep, RunRequest
from tests.fakes import FakeLLMServer, error, reply
from tests.fakes.fixtures import OPENAI_SECRET


def wait_for(predicate, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError("timed out waiting")


def finished(jobs: JobManager, job_id: str):
    return wait_for(lambda: (s := jobs.status(job_id)) and not s.active and s)


# --- the runner's ETA ---------------------------------------------------------------------------------

def test_the_eta_waits_for_a_few_replies_and_ends_with_the_run(tmp_path, monkeypatch):
    from persobench.generation import run_generation

    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_SECRET)
    seen = []
    with FakeLLMServer("openai", latency=0.05) as server:
        run_generation(dataset="sample", model="openai:fake", base_url=server.base_url, limit=8, concurrency=1,
                       home=tmp_path / "home", progress=lambda info: seen.append(info))
    running = [info for info in seen if info.status == "running"]
    early = [info for info in running if info.done - info.cached < ETA_AFTER_REPLIES]
    assert early and all(info.eta is None for info in early)  # "ETA 0 s at 1 of 5" no more
    later = [info for info in running if info.done - info.cached >= ETA_AFTER_REPLIES and info.done < info.total]
    assert later and all(info.eta is not None and info.eta > 0 for info in later)
    assert seen[-1].status == "completed" and seen[-1].eta is None  # nothing left to estimate


# --- the states a job's steps show ------------------------------------------------------------------

def make_job(jobs: JobManager, job_id: str, steps: list[JobStep], **state) -> None:
    folder = jobs.job_dir(job_id)
    folder.mkdir(parents=True)
    (folder / "job.json").write_text(json.dumps({"title": job_id, "steps": [s.to_dict() for s in steps],
                                                 "created_at": "2026-12-03T00:00:00+00:00"}))
    (folder / "state.json").write_text(json.dumps(state))


def write_progress(run_dir, **fields) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    base = {"run_id": run_dir.name, "status": "running", "total": 5, "done": 0, "failed": 0, "cached": 0,
            "requests": 0, "elapsed": 1.0, "eta": None, "pid": os.getpid(), "note": "",
            "updated_at": "2026-12-03T00:00:05+00:00"}
    (run_dir / "progress.json").write_text(json.dumps({**base, **fields}))


def echo_step(run_id: str, label: str = "echo run") -> JobStep:
    return JobStep(label, RunRequest(config=GenerationConfig(dataset="sample", model="baseline:persona-echo")),
                   {"dataset": "sample", "model": "baseline:persona-echo", "mode": "vanilla"}, run_id=run_id)


def test_a_running_step_says_starting_then_running_and_shows_no_early_eta(tmp_path):
    from persobench.app.widgets import step_label

    home = tmp_path / "home"
    jobs = JobManager(home)
    make_job(jobs, "live", [echo_step("r-live"), echo_step("r-next", "second")], state="running", step=0)
    (jobs.job_dir("live") / "lock").write_text(f"{os.getpid()}\n")  # its runner: alive
    run_dir = home / "runs" / "r-live"
    run_dir.mkdir(parents=True)
    first, second = jobs.progress(jobs.status("live"))
    assert first["state"] == STARTING and second["state"] == "waiting"  # no progress.json yet: the model loads
    write_progress(run_dir, status="cancelled", pid=999_999_999)  # a file an earlier, dead attempt left
    assert jobs.progress(jobs.status("live"))[0]["state"] == STARTING
    write_progress(run_dir, done=0)
    row = jobs.progress(jobs.status("live"))[0]
    assert row["state"] == "running" and "waiting for the first reply" in step_label(row)
    write_progress(run_dir, done=1, eta=None)
    assert "ETA" not in step_label(jobs.progress(jobs.status("live"))[0])
    write_progress(run_dir, done=4, eta=12.0)
    assert "ETA 12 s" in step_label(jobs.progress(jobs.status("live"))[0])


def test_a_cancelled_job_reads_cancelled_not_waiting(tmp_path):
    home = tmp_path / "home"
    jobs = JobManager(home)
    make_job(jobs, "stopped", [echo_step("r-a"), echo_step("r-b", "second")], state="cancelled", step=0,
             finished_at="2026-12-03T00:01:00+00:00")
    write_progress(home / "runs" / "r-a", status="cancelled", done=2, pid=999_999_999)
    first, second = jobs.progress(jobs.status("stopped"))
    assert first["state"] == "cancelled" and second["state"] == "not run (cancelled)"


def card(home: str, job_id: str) -> None:
    from persobench.app.widgets import job_card
    from persobench.jobs import JobManager

    manager = JobManager(home)
    job_card(manager, manager.status(job_id))


def test_a_run_whose_every_reply_failed_is_not_a_success(tmp_path):
    """Its row says so, and its card warns instead of drawing a full bar."""
    from persobench.app.widgets import step_label

    home = tmp_path / "home"
    jobs = JobManager(home)
    make_job(jobs, "all-bad", [echo_step("r-bad")], state="completed", step=0,
             finished_at="2026-12-03T00:01:00+00:00")
    write_progress(home / "runs" / "r-bad", status="completed", done=5, failed=5, pid=999_999_999)
    [row] = jobs.progress(jobs.status("all-bad"))
    assert row["state"] == "done" and row["every_reply_failed"]
    assert "every reply failed (5 of 5)" in step_label(row)
    at = AppTest.from_function(card, args=(str(home), "all-bad"), default_timeout=30).run()
    assert not at.exception
    assert not [p for p in at.get("progress") if p.proto.value == 100]  # no full bar for it
    assert any("every reply failed" in w.value.replace("\\", "") for w in at.warning)


def test_the_card_of_a_finished_job_shows_local_times_and_links_to_its_results(tmp_path, monkeypatch):
    """On the New run page (the app's navigation knows the Leaderboard page the link opens)."""
    from tests.test_app import APP

    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        home = tmp_path / "home"
        monkeypatch.setenv("PERSOBENCH_HOME", str(home))
        jobs = JobManager(home)
        make_job(jobs, "ok", [echo_step("r-ok")], state="completed", step=0, run_ids=["r-ok"],
                 finished_at="2026-12-03T00:01:05+00:00")
        write_progress(home / "runs" / "r-ok", status="completed", done=5, failed=1, pid=999_999_999)
        at = AppTest.from_file(APP, default_timeout=120).run()
        at.switch_page("pages/new_run.py").run()
        assert not at.exception
        text = " ".join(str(m.value) for m in [*at.markdown, *at.caption]).replace("\\", "")  # Markdown escapes
        assert "2026-12-03T00:0" not in text  # no raw ISO UTC
        assert "2026-12-03 09:00:00" in text and "09:01:05" in text  # local time (UTC+9)
        assert "took 1 min 05 s" in text
        [link] = [element.proto for element in at.get("page_link")]
        assert link.page_script_hash and "Leaderboard" in link.label  # a page of the app's navigation
        assert link.query_string == "dataset=sample&mode=vanilla"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


# --- real jobs ------------------------------------------------------------------------------------------

def test_a_job_json_that_does_not_read_is_a_failed_card_with_its_line_and_no_resume(tmp_path):
    """A hand-edited (or newer) job.json: the card lists the job, says which file, step and field, offers
    Remove, not Resume."""
    home = tmp_path / "home"
    jobs = JobManager(home)
    make_job(jobs, "edited", [echo_step("r-edited")], state="failed", step=0)
    path = jobs.job_dir("edited") / "job.json"
    spec = json.loads(path.read_text())
    spec["steps"][0]["config"]["limit"] = -2
    path.write_text(json.dumps(spec))
    status = jobs.status("edited")
    assert status.state == "failed" and status.unreadable and not status.resumable
    assert status.message.startswith(f"{path}: step 1 (echo run): limit must be ") and "got -2" in status.message
    at = AppTest.from_function(card, args=(str(home), "edited"), default_timeout=30).run()
    assert not at.exception
    assert {b.key for b in at.button} == {"forget-edited"}
    assert any("step 1 (echo run): limit must be" in str(c.value).replace("\\", "") for c in at.caption)


def test_a_configuration_error_is_the_failed_cards_line_and_offers_no_resume(tmp_path):
    home = tmp_path / "home"
    jobs = JobManager(home)
    step = JobStep("bad model", RunRequest(config=GenerationConfig(dataset="sample", model="nosuchprovider:x", limit=1)))
    job_id, started = jobs.launch("bad", [step])
    assert started
    status = finished(jobs, job_id)
    assert status.state == "failed" and not status.resumable and status.configuration_error
    assert "unknown provider" in status.message and "status 2" not in status.message
    [row] = jobs.progress(status)
    assert row["state"].startswith("failed: ") and "unknown provider" in row["state"]
    at = AppTest.from_function(card, args=(str(home), job_id), default_timeout=30).run()
    assert not at.exception
    assert f"resume-{job_id}" not in {b.key for b in at.button}
    shown = " ".join(str(e.value) for e in [*at.error, *at.caption, *at.markdown])
    assert "unknown provider" in shown and "status 2" not in shown
    assert "launch it again" in shown  # what to do instead of Resume


def test_a_job_whose_requests_all_failed_says_why_and_can_be_resumed(tmp_path, monkeypatch):
    """The first requests all fail alike (HTTP 400): the run stops; the card says the error line; the
    server may be fixed, so Resume stays."""
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_SECRET)
    home = tmp_path / "home"
    jobs = JobManager(home)
    with FakeLLMServer("openai", script=lambda info: error(400, "invalid request: context too long")) as server:
        from persobench.jobs import LaunchChoice, launch_steps, plan_launch

        plans = plan_launch(home, [LaunchChoice("sample", "openai:fake", "vanilla", server.base_url)], limit=3)
        job_id, _ = jobs.launch("all fail", launch_steps(plans, limit=3, profile=None, concurrency=1))
        status = finished(jobs, job_id)
    assert status.state == "failed" and status.resumable and not status.configuration_error
    assert "status 2" not in status.message and "requests all failed" in status.message
    [row] = jobs.progress(status)
    assert row["state"].startswith("failed: ") and "HTTP 400" in row["state"]


def test_a_job_whose_replies_all_fail_to_parse_is_done_but_warns(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_SECRET)
    home = tmp_path / "home"
    jobs = JobManager(home)
    with FakeLLMServer("openai", script=lambda info: reply("not json at all")) as server:
        from persobench.jobs import LaunchChoice, launch_steps, plan_launch

        plans = plan_launch(home, [LaunchChoice("sample", "openai:fake", "vanilla", server.base_url)], limit=3)
        job_id, _ = jobs.launch("unparsed", launch_steps(plans, limit=3, profile=None, concurrency=1))
        status = finished(jobs, job_id)
    assert status.state == "completed"
    [row] = jobs.progress(status)
    assert row["state"] == "done" and row["every_reply_failed"] and row["failed"] == row["done"] == 3
    at = AppTest.from_function(card, args=(str(home), job_id), default_timeout=30).run()
    assert not at.exception and not [p for p in at.get("progress") if p.proto.value == 100]
    assert any("every reply failed (3 of 3)" in w.value.replace("\\", "") for w in at.warning)


# --- the command line ---------------------------------------------------------------------------------

@pytest.mark.parametrize("script, last", [(None, "done: 4/4 sample (100%)"),
                                          (lambda info: reply("not json"), "done, every reply failed: 4/4 sample")])
def test_the_cli_progress_line_starts_and_ends_honestly(tmp_path, monkeypatch, capsys, script, last):
    from persobench.cli import main

    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_SECRET)
    with FakeLLMServer("openai", script=script) as server:
        code = main(["--home", str(tmp_path / "home"), "run", "--dataset", "sample", "--model", "openai:fake",
                     "--base-url", server.base_url, "--limit", "4", "--concurrency", "1"])
    assert code == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert STARTING not in lines  # it started at once: nothing to wait for, nothing said
    assert lines[-1].startswith(last), lines


def test_the_cli_says_it_is_starting_when_the_first_progress_takes_a_while(capsys):
    """What a local model's loading looks like from the command line: nothing reported for a while."""
    from persobench.cli.generate import _ProgressBar
    from persobench.generation.progress import ProgressInfo

    slow = _ProgressBar(disabled=False, starting_after=0.05)
    time.sleep(0.5)
    slow.update(ProgressInfo(run_id="r", status="running", total=4, done=0, failed=0, cached=0, requests=0,
                             elapsed=0.5, eta=None, pid=os.getpid()))
    slow.close()
    assert capsys.readouterr().err.splitlines()[0] == STARTING
    quick = _ProgressBar(disabled=False, starting_after=0.3)
    quick.close()  # a one-line error ends it before then
    time.sleep(0.5)
    assert STARTING not in capsys.readouterr().err


def test_local_time_reads_stored_utc_in_the_viewers_zone():
    from persobench.jobs import local_time

    assert local_time("2026-12-03T00:00:00+00:00", "Asia/Tokyo") == "2026-12-03 09:00:00 JST"
    assert local_time("2026-12-03 00:00:00", "Europe/Paris") == "2026-12-03 01:00:00 CET"  # batches: UTC, no zone
    assert local_time("2026-07-01T12:00:00Z", "America/New_York") == "2026-07-01 08:00:00 EDT"
    assert local_time("not a time", "Asia/Tokyo") == "not a time"
    assert local_time("2026-12-03T00:00:00+00:00", "No/Such_Zone")  # an unknown zone: this machine's


def test_a_run_step_where_no_request_succeeded_says_so_in_one_line(tmp_path, monkeypatch):
    """Every request failed, each for another reason (so the run does not stop early): the step
    fails with the run's most common error, not "exited with status 3"."""
    import itertools

    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_SECRET)
    statuses = itertools.cycle([400, 404, 413])
    home = tmp_path / "home"
    jobs = JobManager(home)
    with FakeLLMServer("openai", script=lambda info: error(next(statuses), "no thanks")) as server:
        from persobench.jobs import LaunchChoice, launch_steps, plan_launch

        plans = plan_launch(home, [LaunchChoice("sample", "openai:fake", "vanilla", server.base_url)], limit=3)
        job_id, _ = jobs.launch("none", launch_steps(plans, limit=3, profile=None, concurrency=1))
        status = finished(jobs, job_id)
    assert status.state == "failed" and status.resumable, status.message
    [row] = jobs.progress(status)
    assert row["state"].startswith("failed: no reply arrived: all 3 request(s) failed, 1 with: "), row["state"]
    assert "status 3" not in status.message


@pytest.mark.browser
def test_job_cards_in_chromium_show_the_error_line_local_times_and_a_working_results_link(tmp_path_factory):
    """What a user sees on New run, in the browser's own time zone: a failed job's error line with no
    Resume, a finished job's local times and its link, which opens the Leaderboard on its dataset."""
    from playwright.sync_api import sync_playwright

    from tests.test_browser import CHROMIUM, streamlit_server

    home = tmp_path_factory.mktemp("job-cards") / "home"
    jobs = JobManager(home)
    make_job(jobs, "finished", [echo_step("r-ok")], state="completed", step=0, run_ids=["r-ok"],
             finished_at="2026-12-03T00:01:05+00:00")
    write_progress(home / "runs" / "r-ok", status="completed", done=5, failed=1, pid=999_999_999)
    make_job(jobs, "broken", [echo_step("r-broken", "bad model")], state="failed", step=0,
             finished_at="2026-12-03T00:00:02+00:00", step_errors={"0": "unknown provider 'nosuch'"},
             configuration_errors=[0], message="bad model: unknown provider 'nosuch'")
    with streamlit_server(tmp_path_factory, home) as server, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM),
                                             args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        try:
            page = browser.new_context(timezone_id="Asia/Tokyo", viewport={"width": 1400, "height": 1400}).new_page()
            page.goto(server["url"])
            page.wait_for_selector('[data-testid="stMainBlockContainer"] h1', timeout=60_000)
            page.locator('[data-testid="stSidebarNav"]').get_by_text("New run").click()  # as a user gets there
            page.get_by_text("Runs launched from the app").wait_for(timeout=60_000)
            # Both cards, each drawn as the page's script gets to it (the broken job's first, the newer):
            # the body is read once the last one is there, not as soon as the first one shows.
            page.get_by_text("bad model: failed: unknown provider").wait_for(timeout=60_000)
            page.get_by_text("(took 1 min 05 s)").wait_for(timeout=60_000)
            body = page.inner_text("body")
            assert "status 2" not in body and "2026-12-03T00" not in body
            assert "started 2026-12-03 09:00:00 JST" in body and "(took 1 min 05 s)" in body
            assert page.get_by_role("button", name="Resume").count() == 0
            assert "launch it again" in body
            link = page.get_by_role("link", name="Results on the Leaderboard · sample")
            assert "dataset=sample" in (link.get_attribute("href") or "")
            link.click()
            page.wait_for_url(lambda url: "dataset=sample" in url and "new-run" not in url, timeout=30_000)
            page.get_by_role("heading", name="Leaderboard").wait_for(timeout=60_000)
        finally:
            browser.close()
