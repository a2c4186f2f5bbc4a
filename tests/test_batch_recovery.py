"""Batch outputs that lie and batch state that is damaged (issue 39, items 4-7, 13, 14): against the
fake batch servers on 127.0.0.1 (tests/fakes/batch_servers.py), shaped as the OpenAI Batch API and
Anthropic Message Batches document their objects and result lines."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from persobench.cli import main
from persobench.llm.batch_driver import STATE_FILE, BatchSettings, BatchState, fill_cache
from persobench.llm.response_cache import ResponseCache
from persobench.providers import parse_spec
from persobench.providers.base import GenerationParams, Request
from persobench.providers.batch_api import make_batch_backend
from persobench.store.run_store import RunStore
from tests.fakes.batch_servers import WRONG_TEXT, FakeBatchServer
from tests.fakes.fixtures import ANTHROPIC_SECRET, OPENAI_SECRET
from tests.test_batch import MODELS, N, _argv, _judge_args, _judged_server, _keys_of, _run, _state

FLAVOURS = ["openai", "anthropic"]


@pytest.fixture(autouse=True)
def _keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_SECRET)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_SECRET)


def _requests(tag: str, n: int = 3) -> dict[str, Request]:
    return {f"{tag}{i:063x}"[-64:]: Request(({"role": "user", "content": f"{tag} prompt {i}"},), GenerationParams())
            for i in range(n)}


def _error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


# --- item 4: a custom_id the output repeats -------------------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_repeated_custom_id_uses_neither_line_and_sends_that_sample_again(tmp_path, capsys, flavour):
    with FakeBatchServer(flavour, repeat=lambda custom_id, line: line in (1, 4)) as server:
        assert main(_argv(tmp_path, server)) == 0
        err = capsys.readouterr().err
        frame = _run(tmp_path).read_table("generations")
        assert (frame["status"] == "ok").all() and len(frame) == N
        assert not frame["raw_text"].str.contains("WRONG REPLY", regex=False).any()
        assert len(server.requests) == 2  # exactly the two repeated samples, sent again
        assert "2 repeated custom_id" in err and f"{N - 2} replies cached" in err
        keys = json.loads((Path(_run(tmp_path).path) / "resume.json").read_text())["keys"]
        with ResponseCache(tmp_path / "responses") as cache:
            assert [cache.get(key)[0].text for key in keys].count(WRONG_TEXT) == 0


# --- item 5: OpenAI's documented expiry lines in the error file -------------------------------------------


@pytest.mark.parametrize("outcome", ["expire", "cancel"])
def test_openai_expired_or_cancelled_lines_in_the_error_file_are_resubmitted_once_as_a_batch(tmp_path, capsys,
                                                                                               outcome):
    with FakeBatchServer("openai", expiry_form="error_file", **{outcome: 1}) as server:
        assert main(_argv(tmp_path, server)) == 0
        assert len(server.created) == 2
        first, second = server.created  # exactly the lines the error file called unanswered
        assert _keys_of(server, second) == _keys_of(server, first, slice(0, None, 2))
        assert len(server.requests) == 0  # nothing at full price
        assert "again" in capsys.readouterr().err
        assert (_run(tmp_path).read_table("generations")["status"] == "ok").all()


def test_anthropic_canceled_lines_are_resubmitted_once_as_a_batch(tmp_path):
    with FakeBatchServer("anthropic", cancel=1) as server:
        assert main(_argv(tmp_path, server)) == 0
        assert len(server.created) == 2 and len(server.requests) == 0
        first, second = server.created
        assert _keys_of(server, second) == _keys_of(server, first, slice(0, None, 2))


# --- item 6: recovery by the run's own identifier, never by size or time ----------------------------------


def _other_run_batch(server: FakeBatchServer, tmp_path: Path, n: int, tag: str = "f") -> str:
    """Another run's batch of ``n`` requests, submitted just now (its own state file and cache)."""
    backend = make_batch_backend(parse_spec(MODELS[server.flavour], base_url=server.base_url))
    with ResponseCache(tmp_path / "other-responses") as cache:
        fill_cache(backend, _requests(tag, n), cache=cache, state_path=tmp_path / f"other-{tag}.json",
                   settings=BatchSettings(wait=0, poll=0.05))
    return server.created[-1]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_lost_creation_answer_is_recovered_beside_another_runs_batch_of_the_same_size(tmp_path, capsys, flavour):
    """Another run submitted a batch of the same size seconds before: the restart neither submits a
    second batch nor adopts the other one; it finds its own by the identifier it wrote into it."""
    home = tmp_path / "home"
    with FakeBatchServer(flavour, finish_after=None) as server:
        other = _other_run_batch(server, tmp_path, N)
        server.lost_answers = 2  # our creation (the second) is carried out, its answer lost
        assert main(_argv(home, server)) == 2
        assert "the batch API failed" in _error_line(capsys.readouterr().err)
        ours = server.created[-1]
        assert len(server.created) == 2
        # both still running: not told apart yet, nothing submitted, nothing adopted
        assert main(_argv(home, server, "--batch-wait", "0")) == 0
        assert len(server.created) == 2 and len(server.requests) == 0
        server.release()
        assert main(_argv(home, server)) == 0
        assert len(server.created) == 2 and len(server.requests) == 0
        run = _run(home)
        assert [b.batch_id for b in _state(run).batches] == [ours]
        assert (run.read_table("generations")["status"] == "ok").all()
        assert run.manifest.extra["batch"]["batch_ids"] == [ours] and other != ours


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_submission_that_never_arrived_never_adopts_another_runs_batch(tmp_path, flavour):
    with FakeBatchServer(flavour) as server:
        mine = _requests("a", 3)
        spec = parse_spec(MODELS[flavour], base_url=server.base_url)
        backend = make_batch_backend(spec)

        def die_before_sending(batch, token):
            raise KeyboardInterrupt  # killed after the token was recorded, before the request left

        backend.submit = die_before_sending
        state = tmp_path / STATE_FILE
        with ResponseCache(tmp_path / "responses") as cache:
            with pytest.raises(KeyboardInterrupt):
                fill_cache(backend, mine, cache=cache, state_path=state)
            other = _other_run_batch(server, tmp_path, 3)  # same size, within the minute
            with ResponseCache(tmp_path / "other-responses") as other_cache:  # the other run collects its own
                fill_cache(make_batch_backend(spec), _requests("f", 3), cache=other_cache,
                           state_path=tmp_path / "other-f.json", settings=BatchSettings(poll=0.05))
            outcome = fill_cache(make_batch_backend(spec), mine, cache=cache, state_path=state,
                                 settings=BatchSettings(poll=0.05))
            [entry] = BatchState.read(state, "").batches
            assert entry.batch_id != other and len(server.created) == 2
            assert outcome.answered == 3 and all(key in cache for key in mine)


def test_recovery_reads_past_the_first_page_of_batches(tmp_path, capsys):
    home = tmp_path / "home"
    with FakeBatchServer("openai", finish_after=None, page_size=2, lost_answers=1) as server:
        assert main(_argv(home, server)) == 2
        capsys.readouterr()
        for tag in "bcd":  # newer batches push ours to the second page
            _other_run_batch(server, tmp_path, 2, tag)
        server.release()
        assert main(_argv(home, server)) == 0
        assert "found again" in capsys.readouterr().err
        assert len(server.created) == 4 and len(server.requests) == 0


# --- item 7: a batch that failed as a whole stops and asks -------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_failed_batch_stops_with_the_command_that_sends_interactively(tmp_path, capsys, flavour):
    kwargs = {"fail_batch": 1} if flavour == "openai" else {"fail": lambda custom_id, line: True}
    with FakeBatchServer(flavour, **kwargs) as server:
        assert main(_argv(tmp_path, server)) == 2
        line = _error_line(capsys.readouterr().err)
        assert len(server.requests) == 0  # nothing at full price without asking
        assert server.created[0] in line and "failed" in line
        if flavour == "openai":
            assert "does not exist" in line  # the provider's reason
        command = line.split("send them one by one at full price: ")[1].split(" (")[0]
        argv = shlex.split(command)
        assert argv[:3] == ["python", "-m", "persobench"] and "--batch" in argv
        assert argv[argv.index("--batch-fallback") + 1] == "interactive"
        assert _run(tmp_path).manifest.status == "failed"
        # the same command again still stops (nothing paid meanwhile) ...
        assert main(_argv(tmp_path, server)) == 2
        assert len(server.requests) == 0 and len(server.created) == 1
        # ... and the printed one sends them
        assert main(argv[3:]) == 0
        assert len(server.requests) == N and len(server.created) == 1
        assert (_run(tmp_path).read_table("generations")["status"] == "ok").all()


def test_a_failed_judge_batch_stops_with_the_command_that_sends_interactively(tmp_path, capsys):
    from tests.test_judge import _sample_run

    store, samples = _sample_run(tmp_path)
    with _judged_server(fail_batch=1) as server:
        assert main(_judge_args(tmp_path, server)) == 2
        line = _error_line(capsys.readouterr().err)
        assert len(server.requests) == 0 and server.created[0] in line and "does not exist" in line
        command = line.split("send them one by one at full price: ")[1]
        argv = shlex.split(command)
        assert argv[:3] == ["python", "-m", "persobench"] and "score" in argv
        assert argv[-2:] == ["--batch-fallback", "interactive"]
        assert main(argv[3:]) == 0
        assert len(server.requests) == len(samples) and len(server.created) == 1
        scores = store.get("sample__judge_test__vanilla").read_table("scores")
        assert len(scores) == len(samples) and (scores["value"] == 1.0).all()


def test_batch_fallback_is_a_flag_of_run_and_of_the_judge_and_survives_job_json(tmp_path, capsys):
    from persobench.metrics.judge.judge_config import Judge, make_judge

    for argv in (["run", "--help"], ["score", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
        assert "--batch-fallback" in capsys.readouterr().out
    judge = make_judge("openai:gpt-4o-mini", home=tmp_path, batch=BatchSettings(fallback="interactive"))
    stored = json.loads(json.dumps(judge.to_dict()))
    assert stored["batch_fallback"] == "interactive"
    assert Judge.from_dict(stored, home=tmp_path).batch.fallback == "interactive"
    with pytest.raises(Exception, match="--batch-fallback"):
        BatchSettings(fallback="maybe")


# --- item 13: a damaged batch.json ------------------------------------------------------------------------

DAMAGED = {
    "keys-not-a-list": {"version": 1, "provider": "openai", "batches": [{"token": "t", "keys": 5, "submitted_at": 1}]},
    "huge-time": {"version": 1, "provider": "openai", "batches": [{"token": "t", "keys": [], "submitted_at": 1e300}]},
    "string-time": {"version": 1, "provider": "openai", "batches": [{"token": "t", "keys": [], "submitted_at": "x"}]},
    "counts-a-list": {"version": 1, "provider": "openai",
                      "batches": [{"token": "t", "keys": [], "submitted_at": 1, "counts": [1]}]},
    "a-list": [],
    "nan-time": '{"version": 1, "provider": "openai", "batches": [{"token": "t", "keys": [], "submitted_at": NaN}]}',
    "not-utf8": b"\xff\xfe",
}


@pytest.mark.parametrize("damage", sorted(DAMAGED))
def test_a_damaged_batch_state_is_one_line_naming_it_and_the_other_runs_are_listed(tmp_path, capfd, damage):
    with FakeBatchServer("openai", finish_after=None) as server:
        assert main(_argv(tmp_path, server, "--batch-wait", "0")) == 0
        assert main(_argv(tmp_path, server, "--batch-wait", "0", limit=3)) == 0
    runs = RunStore(tmp_path).runs()
    damaged, kept = sorted(runs, key=lambda r: len(r.manifest.sample_ids))
    path = Path(damaged.path) / STATE_FILE
    content = DAMAGED[damage]
    path.write_bytes(content if isinstance(content, bytes) else
                     (content if isinstance(content, str) else json.dumps(content)).encode())
    capfd.readouterr()
    assert main(["--home", str(tmp_path), "batches"]) == 0
    out, err = capfd.readouterr()
    assert "Traceback" not in err and server.created[0] in out and server.created[1] not in out
    [line] = [x for x in err.splitlines() if str(path) in x]
    assert len(err.strip().splitlines()) == 1 and "batch" in line
    assert main(["--home", str(tmp_path), "runs"]) == 0
    out, err = capfd.readouterr()
    assert "Traceback" not in err and kept.run_id in out and damaged.run_id in out
    assert sum(str(path) in x for x in (out + err).splitlines()) == 1
    assert main(["--home", str(tmp_path), "runs", "--format", "json"]) == 0
    listed = {r["run_id"]: r for r in json.loads(capfd.readouterr().out)["runs"]}
    assert listed[kept.run_id]["batch_pending"] == N and str(path) in listed[damaged.run_id]["batch_problem"]


def test_the_new_run_page_names_a_damaged_batch_state_and_lists_the_others(tmp_path, monkeypatch, capfd):
    from tests.test_app import open_page, rendered_text

    home = tmp_path / "home"
    monkeypatch.setenv("PERSOBENCH_HOME", str(home))
    with FakeBatchServer("openai", finish_after=None) as server:
        assert main(_argv(home, server, "--batch-wait", "0")) == 0
        assert main(_argv(home, server, "--batch-wait", "0", limit=3)) == 0
    damaged = max(RunStore(home).runs(), key=lambda r: len(r.manifest.sample_ids))
    path = Path(damaged.path) / STATE_FILE
    path.write_text(json.dumps(DAMAGED["keys-not-a-list"]), encoding="utf-8")
    at = open_page("pages/new_run.py")
    assert not at.exception
    shown = [str(w.value).replace("\\", "") for w in at.warning]  # as rendered: Markdown escapes dropped
    assert sum(str(path) in w for w in shown) == 1
    text = rendered_text(at)
    assert server.created[1] in text and server.created[0] not in text


# --- item 14: the stored command, the organization headers, the dry run ------------------------------------


def test_a_refused_plain_run_keeps_the_collect_command_with_batch(tmp_path, capsys):
    with FakeBatchServer("openai", finish_after=None) as server:
        assert main(_argv(tmp_path, server, "--batch-wait", "0")) == 0
        plain = [a for a in _argv(tmp_path, server) if a not in ("--batch", "--batch-poll", "0.05")]
        assert main(plain) == 2
        capsys.readouterr()
        assert main(["--home", str(tmp_path), "runs", "--format", "json"]) == 0
        [listed] = json.loads(capsys.readouterr().out)["runs"]
        assert " --batch" in listed["collect_command"] and listed["batch_pending"] == N
        # the printed command collects it
        server.release()
        assert main(shlex.split(listed["collect_command"])[3:]) == 0
        assert len(server.created) == 1 and len(server.requests) == 0


def test_the_batch_path_sends_the_organization_and_project_headers_as_the_interactive_path(tmp_path):
    with FakeBatchServer("openai", fail=lambda custom_id, line: line == 0) as server:
        assert main(_argv(tmp_path, server, "--option", "organization=org-test1", "--option",
                          "project=proj_test2")) == 0
        assert server.batch_headers and len(server.requests) == 1
        interactive = server.requests[0].headers
        assert interactive.get("openai-organization") == "org-test1"
        assert interactive.get("openai-project") == "proj_test2"
        for method, path, headers in server.batch_headers:
            assert headers.get("openai-organization") == "org-test1", (method, path)
            assert headers.get("openai-project") == "proj_test2", (method, path)
        body = server.batches[server.created[0]]["lines"][0]["body"]
        assert "organization" not in body and "project" not in body


def test_dry_run_mentions_a_pending_batch(tmp_path, capsys):
    with FakeBatchServer("openai", finish_after=None) as server:
        assert main(_argv(tmp_path, server, "--batch-wait", "0")) == 0
        capsys.readouterr()
        assert main([*_argv(tmp_path, server), "--dry-run"]) == 0
        out = capsys.readouterr().out
        [line] = [x for x in out.splitlines() if server.created[0] in x]
        assert "pending" in line and f"{N} request(s)" in line and "collect" in line
        plain = [a for a in _argv(tmp_path, server) if a not in ("--batch", "--batch-poll", "0.05")]
        assert main([*plain, "--dry-run"]) == 0
        out = capsys.readouterr().out
        [line] = [x for x in out.splitlines() if server.created[0] in x]
        assert "add --batch" in line
        assert len(server.created) == 1 and len(server.requests) == 0


def test_judge_dry_run_mentions_a_pending_judge_batch(tmp_path, capsys):
    from tests.test_judge import _sample_run

    _sample_run(tmp_path)
    with _judged_server(finish_after=None) as server:
        assert main(_judge_args(tmp_path, server, "--batch-wait", "0")) == 1  # pairs left waiting
        capsys.readouterr()
        assert main([*_judge_args(tmp_path, server), "--dry-run"]) == 0
        [line] = [x for x in capsys.readouterr().out.splitlines() if server.created[0] in x]
        assert line.startswith("judge batch pending: 3 request(s)") and "collects" in line
        assert len(server.created) == 1 and len(server.requests) == 0


def test_a_failed_batch_echoing_the_key_never_gets_it_stored_or_shown(tmp_path, capsys):
    with FakeBatchServer("openai", fail_batch=1, echo_key=True) as server:
        assert main(_argv(tmp_path, server)) == 2
        out = capsys.readouterr()
        assert server.created and "does not exist" in out.err
    assert OPENAI_SECRET not in out.out + out.err
    assert [p for p in tmp_path.rglob("*") if p.is_file() and OPENAI_SECRET.encode() in p.read_bytes()] == []


def test_the_judge_fallback_command_leaves_the_base_urls_credentials_out():
    import argparse

    from persobench.cli.judge_flags import fallback_command

    args = argparse.Namespace(command_line=[
        "--home", "h", "score", "--judge", "openai:m", "--judge-base-url", "http://me:pw-S3cret@127.0.0.1:9/v1",
        "--batch", "--batch-fallback", "stop", "--ray-address=ray://u:pw-S3cret@10.0.0.1:10001"])
    argv = shlex.split(fallback_command(args))
    assert "pw-S3cret" not in " ".join(argv)
    assert argv[argv.index("--judge-base-url") + 1] == "http://127.0.0.1:9/v1"
    assert argv.count("--batch-fallback") == 1 and argv[-2:] == ["--batch-fallback", "interactive"]
