"""Generation runs against real HTTP fake servers: statuses, retries, concurrency, cache, cancel,
progress, CLI, and secrets staying off the disk."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pandas as pd
import pytest

from persobench.llm.response_cache import ResponseCache
from persobench.cli import main as cli_main
from persobench.datasets import load_dataset
from persobench.generation import (
    COLUMNS,
    RetryPolicy,
    RunAborted,
    read_progress,
    request_cancel,
    run_generation,
)
from persobench.prompts.templates import build_messages, get_template
from persobench.store.run_store import RunStore
from tests.fakes import error, hang, malformed, reply, reset
from tests.fakes.fixtures import ANTHROPIC_SECRET, OPENAI_SECRET, anthropic_server, openai_server  # noqa: F401
from tests.cli_checks import run_cli

SAMPLES = load_dataset("sample")
FAST = RetryPolicy(base_delay=0.01, max_delay=0.05, timeout=30.0)


def prompts(mode: str = "vanilla") -> list[str]:
    template = get_template("paper", mode)  # the default for API providers: the paper's protocol
    return [build_messages(s, template)[-1]["content"] for s in SAMPLES]


PROMPTS = prompts()


def scripted(actions: dict[int, object], *, first_only: bool = True, mode: str = "vanilla"):
    """A server script: sample position -> action (on the first attempt only, by default)."""
    texts = prompts(mode)
    by_prompt = {texts[i]: a for i, a in actions.items()}

    def script(info):
        action = by_prompt.get(info.prompt)
        if action is None or (first_only and info.attempt > 1):
            return None
        return action

    return script


def run(server, home, **kw):
    kw.setdefault("retry", FAST)
    return run_generation(dataset="sample", model=f"{server.flavour}:fake", base_url=server.base_url, home=home, **kw)


def table(run_) -> pd.DataFrame:
    return run_.read_table("generations").set_index("sample_id")


# ---------------------------------------------------------------------------------------------
# statuses


def test_every_status_and_nothing_dropped(openai_server, tmp_path):
    openai_server.script = scripted({
        1: reply('{"response": "I was going to say that my', finish_reason="length"),
        2: reply("Sure: {response: hi}"),
        3: reply('{"reply": "hello there"}'),
        4: reply('{"response": "  "}'),
        5: reply("I'm sorry, but I can't help with that request."),
        6: error(401, "invalid api key"),
        7: reply(refusal="I can't assist with that."),
    }, first_only=False)
    # The robust policy's statuses (the default for the paper's templates is the paper's parsing,
    # which, as its notebooks did, accepts a blank "response").
    result = run(openai_server, tmp_path, concurrency=4, policy="robust")
    frame = table(result)
    assert list(frame.reset_index().columns) == list(COLUMNS)
    assert list(frame.index) == [s.id for s in SAMPLES]  # one row per sample, in run order
    status = {i: frame.loc[SAMPLES[i].id, "status"] for i in range(8)}
    assert status == {0: "ok", 1: "truncated", 2: "invalid_json", 3: "missing_field", 4: "empty",
                      5: "refused", 6: "api_error", 7: "refused"}
    assert (frame["status"] == "ok").sum() == 30 - 7

    ok = frame.loc[SAMPLES[0].id]
    assert ok["response"] == json.loads(ok["raw_text"])["response"] and ok["finish_reason"] == "stop"
    assert ok["latency"] > 0 and (ok["prompt_tokens"], ok["completion_tokens"], ok["attempts"]) == (12, 7, 1)
    assert not ok["cached"] and ok["prompt"] == PROMPTS[0]
    assert frame.loc[SAMPLES[1].id, "finish_reason"] == "length"
    failed = frame.loc[SAMPLES[6].id]
    assert failed["error"].startswith("authentication HTTP 401") and pd.isna(failed["raw_text"])
    assert frame.loc[SAMPLES[5].id, "raw_text"].startswith("I'm sorry")  # raw text kept for failures

    manifest = result.manifest
    assert manifest.status == "completed"
    assert manifest.extra["counts"]["api_error"] == 1 and sum(manifest.extra["counts"].values()) == 30
    assert manifest.extra["usage"]["prompt_tokens"] == 12 * 29
    assert manifest.extra["usage"]["completion_tokens"] == 7 * 29
    assert manifest.model == {"provider": "openai", "model": "fake", "base_url": openai_server.base_url}


def test_paper_defaults_are_sent(openai_server, tmp_path):
    run(openai_server, tmp_path, limit=2)
    run(openai_server, tmp_path, limit=2, mode="cot")
    bodies = [r.body for r in openai_server.requests]
    assert [b["max_tokens"] for b in bodies] == [110, 110, 220, 220]
    assert all(b["temperature"] == 0 and "seed" not in b for b in bodies)
    cot = [r for r in table(run(openai_server, tmp_path, limit=2, mode="cot")).itertuples()]
    assert all(r.reasoning == "It fits the persona." and r.status == "ok" for r in cot)


# ---------------------------------------------------------------------------------------------
# retries


RETRYABLE = {
    "500": error(500), "503": error(503), "529": error(529), "408": error(408), "409": error(409),
    "429": error(429, "Rate limit reached"), "timeout": hang(4.0), "reset": reset(), "malformed": malformed(),
}


def retry_policy_for(name: str) -> RetryPolicy:
    """Only the timeout case needs a short client timeout. Elsewhere a tight one would let a slow
    retry on a busy CI machine time out too and count a third attempt."""
    return RetryPolicy(base_delay=0.01, max_delay=0.05, timeout=1.0 if name == "timeout" else 30.0)


def attempts_seen(server, prompt: str) -> str:
    return "; ".join(f"attempt {r.attempt} at {r.arrived:.2f}" for r in server.requests_for(prompt))


@pytest.mark.parametrize("name", list(RETRYABLE))
def test_retryable_failures_are_retried_openai(openai_server, tmp_path, name):
    openai_server.script = scripted({0: RETRYABLE[name]})
    frame = table(run(openai_server, tmp_path, limit=None, concurrency=8, retry=retry_policy_for(name)))
    first = frame.loc[SAMPLES[0].id]
    assert (first["status"], first["attempts"]) == ("ok", 2), (first["error"], attempts_seen(openai_server, PROMPTS[0]))
    assert len(openai_server.requests_for(PROMPTS[0])) == 2
    assert len(openai_server.requests) == 31


@pytest.mark.parametrize("name", ["503", "529", "reset", "malformed", "timeout"])
def test_retryable_failures_are_retried_anthropic(anthropic_server, tmp_path, name):
    anthropic_server.script = scripted({0: RETRYABLE[name]})
    frame = table(run(anthropic_server, tmp_path, limit=None, retry=retry_policy_for(name)))
    first = frame.loc[SAMPLES[0].id]
    assert (first["status"], first["attempts"]) == ("ok", 2), (first["error"], attempts_seen(anthropic_server, PROMPTS[0]))
    assert len(anthropic_server.requests_for(PROMPTS[0])) == 2


@pytest.mark.parametrize(
    "action, kind",
    [
        (error(400, "bad request"), "bad_request HTTP 400"),
        (error(401), "authentication HTTP 401"),
        (error(403), "permission_denied HTTP 403"),
        (error(404, "model not found"), "not_found HTTP 404"),
        (error(429, "You exceeded your current quota", body={"error": {"code": "insufficient_quota",
                                                                          "message": "quota"}}), "quota_exceeded HTTP 429"),
    ],
)
def test_non_retryable_errors_are_sent_once(openai_server, tmp_path, action, kind):
    openai_server.script = scripted({0: action}, first_only=False)
    frame = table(run(openai_server, tmp_path))
    row = frame.loc[SAMPLES[0].id]
    assert row["status"] == "api_error" and row["error"].startswith(kind) and row["attempts"] == 1
    assert len(openai_server.requests_for(PROMPTS[0])) == 1
    assert (frame["status"] == "ok").sum() == 29


def test_no_request_before_retry_after(openai_server, tmp_path):
    openai_server.script = scripted({0: error(429, headers={"Retry-After": "1"}), 1: error(503, headers={"retry-after-ms": "600"})})
    frame = table(run(openai_server, tmp_path, limit=None, concurrency=4))
    assert frame.loc[SAMPLES[0].id, "status"] == "ok"
    first, second = openai_server.requests_for(PROMPTS[0])
    assert second.arrived - first.arrived >= 1.0
    first, second = openai_server.requests_for(PROMPTS[1])
    assert second.arrived - first.arrived >= 0.6


def test_attempts_are_capped(anthropic_server, tmp_path):
    anthropic_server.script = scripted({0: error(500, "boom")}, first_only=False)
    policy = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.02)
    frame = table(run(anthropic_server, tmp_path, limit=None, retry=policy))
    row = frame.loc[SAMPLES[0].id]
    assert row["status"] == "api_error" and row["attempts"] == 3 and row["error"].startswith("server_error HTTP 500")
    assert len(anthropic_server.requests_for(PROMPTS[0])) == 3


def test_first_requests_failing_alike_stop_the_run(openai_server, tmp_path):
    openai_server.script = lambda info: error(401, "Incorrect API key provided")
    with pytest.raises(RunAborted) as info:
        run(openai_server, tmp_path, concurrency=4)
    assert "the first 20 requests all failed: authentication HTTP 401" in str(info.value)
    assert 20 <= len(openai_server.requests) <= 20 + 4  # not 30: the rest of the dataset is spared
    stored = RunStore(tmp_path).get(info.value.run.run_id)
    assert stored.manifest.status == "failed" and "401" in stored.manifest.extra["failure_reason"]
    assert len(stored.read_table("generations")) == len(openai_server.requests)


# ---------------------------------------------------------------------------------------------
# concurrency


@pytest.mark.parametrize("k", [3, 8])
def test_concurrency_cap_measured_at_the_server(openai_server, tmp_path, k):
    openai_server.latency = 0.5  # long enough that all k slots fill even on a busy machine
    run(openai_server, tmp_path, limit=3 * k, concurrency=k)
    assert openai_server.max_inflight == k
    assert len(openai_server.requests) == 3 * k


# ---------------------------------------------------------------------------------------------
# cache, cancel, resume, progress


def test_rerun_makes_zero_requests_and_errors_are_not_cached(openai_server, tmp_path):
    openai_server.script = scripted({0: error(500)}, first_only=False)
    policy = RetryPolicy(max_attempts=2, base_delay=0.01)
    first = table(run(openai_server, tmp_path, limit=None, retry=policy))
    assert first.loc[SAMPLES[0].id, "status"] == "api_error"
    assert len(ResponseCache(tmp_path / "responses")) == 29  # the error was not stored
    sent = len(openai_server.requests)

    openai_server.script = None  # the server recovers
    again = run(openai_server, tmp_path, limit=None, retry=policy)
    assert len(openai_server.requests) == sent + 1  # only the failed sample is asked again
    frame = table(again)
    assert frame.loc[SAMPLES[0].id, "status"] == "ok" and not frame.loc[SAMPLES[0].id, "cached"]
    assert frame.drop(index=SAMPLES[0].id)["cached"].all()

    third = run(openai_server, tmp_path, limit=None, retry=policy)
    assert len(openai_server.requests) == sent + 1  # a finished run makes zero requests
    assert third.manifest.extra["usage"]["requests"] == 0
    assert table(third)["cached"].all() and (table(third)["status"] == "ok").all()
    pd.testing.assert_series_equal(table(third)["response"], frame["response"])
    assert third.run_id == again.run_id  # same configuration, same run folder


def test_changed_decoding_parameters_miss_the_cache(openai_server, tmp_path):
    run(openai_server, tmp_path, limit=3)
    run(openai_server, tmp_path, limit=3, concurrency=1, retry=RetryPolicy(timeout=9))  # no output change
    assert len(openai_server.requests) == 3
    run(openai_server, tmp_path, limit=3, max_tokens=50)
    assert len(openai_server.requests) == 6


def test_cancel_file_stops_between_requests_and_resume_finishes(openai_server, tmp_path):
    openai_server.latency = 0.05
    seen: list = []

    def progress(info):
        seen.append(info)
        if info.done == 6:
            request_cancel(tmp_path / "runs" / info.run_id)

    cancelled = run(openai_server, tmp_path, concurrency=2, progress=progress)
    assert cancelled.manifest.status == "cancelled"
    done = len(cancelled.read_table("generations"))
    assert 6 <= done < 30 and len(openai_server.requests) <= done + 2
    assert read_progress(cancelled.path)["status"] == "cancelled"
    assert cancelled.manifest.extra["counts"]["pending"] == 30 - done
    dones = [p.done for p in seen]
    assert dones == sorted(dones)

    before = len(openai_server.requests)
    stored = len(ResponseCache(tmp_path / "responses"))
    resumed = run(openai_server, tmp_path, concurrency=2)
    assert resumed.manifest.status == "completed" and resumed.run_id == cancelled.run_id
    assert len(openai_server.requests) - before == 30 - stored
    assert not (resumed.path / "cancel").exists()
    assert (table(resumed)["status"] == "ok").all() and len(table(resumed)) == 30


def test_cancel_event_and_progress_file(openai_server, tmp_path):
    openai_server.latency = 0.05
    stop = threading.Event()
    snapshots: list[dict] = []

    def progress(info):
        if info.done == 4:
            snapshots.append(read_progress(tmp_path / "runs" / info.run_id))
            stop.set()

    result = run(openai_server, tmp_path, concurrency=2, progress=progress, cancel=stop)
    assert result.manifest.status == "cancelled"
    live = snapshots[0]
    assert live["status"] == "running" and live["alive"] is True and live["pid"] == os.getpid()
    assert live["total"] == 30 and set(live) >= {"done", "failed", "cached", "eta", "requests", "updated_at"}
    final = json.loads((result.path / "progress.json").read_text())
    assert final["status"] == "cancelled" and final["done"] == len(result.read_table("generations"))


# ---------------------------------------------------------------------------------------------
# secrets, cost, baselines, anthropic end to end


def _files_containing(root: Path, secret: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_api_keys_never_reach_the_store(openai_server, anthropic_server, tmp_path):
    # errors that echo the key back must be scrubbed before they reach a table
    openai_server.script = scripted({0: error(400, f"key {OPENAI_SECRET} rejected")}, first_only=False)
    anthropic_server.script = scripted({1: error(403, f"key {ANTHROPIC_SECRET} forbidden")}, first_only=False, mode="cot")
    first = run(openai_server, tmp_path, limit=None, options={"headers": {"X-Trace": "1"}})
    second = run(anthropic_server, tmp_path, limit=None, mode="cot")
    assert table(first).loc[SAMPLES[0].id, "status"] == "api_error"
    assert table(second).loc[SAMPLES[1].id, "status"] == "api_error"
    assert cli_main(["--home", str(tmp_path), "export", first.run_id, "--format", "jsonl",
                     "-o", str(tmp_path / "export.jsonl")]) == 0
    assert len(list(tmp_path.rglob("*"))) > 5
    assert _files_containing(tmp_path, OPENAI_SECRET) == []
    assert _files_containing(tmp_path, ANTHROPIC_SECRET) == []
    assert "***" in table(first).loc[SAMPLES[0].id, "error"]


def test_usage_and_cost_from_the_registry_file(openai_server, tmp_path):
    models = tmp_path / "models.toml"
    models.write_text(f'[models.priced]\nspec = "openai:fake"\nbase_url = "{openai_server.base_url}"\n'
                      "price_input_per_mtok = 2.0\nprice_output_per_mtok = 10.0\n")
    result = run_generation(dataset="sample", model="priced", models_file=str(models), home=tmp_path, limit=5)
    assert result.manifest.extra["usage"]["prompt_tokens"] == 60
    assert result.manifest.extra["cost_usd"] == pytest.approx((60 * 2.0 + 35 * 10.0) / 1e6)
    assert result.manifest.model["label"] == "priced"


def test_baselines_run_like_models(tmp_path):
    result = run_generation(dataset="sample", model="baseline:reference", home=tmp_path)
    frame = table(result)
    assert (frame["status"] == "ok").all()
    assert list(frame["response"]) == [s.reference for s in SAMPLES]
    assert result.manifest.model["baseline"] is True and result.manifest.extra["baseline"] is True
    echo = table(run_generation(dataset="sample", model="baseline:persona-echo", home=tmp_path))
    personas = {s.id: s.persona_sentences() for s in SAMPLES}
    assert all(r.response in personas[r.Index] or not personas[r.Index] for r in echo.itertuples())


# ---------------------------------------------------------------------------------------------
# CLI


def test_cli_run_dry_run_and_export(openai_server, tmp_path, capsys):
    six = [s.id for s in load_dataset("sample", limit=6)]
    eight = [s.id for s in load_dataset("sample", limit=8)]
    assert set(six) <= set(eight)  # the subsets nest, so the 6-sample run is a cache for the 8-sample one
    failing = next(i for i, s in enumerate(SAMPLES) if s.id == six[0])
    openai_server.script = scripted({failing: error(400)}, first_only=False)
    base = ["--home", str(tmp_path), "run", "--model", "openai:fake", "--base-url", openai_server.base_url,
            "--no-progress", "--max-attempts", "2"]
    assert cli_main(base + ["--limit", "6"]) == 0  # exits 0 even with a failed sample
    out = capsys.readouterr().out
    run_id = out.split()[1].rstrip(":")
    assert "api_error=1" in out and "ok=5" in out

    assert cli_main(base + ["--limit", "8", "--dry-run"]) == 0
    dry = capsys.readouterr().out
    # 5 of the 8 are cached (the error was not stored)
    assert "requests to send: 3" in dry and "cached hits: 5" in dry
    assert "estimated prompt tokens:" in dry
    assert len(openai_server.requests) == 6  # the dry run sent nothing

    assert cli_main(["--home", str(tmp_path), "export", run_id[:20], "--format", "csv",
                     "-o", str(tmp_path / "out.csv")]) == 0
    csv = pd.read_csv(tmp_path / "out.csv")
    assert list(csv.columns) == list(COLUMNS) and len(csv) == 6
    assert cli_main(["--home", str(tmp_path), "export", run_id, "--format", "jsonl"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    rows = [json.loads(line) for line in lines]
    assert len(rows) == 6 and {r["status"] for r in rows} <= {"ok", "api_error"}
    assert {"sample_id", "response", "reasoning", "raw_text", "finish_reason", "latency", "prompt_tokens",
            "completion_tokens", "error"} <= set(rows[0])


@pytest.mark.parametrize(
    "args, message",
    [
        (["--dataset", "nosuch", "--model", "baseline:reference"], "nosuch"),
        (["--model", "frobnicate:x"], "unknown provider 'frobnicate'"),
        (["--model", "openai:m", "--base-url", "http://127.0.0.1:9/v1"], "cannot reach server"),
        (["--model", "baseline:reference", "--concurrency", "0"], "concurrency"),
    ],
)
def test_cli_configuration_errors(tmp_path, capsys, args, message):
    assert cli_main(["--home", str(tmp_path), "run", "--no-progress", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_retry_loop_is_usable_on_its_own(openai_server):
    """The free retry loop: retries a 503, honours Retry-After through the shared pause gate,
    counts attempts, and gives up at once when the run is stopping."""
    import asyncio
    import random
    import time

    from persobench.generation import PauseGate, call_with_retries
    from persobench.providers import GenerationParams, Request, make_provider, parse_spec

    openai_server.script = lambda info: (
        error(503, headers={"Retry-After": "0.4"}) if info.attempt == 1 else reply('{"response": "hi"}')
    )
    request = Request(messages=({"role": "user", "content": "retry me"},), params=GenerationParams())
    attempts: list[float] = []

    async def go(stop_first: bool):
        provider = make_provider(parse_spec("openai:m", base_url=openai_server.base_url))
        gate, stopping = PauseGate(), asyncio.Event()
        if stop_first:
            stopping.set()
        try:
            outcome = await call_with_retries(
                provider, request, policy=FAST, timeout_flag="--timeout", gate=gate, stopping=stopping,
                rng=random.Random(0),
                on_attempt=lambda: attempts.append(time.monotonic()),
            )
        finally:
            await provider.aclose()
        return outcome, gate

    outcome, gate = asyncio.run(go(stop_first=False))
    assert outcome.completion is not None and outcome.error is None and outcome.attempts == 2
    assert gate.not_before > 0 and attempts[1] - attempts[0] >= 0.4
    assert asyncio.run(go(stop_first=True))[0] is None and len(attempts) == 2


def test_every_sample_reported_done_has_its_reply_committed(openai_server, tmp_path):
    """Replies are committed a loop step after they arrive, several together; a sample is counted,
    parsed and checkpointed only after that commit. Checked from outside, after every reply: each row
    of the table on disk, and as many replies as progress counts done, are in the cache for another reader."""
    from persobench.generation import GenerationConfig, plan_generation

    config = GenerationConfig(dataset="sample", model="openai:fake", base_url=openai_server.base_url,
                              concurrency=8, checkpoint_every=1, retry=FAST)
    plan = plan_generation(config, store=RunStore(tmp_path))
    key_of = {sample.id: key for sample, key in zip(plan.samples, plan.keys)}
    checked: list[int] = []

    def progress(info) -> None:
        with ResponseCache(plan.cache_dir) as reader:  # its own connection: committed entries only
            assert len(reader) >= info.done
            path = tmp_path / "runs" / info.run_id / "generations.parquet"
            if path.exists():
                ids = pd.read_parquet(path, columns=["sample_id"])["sample_id"]
                assert all(key_of[sid] in reader for sid in ids)
                checked.append(len(ids))

    result = run_generation(config, home=tmp_path, progress=progress)
    assert result.manifest.extra["counts"]["ok"] == len(SAMPLES)
    assert max(checked) >= len(SAMPLES) - 1 and len(checked) >= len(SAMPLES)  # a table after each reply was checked


def test_the_heap_is_frozen_during_the_run_and_given_back_after(openai_server, tmp_path):
    """The objects that exist before the requests (modules, plan) stay out of the collector's full
    passes while they are sent, and go back to it after; a heap frozen by the caller stays frozen."""
    import gc

    during: list[int] = []
    assert gc.get_freeze_count() == 0
    run(openai_server, tmp_path, limit=3, progress=lambda info: during.append(gc.get_freeze_count()))
    assert min(during[:-1]) > 0 and during[-1] == 0 == gc.get_freeze_count()  # the last: the summary, after
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        run(openai_server, tmp_path / "again", limit=3)
        assert gc.get_freeze_count() > frozen // 2  # not given back (frozen objects freed meanwhile leave it)
    finally:
        gc.unfreeze()


def test_the_samples_written_beside_the_first_requests_are_on_disk_when_the_run_ends(openai_server, tmp_path):
    """The samples table is written in a thread while the first requests are in flight: the finished
    run has it, and a write the disk refuses fails the run (its replies cached, not paid twice)."""
    done = run(openai_server, tmp_path, limit=6)
    recorded = done.recorded_samples()
    assert recorded is not None and sorted(recorded) == sorted(table(done).index)

    plan_home = tmp_path / "refused"
    from persobench.generation import GenerationConfig, plan_generation

    config = GenerationConfig(dataset="sample", model="openai:fake", base_url=openai_server.base_url, limit=4)
    run_path = RunStore(plan_home).run_path(plan_generation(config, store=RunStore(plan_home)).run_id)
    (run_path / "samples.parquet").mkdir(parents=True)  # a folder where the table goes: the write fails
    sent = len(openai_server.requests)
    with pytest.raises(Exception, match="samples.parquet"):
        run_generation(config, home=plan_home, retry=FAST)
    assert len(openai_server.requests) == sent + 4
    assert RunStore(plan_home).get(run_path.name).manifest.status == "failed"
    assert len(ResponseCache(plan_home / "responses")) == 4  # every reply kept


# ---------------------------------------------------------------------------------------------
# Hardening, second round (issue 17): the edges a fault sweep found, against real parts


def test_exit_status_3_when_no_sample_succeeded_and_0_when_some_did(openai_server, tmp_path, capsys):
    openai_server.script = lambda info: error(500, "down")
    assert run_cli(tmp_path / "a", openai_server, "--limit", "2", "--max-attempts", "1") == 3
    assert "no sample succeeded" in capsys.readouterr().err
    openai_server.script = lambda info: error(500, "down") if info.index == 0 else None
    openai_server.reset_records()
    assert run_cli(tmp_path / "b", openai_server, "--limit", "2", "--max-attempts", "1", "--concurrency", "1") == 0
