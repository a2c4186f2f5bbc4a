"""Unit tests of the app's helpers (persobench/app/): safe text, cache keys, display formats,
persona marks, the environment background runs get."""

from __future__ import annotations

import math
import re
import time

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from persobench.app import page_cache, chrome, dialogues
from persobench.app.text import cell_text, format_seconds, md_escape, model_kind, plot_escape, safe_message, status_badge
from persobench.records import PersonaSet
from persobench.core.secrets import redact


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
    escaped = md_escape(text)
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
    escaped = md_escape(text)
    unescaped = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", escaped).split("  \n")
    expected = [line.strip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    assert unescaped == expected


def test_md_escape_truncates_and_handles_none():
    assert md_escape(None) == ""
    assert md_escape("abcdef", max_chars=3) == "abc…"


def test_plot_escape_neutralises_plotly_html():
    # quotes stay: no tag forms without "<", and Plotly would show "&quot;" as typed (issue 37)
    assert plot_escape('<a href="javascript:x">m</a>') == '&lt;a href="javascript:x"&gt;m&lt;/a&gt;'


def test_safe_message_is_redacted_and_escaped():
    message = safe_message(RuntimeError("bad key sk-abcdefghijklmnop <b>x</b>"))
    assert "sk-abcdefghijklmnop" not in message and "<b>" not in message


def test_status_badge_only_colours_known_statuses():
    assert status_badge("truncated") == ":orange-badge[truncated]"
    assert status_badge("ok]:red[x") == md_escape("ok]:red[x")


def test_format_seconds():
    assert format_seconds(None) == "?"
    assert format_seconds(42) == "42 s"
    assert format_seconds(75) == "1 min 15 s"
    assert format_seconds(3 * 3600 + 60) == "3 h 01 min"


# ---- store signature ---------------------------------------------------------------------------


def test_store_signature_changes_when_a_run_changes(tmp_path):
    from persobench.generation import run_generation

    home = tmp_path / "home"
    assert page_cache.store_signature(home) == "no-runs"
    run = run_generation(dataset="sample", model="baseline:reference", mode="vanilla", limit=2, home=home)
    first = page_cache.store_signature(home)
    assert first == page_cache.store_signature(home), "stable while nothing changes"
    time.sleep(0.01)
    run.update(extra={"note": "changed"})
    assert page_cache.store_signature(home) != first


# ---- display formats ---------------------------------------------------------------------------


def test_cell_text():
    assert cell_text(0.5, 0.1, 0.4, 0.6) == "0.500 ± 0.100 [0.400, 0.600]"
    assert cell_text(math.nan, 0.1, 0.4, 0.6) == "n/a"
    assert cell_text(1.0, math.nan, math.nan, math.nan, digits=1) == "1.0"


def test_persona_marks_from_nli_labels_and_similarity():
    persona = PersonaSet("User2", ("I love cats.", "I am a nurse.", "I live in Oslo."))
    with_nli = pd.DataFrame({"speaker": ["User2"] * 3, "sentence": list(persona.sentences),
                             "nli_label": ["entailment", "contradiction", "neutral"], "similarity": [0.9, 0.2, 0.1]})
    marks = dialogues.persona_marks(persona, with_nli)
    assert list(marks["mark"]) == [dialogues.MARK_USED, dialogues.MARK_CONTRADICTED, dialogues.MARK_NEUTRAL]
    offline = with_nli.assign(nli_label=None)
    marks = dialogues.persona_marks(persona, offline)
    assert marks["mark"].iloc[0] == dialogues.MARK_USED and marks["mark"].iloc[1] == dialogues.MARK_NEUTRAL
    assert "nli" not in marks.columns
    assert list(dialogues.persona_marks(persona, pd.DataFrame())["sentence"]) == list(persona.sentences)


def test_model_kind():
    assert model_kind("baseline:reference") == "baseline (ceiling)"
    assert model_kind("baseline:persona-echo") == "baseline (floor)"
    assert model_kind("openai:gpt-4o") == "model"


def test_app_environment_adds_streamlit_secrets_and_registers_them():
    secrets = {"OPENAI_API_KEY": "sk-secret-from-secrets-123", "title": "not a key"}
    env = chrome.app_environment(secrets)
    assert env["OPENAI_API_KEY"] == "sk-secret-from-secrets-123" and "PATH" in env and "title" not in env
    assert "sk-secret-from-secrets-123" not in redact("error: bad key sk-secret-from-secrets-123")
