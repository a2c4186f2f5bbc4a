"""The LLM judge (`score --judge`): NLI labels from a fake judge server (real HTTP on 127.0.0.1)
answering from a fixed label map, turned into C score, UE score and persona coverage by the metric
code; cached, resumable, counted when malformed, and never on a board beside NLI-model numbers."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from persobench.cli import main as cli_main
from persobench.errors import ConfigurationError
from persobench.metrics import score_samples
from persobench.metrics.backends import get_profile
from persobench.metrics.judge.labeller import (
    DEFAULT_PROMPT, LABEL_SCHEMA, TEMPLATE_DIR, UNPARSEABLE, JudgeError, judge_of_profile, labeller_note,
    load_template, make_judge, parse_label,
)
from persobench.metrics.judge.judge_session import JudgeSession
from persobench.records import PersonaSet, Sample, Turn
from persobench.store.run_store import RunManifest, RunStore
from tests.fakes.fixtures import anthropic_server, openai_server  # noqa: F401 - fixtures
from tests.fakes.judge import judge_script, pair_of
from tests.fakes.servers import error, hang
from tests.test_llm import ANSWER_COST
from tests.fakes.servers import Action
from typing import Callable
from collections import Counter
from persobench.metrics.judge.labeller import JudgeLabeller
from persobench.errors import PersoBenchError
from tests.fakes.servers import RequestInfo
from persobench.llm.response_cache import ResponseCache
from persobench.llm.retry import RetryPolicy
from persobench.llm.spend import SpendLedger
from persobench.metrics.judge.labeller import UNANSWERED
from tests.test_llm import _pairs
from persobench.llm.usage import estimate_prompt_tokens
from tests.fakes.servers import reply
import threading

ROOT = Path(__file__).resolve().parents[1]

#: sha256 of nli-judge-1.toml. Editing the prompt changes what judge numbers mean: put the new text
#: in a new file with a new version instead (the version is in every judge profile key).
PINNED_TEMPLATE = "cdc9bda70835afd7"


# --- prompt, parsing, identity ------------------------------------------------------------------------


def test_the_shipped_prompt_is_pinned_to_its_version():
    raw = (TEMPLATE_DIR / f"{DEFAULT_PROMPT}.toml").read_bytes()
    assert hashlib.sha256(raw).hexdigest()[:16] == PINNED_TEMPLATE, "new prompt text needs a new version file"
    template = load_template()
    assert template.version == DEFAULT_PROMPT and template.sha256 == f"sha256:{PINNED_TEMPLATE}"
    # Filled in one pass: a premise quoting the placeholder is data, not a slot.
    system, user = template.messages("I say {hypothesis}.", "Hi.", structured=False)
    assert "<premise>\nI say {hypothesis}.\n</premise>\n<hypothesis>\nHi.\n</hypothesis>" in user["content"]
    assert user["content"].endswith("exactly one word: entailment, neutral or contradiction.")
    with pytest.raises(ConfigurationError, match="unknown judge prompt 'nli-judge-0'; known: nli-judge-1"):
        load_template("nli-judge-0")


@pytest.mark.parametrize("text, structured, expected", [
    ('{"label": "entailment"}', True, "entailment"),
    ('  {"label": "Contradiction"}\n', True, "contradiction"),
    ('{"label": "entailment", "why": "x"}', True, UNPARSEABLE),
    ('{"label": "maybe"}', True, UNPARSEABLE),
    ("entailment", True, UNPARSEABLE),
    ("Neutral.", False, "neutral"),
    ("contradiction\n", False, "contradiction"),
    ("Probably entailment", False, UNPARSEABLE),
    ("entailment or neutral", False, UNPARSEABLE),
    ("", False, UNPARSEABLE),
])
def test_a_label_is_read_in_one_strict_form_or_not_at_all(text, structured, expected):
    assert parse_label(text, structured=structured) == expected


def test_the_profile_key_carries_the_judge_spec_and_prompt_version(tmp_path):
    judge = make_judge("openai:gpt-4o-mini", cache_dir=str(tmp_path))
    profile = get_profile("offline", judge=judge)
    assert profile.key == "offline+judge=openai:gpt-4o-mini,prompt=nli-judge-1"
    assert judge_of_profile(profile.key) == "openai:gpt-4o-mini,prompt=nli-judge-1"
    assert profile.spec("nli").source == "judge" and profile.describe()["judge"]["prompt"] == "nli-judge-1"
    served = make_judge("openai:llama3.1:8b", base_url="http://user:pw@localhost:11434/v1", plain=True)
    key = get_profile("standard", judge=served).key
    assert key == "standard+judge=openai:llama3.1:8b@localhost:11434,prompt=nli-judge-1,answer=word"
    assert "pw" not in key
    assert labeller_note(key) == "NLI labels by LLM judge openai:llama3.1:8b@localhost:11434 (prompt nli-judge-1, " \
                                 "one-word answers)"
    assert labeller_note("standard", ["cross-encoder/nli-deberta-v3-base"]) == \
        "NLI labels by NLI model cross-encoder/nli-deberta-v3-base"
    with pytest.raises(ConfigurationError, match="both label the NLI pairs"):
        get_profile("offline", {"nli": "none"}, judge=judge)
    with pytest.raises(ConfigurationError, match="cannot label NLI pairs"):
        make_judge("baseline:reference")
    with pytest.raises(ConfigurationError, match="prices are unknown"):
        make_judge("openai:my-model", base_url="http://localhost:8000/v1", max_cost=1.0)


# --- hand-computed metrics from a label map -----------------------------------------------------------

P0 = ("I love cats.", "I have two dogs.")
P1 = ("I am a teacher.", "I hate mornings.", "I live in Oslo.")
P4 = ("I like jazz.", "I am tall.")
R = {"s:0": "I adore my cats.", "s:1": "I sleep in on weekends.", "s:2": "Chess is my hobby.",
     "s:3": "Hello there.", "s:4": "Jazz all day."}
REF = {"s:0": "Yes, I love my cats.", "s:1": "I teach math.", "s:4": "Jazz is great."}

LABEL_MAP = {
    (" ".join(P0), R["s:0"]): "entailment", (REF["s:0"], R["s:0"]): "entailment",
    (P0[0], R["s:0"]): "entailment", (P0[1], R["s:0"]): "neutral",
    (" ".join(P1), R["s:1"]): "contradiction",  # its reference pair and first sentence: the default, neutral
    (P1[1], R["s:1"]): "contradiction", (P1[2], R["s:1"]): "entailment",
    ("I play chess.", R["s:2"]): "entailment",  # persona text == its only sentence: one request for both
    (" ".join(P4), R["s:4"]): "Probably entailment",  # malformed: no c_score, p_consistency, ue_score
    (REF["s:4"], R["s:4"]): "entailment", (P4[0], R["s:4"]): "entailment",
    (P4[1], R["s:4"]): "entailment, I think",  # malformed: no persona_coverage
}
#: By hand from LABEL_MAP (c: entailment 1 / neutral 0 / contradiction -1; ue: 2 both entail, 1 persona
#: only, else 0; coverage: share of sentences labelled entailment).
EXPECTED = {
    "c_score": {"s:0": 1.0, "s:1": -1.0, "s:2": 1.0},
    "p_consistency": {"s:0": 1.0, "s:1": 0.0, "s:2": 1.0},
    "ue_score": {"s:0": 2.0, "s:1": 0.0},
    "persona_coverage": {"s:0": 0.5, "s:1": 1 / 3, "s:2": 1.0},
}
DISTINCT_PAIRS = 4 + 5 + 1 + 4  # s:0, s:1, s:2 (deduplicated), s:4; s:3 has no persona
NLI_METRICS = ["c_score", "p_consistency", "ue_score", "persona_coverage"]


def _samples() -> list[Sample]:
    def sample(sid: str, persona: tuple[str, ...], reference: str) -> Sample:
        personas = (PersonaSet("User2", persona),) if persona else ()
        return Sample(sid, "s", personas, (Turn("User1", "Tell me about you."),), "User2", reference)

    return [sample("s:0", P0, REF["s:0"]), sample("s:1", P1, REF["s:1"]), sample("s:2", ("I play chess.",), ""),
            sample("s:3", (), "Hi."), sample("s:4", P4, REF["s:4"])]


def _judged(judge, metrics, samples=None):
    """``score_samples`` under the offline profile with ``judge``, through a session of its own: the
    result and what the session's judge did."""
    session = JudgeSession(judge)
    result = score_samples(_samples() if samples is None else samples, R, profile=get_profile("offline", judge=judge),
                           metrics=metrics, judge=session)
    return result, session.stats


def _values(result, metric: str) -> dict[str, float]:
    rows = result.scores[result.scores["metric"] == metric]
    return dict(zip(rows["sample_id"], rows["value"]))


def test_scores_equal_the_values_computed_by_hand_from_the_label_map(openai_server, tmp_path):
    openai_server.script = judge_script(LABEL_MAP)
    judge = make_judge("openai:judge-model", base_url=openai_server.base_url, cache_dir=str(tmp_path / "responses"),
                       concurrency=4)
    profile = get_profile("offline", judge=judge)
    result, stats = _judged(judge, NLI_METRICS)
    for metric, expected in EXPECTED.items():
        assert _values(result, metric) == pytest.approx(expected), metric
    assert result.profile == profile.key
    # One request per distinct pair, each asking for the label through a schema whose label is an enum.
    assert len(openai_server.requests) == DISTINCT_PAIRS
    assert {pair_of(r) for r in openai_server.requests} == set(LABEL_MAP) | {
        (REF["s:1"], R["s:1"]), (P1[0], R["s:1"])}
    body = openai_server.requests[0].body
    assert body["response_format"]["json_schema"]["schema"] == LABEL_SCHEMA
    assert body["temperature"] == 0 and body["max_tokens"] == load_template().max_tokens
    # The malformed answers are counted, and the samples they feed get no value (never a guess).
    assert (stats.unparseable, stats.sent, stats.cached) == (2, DISTINCT_PAIRS, 0)
    for metric in ("c_score", "p_consistency", "ue_score", "persona_coverage"):
        prov = result.provenance[metric]
        assert prov["unlabelled"] == 1 and "1 sample(s) without a value" in prov["reason"], metric
        assert prov["model_id"] == f"judge {judge.model_name}" and "nli-judge-1" in prov["metric_version"]
    details = result.persona_details.set_index(["sample_id", "persona_index"])["nli_label"]
    assert details[("s:4", 1)] == UNPARSEABLE and details[("s:0", 1)] == "neutral"

    # An identical rerun (a session of its own) sends nothing: every answer comes from the response cache.
    again, stats = _judged(judge, NLI_METRICS)
    assert len(openai_server.requests) == DISTINCT_PAIRS
    assert _values(again, "c_score") == _values(result, "c_score")
    assert (stats.cached, stats.sent, stats.unparseable) == (DISTINCT_PAIRS, 0, 2)  # cached malformed answers count
    # Without a session given, the call opens one of its own: the same values, nothing more sent.
    assert _values(score_samples(_samples(), R, profile=profile, metrics=NLI_METRICS), "c_score") == \
        _values(result, "c_score")
    assert len(openai_server.requests) == DISTINCT_PAIRS


def test_plain_answers_are_bare_words_read_strictly(openai_server, tmp_path):
    openai_server.script = judge_script(LABEL_MAP)
    judge = make_judge("openai:judge-model", base_url=openai_server.base_url, cache_dir=str(tmp_path), plain=True)
    result, stats = _judged(judge, ["c_score"])
    assert _values(result, "c_score") == EXPECTED["c_score"]
    assert all("response_format" not in r.body for r in openai_server.requests)
    assert stats.unparseable == 1


def test_a_judge_failing_every_request_stops_with_one_line(openai_server, tmp_path, capsys):
    openai_server.script = lambda info: error(401, "bad key")
    judge = make_judge("openai:judge-model", base_url=openai_server.base_url, cache_dir=str(tmp_path), concurrency=1)
    with pytest.raises(JudgeError, match=r"the first 3 request\(s\) all failed: authentication HTTP 401"):
        score_samples(_samples()[:3], R, profile=get_profile("offline", judge=judge), metrics=["c_score"])
    assert len(openai_server.requests) == 3  # not retried: a 401 does not heal


def test_the_cost_cap_stops_sending_and_leaves_the_rest_unlabelled(openai_server, tmp_path):
    models = tmp_path / "models.toml"
    models.write_text(f'[models.priced]\nprovider = "openai"\nmodel = "judge-model"\nbase_url = "{openai_server.base_url}"\n'
                      'price_input_per_mtok = 1000.0\nprice_output_per_mtok = 1000.0\n')
    openai_server.script = judge_script(LABEL_MAP)
    # A request's bound: ~(prompt chars / 4 + 16) tokens x $0.001 ~= $0.18; each answer reports 125 tokens
    # ($0.125). Under a $0.35 cap: $0.125 spent, then $0.125 + 0.18 fits, then $0.25 + 0.18 does not.
    judge = make_judge("priced", models_file=str(models), cache_dir=str(tmp_path / "r"), concurrency=1, max_cost=0.35)
    result, stats = _judged(judge, ["c_score"])
    assert len(openai_server.requests) == stats.sent == 2 and stats.unanswered == 2
    assert stats.cost_usd == pytest.approx(0.25)
    assert _values(result, "c_score") == {"s:0": 1.0, "s:1": -1.0}
    assert result.provenance["c_score"]["unlabelled"] == 2


# --- the command: dry run, resume after a kill, boards --------------------------------------------------

def _sample_run(home: Path, n: int = 3) -> tuple[RunStore, list]:
    from persobench.datasets import load_dataset

    samples = load_dataset("sample")[:n]
    store = RunStore(home)
    run = store.create(RunManifest(run_id="sample__judge_test__vanilla", dataset="sample",
                                   sample_ids=tuple(s.id for s in samples), model={"label": "replier"},
                                   mode="vanilla", template="t", template_hash="h"))
    run.write_table("generations", pd.DataFrame({
        "sample_id": [s.id for s in samples], "status": ["ok"] * n,
        "response": [f"Reply number {i}: I like plants." for i in range(n)], "latency": [1.0] * n}))
    run.update(status="completed")
    return store, samples


def _score_args(home: Path, server, *extra: str) -> list[str]:
    return ["--home", str(home), "score", "--metrics", "c_score,ue_score,persona_coverage", "--no-progress",
            "--judge", "openai:judge-model", "--judge-base-url", server.base_url, *extra]


def test_dry_run_shows_prompt_pairs_tokens_and_cost_and_sends_nothing(openai_server, tmp_path, capsys):
    store, samples = _sample_run(tmp_path)
    pairs = sum(2 + len(s.persona_sentences()) for s in samples)
    assert cli_main(_score_args(tmp_path, openai_server, "--dry-run")) == 0
    out = capsys.readouterr().out
    assert "prompt nli-judge-1 (sha256:" in out and "<premise>\n{premise}\n</premise>" in out
    assert f"sample__judge_test__vanilla: {pairs} pair(s), 0 cached, {pairs} to send" in out
    assert f"total: {pairs} distinct pair(s), 0 in the response cache, {pairs} request(s) to send, ~" in out
    assert "estimated cost at most unknown (no prices for this judge)" in out
    assert openai_server.requests == [] and not store.get("sample__judge_test__vanilla").has_table("scores")


def test_a_killed_judge_run_resumes_without_asking_twice(openai_server, tmp_path):
    store, samples = _sample_run(tmp_path)
    answered_first = 4
    phase = {"hang": True}
    openai_server.script = judge_script({}, default="entailment", then=lambda info: (
        hang(30) if phase["hang"] and info.index >= answered_first else None))
    command = [sys.executable, "-m", "persobench", *_score_args(tmp_path, openai_server, "--judge-concurrency", "1")]
    child = subprocess.Popen(command, cwd=ROOT, env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while len(openai_server.requests) <= answered_first and time.monotonic() < deadline:
            assert child.poll() is None, child.communicate()
            time.sleep(0.05)
        assert len(openai_server.requests) == answered_first + 1  # the 5th hangs: kill the scorer mid-run
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    first = [r.prompt for r in openai_server.requests]
    phase["hang"] = False
    assert cli_main(_score_args(tmp_path, openai_server)) == 0
    second = [r.prompt for r in openai_server.requests[len(first):]]
    pairs = sum(2 + len(s.persona_sentences()) for s in samples)
    assert not set(first[:answered_first]) & set(second)  # answered before the kill: never asked again
    assert first[answered_first] in second  # the request in flight at the kill had no answer: asked again
    assert len(set(first + second)) == pairs and len(second) == pairs - answered_first
    scores = store.get("sample__judge_test__vanilla").read_table("scores")
    assert set(scores["profile"]) == {f"offline+judge=openai:judge-model@127.0.0.1:{openai_server.httpd.server_address[1]}"
                                      ",prompt=nli-judge-1"}
    assert (scores[scores["metric"] == "c_score"]["value"] == 1.0).all() and len(scores) == 3 * len(samples)
    # And once scored, an identical rerun sends nothing at all.
    assert cli_main(_score_args(tmp_path, openai_server)) == 0
    assert len(openai_server.requests) == len(first) + len(second)


@pytest.mark.hub_loading
def test_boards_keep_judge_and_nli_model_numbers_apart_and_say_who_labelled(openai_server, tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from persobench import aggregate
    from tests.fakes.tiny_models import build_tiny_nli

    store, samples = _sample_run(tmp_path)
    nli_dir = build_tiny_nli(tmp_path / "nli", favoured=0)  # index 0 = contradiction for every pair
    assert cli_main(["--home", str(tmp_path), "score", "--metrics", "c_score", "--no-progress",
                     "--model", f"nli={nli_dir}"]) == 0
    openai_server.script = judge_script({}, default="entailment")
    assert cli_main(_score_args(tmp_path, openai_server)) == 0
    capsys.readouterr()
    profiles = aggregate.available_profiles(store)
    judge_key = next(p for p in profiles if judge_of_profile(p))
    nli_key = next(p for p in profiles if p != judge_key)
    boards = {key: aggregate.leaderboard(aggregate.load_results(store, profile=key), profile=key)
              for key in (judge_key, nli_key)}
    c = {key: board[board["metric"] == "c_score"] for key, board in boards.items()}
    assert list(c[judge_key]["mean"]) == [1.0] and list(c[nli_key]["mean"]) == [-1.0]  # one labeller each
    assert set(boards[judge_key]["profile"]) == {judge_key} and set(boards[nli_key]["profile"]) == {nli_key}
    assert c[judge_key]["model_id"].iloc[0].startswith("judge openai:judge-model@127.0.0.1:")
    for key, expected in ((judge_key, "NLI labels by LLM judge openai:judge-model@127.0.0.1:"),
                          (nli_key, f"NLI labels by NLI model {nli_dir}")):
        assert cli_main(["--home", str(tmp_path), "leaderboard", "--profile", key, "--format", "markdown"]) == 0
        header = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("### "))
        assert expected in header and f"profile {key}" in header
        assert json.loads(aggregate.export_board(boards[key], "json"))["nli_labels"].startswith(expected)


# --- calibration -------------------------------------------------------------------------------------------


def test_agreement_matches_scikit_learn_and_counts_unlabelled_pairs():
    from sklearn.metrics import cohen_kappa_score, confusion_matrix

    from persobench.metrics.judge.labeller import UNANSWERED, agreement
    from persobench.metrics.nli import LABELS

    reference = ["entailment", "neutral", "contradiction", "neutral", "entailment", "neutral", "contradiction"]
    judged = ["entailment", "entailment", "contradiction", "neutral", UNPARSEABLE, "neutral", UNANSWERED]
    result = agreement(reference, judged)
    both = [(r, j) for r, j in zip(reference, judged) if j in LABELS]
    assert (result.n, result.unlabelled) == (5, 2)
    assert result.accuracy == pytest.approx(4 / 5)
    assert result.kappa == pytest.approx(cohen_kappa_score([r for r, _ in both], [j for _, j in both]))
    matrix = confusion_matrix([r for r, _ in both], [j for _, j in both], labels=list(LABELS))
    assert [[result.confusion[r][j] for j in LABELS] for r in LABELS] == matrix.tolist()
    assert result.confusion["entailment"][UNPARSEABLE] == 1 and result.confusion["contradiction"][UNANSWERED] == 1
    from persobench.errors import ScoringError

    with pytest.raises(ScoringError, match="agreement: 2 reference labels for 1 judged ones"):
        agreement(reference[:2], judged[:1])


@pytest.mark.reference
@pytest.mark.hub_loading
def test_the_calibration_benchmark_measures_agreement_when_both_labellers_exist(reference_dir, openai_server,
                                                                                 tmp_path, capsys):
    """benchmarks/judge.py end to end on published FoCus pairs, with a tiny NLI model built in code
    (always contradiction) and the fake judge (always entailment): agreement is exactly none."""
    pytest.importorskip("torch")
    import importlib.util

    from tests.fakes.tiny_models import build_tiny_nli

    spec = importlib.util.spec_from_file_location("judge_benchmark", ROOT / "benchmarks" / "judge.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    nli_dir = build_tiny_nli(tmp_path / "nli", favoured=0)
    openai_server.script = judge_script({}, default="entailment")
    code = bench.main(["--judge", "openai:judge-model", "--judge-base-url", openai_server.base_url, "--nli",
                       str(nli_dir), "--pairs", "12", "--reference", str(reference_dir),
                       "--cache", str(tmp_path / "responses"), "--require"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "pairs: 12 drawn (seed 0) from" in out and "of 16 published FoCus runs" in out
    assert "pairs both labelled: 12" in out and "accuracy: 0.000" in out
    assert len(openai_server.requests) == 12
    row = next(line for line in out.splitlines() if line.strip().startswith("contradiction "))
    assert row.split()[1:3] == ["12", "0"]  # all 12 NLI contradictions were judged entailment


# --- generation's machinery: rate limits, other providers, keys -----------------------------------------


def test_rate_limited_judge_requests_are_retried_by_the_one_retry_loop(openai_server, tmp_path):
    first_refused = judge_script(LABEL_MAP, then=lambda info: (
        error(429, "slow down", headers={"retry-after-ms": "20"}) if info.attempt == 1 else None))
    openai_server.script = first_refused
    judge = make_judge("openai:judge-model", base_url=openai_server.base_url, cache_dir=str(tmp_path),
                       concurrency="auto")
    result, stats = _judged(judge, ["c_score"])
    assert _values(result, "c_score") == EXPECTED["c_score"]
    assert stats.attempts == len(openai_server.requests) == 2 * 4 and stats.unanswered == 0
    assert set(openai_server.counts.values()) == {2}  # each pair: refused once, answered on the retry


def test_an_anthropic_judge_answers_through_its_structured_output(anthropic_server, tmp_path):
    anthropic_server.script = judge_script(LABEL_MAP)
    judge = make_judge("anthropic:judge-model", base_url=anthropic_server.base_url, cache_dir=str(tmp_path))
    result = score_samples(_samples(), R, profile=get_profile("offline", judge=judge), metrics=["c_score", "ue_score"])
    assert _values(result, "c_score") == EXPECTED["c_score"] and _values(result, "ue_score") == EXPECTED["ue_score"]
    schemas = [r.body["output_config"]["format"]["schema"] for r in anthropic_server.requests]
    assert schemas and all(sc["properties"]["label"]["enum"] == ["entailment", "neutral", "contradiction"]
                           for sc in schemas)


@pytest.mark.parametrize("structured", [True, False], ids=["enforces-a-schema", "does-not"])
def test_the_judge_s_answer_form_is_what_the_provider_s_registry_entry_says(openai_server, tmp_path, structured):
    """Which providers enforce a JSON schema was a hand-kept set beside the judge (a third file for a new
    provider); the provider's registration line says it now, read without importing the provider. A
    provider registered through the real path (here the OpenAI adapter under a new name) gets the
    structured form only when its entry says so."""
    from persobench.metrics import Judge
    from persobench.providers import PROVIDERS, ModelSpec, enforces_schema

    name = "toyschema" if structured else "toyword"
    PROVIDERS.register(name, "persobench.providers.openai_provider:OpenAIProvider", description="a test's",
                       **({"structured": True} if structured else {}))
    PROVIDERS.register("toylazy", "tests.no_such_module:NoProvider", structured=True)  # never imported
    try:
        assert enforces_schema(name) is structured and (name in PROVIDERS.having("structured")) is structured
        assert enforces_schema("toylazy") and "toylazy" in PROVIDERS.having("structured")
        openai_server.script = judge_script(LABEL_MAP)
        judge = make_judge(f"{name}:judge-model", base_url=openai_server.base_url, cache_dir=str(tmp_path))
        assert judge.structured is structured and judge.identity.endswith(",answer=word") is not structured
        result = score_samples(_samples(), R, profile=get_profile("offline", judge=judge), metrics=["c_score"])
        assert _values(result, "c_score") == EXPECTED["c_score"]
        formats = [r.body.get("response_format") for r in openai_server.requests]
        assert formats and all((form is not None) is structured for form in formats)
    finally:
        PROVIDERS.unregister(name)
        PROVIDERS.unregister("toylazy")
    assert not enforces_schema(name)
    for provider in PROVIDERS.names():  # the built-ins: the judge follows each one's entry
        spec = ModelSpec(provider=provider, model="m")
        assert Judge(spec).structured is enforces_schema(provider) and not Judge(spec, plain=True).structured


def test_a_judge_echoing_the_key_never_gets_it_on_disk(openai_server, tmp_path):
    from tests.fakes.fixtures import OPENAI_SECRET
    from tests.fakes.servers import reply

    openai_server.script = lambda info: reply(f"entailment {OPENAI_SECRET}")
    judge = make_judge("openai:judge-model", base_url=openai_server.base_url, cache_dir=str(tmp_path / "responses"))
    result, stats = _judged(judge, ["c_score"], _samples()[:1])
    assert result.scores.empty and stats.unparseable == 1  # and not guessed "entailment"
    on_disk = b"".join(p.read_bytes() for p in (tmp_path / "responses").rglob("*") if p.is_file())
    assert b"entailment" in on_disk and OPENAI_SECRET.encode() not in on_disk


# ---------------------------------------------------------------------------------------------
# Money and data (issue 39, items 1-3): judge passes at once ask each pair once; a damaged ledger
# stops the pass in one line; the cap waits for reservations in flight

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
