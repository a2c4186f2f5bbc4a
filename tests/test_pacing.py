"""Pacing by the rate limits a server states (issue 41 items 1 and 2): the headers of both dialects,
the budget arithmetic, one budget shared by two processes, and runs against the fake server's token
buckets (real HTTP on 127.0.0.1) that stay under the refusal bound."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from persobench.cli import main as cli_main
from persobench.errors import ProviderError
from persobench.generation import run_generation
from persobench.llm.pacing import BUDGET_DIR, Bucket, Pacer, budget_path, parse_budget, refill_rate, request_cost
from persobench.llm.ratelimits import StatedLimit, format_duration, parse_duration, parse_reset, read_stated_limits
from persobench.providers import make_provider, parse_spec
from persobench.providers.base import GenerationParams, Request
from persobench.store.run_store import RunStore
from tests.fakes import FakeLLMServer, RateLimits, error
from tests.fakes.buckets import min_seconds
from tests.fakes.fixtures import ANTHROPIC_SECRET, OPENAI_SECRET

REPO = Path(__file__).resolve().parents[1]
MESSAGES = ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi."})


# -- the headers --------------------------------------------------------------------------------


@pytest.mark.parametrize("text, seconds", [
    ("6s", 6.0), ("1m30s", 90.0), ("12ms", 0.012), ("1h2m3.5s", 3723.5), ("0s", 0.0), ("17.28s", 17.28),
    ("6m0s", 360.0), ("250us", 0.00025), ("2", 2.0), ("0.5", 0.5), (" 1m ", 60.0),
])
def test_durations_as_openai_writes_them(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "abc", "1x", "s", "1m30", "-5s", "5s1", "inf", "nan", "1.2.3s"])
def test_what_is_not_a_duration_is_none(text):
    assert parse_duration(text) is None


def test_format_duration_writes_what_parse_duration_reads():
    for seconds in (0.012, 0.5, 6.0, 90.0, 3723.5, 59.999):
        assert parse_duration(format_duration(seconds)) == pytest.approx(seconds, abs=0.001)
    assert format_duration(90) == "1m30s" and format_duration(0.012) == "12ms" and format_duration(6) == "6s"


def test_reset_times_in_rfc_3339_count_from_now():
    now = dt.datetime(2026, 12, 6, 10, 0, 0, tzinfo=dt.UTC).timestamp()
    assert parse_reset("2026-12-06T10:00:30Z", now=now) == pytest.approx(30)
    assert parse_reset("2026-12-06T10:00:01.250Z", now=now) == pytest.approx(1.25)
    assert parse_reset("2026-12-06T11:00:30+01:00", now=now) == pytest.approx(30)
    assert parse_reset("2026-12-06T10:00:30", now=now) == pytest.approx(30)  # no zone: UTC
    assert parse_reset("2026-12-06T09:59:00Z", now=now) == 0.0  # already past
    assert parse_reset("1m30s", now=now) == 90.0 and parse_reset("not a time", now=now) is None
    assert parse_reset("2999-01-01T00:00:00Z", now=now) == 86_400.0  # a hostile year: a day at most


def test_openai_headers_state_requests_and_tokens():
    stated = read_stated_limits({
        "X-RateLimit-Limit-Requests": "600", "x-ratelimit-remaining-requests": "599",
        "x-ratelimit-reset-requests": "100ms", "x-ratelimit-limit-tokens": "40000",
        "x-ratelimit-remaining-tokens": "39000", "x-ratelimit-reset-tokens": "1m30s", "x-request-id": "abc"})
    assert stated == {"requests": StatedLimit(600, 599, 0.1), "tokens": StatedLimit(40000, 39000, 90.0)}


def test_anthropic_headers_state_four_limits_and_the_rounded_total_is_left_out():
    now = time.time()
    reset = dt.datetime.fromtimestamp(now + 12, dt.UTC).isoformat().replace("+00:00", "Z")
    headers = {}
    for kind, limit, left in (("requests", 50, 49), ("tokens", 30000, 29000), ("input-tokens", 20000, 19500),
                              ("output-tokens", 8000, 7000)):
        headers |= {f"anthropic-ratelimit-{kind}-limit": str(limit), f"anthropic-ratelimit-{kind}-remaining": str(left),
                    f"anthropic-ratelimit-{kind}-reset": reset}
    stated = read_stated_limits(headers, now=now)
    assert set(stated) == {"requests", "input_tokens", "output_tokens"}
    assert stated["input_tokens"].limit == 20000 and stated["output_tokens"].remaining == 7000
    assert stated["requests"].reset == pytest.approx(12, abs=0.01)


def test_unreadable_headers_are_ignored_never_an_error():
    assert read_stated_limits(None) == {} and read_stated_limits({}) == {}
    stated = read_stated_limits({
        "x-ratelimit-limit-requests": "lots", "x-ratelimit-remaining-requests": "5",  # no number: no limit
        "x-ratelimit-limit-tokens": "1000", "x-ratelimit-remaining-tokens": "5000",  # more left than the limit
        "x-ratelimit-reset-tokens": "soon"})
    assert stated == {"tokens": StatedLimit(1000, 1000, None)}
    assert read_stated_limits({"x-ratelimit-limit-requests": "0", "x-ratelimit-remaining-requests": "0"}) == {}
    assert read_stated_limits({"x-ratelimit-limit-requests": "nan", "x-ratelimit-remaining-requests": "1"}) == {}


async def _twice(provider, request):
    try:
        first = await provider.generate(request)
        with pytest.raises(ProviderError) as refused:
            await provider.generate(request)  # the one request of the bucket is spent
        return first, refused.value
    finally:
        await provider.aclose()


def test_providers_hand_the_rate_headers_of_replies_and_429s_to_the_llm_layer(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_SECRET)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_SECRET)
    for flavour in ("openai", "anthropic"):
        prefix = "x-ratelimit-" if flavour == "openai" else "anthropic-ratelimit-"
        with FakeLLMServer(flavour, limits=RateLimits(rpm=60, start={"requests": 1}, dialect=flavour)) as server:
            provider = make_provider(parse_spec(f"{flavour}:m", base_url=server.base_url))
            completion, refusal = asyncio.run(_twice(provider, Request(MESSAGES, GenerationParams(max_tokens=20))))
        assert completion.rate_headers and all(k.startswith(prefix) for k in completion.rate_headers)
        assert read_stated_limits(completion.rate_headers)["requests"].limit == 60
        assert refusal.status_code == 429 and refusal.retry_after is not None and refusal.retry_after >= 1
        assert read_stated_limits(refusal.rate_headers)["requests"].remaining == 0
        assert completion.to_dict().keys() == {"text", "finish_reason", "prompt_tokens", "completion_tokens", "model"}


# -- the budget arithmetic ----------------------------------------------------------------------


def test_a_bucket_refills_at_its_rate_up_to_its_size():
    bucket = Bucket(capacity=600, rate=10, level=0, at=100.0)
    assert bucket.wait_for(1, 100.0) == pytest.approx(0.1)
    assert bucket.wait_for(5, 100.2) == pytest.approx(0.3)  # 2 refilled, 3 to go
    bucket.advance(1000.0)
    assert bucket.level == 600  # never above the limit
    assert bucket.wait_for(10_000, 1000.0) == 0  # a cost above the limit waits for a full bucket only


def test_the_refill_is_the_limit_per_minute_unless_the_reset_shows_slower():
    assert refill_rate(StatedLimit(600, 599, 0.1)) == 10
    assert refill_rate(StatedLimit(600, 0, 60.0)) == 10
    # 1,000 a day: 100 spent and 8,640 s to be whole again is 1,000 per 86,400 s, not per minute
    assert refill_rate(StatedLimit(1000, 900, 8640.0)) == pytest.approx(99 / 8640)
    assert refill_rate(StatedLimit(1000, 999, 86_000.0)) == pytest.approx(1000 / 60)  # too little spent to tell


def _headers(requests: tuple[int, int], tokens: tuple[int, int] | None = None) -> dict[str, str]:
    out = {"x-ratelimit-limit-requests": str(requests[0]), "x-ratelimit-remaining-requests": str(requests[1])}
    if tokens is not None:
        out |= {"x-ratelimit-limit-tokens": str(tokens[0]), "x-ratelimit-remaining-tokens": str(tokens[1])}
    return out


def test_the_first_reply_sets_the_budget_and_counts_what_was_sent_after_it():
    pacer = Pacer()

    async def scenario():
        stopping = asyncio.Event()
        first = await pacer.admit(request_cost(100, 20), stopping)
        later = [await pacer.admit(request_cost(100, 20), stopping) for _ in range(3)]  # sent before the reply
        assert not pacer.known() and not first.charged
        pacer.settle(first, _headers((600, 19), (40_000, 30_000)), (100, 10))
        return later

    asyncio.run(scenario())
    buckets = pacer._memory
    # 19 left when the server answered, minus the 3 sent after the first (not counted there yet)
    assert buckets["requests"].level == pytest.approx(16, abs=0.1)
    assert buckets["tokens"].level == pytest.approx(30_000 - 3 * 120, abs=5)
    assert pacer.stats.limits == {"requests": 600, "tokens": 40_000}


def test_a_send_waits_for_the_budget_and_the_reply_corrects_the_estimate():
    pacer = Pacer()
    pacer._memory["tokens"] = Bucket(capacity=6000, rate=100, level=300, at=time.time())

    async def scenario():
        stopping = asyncio.Event()
        first = await pacer.admit(request_cost(100, 150), stopping)  # 250 of the 300
        level = pacer._memory["tokens"].level
        pacer.settle(first, None, (100, 30))  # 120 unused tokens come back
        corrected = pacer._memory["tokens"].level
        started = time.monotonic()
        second = await pacer.admit(request_cost(300, 100), stopping)  # 400 needed: waits ~2 s at 100/s
        waited = time.monotonic() - started
        pacer.settle(second, None, failed=True)  # no reply: its 400 tokens come back
        return level, corrected, waited

    level, corrected, waited = asyncio.run(scenario())
    assert level == pytest.approx(50, abs=2)
    assert corrected == pytest.approx(170, abs=2)
    assert 1.9 < waited < 3.0
    assert pacer._memory["tokens"].level == pytest.approx(400, abs=5)
    assert pacer.stats.paced == 1 and pacer.stats.waited_s == pytest.approx(waited, abs=0.05)


def test_a_stated_remaining_below_the_budget_is_believed_and_one_above_is_not():
    pacer = Pacer()
    now = time.time()
    pacer._memory["requests"] = Bucket(capacity=600, rate=10, level=50, at=now)

    async def scenario():
        stopping = asyncio.Event()
        ticket = await pacer.admit(request_cost(10, 10), stopping)
        pacer.settle(ticket, _headers((600, 10)))  # another user of the key took more
        low = pacer._memory["requests"].level
        ticket = await pacer.admit(request_cost(10, 10), stopping)
        pacer.settle(ticket, _headers((600, 500)))  # a stale or hopeful figure: the budget stays
        return low, pacer._memory["requests"].level

    low, after = asyncio.run(scenario())
    assert low == pytest.approx(10, abs=0.5)
    assert after == pytest.approx(low - 1, abs=0.5)


def test_a_wait_longer_than_max_retry_after_fails_the_request_as_a_rate_limit():
    pacer = Pacer(max_wait=5)
    pacer._memory["requests"] = Bucket(capacity=10, rate=10 / 86_400, level=0, at=time.time())  # 10 a day, spent
    failed = asyncio.run(pacer.admit(request_cost(1, 1), asyncio.Event()))
    assert isinstance(failed, ProviderError)
    assert failed.kind.value == "rate_limit" and "max_retry_after" in str(failed)


def test_a_stop_ends_a_wait_at_once():
    pacer = Pacer()
    pacer._memory["requests"] = Bucket(capacity=1, rate=1 / 60, level=0, at=time.time())

    async def scenario():
        stopping = asyncio.Event()
        asyncio.get_running_loop().call_later(0.2, stopping.set)
        started = time.monotonic()
        ticket = await pacer.admit(request_cost(1, 1), stopping)
        return ticket, time.monotonic() - started

    ticket, waited = asyncio.run(scenario())
    assert ticket is None and waited < 2


def test_a_long_wait_for_the_budget_is_announced_with_the_stated_limits_and_cleared():
    pacer = Pacer()
    pacer._memory["requests"] = Bucket(capacity=60, rate=1, level=-29, at=time.time())  # 30 s to the next one
    pacer.stats.limits["requests"] = 60.0
    said: list[tuple[float, str]] = []

    async def scenario():
        stopping = asyncio.Event()
        asyncio.get_running_loop().call_later(0.3, stopping.set)
        return await pacer.admit(request_cost(1, 1), stopping, lambda seconds, note: said.append((seconds, note)))

    assert asyncio.run(scenario()) is None
    assert said[0][0] == pytest.approx(30, abs=0.5)
    assert said[0][1].startswith("waiting 30 s: the server's stated rate limits are used up (60 requests a minute")
    assert said[-1] == (0.0, "")


def test_the_budget_file_names_no_key_and_differs_per_key_server_and_model(tmp_path):
    path = budget_path(tmp_path, "openai", "http://user:pw@127.0.0.1:9/v1?api_key=zzz", "m", OPENAI_SECRET)
    assert path.parent == tmp_path / BUDGET_DIR and OPENAI_SECRET not in str(path)
    assert path != budget_path(tmp_path, "openai", "http://127.0.0.1:9/v1", "m", "sk-another-key-000000")
    assert path != budget_path(tmp_path, "openai", "http://127.0.0.1:9/v1", "m2", OPENAI_SECRET)
    assert path != budget_path(tmp_path, "openai", "http://127.0.0.1:8/v1", "m", OPENAI_SECRET)


def test_a_budget_file_that_cannot_be_read_or_written_costs_the_sharing_not_the_run(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    pacer = Pacer(blocker / BUDGET_DIR / "b.json")

    async def scenario():
        ticket = await pacer.admit(request_cost(1, 1), asyncio.Event())
        pacer.settle(ticket, _headers((600, 100)))
        return await pacer.admit(request_cost(1, 1), asyncio.Event())

    assert asyncio.run(scenario()) is not None
    assert pacer.path is None and pacer._memory["requests"].level == pytest.approx(99, abs=0.5)
    assert parse_budget(b'{"version": 1, "buckets": {"requests": [600, 10, ') == {}  # half written
    assert parse_budget(b"") == {} and parse_budget(b"\xff\xfe") == {}
    assert parse_budget(b'{"version": 1, "buckets": {"requests": [600, -10, 5, 1e9], "x": [1, 1, 1, 1]}}') == {}


_SHARED_SENDER = """
import asyncio, json, sys, time
from persobench.llm.pacing import Pacer, request_cost
pacer = Pacer(sys.argv[1])
async def main():
    times = []
    for _ in range(int(sys.argv[2])):
        await pacer.admit(request_cost(10, 10), asyncio.Event())
        times.append(time.time())
    print(json.dumps(times))
asyncio.run(main())
"""


def test_two_processes_sharing_a_budget_file_never_send_more_than_it_allows_together(tmp_path):
    """Two processes admit 12 sends each from one budget of 5 requests refilled at 10 a second: together
    no more than 5 + 10 t in any first t seconds, so the 24 take at least 1.9 s (each alone would
    believe it had the whole budget and be done in 0.7 s)."""
    path = tmp_path / BUDGET_DIR / "shared.json"
    path.parent.mkdir()
    start = time.time() + 1.5  # both processes are up by then: the budget is full from this time on
    path.write_text(json.dumps({"version": 1, "server": "s", "model": "m",
                                "buckets": {"requests": [5.0, 10.0, 5.0, start]}}))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-c", _SHARED_SENDER, str(path), "12"], env=env, cwd=REPO,
                              stdout=subprocess.PIPE, text=True) for _ in range(2)]
    sent = sorted(t for p in procs for t in json.loads(p.communicate(timeout=60)[0]))
    assert len(sent) == 24
    for n, when in enumerate(sent, start=1):  # the n-th send needs n units: 5 at the start, 10 a second after
        assert n <= 5 + 10 * max(0.0, when - start) + 0.5, (n, when - start)
    assert sent[-1] - start >= 1.85


# -- runs against the fake buckets --------------------------------------------------------------


def _samples(n: int):
    import benchmarks.generation as bench

    return bench.make_samples(n)


def test_a_run_against_the_token_buckets_stays_under_the_refusal_bound_and_near_the_time_they_allow(
        tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_SECRET)
    limits = RateLimits(rpm=600, tpm=60_000, start={"requests": 10, "tokens": 4_000})
    with FakeLLMServer("openai", latency=0.05, limits=limits) as server:
        run = run_generation(dataset="bench", model="openai:bench", base_url=server.base_url, samples=_samples(40),
                             home=tmp_path, concurrency="auto", max_tokens=40)
        refused = len(server.refusals)
        span = server.last_reply - server.requests[0].arrived
    assert run.manifest.details.counts["ok"] == 40
    assert refused == 0  # without pacing a fixed 8 or auto's slow start would meet the empty bucket
    summary = limits.summary()
    bound = min_seconds(summary["admitted"], summary["limits"], {"requests": 10, "tokens": 4_000}, 0.05)
    assert bound > 2.5  # the buckets bind: 40 requests of ~290 tokens against 10 and 4,000 to start
    assert span < 1.5 * bound  # a loose bound for a loaded machine: benchmarks/pacing.py measures it
    pacing = run.manifest.details.pacing
    assert pacing is not None and pacing.limits == {"requests": 600, "tokens": 60_000}
    assert pacing.paced and pacing.paced > 10 and pacing.refused == 0
    stored = json.loads(next((tmp_path / BUDGET_DIR).glob("*.json")).read_text())
    assert set(stored["buckets"]) == {"requests", "tokens"} and stored["server"] == server.base_url
    for path in tmp_path.rglob("*"):  # the key reaches no file (the budget's name and content included)
        if path.is_file():
            assert OPENAI_SECRET.encode() not in path.read_bytes() and OPENAI_SECRET not in path.name


def test_an_anthropic_run_is_paced_by_its_input_and_output_token_buckets(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_SECRET)
    # ~275 input tokens a request: the first 8 fit in the 3,000 to start, the other 22 wait for the
    # refill (1,000 a second); every request also reserves its 100 output tokens
    limits = RateLimits(rpm=1000, itpm=60_000, otpm=12_000, start={"input_tokens": 3_000}, dialect="anthropic")
    with FakeLLMServer("anthropic", latency=0.02, limits=limits) as server:
        run = run_generation(dataset="bench", model="anthropic:bench", base_url=server.base_url,
                             samples=_samples(30), home=tmp_path, concurrency=8, max_tokens=100)
        refused = len(server.refusals)
        span = server.last_reply - server.requests[0].arrived
    assert run.manifest.details.counts["ok"] == 30 and refused == 0
    assert span > 3.5  # the input-token bucket bound: at 8 in flight and 20 ms the 30 would take 0.1 s
    pacing = run.manifest.details.pacing
    assert pacing is not None and set(pacing.limits) == {"requests", "input_tokens", "output_tokens"}
    assert pacing.paced and pacing.paced > 0


def test_a_server_that_states_nothing_is_not_paced_and_no_budget_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_SECRET)
    with FakeLLMServer("openai", limits=RateLimits(rpm=6000, state=False)) as server:
        run = run_generation(dataset="bench", model="openai:bench", base_url=server.base_url, samples=_samples(12),
                             home=tmp_path, concurrency=4)
    assert run.manifest.details.counts["ok"] == 12 and run.manifest.details.pacing is None
    assert not (tmp_path / BUDGET_DIR).exists()


def test_a_429_stating_an_empty_budget_holds_the_next_sends_back(tmp_path, monkeypatch):
    """A server refusing with its limits in the 429 (another user of the key spent them): the budget
    learns it from the refusal, so the retries do not meet a second refusal."""
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_SECRET)
    refused_at: list[float] = []

    def script(info):
        if info.index == 0:
            refused_at.append(time.monotonic())
            return error(429, "rate limited", headers={**_headers((60, 0)), "x-ratelimit-reset-requests": "1s",
                                                        "retry-after": "1"})
        return None

    with FakeLLMServer("openai", script=script) as server:
        run = run_generation(dataset="bench", model="openai:bench", base_url=server.base_url, samples=_samples(3),
                             home=tmp_path, concurrency=1)
        arrivals = [r.arrived for r in server.requests]
    assert run.manifest.details.counts["ok"] == 3 and len(arrivals) == 4
    # 60 a minute from empty: one request a second after the refusal, whatever Retry-After allowed
    assert arrivals[2] - arrivals[1] >= 0.9 and arrivals[3] - arrivals[2] >= 0.9
    assert run.manifest.details.pacing.refused == 1


def test_two_run_commands_on_one_key_share_the_budget(tmp_path, monkeypatch, capsys):
    """Two ``run`` processes against one server whose request bucket holds 6 and refills 3 a second:
    with one budget between them they are refused at most once (their first 2 + 2 requests fit);
    each believing the limit its own would meet the empty bucket again and again."""
    limits = RateLimits(rpm=180, start={"requests": 6})
    with FakeLLMServer("openai", latency=0.05, limits=limits) as server:
        env = {**os.environ, "OPENAI_API_KEY": OPENAI_SECRET, "PYTHONPATH": str(REPO)}
        procs = [subprocess.Popen(
            [sys.executable, "-m", "persobench", "--home", str(tmp_path), "run", "--dataset", "sample", "--limit",
             "12", "--seed", str(seed), "--model", "openai:fake", "--base-url", server.base_url, "--no-progress",
             "--concurrency", "2"], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for seed in (1, 2)]
        outputs = [p.communicate(timeout=120) for p in procs]
        refused = len(server.refusals)
        replies = server.replies_sent
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert replies == 24
    assert refused <= 1, refused
    assert all("paced by the server's stated limits (180 requests a minute)" in out for out, _ in outputs)
    assert len(list((tmp_path / BUDGET_DIR).glob("*.json"))) == 1


def test_the_fake_bucket_bound_counts_refill_and_returned_tokens():
    admitted = [{"prompt": 10, "max_tokens": 90, "completion": 10}] * 3
    # 200 tokens to start, 60 a second; each request costs 100 and gives 80 back 1 s after it was sent:
    # two go at once, the third needs 100 with 60 refilled by 1 s, when the 160 come back: sent at 1 s
    assert min_seconds(admitted, {"tokens": 3600}, {"tokens": 200}, latency=1.0) == pytest.approx(2.0)
    # without the tokens coming back it would wait for the refill alone: 40 more at 60 a second
    assert min_seconds([{"prompt": 10, "max_tokens": 90}] * 3, {"tokens": 3600}, {"tokens": 200}, latency=1.0) == \
        pytest.approx(100 / 60 + 1.0)
    assert min_seconds([{"prompt": 0, "max_tokens": 0}] * 21, {"requests": 600}, {"requests": 20}, 0.2) == \
        pytest.approx(0.1 + 0.2)


def test_run_says_how_the_stated_limits_paced_it_and_the_next_run_is_paced_from_its_first_request(
        tmp_path, monkeypatch, capsys):
    """Cold, ``auto`` sends 2 before any reply states a limit (a fixed 8 would send 8 into the 2 left);
    the next run, right after, reads the budget the first one left (nearly spent) and does not send
    its 8 at once into it."""
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_SECRET)
    with FakeLLMServer("openai", limits=RateLimits(rpm=240, start={"requests": 2})) as server:
        argv = ["--home", str(tmp_path), "run", "--dataset", "sample", "--model", "openai:m", "--base-url",
                server.base_url, "--no-progress"]
        code = cli_main([*argv, "--limit", "8", "--concurrency", "auto"])
        first = capsys.readouterr().out
        level = server.limits.buckets["requests"].level
        code2 = cli_main([*argv, "--limit", "16", "--seed", "1", "--concurrency", "8"])
        refused = len(server.refusals)
    # 8 at once into a bucket holding under 2 would be refused 6 times or more; reading the budget the
    # first run left, at most one request meets the bucket at the moment its stated reset and its
    # continuous refill disagree (1 run in 3 on a quiet machine), as in the two-run test below
    assert code == 0 and code2 == 0 and refused <= 1, refused
    assert level < 4  # nearly spent: what the second run started with (under a second's refill at 4 a second)
    assert "paced by the server's stated limits (240 requests a minute)" in first
    assert RunStore(tmp_path).runs()[0].manifest.details.pacing.paced >= 5
