"""Hardening, fourth round (issue 39, items 1-3: money and data), against real parts: fake judge
servers on 127.0.0.1, real `python -m persobench score` processes, real diskcache, a real Ray instance.

1. Judge passes running at once over the same pairs (threads of one process, or several processes)
   ask each distinct pair once: the first claims it, the others wait for its answer in the cache.
2. A spend ledger that is damaged (NaN, -Infinity, negative, `[]`, `null`, wrong types, cut short),
   deleted or made immutable stops the pass in one line naming the file (and the field), sends
   nothing more, and never loses a reply already paid for, locally and on Ray.
3. A reservation refused at the cap waits for the reservations in flight instead of being final,
   and a timed-out request is counted at its reserved cost (a retry after it reserves again).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Callable

import pytest

from persobench.cli import main as cli_main
from persobench.errors import PersoBenchError
from persobench.llm.response_cache import ResponseCache
from persobench.llm.retry import RetryPolicy
from persobench.llm.spend import SpendLedger
from persobench.llm.usage import estimate_prompt_tokens
from persobench.metrics.judge.labeller import UNANSWERED, JudgeLabeller, load_template, make_judge
from tests.fakes.fixtures import openai_server  # noqa: F401 - fixture
from tests.fakes.judge import judge_script, pair_of
from tests.fakes.servers import Action, RequestInfo, hang, reply
from tests.test_judge import _sample_run
from tests.test_llm import ANSWER_COST, _pairs
from tests.test_ray_executor import cluster  # noqa: F401 - fixture: a 2-CPU Ray instance for the module

ROOT = Path(__file__).resolve().parents[1]
#: USD per token of the priced judge (`_priced_judge`: $1000 per million tokens, in and out).
PRICE = 0.001


def _bound(pair: tuple[str, str]) -> float:
    """The upper bound reserved for one judge request: prompt estimate plus the whole token budget."""
    template = load_template()
    return (estimate_prompt_tokens(template.messages(*pair, structured=True)) + template.max_tokens) * PRICE


def _wait_for(condition: Callable[[], bool], timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what or condition}"
        time.sleep(0.02)


def _priced_judge(server, tmp_path: Path, *, max_cost: float | None, concurrency: int = 1, **kw):
    """A judge at $1000 per million tokens whose models-file entry declares its structured form, so
    its first requests are not serialized behind a probe of the server's form."""
    models = tmp_path / "models.toml"
    models.write_text(f'[models.priced]\nprovider = "openai"\nmodel = "judge-model"\nbase_url = "{server.base_url}"\n'
                      'price_input_per_mtok = 1000.0\nprice_output_per_mtok = 1000.0\n'
                      'structured_format = "json_schema"\n')
    return make_judge("priced", models_file=str(models), cache_dir=str(tmp_path / "responses"),
                      concurrency=concurrency, max_cost=max_cost, **kw)


def _held(gate: threading.Event) -> Callable[[RequestInfo], Action | None]:
    """A judge-script override: every reply waits for ``gate`` (then the label map answers)."""
    def hold(info: RequestInfo) -> None:
        gate.wait(120)
        return None
    return hold


def _quiet(server, at_least: int, seconds: float, timeout: float = 60.0) -> None:
    """Wait until the server has seen ``at_least`` requests and then none for ``seconds``."""
    deadline = time.monotonic() + timeout
    seen, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        count = len(server.requests)
        if count != seen:
            seen, since = count, time.monotonic()
        elif count >= at_least and time.monotonic() - since >= seconds:
            return
        time.sleep(0.05)


def _one_line(exc: BaseException) -> str:
    message = str(exc)
    assert "\n" not in message and "Traceback" not in message, message
    return message


# ---------------------------------------------------------------------------------------------
# 1. Concurrent judge passes over the same pairs ask each distinct pair once


def test_three_score_judge_commands_at_once_ask_each_distinct_pair_once(openai_server, tmp_path):
    """Three `score --judge` processes on one run used to pay three times (27 requests for 9 pairs)."""
    home = tmp_path / "home"
    store, samples = _sample_run(home, n=3)
    pairs = sum(2 + len(s.persona_sentences()) for s in samples)
    gate = threading.Event()
    openai_server.script = judge_script({}, default="entailment", then=_held(gate))
    _priced_judge(openai_server, tmp_path, max_cost=None)  # writes tmp_path/models.toml
    command = [sys.executable, "-m", "persobench", "--home", str(home), "score", "--no-progress",
               "--metrics", "c_score,ue_score,persona_coverage", "--judge", "priced", "--judge-concurrency", "16",
               "--judge-max-cost", "100"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PERSOBENCH_MODELS": str(tmp_path / "models.toml")}
    children = [subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for _ in range(3)]
    started = [threading.Event() for _ in children]
    outputs: list[list[str]] = [[] for _ in children]

    def read(k: int) -> None:
        for line in children[k].stdout:  # type: ignore[union-attr]
            outputs[k].append(line)
            if line.startswith("profile "):  # printed just before the pass plans and labels
                started[k].set()

    readers = [threading.Thread(target=read, args=(k,), daemon=True) for k in range(3)]
    for reader in readers:
        reader.start()
    try:
        for k, event in enumerate(started):
            assert event.wait(180), f"score process {k} never started its pass (exit status {children[k].poll()})"
        # All three are labelling: hold every answer until the requests stop coming.
        _quiet(openai_server, pairs, 3.0)
        gate.set()
        codes = [child.wait(180) for child in children]
    finally:
        gate.set()
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait(30)
    errors = [child.stderr.read() for child in children]  # type: ignore[union-attr]
    assert codes == [0, 0, 0], errors
    asked = Counter(pair_of(r) for r in openai_server.requests)
    assert len(asked) == pairs and set(asked.values()) == {1}, asked.most_common(3)
    scores = store.get("sample__judge_test__vanilla").read_table("scores")
    c_score = scores[scores["metric"] == "c_score"]
    assert len(c_score) == len(samples) and (c_score["value"] == 1.0).all()


def test_two_labellers_in_one_process_split_the_pairs_and_ask_each_once(openai_server, tmp_path):
    gate = threading.Event()
    openai_server.script = judge_script({}, then=_held(gate))
    judge = _priced_judge(openai_server, tmp_path, max_cost=None, concurrency=4)
    pairs = _pairs(6)
    labels: dict[str, list[str]] = {}

    def label(name: str) -> None:
        labeller = JudgeLabeller(judge)
        labels[name] = [p.label for p in labeller.predict(pairs)]
        labels[name + " stats"] = [labeller.stats.sent, labeller.stats.cached]  # type: ignore[list-item]

    threads = [threading.Thread(target=label, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    try:
        _quiet(openai_server, 4, 1.5)
    finally:
        gate.set()
        for thread in threads:
            thread.join(60)
    assert labels["a"] == labels["b"] == ["neutral"] * 6
    asked = Counter(pair_of(r) for r in openai_server.requests)
    assert len(asked) == 6 and set(asked.values()) == {1}, asked
    # Between them the two sent each pair once; what one sent the other read from the cache.
    sent = labels["a stats"][0] + labels["b stats"][0]
    assert sent == 6 and labels["a stats"][1] + labels["b stats"][1] == 6


# ---------------------------------------------------------------------------------------------
# 2. The spend ledger: damaged, deleted, immutable


DAMAGED = {
    "NaN": ('{"spent": NaN, "reserved": 0, "requests": 0}', '"spent"'),
    "-Infinity": ('{"spent": 0.6, "reserved": -Infinity, "requests": 3}', '"reserved"'),
    "Infinity": ('{"spent": Infinity, "reserved": 0, "requests": 3}', '"spent"'),
    "negative": ('{"spent": -0.6, "reserved": 0, "requests": 3}', '"spent"'),
    "huge": ('{"spent": 1e400, "reserved": 0, "requests": 3}', '"spent"'),
    "list": ("[]", "JSON object"),
    "null": ("null", "JSON object"),
    "empty object": ("{}", '"spent"'),
    "string": ('{"spent": "0.6", "reserved": 0, "requests": 3}', '"spent"'),
    "bool": ('{"spent": true, "reserved": 0, "requests": 3}', '"spent"'),
    "object": ('{"spent": 0.6, "reserved": {}, "requests": 3}', '"reserved"'),
    "fractional count": ('{"spent": 0.6, "reserved": 0, "requests": 2.5}', '"requests"'),
    "cut short": ('{"spent": 0.6, "rese', "not JSON"),
    "not UTF-8": (b'{"spent": 0.6\xff}', "not JSON"),
}


@pytest.mark.parametrize("content, field", DAMAGED.values(), ids=list(DAMAGED))
def test_a_damaged_ledger_is_one_line_naming_the_file_and_field_and_nothing_is_sent(openai_server, tmp_path,
                                                                                  content, field):
    openai_server.script = judge_script({})
    judge = _priced_judge(openai_server, tmp_path, max_cost=1.0)
    ledger = SpendLedger.for_invocation(tmp_path / "home", judge.max_cost, "score-1")
    ledger.path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        ledger.path.write_bytes(content)
    else:
        ledger.path.write_text(content)
    with pytest.raises(PersoBenchError) as raised:
        JudgeLabeller(judge, ledger=ledger).predict(_pairs(3))
    message = _one_line(raised.value)
    assert str(ledger.path) in message and field in message, message
    assert openai_server.requests == []
    with pytest.raises(PersoBenchError, match="spend ledger"):  # the library's totals say so too
        ledger.totals()


def _chattr(flag: str, path: Path) -> bool:
    return subprocess.run(["chattr", flag, str(path)], capture_output=True).returncode == 0


@pytest.mark.parametrize("damage", ["damaged", "deleted", "immutable"])
def test_a_ledger_damaged_deleted_or_made_immutable_mid_pass_stops_it_and_keeps_every_paid_reply(
        openai_server, tmp_path, damage):
    gate = threading.Event()
    openai_server.script = judge_script({}, then=_held(gate))
    judge = _priced_judge(openai_server, tmp_path, max_cost=100.0, concurrency=4)
    ledger = SpendLedger.for_invocation(tmp_path / "home", judge.max_cost, "score-1")
    failures: list[BaseException] = []

    def label() -> None:
        try:
            JudgeLabeller(judge, ledger=ledger).predict(_pairs(12))
        except BaseException as exc:  # noqa: BLE001 - checked below
            failures.append(exc)

    labelling = threading.Thread(target=label)
    labelling.start()
    immutable = False
    try:
        _wait_for(lambda: len(openai_server.requests) == 4, what="4 requests in flight")
        if damage == "damaged":
            ledger.path.write_text('{"spent": NaN, "reserved": 0, "requests": 0}')
        elif damage == "deleted":
            ledger.path.unlink()
        else:
            immutable = _chattr("+i", ledger.path)
            if not immutable:
                pytest.skip("chattr +i is not allowed here")
    finally:
        gate.set()
        labelling.join(60)
        if immutable:
            _chattr("-i", ledger.path)
    assert not labelling.is_alive() and len(failures) == 1, failures
    assert isinstance(failures[0], PersoBenchError), repr(failures[0])
    message = _one_line(failures[0])
    assert str(ledger.path) in message and "spend ledger" in message, message
    assert len(openai_server.requests) == 4  # nothing sent once the ledger could not be trusted
    with ResponseCache(tmp_path / "responses") as cache:
        assert len(cache) == 4  # the four replies in flight were paid for: all cached
    # The next pass asks only for the pairs that got no answer.
    openai_server.reset_records()
    again = JudgeLabeller(judge, ledger=SpendLedger.for_invocation(tmp_path / "home", judge.max_cost, "score-2"))
    assert [p.label for p in again.predict(_pairs(12))] == ["neutral"] * 12
    assert again.stats.cached == 4 and len(openai_server.requests) == 8


@pytest.mark.parametrize("damage", ["deleted", "damaged"])
def test_on_ray_a_ledger_deleted_or_damaged_mid_pass_stops_it_in_one_line_and_keeps_paid_replies(
        cluster, openai_server, tmp_path, capsys, monkeypatch, damage):
    """Under Ray the deleted ledger let 60 requests ($6.15) through a $1 cap, and a damaged one lost
    2 paid replies and reported "0 request(s), $0.0000"."""
    home = tmp_path / "home"
    _sample_run(home, n=8)
    _priced_judge(openai_server, tmp_path, max_cost=1.0)  # writes tmp_path/models.toml
    monkeypatch.setenv("PERSOBENCH_MODELS", str(tmp_path / "models.toml"))
    gate = threading.Event()
    openai_server.script = judge_script({}, then=_held(gate))
    ledgers: list[Path] = []

    def damage_it() -> None:
        try:
            _wait_for(lambda: len(openai_server.requests) >= 1, timeout=240, what="the first judge request")
            time.sleep(0.5)  # the other requests of the first round reserve and go out
            ledgers.extend((home / "spend").glob("*.json"))
            for path in ledgers:
                if damage == "deleted":
                    path.unlink()
                else:
                    path.write_text("[]")
        finally:
            gate.set()

    damager = threading.Thread(target=damage_it, daemon=True)
    damager.start()
    code = cli_main(["--home", str(home), "score", "--metrics", "c_score,persona_coverage", "--no-progress",
                     "--executor", "ray", "--judge", "priced", "--judge-max-cost", "1"])
    gate.set()
    damager.join(30)
    out = capsys.readouterr()
    assert len(ledgers) == 1, ledgers
    err = [line for line in out.err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1 and "Traceback" not in out.out + out.err, out
    assert "spend ledger" in err[0] and ledgers[0].name in err[0], err[0]
    sent = len(openai_server.requests)
    assert 1 <= sent <= 1.0 // _bound(_pairs(1)[0]), sent  # only reservations made before the damage went out
    with ResponseCache(home / "responses") as cache:
        assert len(cache) == sent  # every request answered was paid for, and is cached


# ---------------------------------------------------------------------------------------------
# 3. Refusals at the cap wait for the reservations in flight; timeouts cost their reservation


def test_a_refusal_at_the_cap_waits_for_the_reservations_in_flight(openai_server, tmp_path):
    """At a $0.50 cap and concurrency 8 the judge stopped after $0.034 of real spend."""
    openai_server.script = lambda info: reply('{"label": "neutral"}', usage=(10, 1), delay=0.05)
    judge = _priced_judge(openai_server, tmp_path, max_cost=0.5, concurrency=8)
    pairs = _pairs(20)
    assert 3 * _bound(pairs[0]) > judge.max_cost  # only two bounds fit at once
    labeller = JudgeLabeller(judge)
    assert [p.label for p in labeller.predict(pairs)] == ["neutral"] * 20
    stats = labeller.stats
    assert stats.over_cap == 0 and stats.sent == len(openai_server.requests) == 20
    assert stats.cost_usd == pytest.approx(20 * 11 * PRICE) and labeller.ledger.totals().reserved_usd == 0


def test_the_cap_still_holds_when_the_replies_cost_what_they_may(openai_server, tmp_path):
    openai_server.script = judge_script({})  # each answer reports 120 + 5 tokens: $0.125
    judge = _priced_judge(openai_server, tmp_path, max_cost=0.5, concurrency=8)
    pairs = _pairs(20)
    bound = _bound(pairs[0])
    labeller = JudgeLabeller(judge)
    labeller.predict(pairs)
    stats = labeller.stats
    # Sent while the spend so far plus one more bound fits: 0, 1, 2 answers spent, then 3 x 0.125 + bound > 0.5.
    expected = int((judge.max_cost - bound) // ANSWER_COST) + 1
    assert stats.sent == len(openai_server.requests) == expected and stats.over_cap == 20 - expected
    assert stats.cost_usd == pytest.approx(expected * ANSWER_COST) and stats.cost_usd <= judge.max_cost


def test_a_timed_out_request_is_counted_at_its_reserved_cost(openai_server, tmp_path):
    openai_server.script = lambda info: hang(5)
    judge = _priced_judge(openai_server, tmp_path, max_cost=10.0, retry=RetryPolicy(timeout=0.3, max_attempts=1))
    labeller = JudgeLabeller(judge)
    pair = _pairs(1)
    assert [p.label for p in labeller.predict(pair)] == [UNANSWERED]
    totals = labeller.ledger.totals()
    assert totals.spent_usd == pytest.approx(_bound(pair[0])) and totals.reserved_usd == 0
    assert labeller.stats.cost_usd == pytest.approx(_bound(pair[0])) and labeller.stats.timed_out == 1
    assert "--judge-timeout" in labeller.stats.first_error


@pytest.mark.parametrize("cap_bounds, requests", [(10.0, 2), (1.5, 1)])
def test_a_retry_after_a_timeout_reserves_again_and_is_not_sent_when_that_does_not_fit(openai_server, tmp_path,
                                                                                    cap_bounds, requests):
    pair = _pairs(1)
    bound = _bound(pair[0])
    openai_server.script = judge_script({}, then=lambda info: hang(5) if info.attempt == 1 else None)
    judge = _priced_judge(openai_server, tmp_path, max_cost=round(cap_bounds * bound, 6),
                          retry=RetryPolicy(timeout=0.3, max_attempts=3, base_delay=0.01))
    labeller = JudgeLabeller(judge)
    labels = [p.label for p in labeller.predict(pair)]
    assert len(openai_server.requests) == requests
    spent = labeller.ledger.totals().spent_usd
    if requests == 2:  # the timed-out attempt at its bound, the answer at its reported usage
        assert labels == ["neutral"] and spent == pytest.approx(bound + ANSWER_COST)
    else:  # a second bound does not fit under the cap: the request is not sent again
        assert labels == [UNANSWERED] and spent == pytest.approx(bound)
    assert labeller.stats.cost_usd == pytest.approx(spent) and spent <= judge.max_cost


def test_score_reports_timed_out_requests_at_their_reserved_cost(openai_server, tmp_path, capsys, monkeypatch):
    home = tmp_path / "home"
    _sample_run(home, n=1)
    _priced_judge(openai_server, tmp_path, max_cost=None)  # writes tmp_path/models.toml
    monkeypatch.setenv("PERSOBENCH_MODELS", str(tmp_path / "models.toml"))
    openai_server.script = judge_script({}, then=lambda info: hang(5) if info.attempt == 1 else None)
    code = cli_main(["--home", str(home), "score", "--metrics", "c_score", "--no-progress", "--judge", "priced",
                     "--judge-timeout", "0.5", "--judge-max-cost", "50"])
    out = capsys.readouterr().out
    pairs = len({pair_of(r) for r in openai_server.requests})
    assert code == 0 and len(openai_server.requests) == 2 * pairs > 0, out
    bounds = sum(_bound(pair) for pair in {pair_of(r) for r in openai_server.requests})
    assert f"{pairs} request(s) timed out, each counted at its reserved cost" in out, out
    assert f"cost ${bounds + pairs * ANSWER_COST:.4f}" in out, out  # not the answers' $0.125 each alone


def test_a_reservation_left_by_a_killed_process_counts_as_spent_and_is_not_waited_for(openai_server, tmp_path):
    import socket

    openai_server.script = judge_script({})
    judge = _priced_judge(openai_server, tmp_path, max_cost=0.5, concurrency=2)
    ledger = SpendLedger.for_invocation(tmp_path / "home", judge.max_cost, "score-1")
    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    killed.kill()
    killed.wait(30)
    left = {"spent": 0.0, "reserved": 0.4, "requests": 0, "holders": {f"{socket.gethostname()}/{killed.pid}": 0.4}}
    ledger.path.write_text(json.dumps(left))
    labeller = JudgeLabeller(judge, ledger=ledger)
    started = time.monotonic()
    assert [p.label for p in labeller.predict(_pairs(3))] == [UNANSWERED] * 3
    assert time.monotonic() - started < 30 and openai_server.requests == []
    assert labeller.stats.over_cap == 3
    totals = ledger.totals()  # the killed process's request may have been paid for: spent, not in flight
    assert (totals.spent_usd, totals.reserved_usd) == (0.4, 0.0)
