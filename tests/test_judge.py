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


def test_a_judge_echoing_the_key_never_gets_it_on_disk(openai_server, tmp_path):
    from tests.fakes.fixtures import OPENAI_SECRET
    from tests.fakes.servers import reply

    openai_server.script = lambda info: reply(f"entailment {OPENAI_SECRET}")
    judge = make_judge("openai:judge-model", base_url=openai_server.base_url, cache_dir=str(tmp_path / "responses"))
    result, stats = _judged(judge, ["c_score"], _samples()[:1])
    assert result.scores.empty and stats.unparseable == 1  # and not guessed "entailment"
    on_disk = b"".join(p.read_bytes() for p in (tmp_path / "responses").rglob("*") if p.is_file())
    assert b"entailment" in on_disk and OPENAI_SECRET.encode() not in on_disk
