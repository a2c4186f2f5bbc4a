"""``run --batch``: requests through the OpenAI Batch API and Anthropic Message Batches, against
fake batch servers speaking real HTTP on 127.0.0.1 (tests/fakes/batch_servers.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from persobench.llm.response_cache import ResponseCache
from persobench.cli import main
from persobench.llm.batch_driver import STATE_FILE, BatchState
from persobench.store.run_store import RunStore
from tests.fakes.batch_servers import FakeBatchServer
from tests.fakes.fixtures import ANTHROPIC_SECRET, OPENAI_SECRET

REPO = Path(__file__).resolve().parents[1]
MODELS = {"openai": "openai:gpt-4o-mini", "anthropic": "anthropic:claude-3-5-haiku-latest"}
N = 8


@pytest.fixture(autouse=True)
def _keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_SECRET)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_SECRET)


def _argv(home: Path, server: FakeBatchServer, *extra: str, limit: int = N) -> list[str]:
    return ["--home", str(home), "run", "--dataset", "sample", "--limit", str(limit),
            "--model", MODELS[server.flavour], "--base-url", server.base_url, "--batch", "--batch-poll", "0.05",
            "--no-progress", *extra]


def _run(home: Path) -> object:
    [run] = RunStore(home).runs()
    return run


def _state(run: object) -> BatchState:
    return BatchState.read(Path(run.path) / STATE_FILE, "")


def _keys_of(server: FakeBatchServer, batch_id: str, positions: slice = slice(None)) -> list[str]:
    """The prompts of a batch's lines (``positions`` of them): the same requests in two batches."""
    lines = server.batches[batch_id]["lines"][positions]
    return sorted(json.dumps((line.get("body") or line.get("params"))["messages"]) for line in lines)


@pytest.mark.parametrize("flavour", ["openai", "anthropic"])
def test_a_batch_answers_every_request_and_a_second_run_sends_nothing(tmp_path, capsys, flavour):
    with FakeBatchServer(flavour, finish_after=3) as server:
        assert main(_argv(tmp_path, server)) == 0
        captured = capsys.readouterr()
        err = captured.err
        run = _run(tmp_path)
        frame = run.read_table("generations")
        assert run.manifest.status == "completed" and len(frame) == N and (frame["status"] == "ok").all()
        assert len(server.created) == 1 and len(server.requests) == 0  # no interactive request at all
        assert sorted(server.custom_ids(server.created[0])) == sorted(set(server.custom_ids(server.created[0])))
        assert len(server.custom_ids(server.created[0])) == N
        assert f"batch {server.created[0]}: submitted {N} request(s)" in err
        assert "in_progress 0/8 done" in err and f"{N} replies cached" in err
        [entry] = _state(run).batches
        assert entry.batch_id == server.created[0] and entry.collected and entry.counts["succeeded"] == N
        record = run.manifest.extra["batch"]
        assert record["batch_ids"] == server.created and record["replies"] == N and record["prompt_tokens"] == 12 * N
        assert f"batch: {N} replies from {server.created[0]}" in captured.out
        # each custom id is the submission's token and the request's place in the state file's keys
        assert sorted(server.custom_ids(server.created[0])) == sorted(f"{entry.token}-{n}" for n in range(N))
        with ResponseCache(tmp_path / "responses") as cache:
            assert all(key in cache for key in entry.keys)
        # the same command again: everything is cached, nothing goes to either endpoint
        polls = server.polls
        assert main(_argv(tmp_path, server)) == 0
        assert len(server.created) == 1 and len(server.requests) == 0 and server.polls == polls


@pytest.mark.parametrize("flavour", ["openai", "anthropic"])
def test_lines_the_batch_failed_are_retried_as_ordinary_requests(tmp_path, capsys, flavour):
    with FakeBatchServer(flavour, fail=lambda custom_id, line: line % 2 == 0) as server:
        assert main(_argv(tmp_path, server)) == 0
        run = _run(tmp_path)
        frame = run.read_table("generations")
        assert run.manifest.status == "completed" and (frame["status"] == "ok").all() and len(frame) == N
        assert len(server.created) == 1
        assert len(server.requests) == N // 2  # exactly the failed half, one by one
        assert f"{N // 2} replies cached, {N // 2} failed" in capsys.readouterr().err
        # a batch line carries the same request body the interactive path sends
        batch = server.batches[server.created[0]]["lines"]
        sent = {json.dumps(r.body["messages"]) for r in server.requests}
        lines = [line.get("body") or line.get("params") for line in batch]
        twins = [body for body in lines if json.dumps(body["messages"]) in sent]
        assert len(twins) == N // 2
        interactive = next(r.body for r in server.requests if json.dumps(r.body["messages"]) == json.dumps(twins[0]["messages"]))
        for field in ("model", "messages", "temperature", "max_tokens", "system"):
            assert twins[0].get(field) == interactive.get(field), field


@pytest.mark.parametrize("flavour", ["openai", "anthropic"])
def test_a_batch_that_never_ends_exits_at_the_deadline_and_a_later_run_collects_it(tmp_path, capsys, flavour):
    with FakeBatchServer(flavour, finish_after=None) as server:
        started = time.monotonic()
        assert main(_argv(tmp_path, server, "--batch-wait", "0.5")) == 0
        assert time.monotonic() - started < 10
        err = capsys.readouterr().err
        assert "still running at the --batch-wait deadline" in err and "run the same command again" in err
        run = _run(tmp_path)
        assert run.manifest.status == "pending" and not run.has_table("generations")
        from persobench.generation import read_progress

        assert read_progress(run.path)["status"] == "pending"
        assert _state(run).batches[0].batch_id == server.created[0]
        # still not done: a second command only looks, never submits again
        assert main(_argv(tmp_path, server, "--batch-wait", "0")) == 0
        assert len(server.created) == 1
        server.release()
        assert main(_argv(tmp_path, server)) == 0
        run = _run(tmp_path)
        assert run.manifest.status == "completed" and (run.read_table("generations")["status"] == "ok").all()
        assert len(server.created) == 1 and len(server.requests) == 0


@pytest.mark.parametrize("flavour", ["openai", "anthropic"])
def test_an_expired_batch_is_resubmitted_once(tmp_path, capsys, flavour):
    with FakeBatchServer(flavour, expire=1) as server:
        assert main(_argv(tmp_path, server)) == 0
        assert len(server.created) == 2
        first, second = server.created
        assert _keys_of(server, second) == _keys_of(server, first, slice(0, None, 2))  # what the first left unanswered
        assert "again (the first batch expired or was cancelled)" in capsys.readouterr().err
        assert len(server.requests) == 0
        assert (_run(tmp_path).read_table("generations")["status"] == "ok").all()


def test_a_resubmission_that_expires_too_goes_out_as_ordinary_requests(tmp_path):
    with FakeBatchServer("openai", expire=5) as server:
        assert main(_argv(tmp_path, server)) == 0
        assert len(server.created) == 2  # resubmitted once, never twice
        second = server.custom_ids(server.created[1])
        assert len(server.requests) == len(second[0::2])  # what the second batch left unanswered
        assert (_run(tmp_path).read_table("generations")["status"] == "ok").all()


def test_a_killed_process_is_resumed_without_a_second_batch(tmp_path):
    with FakeBatchServer("openai", finish_after=None) as server:
        env = {**os.environ, "OPENAI_API_KEY": OPENAI_SECRET}
        command = [sys.executable, "-m", "persobench", *_argv(tmp_path, server)]
        proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        state_files = []
        while not (server.created and server.polls >= 2 and state_files):
            assert proc.poll() is None, proc.stderr.read().decode()[-800:]
            assert time.monotonic() < deadline
            state_files = list(tmp_path.glob(f"runs/*/{STATE_FILE}"))
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        [entry] = BatchState.read(state_files[0], "").batches
        assert entry.batch_id == server.created[0] and not entry.collected  # written before the waiting
        server.release()
        result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr[-800:]
        assert len(server.created) == 1 and server.uploads == 1 and len(server.requests) == 0
        run = _run(tmp_path)
        assert run.manifest.status == "completed" and (run.read_table("generations")["status"] == "ok").all()


@pytest.mark.parametrize("flavour", ["openai", "anthropic"])
def test_a_process_killed_between_submitting_and_recording_finds_its_batch(tmp_path, flavour):
    """The server took the batch but the process died before writing its id: the next command
    finds it (OpenAI by its metadata token, Anthropic by time and size) instead of submitting again."""
    from persobench.llm.batch_driver import BatchSettings, fill_cache
    from persobench.providers import parse_spec
    from persobench.providers.base import GenerationParams, Request
    from persobench.providers.batch_api import make_batch_backend

    with FakeBatchServer(flavour) as server:
        spec = parse_spec(MODELS[flavour], base_url=server.base_url)
        requests = {f"{i:064x}": Request(({"role": "user", "content": f"prompt {i}"},), GenerationParams())
                    for i in range(3)}
        backend = make_batch_backend(spec)
        real_submit = backend.submit

        def submit_then_die(batch, token):
            real_submit(batch, token)
            raise KeyboardInterrupt  # the process dies before the id is written

        backend.submit = submit_then_die
        state = tmp_path / STATE_FILE
        with ResponseCache(tmp_path / "responses") as cache:
            with pytest.raises(KeyboardInterrupt):
                fill_cache(backend, requests, cache=cache, state_path=state)
            [entry] = BatchState.read(state, "").batches
            assert entry.batch_id is None and sorted(entry.keys) == sorted(requests)
            outcome = fill_cache(make_batch_backend(spec), requests, cache=cache, state_path=state,
                                 settings=BatchSettings(poll=0.05))
            assert len(server.created) == 1 and outcome.answered == 3 and not outcome.waiting
            assert all(key in cache for key in requests)


@pytest.mark.parametrize("flavour", ["openai", "anthropic"])
def test_a_server_echoing_the_key_never_gets_it_stored(tmp_path, capsys, flavour):
    secret = OPENAI_SECRET if flavour == "openai" else ANTHROPIC_SECRET
    with FakeBatchServer(flavour, echo_key=True, fail=lambda custom_id, line: line == 0) as server:
        assert main(_argv(tmp_path, server)) == 0
        out = capsys.readouterr()
        assert server.created
    assert secret not in out.out + out.err
    leaked = [p for p in tmp_path.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert leaked == []
    frame = _run(tmp_path).read_table("generations")
    assert frame["raw_text"].str.contains("your key is ***", regex=False).sum() >= N - 1


def test_batch_with_a_provider_without_a_batch_api_is_one_line(tmp_path, capsys):
    assert main(["--home", str(tmp_path), "run", "--model", "baseline:reference", "--batch", "--limit", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --batch needs a provider with a batch API") and err.count("\n") == 1
    assert not list(tmp_path.glob("runs/*"))


def test_dry_run_shows_the_batch_cost_beside_the_interactive_cost(tmp_path, capsys):
    assert main(["--home", str(tmp_path), "run", "--model", "gpt-4o-mini", "--limit", "5", "--dry-run"]) == 0
    out = capsys.readouterr().out
    interactive = float(out.split("estimated cost: at most $")[1].split()[0])
    batch = float(out.split("estimated batch cost: at most $")[1].split()[0])
    assert interactive > 0 and batch == pytest.approx(interactive / 2, abs=1e-4)
    assert "add --batch" in out
    # a models file's batch prices win over the half price
    models = tmp_path / "models.toml"
    models.write_text('[models.cheap]\nspec = "openai:gpt-4o-mini"\nprice_input_per_mtok = 1.0\n'
                      'price_output_per_mtok = 1.0\nprice_batch_input_per_mtok = 0.1\nprice_batch_output_per_mtok = 0.1\n')
    assert main(["--home", str(tmp_path), "run", "--model", "cheap", "--models", str(models), "--limit", "5",
                 "--dry-run", "--batch"]) == 0
    out = capsys.readouterr().out
    interactive = float(out.split("estimated cost: at most $")[1].split()[0])
    batch = float(out.split("estimated batch cost: at most $")[1].split()[0])
    assert batch == pytest.approx(interactive / 10, abs=1e-4) and "this run: --batch" in out


def test_new_run_page_batch_checkbox_launches_a_batch_and_shows_its_state(tmp_path, monkeypatch):
    """The checkbox (key ``new_batch``) reaches the estimate (batch cost beside the interactive one)
    and the run step; the launched run goes through the batch API and the page shows the batch's
    state from the store."""
    from persobench.jobs import JobManager
    from tests.test_app import frame_by_columns, open_page, rendered_text, wait_for

    home = tmp_path / "home"
    monkeypatch.setenv("PERSOBENCH_HOME", str(home))
    monkeypatch.delenv("PERSOBENCH_MODELS", raising=False)
    with FakeBatchServer("openai") as server:
        monkeypatch.setenv("PERSOBENCH_KEY_HOSTS", server.base_url)
        at = open_page("pages/new_run.py")
        at.text_input(key="new_model_name").input("fake-batch").run()
        at.text_input(key="new_base_url").input(server.base_url).run()
        at.button(key="new_add_model").click().run()
        at.multiselect(key="new_models").set_value(["openai:fake-batch", "gpt-4o-mini", "baseline:reference"]).run()
        at.number_input(key="new_limit").set_value(3).run()
        at.selectbox(key="new_profile").set_value("(do not score)").run()
        assert not frame_by_columns(at, "model", "batch")["batch"].any()
        at.checkbox(key="new_batch").check().run()
        assert not at.exception
        estimate = frame_by_columns(at, "model", "batch", "batch_cost_usd").set_index("model")
        assert bool(estimate.loc["openai:fake-batch", "batch"]) and bool(estimate.loc["gpt-4o-mini", "batch"])
        assert not bool(estimate.loc["baseline:reference", "batch"])  # no batch API: ignored, not an error
        assert estimate.loc["gpt-4o-mini", "batch_cost_usd"] == pytest.approx(
            estimate.loc["gpt-4o-mini", "max_cost_usd"] / 2, abs=1e-6)
        at.multiselect(key="new_models").set_value(["openai:fake-batch", "baseline:reference"]).run()
        at.button(key="new_launch").click().run()
        assert not at.exception
        jobs = JobManager(home)
        job = wait_for(lambda: (s := jobs.jobs()) and not s[0].active and s[0])
        assert job.state == "completed", job.message
        assert [step.request.config.batch for step in job.steps] == [True, False]
        assert len(server.created) == 1 and len(server.requests) == 0
        at.run()
        shown = frame_by_columns(at, "batch_id", "state", "succeeded")
        row = shown[shown["batch_id"] == server.created[0]].iloc[0]
        assert row["state"] == "completed" and row["succeeded"] == 3 and bool(row["collected"])
        assert "Batches" in rendered_text(at) and OPENAI_SECRET not in rendered_text(at)


# --- score --judge ... --batch ---------------------------------------------------------------------


def _judge_args(home: Path, server: FakeBatchServer, *extra: str) -> list[str]:
    return ["--home", str(home), "score", "--metrics", "c_score", "--no-progress", "--judge", f"{server.flavour}:judge-model",
            "--judge-base-url", server.base_url, "--batch", "--batch-poll", "0.05", *extra]


def _judged_server(flavour: str = "openai", **kwargs) -> FakeBatchServer:
    from tests.fakes.judge import judge_script

    script = judge_script({}, default="entailment")
    return FakeBatchServer(flavour, answer=lambda info: script(info).text, script=script, **kwargs)


@pytest.mark.parametrize("flavour", ["openai", "anthropic"])
def test_the_judge_labels_through_one_batch_and_retries_its_failures_one_by_one(tmp_path, capsys, flavour):
    from tests.test_judge import _sample_run

    store, samples = _sample_run(tmp_path)
    with _judged_server(flavour, fail=lambda custom_id, line: line == 0) as server:
        assert main(_judge_args(tmp_path, server)) == 0
        captured = capsys.readouterr()
        assert len(server.created) == 1 and len(server.requests) == 1  # the failed line, one by one
        scores = store.get("sample__judge_test__vanilla").read_table("scores")
        assert len(scores) == len(samples) and (scores["value"] == 1.0).all()
        assert f"judge batch {server.created[0]}: submitted" in captured.err
        states = list((tmp_path / "batches").glob("judge-*.json"))
        assert len(states) == 1 and BatchState.read(states[0], "").batches[0].batch_id == server.created[0]
        # scored: the same command sends nothing more
        assert main(_judge_args(tmp_path, server)) == 0
        assert len(server.created) == 1 and len(server.requests) == 1


def test_a_judge_batch_past_its_deadline_is_collected_by_the_next_command(tmp_path, capsys):
    from tests.test_judge import _sample_run

    store, samples = _sample_run(tmp_path)
    with _judged_server(finish_after=None) as server:
        assert main(_judge_args(tmp_path, server, "--batch-wait", "0.3")) == 1  # pairs left without a label
        captured = capsys.readouterr()
        assert "unanswered" in captured.out and "in_progress" in captured.err
        assert len(server.created) == 1 and len(server.requests) == 0
        server.release()
        assert main(_judge_args(tmp_path, server)) == 0
        assert len(server.created) == 1 and len(server.requests) == 0
        scores = store.get("sample__judge_test__vanilla").read_table("scores")
        assert len(scores) == len(samples) and (scores["value"] == 1.0).all()


def test_judge_dry_run_shows_the_batch_cost(tmp_path, capsys):
    from tests.test_judge import _sample_run

    _sample_run(tmp_path)
    assert main(["--home", str(tmp_path), "score", "--metrics", "c_score", "--judge", "gpt-4o-mini", "--dry-run"]) == 0
    out = capsys.readouterr().out
    full = float(out.split("estimated cost at most $")[1].split()[0])
    batch = float(out.split("estimated batch cost: at most $")[1].split()[0])
    assert full > 0 and batch == pytest.approx(full / 2, abs=1e-4)


@pytest.mark.parametrize("flavour", ["openai", "anthropic"])
def test_a_batch_whose_creation_answer_was_lost_is_found_not_submitted_again(tmp_path, capsys, flavour):
    """The server created the batch but the answer never came (HTTP 502): the creation is not
    retried blindly; the command stops in one line and the next one finds the batch by its token."""
    with FakeBatchServer(flavour, lost_answers=1) as server:
        assert main(_argv(tmp_path, server)) == 2
        err = capsys.readouterr().err
        assert "the batch API failed" in err and err.count("\n") == 1
        assert len(server.created) == 1
        assert main(_argv(tmp_path, server)) == 0
        assert "found again after an interrupted submission" in capsys.readouterr().err
        assert len(server.created) == 1 and len(server.requests) == 0
        assert (_run(tmp_path).read_table("generations")["status"] == "ok").all()


def test_bad_batch_numbers_are_one_line_before_anything_is_sent(tmp_path, capsys):
    with FakeBatchServer("openai") as server:
        for flags, line in ((("--batch-poll", "0"), "batch_poll must be a finite number > 0 (seconds), got 0"),
                            (("--batch-wait", "-1"), "batch_wait must be a finite number >= 0 (seconds), got -1")):
            assert main(_argv(tmp_path, server, *flags)) == 2
            assert capsys.readouterr().err == f"error: {line} ({flags[0]})\n"  # the field table's line
        assert main(_judge_args(tmp_path, server, "--batch-poll", "-3")) == 2
        assert capsys.readouterr().err == "error: batch_poll must be a finite number > 0 (seconds), got -3 (--batch-poll)\n"
        assert server.created == [] and not list(tmp_path.glob("runs/*"))


def test_an_anthropic_results_url_on_another_host_is_never_followed(tmp_path):
    """The key travels with the results request: a results URL pointing elsewhere is replaced by
    the API's own results path."""
    from persobench.providers import parse_spec
    from persobench.providers.batch_api import make_batch_backend

    with FakeBatchServer("anthropic") as server, FakeBatchServer("anthropic") as elsewhere:
        backend = make_batch_backend(parse_spec(MODELS["anthropic"], base_url=server.base_url))
        assert backend._results_url(f"{elsewhere.url}/v1/messages/batches/x/results", "x") == \
            "/messages/batches/x/results"
        own = f"{server.url}/v1/messages/batches/x/results"
        assert backend._results_url(own, "x") == own
        backend.close()


def test_more_requests_than_a_batch_holds_are_split(tmp_path):
    from persobench.llm.batch_driver import BatchSettings, fill_cache
    from persobench.providers import parse_spec
    from persobench.providers.base import GenerationParams, Request
    from persobench.providers.batch_api import make_batch_backend

    with FakeBatchServer("openai") as server:
        backend = make_batch_backend(parse_spec(MODELS["openai"], base_url=server.base_url))
        backend.max_requests = 2
        requests = {f"{i:064x}": Request(({"role": "user", "content": f"p{i}"},), GenerationParams()) for i in range(5)}
        with ResponseCache(tmp_path / "responses") as cache:
            outcome = fill_cache(backend, requests, cache=cache, state_path=tmp_path / STATE_FILE,
                                 settings=BatchSettings(poll=0.05))
            assert [len(server.custom_ids(b)) for b in server.created] == [2, 2, 1]
            assert outcome.answered == 5 and outcome.submitted == 3 and all(k in cache for k in requests)


def test_ids_and_words_from_the_server_are_checked_and_escaped():
    from persobench.errors import ProviderError
    from persobench.providers.batch_api import safe_id, scrubbed_text

    assert safe_id("batch_abc-1.2:3") == "batch_abc-1.2:3"
    for bad in ("../../files/x", "batch\x1b[31m", "", "a b"):
        with pytest.raises(ProviderError, match="unusable batch id"):
            safe_id(bad)
    assert scrubbed_text("done\x1b[2J key sk-abcdef123456", ["sk-abcdef123456"]) == "done\\x1b[2J key ***"


def test_a_run_without_batch_never_pays_again_for_a_batch_still_running(tmp_path, capsys):
    """`run` without --batch on a run whose batch is still running refuses in one line (instead of
    sending every request a second time); once the batch has ended it collects it like --batch."""
    with FakeBatchServer("openai", finish_after=None) as server:
        assert main(_argv(tmp_path, server, "--batch-wait", "0")) == 0
        plain = [a for a in _argv(tmp_path, server) if a not in ("--batch", "--batch-poll", "0.05")]
        capsys.readouterr()
        assert main(plain) == 2
        err = capsys.readouterr().err
        [line] = [line for line in err.splitlines() if line.startswith("error:")]
        assert "is still running" in line and "add --batch" in line
        assert len(server.requests) == 0 and len(server.created) == 1
        server.release()
        assert main(plain) == 0
        assert len(server.requests) == 0 and len(server.created) == 1
        assert (_run(tmp_path).read_table("generations")["status"] == "ok").all()


def test_a_batch_reply_over_the_size_cap_is_not_cached(tmp_path, capsys):
    with FakeBatchServer("openai", answer=lambda info: "x" * 5000) as server:
        assert main(_argv(tmp_path, server, "--max-reply-bytes", "1000")) == 0
        assert f"0 replies cached, {N} failed" in capsys.readouterr().err
        assert len(server.requests) == N  # each sent again on its own, under the same cap
    with ResponseCache(tmp_path / "responses") as cache:
        assert all(len(cache.get(key)[0].text) < 1000 for key in _state(_run(tmp_path)).batches[0].keys)


def test_status_requests_are_retried_on_a_passing_server_error(tmp_path):
    with FakeBatchServer("anthropic", finish_after=2) as server:
        server.status_errors = 2
        assert main(_argv(tmp_path, server)) == 0
        assert server.status_errors == 0 and len(server.created) == 1 and len(server.requests) == 0
        assert (_run(tmp_path).read_table("generations")["status"] == "ok").all()


def test_a_server_without_a_batch_api_stops_in_one_line_and_leaves_nothing_to_look_for(tmp_path, capsys):
    """A plain OpenAI-compatible server (no /v1/files): one line; the state keeps no half
    submission, so the same run without --batch goes out one request at a time."""
    from tests.fakes import FakeLLMServer

    with FakeLLMServer("openai") as server:
        argv = ["--home", str(tmp_path), "run", "--limit", "3", "--model", "openai:fake", "--base-url",
                server.base_url, "--no-progress"]
        assert main([*argv, "--batch"]) == 2
        [line] = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error:")]
        assert "the batch API failed" in line and "404" in line
        [state] = tmp_path.glob(f"runs/*/{STATE_FILE}")
        assert BatchState.read(state, "").batches == []
        assert main(argv) == 0 and len(server.requests) == 3


def test_the_batches_command_lists_run_and_judge_batches_from_the_store(tmp_path, capfd):
    from tests.test_judge import _sample_run

    _sample_run(tmp_path)
    with FakeBatchServer("openai", finish_after=None) as server:
        assert main(_argv(tmp_path, server, "--batch-wait", "0")) == 0
    with _judged_server(finish_after=None) as judge:
        assert main(_judge_args(tmp_path, judge, "--batch-wait", "0")) == 1
    capfd.readouterr()
    assert main(["--home", str(tmp_path), "batches", "--format", "json"]) == 0
    rows = json.loads(capfd.readouterr().out)
    assert [(r["batch_id"], r["state"], r["collected"]) for r in rows] == [
        (server.created[0], "in_progress", False), (judge.created[0], "in_progress", False)]
    pending = next(r.run_id for r in RunStore(tmp_path).runs() if r.manifest.status == "pending")
    assert rows[0]["run_id"] == pending and rows[1]["run_id"].startswith("(judge) judge-")
    assert rows[0]["requests"] == N and rows[0]["succeeded"] == 0
    assert main(["--home", str(tmp_path), "batches"]) == 0
    text = capfd.readouterr().out
    assert text.splitlines()[0].split()[:4] == ["run_id", "provider", "batch_id", "state"]
    assert server.created[0] in text and OPENAI_SECRET not in text


def test_sigterm_while_waiting_cancels_cleanly_and_the_batch_is_collected_later(tmp_path):
    with FakeBatchServer("anthropic", finish_after=None) as server:
        env = {**os.environ, "ANTHROPIC_API_KEY": ANTHROPIC_SECRET}
        command = [sys.executable, "-m", "persobench", *_argv(tmp_path, server)]
        proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while server.polls < 2:
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 1 and "cancelled while waiting" in err and "Traceback" not in err
        assert _run(tmp_path).manifest.status == "cancelled"
        server.release()
        result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr[-800:]
        assert len(server.created) == 1 and len(server.requests) == 0
        assert _run(tmp_path).manifest.status == "completed"


# --- what a run that used a batch cost ----------------------------------------------------------------


def _priced(home: Path, server: FakeBatchServer, *extra: str) -> list[str]:
    """``run --batch`` of a models-file model whose interactive and batch prices differ tenfold."""
    models = home / "models.toml"
    models.write_text(f'[models.priced]\nspec = "{MODELS[server.flavour]}"\nprice_input_per_mtok = 1000.0\n'
                      'price_output_per_mtok = 1000.0\nprice_batch_input_per_mtok = 100.0\n'
                      'price_batch_output_per_mtok = 100.0\n', encoding="utf-8")
    argv = _argv(home, server, "--models", str(models), *extra)
    argv[argv.index("--model") + 1] = "priced"
    return argv


@pytest.mark.parametrize("flavour", ["openai", "anthropic"])
def test_the_run_cost_prices_what_the_batch_answered_at_batch_prices(tmp_path, capsys, flavour):
    with FakeBatchServer(flavour, fail=lambda custom_id, line: line % 2 == 0) as server:
        assert main(_priced(tmp_path, server)) == 0
        out = capsys.readouterr().out
        run = _run(tmp_path)
        frame = run.read_table("generations")
        assert len(server.requests) == N // 2 and frame["cached"].sum() == N // 2  # the batch answered half
        # By hand: USD per token is 1e-4 through the batch, 1e-3 for the half sent one by one.
        by_batch, by_hand = frame[frame["cached"]], frame[~frame["cached"]]
        expected = (1e-4 * (by_batch["prompt_tokens"].sum() + by_batch["completion_tokens"].sum())
                    + 1e-3 * (by_hand["prompt_tokens"].sum() + by_hand["completion_tokens"].sum()))
        assert run.manifest.details.cost_usd == pytest.approx(expected, abs=1e-6)
        assert run.manifest.extra["batch"]["cost_usd"] == pytest.approx(
            1e-4 * (by_batch["prompt_tokens"].sum() + by_batch["completion_tokens"].sum()), abs=1e-6)
        assert f"est. cost: ${expected:.4f}" in out
        assert f"at batch prices: ${run.manifest.extra['batch']['cost_usd']:.4f} (part of est. cost above)" in out
        # the same command again: every reply is cached now, each still priced as it was answered
        assert main(_priced(tmp_path, server)) == 0
        assert len(server.requests) == N // 2 and len(server.created) == 1
        assert _run(tmp_path).manifest.details.cost_usd == pytest.approx(expected, abs=1e-6)


def test_runs_tells_how_to_collect_a_pending_batch(tmp_path, capsys):
    data = tmp_path / "red\x1b[31m.jsonl"  # a control character reaches the command the hint prints
    data.write_text("".join(json.dumps({"personas": f"[Responder persona]: i like tea number {i}",
                                        "context": "User1: tea?", "act_response": "User2: yes please"}) + "\n"
                            for i in range(N)), encoding="utf-8")
    with FakeBatchServer("openai", finish_after=None) as server:
        argv = _argv(tmp_path, server, "--batch-wait", "0")
        argv[argv.index("--dataset") + 1] = str(data)
        assert main(argv) == 0
        run = _run(tmp_path)
        assert run.manifest.status == "pending"
        capsys.readouterr()
        assert main(["--home", str(tmp_path), "runs"]) == 0
        out = capsys.readouterr().out
        assert "\x1b" not in out
        [hint] = [line for line in out.splitlines() if line.startswith("  ")]
        assert hint.startswith(f"  batch pending: {N} request(s) waiting on the provider; run the same command "
                               "again to collect it (nothing is submitted twice): python -m persobench")
        assert " --batch" in hint and "--base-url " + server.base_url in hint and "red\\u001b[31m.jsonl" in hint
        assert main(["--home", str(tmp_path), "runs", "--format", "json"]) == 0
        [listed] = json.loads(capsys.readouterr().out)["runs"]
        assert listed["status"] == "pending" and listed["batch_pending"] == N
        assert listed["collect_command"].startswith("python -m persobench") and str(data) in listed["collect_command"]
        # once collected, the hint is gone
        server.release()
        assert main(argv) == 0
        capsys.readouterr()
        assert main(["--home", str(tmp_path), "runs"]) == 0
        out = capsys.readouterr().out
        assert " completed " in out and "batch pending" not in out


# --- the judge's batch setting in the app and in job.json ---------------------------------------------


def test_a_judges_batch_setting_survives_job_json_and_old_ones_still_load(tmp_path):
    from persobench.llm.batch_driver import BatchSettings
    from persobench.config import JudgeConfig
    from persobench.metrics.judge.judge_config import JUDGE_FLAGS, Judge, make_judge
    from persobench.scoring.score_config import ScoreConfig

    judge = make_judge("openai:gpt-4o-mini", home=tmp_path, batch=BatchSettings(wait=5.0, poll=2.0))
    stored = json.loads(json.dumps(ScoreConfig(judge=judge).to_dict()))  # what job.json holds
    assert stored["judge"]["batch"] is True and stored["judge"]["batch_wait"] == 5.0
    assert set(stored["judge"]) == set(JudgeConfig.model_fields)  # the judge's field table, typed
    assert JUDGE_FLAGS["batch"] == "--batch" and JUDGE_FLAGS["batch_wait"] == "--batch-wait"
    back = ScoreConfig.from_dict(stored, home=tmp_path).judge
    assert back.batch == BatchSettings(wait=5.0, poll=2.0) and back.to_dict() == judge.to_dict()
    plain = Judge.from_dict(make_judge("openai:gpt-4o-mini", home=tmp_path).to_dict(), home=tmp_path)
    assert plain.batch is None and plain.to_dict()["batch"] is False
    # job.json files written before the setting (and before the typed judge) load without a batch
    old = {"profile": "offline", "metrics": ["c_score"], "judge": {"model": "openai:gpt-4o-mini", "base_url": None,
                                                                   "concurrency": 8, "max_cost": None}}
    assert ScoreConfig.from_dict(old, home=tmp_path).judge.batch is None
    with pytest.raises(Exception, match="batch"):
        Judge.from_dict({"model": "openai:gpt-4o-mini", "batch": "yes"}, home=tmp_path)
    with pytest.raises(Exception, match="batch API"):
        Judge.from_dict({"model": "local:smollm2", "batch": True}, home=tmp_path)


def test_metrics_page_judge_batch_checkbox_launches_the_judge_through_one_batch(tmp_path, monkeypatch):
    """The judge form's *Batch API* checkbox (key ``metrics_judge_batch``) reaches the estimate, the
    JudgeConfig and the job's stored score step; the job labels every pair through one batch."""
    from persobench.jobs import JobManager
    from tests.test_app import open_page, rendered_text, wait_for
    from tests.test_judge import _sample_run

    home = tmp_path / "home"
    monkeypatch.setenv("PERSOBENCH_HOME", str(home))
    monkeypatch.delenv("PERSOBENCH_MODELS", raising=False)
    store, samples = _sample_run(home)
    with _judged_server() as server:
        monkeypatch.setenv("PERSOBENCH_KEY_HOSTS", server.base_url)
        at = open_page("pages/metrics.py")
        at.toggle(key="metrics_judge_on").set_value(True).run()
        at.text_input(key="metrics_judge_model").input("openai:judge-model").run()
        at.text_input(key="metrics_judge_base_url").input(server.base_url).run()
        at.toggle(key="metrics_judge_estimate").set_value(True).run()
        assert "Batch API" not in " ".join(str(c.value) for c in at.caption)
        at.checkbox(key="metrics_judge_batch").check().run()
        assert not at.exception
        caption = next(str(c.value) for c in at.caption if str(c.value).startswith("LLM judge:"))
        assert "through the Batch API" in caption
        at.button(key="metrics_judge_launch").click().run()
        assert not at.exception
        jobs = JobManager(home)
        job = wait_for(lambda: (s := jobs.jobs()) and not s[0].active and s[0], timeout=180)
        assert job.state == "completed", job.message
        assert job.steps[-1].request.judge.batch is True
        assert len(server.created) == 1 and len(server.requests) == 0  # every pair through the one batch
        scores = store.get("sample__judge_test__vanilla").read_table("scores")
        judged = scores[scores["metric"] == "c_score"]
        assert len(judged) == len(samples) and (judged["value"] == 1.0).all()
        assert OPENAI_SECRET not in rendered_text(at)
        # a judge whose provider has no batch API: one warning, nothing to launch
        at.text_input(key="metrics_judge_model").input("local:smollm2").run()
        assert any("batch API" in str(w.value) for w in at.warning) and not at.exception
    # the New run page's scoring step has the same form, so the same checkbox
    at = open_page("pages/new_run.py")
    at.toggle(key="new_judge_on").set_value(True).run()
    assert at.checkbox(key="new_judge_batch").label == "Batch API" and not at.exception


# ---------------------------------------------------------------------------------------------
# Hardening, fourth round (issue 39): files and inputs


#: Characters ``str.splitlines`` breaks on that JSON allows raw inside a string.
NOT_LINE_BREAKS = "\u2028\u2029\u0085"


def test_batch_output_lines_holding_a_raw_line_separator_are_read_whole():
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from persobench.providers.batch_api import HttpClient

    lines = [{"custom_id": "k1", "response": {"body": {"text": f"a{NOT_LINE_BREAKS}b"}}}, {"custom_id": "k2"}]
    body = ("\n".join(json.dumps(line, ensure_ascii=False) for line in lines) + "\n").encode("utf-8")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "application/jsonl")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = HttpClient(f"http://127.0.0.1:{server.server_address[1]}", {})
        assert client.lines("/files/f1/content") == lines
        # the first record alone (Anthropic recovery reads its custom id), streamed: whole too
        assert client.first_line("/files/f1/content") == lines[0]
        client.close()
    finally:
        server.shutdown()
        server.server_close()
