"""Unit tests of persobench.app_support (safe text, cache keys, ranking with ties, persona marks)
and of ``python -m persobench demo`` (cached: a second call is a fast no-op)."""

from __future__ import annotations

import math
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from persobench import app_support as sup
from persobench.records import PersonaSet

ROOT = Path(__file__).resolve().parents[1]


# ---- safe text ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    "<script>alert(1)</script>",
    '<img src=x onerror="alert(1)">',
    "[click](javascript:alert(1))",
    "![x](https://example.invalid/p.png)",
    ":red[colour] :smile: $x^2$ **bold** # heading",
    "1. list\n- item\n    code block",
    "&lt;entity&gt; &amp;",
])
def test_md_escape_leaves_no_markup(text):
    escaped = sup.md_escape(text)
    import re

    # Every ASCII punctuation character is preceded by a backslash: nothing can form markup.
    for match in re.finditer(r"[!-/:-@\[-`{-~]", escaped):
        position = match.start()
        if escaped[position] == "\\" and position + 1 < len(escaped) and escaped[position + 1] in \
                "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~":
            continue
        assert position > 0 and escaped[position - 1] == "\\", (text, escaped, position)


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_md_escape_round_trips_through_commonmark_unescaping(text):
    """Undoing CommonMark backslash escapes gives back the text (per line, trimmed)."""
    import re

    escaped = sup.md_escape(text)
    unescaped = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", escaped).split("  \n")
    expected = [line.strip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    assert unescaped == expected


def test_md_escape_truncates_and_handles_none():
    assert sup.md_escape(None) == ""
    assert sup.md_escape("abcdef", max_chars=3) == "abc…"


def test_plot_escape_neutralises_plotly_html():
    assert sup.plot_escape('<a href="javascript:x">m</a>') == "&lt;a href=&quot;javascript:x&quot;&gt;m&lt;/a&gt;"


def test_redact_removes_keys_and_env_secrets(monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-1234567890-secret")
    text = ("key sk-proj-ABCDEFGHIJKLMNOP, sk-ant-api03-xyzxyzxyzxyz, Authorization: Bearer abc.def.ghijkl, "
            'api_key="hunter2hunter2" and tok-1234567890-secret')
    clean = sup.redact(text)
    for secret in ("sk-proj-ABCDEFGHIJKLMNOP", "sk-ant-api03-xyzxyzxyzxyz", "abc.def.ghijkl", "hunter2hunter2",
                   "tok-1234567890-secret"):
        assert secret not in clean
    assert "[redacted]" in clean


def test_safe_message_is_redacted_and_escaped():
    message = sup.safe_message(RuntimeError("bad key sk-abcdefghijklmnop <b>x</b>"))
    assert "sk-abcdefghijklmnop" not in message and "<b>" not in message


def test_status_badge_only_colours_known_statuses():
    assert sup.status_badge("truncated") == ":orange-badge[truncated]"
    assert sup.status_badge("ok]:red[x") == sup.md_escape("ok]:red[x")


def test_format_seconds():
    assert sup.format_seconds(None) == "?"
    assert sup.format_seconds(42) == "42 s"
    assert sup.format_seconds(75) == "1 min 15 s"
    assert sup.format_seconds(3 * 3600 + 60) == "3 h 01 min"


# ---- store signature ---------------------------------------------------------------------------


def test_store_signature_changes_when_a_run_changes(tmp_path):
    from persobench.generation import run_generation

    home = tmp_path / "home"
    assert sup.store_signature(home) == "empty"
    run = run_generation(dataset="sample", model="baseline:reference", mode="vanilla", limit=2, home=home)
    first = sup.store_signature(home)
    assert first == sup.store_signature(home), "stable while nothing changes"
    time.sleep(0.01)
    run.update(extra={"note": "changed"})
    assert sup.store_signature(home) != first


# ---- ranking with ties -------------------------------------------------------------------------


def test_rank_with_ties_shares_ranks_when_intervals_overlap():
    frame = pd.DataFrame({
        "model": ["a", "b", "c", "d"],
        "v": [0.90, 0.88, 0.50, math.nan],
        "lo": [0.85, 0.80, 0.45, math.nan],
        "hi": [0.95, 0.92, 0.55, math.nan],
    })
    ranked = sup.rank_with_ties(frame, "v", "lo", "hi", higher_is_better=True)
    assert list(ranked["model"]) == ["a", "b", "c", "d"]
    assert list(ranked["rank"]) == ["1=", "1=", "3", "–"]
    assert ranked.loc[0, "overlaps"] == "b" and ranked.loc[2, "overlaps"] == ""


def test_rank_with_ties_lower_is_better():
    frame = pd.DataFrame({"model": ["fast", "slow"], "v": [1.0, 5.0], "lo": [0.9, 4.0], "hi": [1.1, 6.0]})
    ranked = sup.rank_with_ties(frame, "v", "lo", "hi", higher_is_better=False)
    assert list(ranked["model"]) == ["fast", "slow"] and list(ranked["rank"]) == ["1", "2"]


def test_cell_text():
    assert sup.cell_text(0.5, 0.1, 0.4, 0.6) == "0.500 ± 0.100 [0.400, 0.600]"
    assert sup.cell_text(math.nan, 0.1, 0.4, 0.6) == "n/a"
    assert sup.cell_text(1.0, math.nan, math.nan, math.nan, digits=1) == "1.0"


# ---- persona marks -----------------------------------------------------------------------------


def test_persona_marks_from_nli_labels_and_similarity():
    persona = PersonaSet("User2", ("I love cats.", "I am a nurse.", "I live in Oslo."))
    with_nli = pd.DataFrame({"speaker": ["User2"] * 3, "sentence": list(persona.sentences),
                             "nli_label": ["entailment", "contradiction", "neutral"], "similarity": [0.9, 0.2, 0.1]})
    marks = sup.persona_marks(persona, with_nli)
    assert list(marks["mark"]) == [sup.MARK_USED, sup.MARK_CONTRADICTED, sup.MARK_NEUTRAL]
    offline = with_nli.assign(nli_label=None)
    marks = sup.persona_marks(persona, offline)
    assert marks["mark"].iloc[0] == sup.MARK_USED and marks["mark"].iloc[1] == sup.MARK_NEUTRAL
    assert "nli" not in marks.columns
    assert list(sup.persona_marks(persona, pd.DataFrame())["sentence"]) == list(persona.sentences)


def test_model_kind():
    assert sup.model_kind("baseline:reference") == "baseline (ceiling)"
    assert sup.model_kind("baseline:persona-echo") == "baseline (floor)"
    assert sup.model_kind("openai:gpt-4o") == "model"


# ---- jobs --------------------------------------------------------------------------------------


def test_job_ids_are_deterministic_and_safe():
    step = sup.JobStep("x", ("run", "--dataset", "sample"))
    assert sup.job_id_for("t", [step]) == sup.job_id_for("t", [step])
    assert sup.job_id_for("t", [step]) != sup.job_id_for("u", [step])
    with pytest.raises(ValueError):
        sup.JobManager("/tmp").job_dir("../escape")


def test_failed_step_is_reported_with_a_redacted_log(tmp_path, monkeypatch):
    monkeypatch.setenv("SOME_API_KEY", "sk-supersecretvalue123")
    jobs = sup.JobManager(tmp_path / "home")
    step = sup.JobStep("bad model", ("run", "--dataset", "sample", "--model", "nosuchprovider:x", "--limit", "1"))
    job_id, started = jobs.launch("bad", [step])
    assert started
    deadline = time.monotonic() + 60
    while (status := jobs.status(job_id)).active and time.monotonic() < deadline:
        time.sleep(0.2)
    assert status.state == "failed" and status.resumable
    assert "exited with status 2" in status.message
    assert "unknown provider" in status.log_tail
    assert "sk-supersecretvalue123" not in status.log_tail


# ---- demo --------------------------------------------------------------------------------------


def test_demo_is_cached_second_call_is_a_fast_no_op(tmp_path):
    home = tmp_path / "demo"
    command = [sys.executable, "-m", "persobench", "--home", str(home), "demo", "--no-local", "--limit", "3",
               "--no-progress"]
    first = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "demo ready" in first.stdout
    from persobench.store import RunStore

    runs = RunStore(home).runs()
    assert {(r.manifest.model_label, r.manifest.mode) for r in runs} == {
        ("baseline:reference", "vanilla"), ("baseline:reference", "cot"),
        ("baseline:persona-echo", "vanilla"), ("baseline:persona-echo", "cot")}
    assert all("offline" in r.manifest.extra["scores"] for r in runs)
    def snapshot() -> dict[str, int]:
        return {str(p.relative_to(home)): p.stat().st_mtime_ns for p in (home / "runs").rglob("*") if p.is_file()}

    before = snapshot()
    assert before
    second = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0 and "demo ready (cached)" in second.stdout
    assert snapshot() == before  # a no-op: no run, table or manifest was rewritten


def test_secrets_become_environment_for_runs_and_are_redacted():
    secrets = {"OPENAI_API_KEY": "sk-secret-from-secrets-123", "title": "not a key", "lower_key": "x" * 12,
               "nested": {"ANTHROPIC_API_KEY": "no"}}
    found = sup.secret_environment(secrets)
    assert found == {"OPENAI_API_KEY": "sk-secret-from-secrets-123"}
    env = sup.app_environment(secrets)
    assert env["OPENAI_API_KEY"] == "sk-secret-from-secrets-123" and "PATH" in env
    assert "sk-secret-from-secrets-123" not in sup.redact("error: bad key sk-secret-from-secrets-123")


def test_plan_launch_checks_keys_against_the_given_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    choice = [sup.LaunchChoice("sample", "openai:gpt-4o-mini", "vanilla", None)]
    without = sup.plan_launch(tmp_path, choice, limit=2)
    assert "OPENAI_API_KEY" in without[0]["problem"]
    with_key = sup.plan_launch(tmp_path, choice, limit=2, env={"OPENAI_API_KEY": "sk-test-0000000000"})
    assert with_key[0]["problem"] == ""
