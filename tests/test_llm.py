"""The LLM layer (persobench.llm) against real fake servers on 127.0.0.1: a spend cap shared by several
processes, hostile usage fields, answers nested too deep to parse, the judge's deadline flag, and
queued judge requests of a deleted run."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import threading
import time
from pathlib import Path

import pytest

from persobench.llm.response_cache import ResponseCache
from persobench.llm.retry import RetryPolicy
from persobench.llm.spend import SpendLedger
from persobench.metrics.judge.labeller import UNANSWERED, UNPARSEABLE, JudgeLabeller, make_judge
from tests.fakes.fixtures import openai_server  # noqa: F401 - fixture
from tests.fakes.judge import judge_script
from tests.fakes.servers import hang, nested, reply
from persobench.store.run_store import RunStore
from persobench.cli import main as cli_main
from tests.fakes import drip
from tests.fakes import error
from tests.cli_checks import run_cli

#: A judge priced at $1000 per million tokens: each fake answer (120 + 5 tokens) costs $0.125.
ANSWER_COST = 0.125


def _priced_judge(server, tmp_path: Path, *, max_cost: float | None, concurrency: int = 1, **kw):
    models = tmp_path / "models.toml"
    models.write_text(f'[models.priced]\nprovider = "openai"\nmodel = "judge-model"\nbase_url = "{server.base_url}"\n'
                      'price_input_per_mtok = 1000.0\nprice_output_per_mtok = 1000.0\n')
    return make_judge("priced", models_file=str(models), cache_dir=str(tmp_path / "responses"),
                      concurrency=concurrency, max_cost=max_cost, **kw)


def _pairs(n: int, tag: str = "") -> list[tuple[str, str]]:
    return [(f"I like item {tag}{i}.", f"Item {tag}{i} is liked.") for i in range(n)]


# --- B: one cap for several processes ------------------------------------------------------------------


def _label_in_child(judge, ledger, pairs, out) -> None:
    labeller = JudgeLabeller(judge, ledger=ledger)
    labeller.predict(pairs)
    out.put(labeller.stats.to_dict())


def test_several_processes_sharing_one_ledger_never_pass_the_cap(openai_server, tmp_path):
    openai_server.script = judge_script({})
    openai_server.latency = 0.05
    judge = _priced_judge(openai_server, tmp_path, max_cost=1.0, concurrency=2)
    ledger = SpendLedger.for_invocation(tmp_path / "home", judge.max_cost)
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    children = [context.Process(target=_label_in_child, args=(judge, ledger, _pairs(10, f"p{k}-"), out))
                for k in range(3)]
    for child in children:
        child.start()
    stats = [out.get(timeout=120) for _ in children]
    for child in children:
        child.join(timeout=30)
        assert child.exitcode == 0
    sent = len(openai_server.requests)
    # Each process alone would send 7 (7 x $0.125 = $0.875 and one more bound does not fit): 21 in all.
    assert 1 <= sent and sent * ANSWER_COST <= 1.0
    totals = ledger.totals()
    assert totals.spent_usd == pytest.approx(sent * ANSWER_COST) and totals.reserved_usd == 0
    assert totals.requests == sent
    # The real total is the sum of what each process reports.
    assert sum(s["cost_usd"] for s in stats) == pytest.approx(totals.spent_usd)
    assert sum(s["sent"] for s in stats) == sent and sum(s["over_cap"] for s in stats) == 30 - sent


def test_a_ledger_without_a_path_refuses_to_travel_to_another_process():
    import pickle

    from persobench.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="for_invocation"):
        pickle.dumps(SpendLedger(1.0))


# --- C: hostile usage fields ----------------------------------------------------------------------------


@pytest.mark.parametrize("usage", [(-1_000_000, -1_000_000), ("many", "few"), (120.5, 5), (10**12, 5)])
def test_a_judge_reporting_unusable_usage_is_refused_and_the_cap_still_holds(openai_server, tmp_path, usage):
    openai_server.script = lambda info: reply('{"label": "neutral"}', usage=usage)
    judge = _priced_judge(openai_server, tmp_path, max_cost=1.0)
    labeller = JudgeLabeller(judge)
    labels = [p.label for p in labeller.predict(_pairs(38))]
    stats = labeller.stats
    sent = len(openai_server.requests)
    # Each refused answer counts at its estimate (~$0.18): the $1 cap stops sending after a handful.
    assert 1 <= sent <= 6 and stats.refused_usage == sent and stats.sent == 0
    assert stats.cost_usd is not None and 0 < stats.cost_usd <= 1.0
    assert set(labels) == {UNANSWERED} and "unusable token usage" in stats.first_error
    assert "\n" not in stats.first_error
    with ResponseCache(tmp_path / "responses") as cache:
        assert len(cache) == 0  # never cached: a fixed server is asked again


def _generate(server, home, **kw):
    from persobench.generation import run_generation

    return run_generation(**{"dataset": "sample", "model": "openai:fake", "base_url": server.base_url, "home": home,
                             "limit": 3, "concurrency": 1, **kw})


@pytest.mark.parametrize("usage", [("twelve", "7"), (-5, -7)])
def test_a_generation_server_sending_unusable_token_counts_fails_those_samples_in_one_line(openai_server, tmp_path,
                                                                                           usage):
    openai_server.script = lambda info: reply("Hello there.", usage=usage)
    run = _generate(openai_server, tmp_path, fail_fast_after=0)
    frame = run.read_table("generations")
    assert set(frame["status"]) == {"api_error"}
    assert all("unusable token usage" in e and "\n" not in e for e in frame["error"])
    usage_record = run.manifest.extra["usage"]
    assert usage_record["prompt_tokens"] >= 0 and usage_record["completion_tokens"] >= 0
    # Nothing was cached, so the rerun against a healed server completes.
    openai_server.script = None
    again = _generate(openai_server, tmp_path)
    assert set(again.read_table("generations")["status"]) == {"ok"}


def test_counts_an_older_version_cached_unchecked_are_dropped_not_a_crash(openai_server, tmp_path):
    from persobench.generation import plan_generation
    from persobench.generation.config import GenerationConfig
    from persobench.providers.base import Completion
    from persobench.store.run_store import RunStore

    config = GenerationConfig(dataset="sample", model="openai:fake", base_url=openai_server.base_url, limit=2)
    plan = plan_generation(config, store=RunStore(tmp_path))
    with ResponseCache(plan.cache_dir) as cache:
        for key in plan.keys:
            cache.set(key, Completion("Cached.", "stop", "12", "7"), latency=0.1)  # type: ignore[arg-type]
    run = _generate(openai_server, tmp_path, limit=2)
    frame = run.read_table("generations")
    assert run.manifest.status == "completed" and frame["cached"].all() and len(openai_server.requests) == 0
    assert frame["prompt_tokens"].isna().all()  # the counts are dropped, the paid-for text stays


# --- D: an answer nested 100,000 deep ---------------------------------------------------------------------


def test_a_deeply_nested_answer_is_unparseable_now_and_from_the_cache(openai_server, tmp_path):
    openai_server.script = lambda info: reply(nested(), usage=(120, 5))
    judge = _priced_judge(openai_server, tmp_path, max_cost=None)
    first = JudgeLabeller(judge)
    assert [p.label for p in first.predict(_pairs(2))] == [UNPARSEABLE, UNPARSEABLE]
    assert first.stats.unparseable == 2 and first.stats.sent == 2
    openai_server.script = judge_script({})  # healthy now; the cached answers are read, not re-asked
    again = JudgeLabeller(judge)
    assert [p.label for p in again.predict(_pairs(2))] == [UNPARSEABLE, UNPARSEABLE]
    assert again.stats.cached == 2 and again.stats.unparseable == 2 and len(openai_server.requests) == 2


# --- E: the judge's deadline, and a deleted run's queued requests --------------------------------------------


def test_a_hung_judge_request_fails_at_its_deadline_naming_the_judge_flag(openai_server, tmp_path):
    openai_server.script = lambda info: hang(5)
    judge = _priced_judge(openai_server, tmp_path, max_cost=None, retry=RetryPolicy(timeout=0.3, max_attempts=1))
    labeller = JudgeLabeller(judge)
    started = time.monotonic()
    assert [p.label for p in labeller.predict(_pairs(1))] == [UNANSWERED]
    assert time.monotonic() - started < 3
    assert "--judge-timeout is a deadline" in labeller.stats.first_error
    assert "--timeout is" not in labeller.stats.first_error


def test_score_takes_a_judge_timeout_flag(tmp_path, capsys):
    from persobench.cli.judge_flags import add_arguments, judge_from_args

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    add_arguments(sub.add_parser("score"))
    args = parser.parse_args(["score", "--judge", "openai:gpt-4o-mini", "--judge-timeout", "2.5"])
    judge = judge_from_args(args, tmp_path)
    assert judge.retry.timeout == 2.5
    # Refused by the judge's field table in the words of a run's --timeout (the same bounds), one line
    # naming the flag, exit 2, nothing scored: the line the app's form shows for the same value.
    from persobench.cli import main

    for bad, shown in (("0", "0"), ("-1", "-1"), ("nan", "nan"), ("inf", "inf"), ("soon", "'soon'")):
        assert main(["--home", str(tmp_path), "score", "--judge", "openai:gpt-4o-mini", "--judge-timeout", bad]) == 2
        said = capsys.readouterr().err
        assert said == (f"error: judge_timeout must be a finite number > 0 (seconds for the whole request), got "
                        f"{shown} (--judge-timeout)\n"), said


@pytest.mark.parametrize("through", ["score_run", "score command"])
def test_deleting_a_run_stops_its_queued_judge_requests(openai_server, tmp_path, through):
    """One run (score_run) and the score command's pass (pipeline.score, what `score --judge` and the
    app's judge job run: it labels each run's pairs for that run; it sent all 10 before) alike."""
    from persobench import pipeline
    from persobench.datasets import load_dataset
    from persobench.errors import PersoBenchError
    from persobench.metrics.backends import get_profile
    from persobench.scoring import score_run
    from persobench.store.run_store import RunStore

    store = RunStore(tmp_path / "home")
    openai_server.script = None
    run = _generate(openai_server, store.home, limit=10)
    openai_server.reset_records()
    openai_server.latency = 0.2
    openai_server.script = judge_script({})
    profile = get_profile("offline", judge=_priced_judge(openai_server, tmp_path, max_cost=None))

    def delete_soon() -> None:
        while len(openai_server.requests) < 2:
            time.sleep(0.02)
        store.delete(run.run_id)

    deleter = threading.Thread(target=delete_soon)
    deleter.start()
    report = None
    try:
        if through == "score_run":
            score_run(store.get(run.run_id), {s.id: s for s in load_dataset("sample")}, profile=profile,
                      metrics=["c_score"])
        else:
            report = pipeline.score([run.run_id], store=store, profile=profile, metrics=["c_score"])
    except PersoBenchError as exc:  # the run is gone: writing its scores fails in one line, never a traceback
        assert through == "score_run" and "\n" not in str(exc)
    deleter.join(timeout=30)
    assert not deleter.is_alive() and not store.run_path(run.run_id).exists()
    asked = len(openai_server.requests)
    time.sleep(0.5)
    assert len(openai_server.requests) == asked  # nothing more goes out after the deletion
    assert 2 <= asked <= 4, json.dumps([r.prompt[:60] for r in openai_server.requests])
    if report is not None:
        assert report.judge.run_deleted >= 1 and report.judge.unanswered == 10 - asked and not report.complete


def test_a_session_given_no_run_keeps_the_callers_deleted_run_check(openai_server, tmp_path):
    """A caller's own sending_for block holds for a session asked without a run path."""
    from persobench.llm.session import sending_for
    from persobench.metrics.judge.labeller import UNANSWERED
    from persobench.metrics.judge.judge_session import JudgeSession

    openai_server.script = judge_script({})
    session = JudgeSession(_priced_judge(openai_server, tmp_path, max_cost=None))
    with sending_for(tmp_path / "a-deleted-run"):
        answers = session.label(_pairs(3))
    assert openai_server.requests == [] and session.stats.run_deleted >= 1 and session.stats.unanswered == 3
    assert {answers.label(pair) for pair in _pairs(3)} == {UNANSWERED}
    assert [p.label for p in answers.predict(_pairs(3))] == [UNANSWERED] * 3


# --- per-pass stats: a session of one's own, no process-wide counts ---------------------------------------


def test_a_session_owns_its_labeller_stats_and_ledger(openai_server, tmp_path):
    from persobench.metrics import score_samples
    from persobench.metrics.backends import get_profile
    from persobench.metrics.judge.judge_session import JudgeSession
    from persobench.records import PersonaSet, Sample, Turn

    openai_server.script = judge_script({})
    judge = _priced_judge(openai_server, tmp_path, max_cost=10.0)
    persona = PersonaSet("User2", ("I like tea.", "I own a cat."))
    samples = [Sample(f"s:{i}", "s", (persona,), (Turn("User1", "Hi."),), "User2", f"Reply {i}.")
               for i in range(2)]
    replies = {"s:0": "I drink tea.", "s:1": "My cat sleeps."}
    profile = get_profile("offline", judge=judge)
    ledger = SpendLedger.for_invocation(tmp_path / "home", judge.max_cost, "score-1")
    mine = JudgeSession(judge, ledger=ledger)
    score_samples(samples, replies, profile=profile, metrics=["c_score"], judge=mine)
    sent = len(openai_server.requests)
    stats = mine.stats
    assert sent > 0 and stats.sent == sent and stats.cost_usd == pytest.approx(sent * ANSWER_COST)
    assert ledger.totals().spent_usd == pytest.approx(stats.cost_usd)
    assert ledger.path == tmp_path / "home" / "spend" / "score-1.json"
    # The same pairs again through the session: answered from its memory, nothing read, sent or counted.
    score_samples(samples, replies, profile=profile, metrics=["c_score"], judge=mine)
    assert mine.stats == stats and len(openai_server.requests) == sent
    # Another session counts only its own work (the response cache answers it).
    other = JudgeSession(judge)
    score_samples(samples, replies, profile=profile, metrics=["c_score"], judge=other)
    assert (other.stats.cached, other.stats.sent) == (sent, 0) and mine.stats == stats
    # Counts from several labellers (processes) add up.
    total = type(stats).from_dict(stats.to_dict())
    total.add(stats)
    assert total.sent == 2 * sent and total.cost_usd == pytest.approx(2 * stats.cost_usd)


def test_score_against_a_judge_reporting_negative_usage_keeps_the_cap_and_says_why(openai_server, tmp_path, capsys,
                                                                                   monkeypatch):
    from persobench.cli import main as cli_main
    from tests.test_judge import _sample_run

    _sample_run(tmp_path / "home", n=5)
    judge = _priced_judge(openai_server, tmp_path, max_cost=1.0)  # writes tmp_path/models.toml
    monkeypatch.setenv("PERSOBENCH_MODELS", str(tmp_path / "models.toml"))
    openai_server.script = lambda info: reply('{"label": "neutral"}', usage=(-10**6, -10**6))
    code = cli_main(["--home", str(tmp_path / "home"), "score", "--metrics", "c_score,persona_coverage",
                     "--no-progress", "--judge", "priced", "--judge-max-cost", str(judge.max_cost)])
    out = capsys.readouterr()
    assert code == 1 and "Traceback" not in out.out + out.err
    sent = len(openai_server.requests)
    assert 1 <= sent <= 6  # each refused answer counts at its estimate (~$0.18), never at "-$2,000"
    assert f"{sent} refused for unusable token usage" in out.out and "over the cost cap" in out.out
    assert "cost $-" not in out.out and "prompt_tokens -1000000 is negative" in out.out


# ---------------------------------------------------------------------------------------------
# Hardening, second round (issue 17): the edges a fault sweep found, against real parts


def test_timeout_is_a_deadline_for_the_whole_request(openai_server, tmp_path):
    openai_server.script = lambda info: drip(interval=0.3)  # ~100 bytes: 30 s, no read waits 2 s
    home = tmp_path / "home"
    started = time.monotonic()
    assert run_cli(home, openai_server, "--limit", "1", "--max-attempts", "1", "--timeout", "2") == 3
    assert time.monotonic() - started < 15
    [run] = RunStore(home).runs()
    [err] = run.read_table("generations")["error"]
    assert err.startswith("timeout") and "2" in err, err


def test_long_retry_after_is_announced_with_its_length_and_reason(openai_server, tmp_path, capsys):
    openai_server.script = lambda info: (error(429, "slow down", headers={"Retry-After": "2"})
                                         if info.attempt == 1 else None)
    home = tmp_path / "home"
    assert cli_main(["--home", str(home), "run", "--model", "openai:fake", "--base-url", openai_server.base_url,
                     "--limit", "1", "--concurrency", "1"]) == 0
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if "waiting" in line]
    assert notes, err
    assert "2 s" in notes[0] and "Retry-After" in notes[0] and "429" in notes[0], notes[0]
