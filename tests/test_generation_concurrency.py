"""``--concurrency auto``: the AIMD rule, and a whole run against a server that refuses load.

The server is the real fake OpenAI-compatible server (HTTP on 127.0.0.1) with a capacity: a request
arriving while more than N are in flight gets a 429 with ``retry-after-ms``.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from benchmarks.generation import make_samples
from persobench.cli import main as cli_main
from persobench.generation import RetryPolicy, run_generation
from persobench.llm.concurrency import (FIRST_PROBE_ROUNDS, LATENCY_TOLERANCE, MAX_PROBE_ROUNDS, MEMORY_FILE,
                                               PROBE_BACKOFF, START, AdaptiveLimit, HeldLevel, LevelMemory,
                                               is_overload)
from persobench.errors import ErrorKind, ProviderError
from tests.fakes.fixtures import openai_server  # noqa: F401

TOO_MANY = ProviderError(ErrorKind.RATE_LIMIT, "429", status_code=429)
BAD_GATEWAY = ProviderError(ErrorKind.SERVER, "502", status_code=502)
BAD_REQUEST = ProviderError(ErrorKind.BAD_REQUEST, "400", status_code=400)


def attempt(limit: AdaptiveLimit, error: ProviderError | None = None, latency: float = 0.1, sent_at: float = 1e9,
            level: int | None = None):
    """One attempt through the limit: take a slot, give it back with this outcome (``level``: the
    requests in flight when it was sent; ``None`` leaves it unknown)."""
    asyncio.run(limit.acquire())
    limit.release(sent_at, error, latency, level)


def test_starts_low_and_grows_while_replies_come_back():
    limit = AdaptiveLimit(ceiling=32)
    assert limit.limit == START
    for _ in range(10):
        attempt(limit)
    assert limit.limit == START + 10  # nothing refused yet: one more per reply


def test_never_above_the_ceiling():
    limit = AdaptiveLimit(ceiling=5)
    for _ in range(50):
        attempt(limit)
    assert limit.limit == 5 and limit.highest == 5


def test_halves_on_429_and_5xx_but_not_on_other_errors():
    limit = AdaptiveLimit(ceiling=32)
    for _ in range(14):
        attempt(limit)
    assert limit.limit == 16
    attempt(limit, BAD_REQUEST)
    assert limit.limit == 16
    attempt(limit, TOO_MANY)  # the level it was sent at unknown: halves
    assert limit.limit == 8 and limit.safe == 15
    for _ in range(7):
        attempt(limit)  # back up to the safe level
    assert limit.limit == 15
    attempt(limit, BAD_GATEWAY, sent_at=float("inf"))  # sent after the decrease, at the safe level: once is noise
    assert limit.limit == 15 and limit.decreases == 1
    attempt(limit, BAD_GATEWAY, sent_at=float("inf"))  # twice in a round is not: halves again
    assert (limit.limit, limit.safe) == (7, 14) and limit.decreases == 2


def test_refusals_of_requests_sent_before_a_decrease_count_once():
    limit = AdaptiveLimit(ceiling=32)
    for _ in range(14):
        attempt(limit)
    attempt(limit, TOO_MANY, sent_at=0.0)
    assert limit.limit == 8
    for _ in range(5):  # the burst sent under the old limit comes back refused too
        attempt(limit, TOO_MANY, sent_at=0.0)
    assert limit.limit == 8 and limit.decreases == 1


def test_after_a_refusal_climbs_fast_to_the_safe_level_then_probes_slowly():
    limit = AdaptiveLimit(ceiling=32)
    for _ in range(7):
        attempt(limit)
    attempt(limit, TOO_MANY)  # refused at 9: 8 is safe, back to 4
    assert (limit.limit, limit.safe) == (4, 8)
    for _ in range(4):
        attempt(limit)
    assert limit.limit == 8  # one per reply up to the safe level
    for _ in range(8 * FIRST_PROBE_ROUNDS - 1):
        attempt(limit)
    assert limit.limit == 8  # then a few rounds (8 replies each) at the safe level ...
    attempt(limit)
    assert limit.limit == 9  # ... before probing above it


def test_the_safe_level_is_what_was_in_flight_when_the_refused_request_was_sent():
    limit = AdaptiveLimit(ceiling=32)
    for _ in range(14):
        attempt(limit)
    assert limit.limit == 16  # the fast climb ran ahead of the replies
    attempt(limit, TOO_MANY, level=9)  # refused when 9 were in flight
    assert (limit.limit, limit.safe) == (8, 8)  # 8 (not 15) is the safe level


def test_a_refusal_drops_the_limit_to_the_level_that_held_not_below():
    limit = AdaptiveLimit(ceiling=32)
    for _ in range(22):
        attempt(limit)
    assert limit.limit == 24
    attempt(limit, TOO_MANY, level=17)  # refused when 17 were in flight: 16 held
    assert (limit.limit, limit.safe, limit.decreases) == (16, 16, 1)  # not 12 (halved)
    for _ in range(16 * FIRST_PROBE_ROUNDS):
        attempt(limit)
    assert limit.limit == 17
    attempt(limit, TOO_MANY, level=17)  # the probe is refused: back to 16, not 8
    assert (limit.limit, limit.safe, limit.decreases) == (16, 16, 2)


def test_each_refusal_at_the_same_level_probes_less_often():
    limit = AdaptiveLimit(ceiling=32)
    for _ in range(14):
        attempt(limit)
    attempt(limit, TOO_MANY, level=9)
    rounds = FIRST_PROBE_ROUNDS
    for _ in range(3):
        replies = 0
        while limit.limit <= 8:  # climb back to 8, stay `rounds` rounds, then probe 9
            attempt(limit)
            replies += 1
        assert limit.limit == 9
        assert replies >= 8 * rounds
        attempt(limit, TOO_MANY, level=9)  # the probe is refused again
        assert limit.safe == 8 and limit.limit == 8
        rounds = min(rounds * PROBE_BACKOFF, MAX_PROBE_ROUNDS)


def test_stops_growing_while_latency_does_not_hold():
    limit = AdaptiveLimit(ceiling=32)
    attempt(limit, latency=0.1)
    grown = limit.limit
    for _ in range(20):
        attempt(limit, latency=0.1 * LATENCY_TOLERANCE * 3)
    assert not limit.latency_holds()
    assert limit.limit <= grown + 3  # the slow average catches up within a few replies, then it holds


def test_overload_means_429_or_5xx():
    assert is_overload(TOO_MANY) and is_overload(BAD_GATEWAY)
    assert is_overload(ProviderError(ErrorKind.OVERLOADED, "overloaded"))
    assert not is_overload(BAD_REQUEST) and not is_overload(None)
    assert not is_overload(ProviderError(ErrorKind.TIMEOUT, "slow"))


def test_auto_against_a_server_that_refuses_load(openai_server, tmp_path):
    server = openai_server
    server.latency, server.capacity, server.retry_after_ms = 0.05, 4, 300
    policy = RetryPolicy(base_delay=0.01, max_delay=0.05, timeout=30.0)
    samples = make_samples(90)  # distinct prompts, as the benchmark sends
    run = run_generation(dataset="bench", model="openai:fake", base_url=server.base_url, home=tmp_path,
                         samples=samples, concurrency="auto", max_concurrency=12, retry=policy)
    frame = run.read_table("generations")
    # No sample lost: every one has a row, every one succeeded in the end.
    assert sorted(frame["sample_id"]) == sorted(s.id for s in samples)
    assert (frame["status"] == "ok").all(), frame["status"].value_counts()
    stats = run.manifest.extra["concurrency"]
    assert server.refusals, "the run never went above the server's capacity: the 429 path was not exercised"
    assert stats["mode"] == "auto" and stats["decreases"] >= 1 and stats["highest"] <= 12
    assert server.max_inflight <= 12
    # No request sent before a Retry-After: nothing arrives between a 429 (plus the moment it takes
    # to reach the client, whose other workers may already be sending) and the end of its wait.
    arrivals = sorted(r.arrived for r in server.requests)
    for sent, wait in server.refusals:
        early = [t for t in arrivals if sent + 0.1 < t < sent + wait - 0.01]
        assert not early, f"{len(early)} request(s) within the {wait}s Retry-After of a 429"


def test_cli_accepts_auto_and_rejects_nonsense(tmp_path, capsys):
    assert cli_main(["--home", str(tmp_path), "run", "--model", "baseline:reference", "--concurrency", "auto",
                     "--max-concurrency", "4", "--no-progress"]) == 0
    capsys.readouterr()
    # refused by GenerationConfig's field, in the line the app's form shows for it (exit 2, nothing run)
    assert cli_main(["--home", str(tmp_path), "run", "--concurrency", "lots"]) == 2
    assert capsys.readouterr().err == "error: concurrency must be at least 1 or 'auto', got 'lots' (--concurrency)\n"


def test_one_refusal_at_the_safe_level_keeps_it_a_second_in_the_same_round_lowers_it():
    limit = AdaptiveLimit(ceiling=32)
    for _ in range(14):
        attempt(limit)
    attempt(limit, TOO_MANY, level=9)
    assert (limit.limit, limit.safe) == (8, 8)
    attempt(limit, TOO_MANY, level=8)  # once at a level that has been serving
    assert (limit.limit, limit.safe, limit.decreases) == (8, 8, 1)  # not lowered: it held
    attempt(limit, TOO_MANY, level=8)  # again before a whole round was served at 8
    assert (limit.limit, limit.safe, limit.decreases) == (4, 7, 2)  # one step down, and halved
    for _ in range(3):
        attempt(limit)
    assert limit.limit == 7
    for _ in range(7):
        attempt(limit)  # a whole round served at 7
    attempt(limit, TOO_MANY, level=7)  # a single refusal again: noise once more
    assert (limit.limit, limit.safe, limit.decreases) == (7, 7, 2)



def test_climbs_back_to_the_safe_level_even_while_latency_is_high():
    limit = AdaptiveLimit(ceiling=32)
    for _ in range(7):
        attempt(limit, latency=0.1)
    attempt(limit, TOO_MANY)  # the level unknown: halved
    assert (limit.limit, limit.safe) == (4, 8)
    for _ in range(4):
        attempt(limit, latency=0.1 * LATENCY_TOLERANCE * 5)  # a loaded server: slow replies
    assert not limit.latency_holds()
    assert limit.limit == 8  # back to the level that served
    for _ in range(8 * FIRST_PROBE_ROUNDS * 2):
        attempt(limit, latency=0.1 * LATENCY_TOLERANCE * 5)
    assert limit.limit == 8  # but no probe above it while replies are slow


def test_a_refusal_while_climbing_back_below_the_safe_level_does_not_halve_again():
    limit = AdaptiveLimit(ceiling=32)
    for _ in range(7):
        attempt(limit)
    attempt(limit, TOO_MANY)  # the level unknown: halved
    assert (limit.limit, limit.safe, limit.decreases) == (4, 8, 1)
    attempt(limit)
    attempt(limit, TOO_MANY, level=5)  # refused at 5 while back at 5 on the way to 8
    assert (limit.safe, limit.decreases) == (8, 1) and limit.limit == 5
    for _ in range(3):
        attempt(limit)
    attempt(limit, TOO_MANY, level=8)  # once back at the safe level, refusals count again
    attempt(limit, TOO_MANY, level=8)  # (twice in a round: the first may be noise)
    assert limit.decreases == 2 and (limit.limit, limit.safe) == (4, 7)


def test_the_lowest_level_refused_in_a_burst_sets_the_safe_level():
    limit = AdaptiveLimit(ceiling=32)
    for _ in range(14):
        attempt(limit)
    attempt(limit, TOO_MANY, sent_at=0.0, level=13)  # the first refusal of a burst to come back
    assert (limit.limit, limit.safe, limit.decreases) == (12, 12, 1)
    for level in (11, 15, 10):  # the rest of the burst, sent before the decrease
        attempt(limit, TOO_MANY, sent_at=0.0, level=level)
    assert (limit.limit, limit.safe, limit.decreases) == (9, 9, 1)  # a better guess, not a new decrease



# ---------------------------------------------------------------------------------------------
# the level that held, remembered per server for the next run


def _memory(tmp_path, url: str = "http://127.0.0.1:9/v1") -> LevelMemory:
    return LevelMemory(tmp_path, "openai", url)


def test_the_next_limit_starts_at_the_level_that_held_and_probes_as_late():
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        first = AdaptiveLimit(ceiling=32, memory=_memory(Path(tmp)))
        assert first.limit == START and first.start == START
        for level in range(2, 9):
            attempt(first, level=level)
        attempt(first, TOO_MANY, level=9)  # refused when 9 were in flight, just above the 8 served:
        rounds = FIRST_PROBE_ROUNDS * PROBE_BACKOFF  # the edge is found, as if a probe had been refused
        assert (first.limit, first.safe) == (8, 8)
        assert _memory(Path(tmp)).load() == HeldLevel(8, 9, rounds)
        for _ in range(8 * rounds):
            attempt(first, level=8)
        assert first.limit == 9
        attempt(first, TOO_MANY, level=9)  # the probe is refused: probe later, next time too
        rounds *= PROBE_BACKOFF
        assert _memory(Path(tmp)).load() == HeldLevel(8, 9, rounds)

        second = AdaptiveLimit(ceiling=32, memory=_memory(Path(tmp)))
        assert (second.limit, second.safe, second.start) == (8, 8, 8)
        for _ in range(8 * rounds - 1):
            attempt(second, level=8)
        assert second.limit == 8 and second.decreases == 0  # no probe before the remembered rounds
        attempt(second, level=8)
        assert second.limit == 9
        assert second.stats().start == 8

        capped = AdaptiveLimit(ceiling=5, memory=_memory(Path(tmp)))
        assert capped.limit == 5  # never above the ceiling, whatever was remembered


def test_before_any_refusal_the_level_served_is_remembered_and_the_climb_goes_on_from_it(tmp_path):
    first = AdaptiveLimit(ceiling=32, memory=_memory(tmp_path))
    for level in (1, 2, 3, 4, 5, 6):
        attempt(first, level=level)
    held = _memory(tmp_path).load()
    assert held is not None and held.refused is None and 4 <= held.level <= 6  # written when it doubled
    second = AdaptiveLimit(ceiling=32, memory=_memory(tmp_path))
    assert second.limit == held.level and second.safe is None  # nothing refused: slow start from there
    attempt(second, level=held.level)
    assert second.limit == held.level + 1


def test_a_capacity_that_fell_is_remembered_lower(tmp_path):
    _memory(tmp_path).save(HeldLevel(16, 17, MAX_PROBE_ROUNDS))
    limit = AdaptiveLimit(ceiling=32, memory=_memory(tmp_path))
    assert limit.limit == 16
    attempt(limit, TOO_MANY, level=10)
    attempt(limit, TOO_MANY, level=10)  # twice in a round at a level that was serving
    assert _memory(tmp_path).load().level == limit.safe == 10 and limit.limit == 8  # down to the level refused
    attempt(limit, TOO_MANY, level=6, sent_at=0.0)  # the rest of the burst: 5 is what holds
    assert _memory(tmp_path).load().level == limit.safe == limit.limit == 5


def test_memory_is_keyed_by_the_public_base_url_and_keeps_other_servers(tmp_path):
    secret_url = "http://user:pa55word@127.0.0.1:8000/v1/?api-key=qwerty123&api-version=2"
    _memory(tmp_path, secret_url).save(HeldLevel(6, 7, 16))
    _memory(tmp_path, "http://127.0.0.1:8001/v1").save(HeldLevel(3))
    LevelMemory(tmp_path, "anthropic", None).save(HeldLevel(5, 6))
    text = (tmp_path / MEMORY_FILE).read_text(encoding="utf-8")
    for secret in ("pa55word", "user", "qwerty123", "api-key"):
        assert secret not in text, secret
    servers = json.loads(text)["servers"]
    assert set(servers) == {"http://127.0.0.1:8000/v1/?api-version=2", "http://127.0.0.1:8001/v1",
                            "anthropic:default"}
    # the same server however its credentials are given
    assert _memory(tmp_path, "http://127.0.0.1:8000/v1/?api-version=2").load() == HeldLevel(6, 7, 16)
    assert _memory(tmp_path, "http://127.0.0.1:8001/v1/").load() == HeldLevel(3)
    assert _memory(tmp_path, "http://127.0.0.1:8002/v1").load() is None


def test_an_entry_an_older_version_wrote_under_a_credential_is_dropped_on_the_next_save(tmp_path):
    """Before query parameters were dropped from the public form, ``?pw=...`` reached the file as part
    of a key; carrying the other servers' entries over must not keep such a key forever."""
    leaked = {"http://127.0.0.1:8000/v1?pw=hunter2&session_id=s3cr3t": {"level": 4},
              "http://user:pa55word@127.0.0.1:8003/v1": {"level": 2},
              "http://127.0.0.1:8001/v1": {"level": 3}, "anthropic:default": {"level": 5}}
    (tmp_path / MEMORY_FILE).write_text(json.dumps({"version": 1, "servers": leaked}), encoding="utf-8")
    _memory(tmp_path, "http://127.0.0.1:8002/v1").save(HeldLevel(6))
    text = (tmp_path / MEMORY_FILE).read_text(encoding="utf-8")
    for secret in ("hunter2", "s3cr3t", "pa55word", "user"):
        assert secret not in text, secret
    assert set(json.loads(text)["servers"]) == {"http://127.0.0.1:8001/v1", "anthropic:default",
                                                "http://127.0.0.1:8002/v1"}


def test_a_damaged_or_unwritable_memory_never_stops_a_run(tmp_path):
    (tmp_path / MEMORY_FILE).write_text("{not json", encoding="utf-8")
    limit = AdaptiveLimit(ceiling=32, memory=_memory(tmp_path))
    assert limit.limit == START
    attempt(limit, level=1)
    assert _memory(tmp_path).load() == HeldLevel(1)  # rewritten whole
    blocked = tmp_path / "a-file"
    blocked.write_text("", encoding="utf-8")
    limit = AdaptiveLimit(ceiling=32, memory=LevelMemory(blocked, "openai", "http://127.0.0.1:9/v1"))
    attempt(limit, level=1)
    attempt(limit, TOO_MANY, level=3)  # the writes fail quietly
    assert limit.limit == 2


def test_auto_starts_where_the_last_run_against_the_same_server_held(openai_server, tmp_path):
    """Two runs against a server refusing above 4 in flight, a third against another server: the
    level that held is stored under the public base URL and is where the next run starts."""
    from tests.fakes import FakeLLMServer

    server = openai_server
    server.latency, server.capacity, server.retry_after_ms = 0.05, 4, 300
    policy = RetryPolicy(base_delay=0.01, max_delay=0.05, timeout=30.0)
    host = server.base_url.split("//", 1)[1]
    with_credentials = f"http://user:pa55word@{host}"

    def run_auto(base_url: str, first: int, home=tmp_path):
        return run_generation(dataset="bench", model="openai:fake", base_url=base_url, home=home,
                              samples=make_samples(40, first=first), concurrency="auto", max_concurrency=12,
                              retry=policy)

    first = run_auto(with_credentials, 0)
    assert first.manifest.extra["concurrency"]["start"] == START
    assert server.refusals, "the first run never met the server's capacity"
    text = (tmp_path / MEMORY_FILE).read_text(encoding="utf-8")
    assert "pa55word" not in text and "user" not in text
    [(key, held)] = json.loads(text)["servers"].items()
    assert key == server.base_url  # the public form
    assert 1 <= held["level"] <= server.capacity + 1 and held["refused"] is not None

    server.reset_records()
    second = run_auto(server.base_url, 1000)  # the same server, given without the credentials
    assert second.manifest.extra["concurrency"]["start"] == held["level"]
    assert (frame := second.read_table("generations"))["status"].eq("ok").all() and len(frame) == 40

    with FakeLLMServer("openai", latency=0.01) as other:
        third = run_auto(other.base_url, 2000)
    assert third.manifest.extra["concurrency"]["start"] == START  # nothing remembered for that one
    assert set(json.loads((tmp_path / MEMORY_FILE).read_text(encoding="utf-8"))["servers"]) == {
        server.base_url, other.base_url}


def test_a_stop_cancels_the_request_in_flight_and_the_worker_carries_on():
    """unless_stopping runs the request in the worker's own task: a stop cancels the request at
    once (Stopped), and the worker itself is not left cancelled (it records, then ends)."""
    from persobench.llm.session import Stopped, unless_stopping

    async def scenario():
        stopping = asyncio.Event()
        closed = []

        async def hanging():
            try:
                await asyncio.sleep(60)
            finally:
                closed.append(True)  # the request's own clean-up ran (the SDK closes its connection)

        async def worker():
            try:
                await unless_stopping(hanging(), stopping)
            except Stopped:
                await asyncio.sleep(0.01)  # still able to await: not cancelled
                return "stopped"
            return "finished"

        async def quick():
            return await unless_stopping(asyncio.sleep(0, result="reply"), stopping)

        assert await quick() == "reply"
        task = asyncio.ensure_future(worker())
        await asyncio.sleep(0.05)
        stopping.set()
        outcome = await asyncio.wait_for(task, 5)
        with pytest.raises(Stopped):  # once stopping, nothing more is sent
            await unless_stopping(asyncio.sleep(0), stopping)
        return outcome, closed

    assert asyncio.run(scenario()) == ("stopped", [True])
