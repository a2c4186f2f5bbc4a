"""Prompt construction: roles, annotated personas, instructions, output formats, template hashes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from persobench.datasets import load_dataset
from persobench.prompts.templates import (
    BUILTIN_TEMPLATES, TemplateError, build_messages, get_template, load_template, template_family,
)
from persobench.records import PersonaSet, Sample, Turn


def _sample(personas: tuple[PersonaSet, ...] = (PersonaSet("User2", ("I keep bees.",)),)) -> Sample:
    return Sample("t:0", "t", personas, (Turn("User1", "Any weekend plans?"),), "User2", "Checking my hives.")


def test_vanilla_prompt_has_role_personas_context_instructions_and_json_format() -> None:
    system, user = build_messages(_sample(), get_template("vanilla"))
    assert system["role"] == "system" and "JSON" in system["content"] and "response generator" in system["content"]
    text = user["content"]
    assert "You are User2, a participant in the conversation" in text
    assert "[User2 persona (your persona)]\n- I keep bees." in text
    assert "User1: Any weekend plans?" in text
    assert "without a speaker label" in text and "single question" in text
    assert '{"response": "<your reply>"}' in text and '"reasoning"' not in text


def test_cot_prompt_asks_for_bounded_reasoning_about_persona_alignment() -> None:
    template = get_template("cot")
    text = build_messages(_sample(), template)[1]["content"]
    assert '"reasoning"' in text and "at most 110 words" in text and "align" in text
    assert template.max_tokens == 220 and get_template("vanilla").max_tokens == 110
    assert template.temperature == 0 and template.requires_reasoning


def test_partner_persona_is_labelled_as_such() -> None:
    text = build_messages(_sample((PersonaSet("User1", ("I hate mornings.",)),)), get_template("vanilla"))[1]["content"]
    assert "[User1 persona (your partner's persona)]" in text


def test_messages_are_pure_and_deterministic() -> None:
    sample = load_dataset("sample", limit=1)[0]
    assert build_messages(sample, get_template("cot")) == build_messages(sample, get_template("cot"))


def test_version_hash_tracks_wording() -> None:
    hashes = {t.version_hash for t in BUILTIN_TEMPLATES.values()}
    assert len(hashes) == 6 and all(len(h) == 12 for h in hashes)
    # PersoBench's own templates kept their wording, so runs made with them keep their ids.
    assert get_template("persobench", "vanilla").version_hash == "23f6bee4d7d5"
    assert get_template("persobench", "cot").version_hash == "a41e9a625825"


def test_template_names_aliases_and_families() -> None:
    assert get_template("vanilla") is get_template("persobench", "vanilla")
    assert get_template("cot", "vanilla").mode == "cot"  # the old names fix their mode
    assert get_template("paper-cot").name == "paper"
    assert {get_template(n).family for n in ("paper", "paper-open", "paper-vanilla")} == {"paper"}
    assert get_template("persobench").family == "persobench"
    assert template_family("cot") == "persobench" and template_family("paper-open") == "paper"
    assert template_family("mine") == "mine"
    assert get_template("paper").chat_template and not get_template("paper-open").chat_template
    with pytest.raises(TemplateError, match="unknown mode"):
        get_template("paper", "fancy")


def test_user_template_file_with_placeholders(tmp_path: Path) -> None:
    path = tmp_path / "terse.toml"
    path.write_text('mode = "cot"\nmax_tokens = 300\nuser = """Be {responder}.\n{personas}\n{context}\n{output_format}\n{"example": 1}"""\n')
    template = load_template(path)
    assert template.mode == "cot" and template.max_tokens == 300 and template.name == "terse"
    text = build_messages(_sample(), template)[1]["content"]
    assert text.startswith("Be User2.") and '{"example": 1}' in text and '"reasoning"' in text
    other = tmp_path / "other.toml"
    other.write_text(path.read_text().replace("Be ", "Please be "))
    assert load_template(other).version_hash != template.version_hash
    assert template.family == "file:terse"  # a file never joins a built-in family by its name


def test_plain_text_template_and_errors(tmp_path: Path) -> None:
    plain = tmp_path / "plain.txt"
    plain.write_text("{context}\n{output_format}")
    assert get_template(str(plain)).mode == "vanilla"
    bad = tmp_path / "bad.txt"
    bad.write_text("{context} {persona_list} {output_format}")
    with pytest.raises(TemplateError, match=r"bad.txt: unknown placeholder\(s\) \{persona_list\}"):
        load_template(bad)
    with pytest.raises(TemplateError, match="unknown template"):
        get_template("nonexistent")


def test_no_persona_is_said_explicitly() -> None:
    text = build_messages(_sample(()), get_template("vanilla"))[1]["content"]
    assert "(no persona given)" in text
    json.dumps(build_messages(_sample(()), get_template("vanilla")))  # serialisable for the cache key


# ---------------------------------------------------------------------------------------------
# Hardening, second round (issue 17): the edges a fault sweep found, against real parts


def test_every_template_field_is_rendered_and_unknown_placeholders_are_errors(tmp_path):
    from persobench.datasets import load_dataset
    from persobench.prompts.templates import TemplateError, build_messages, load_template

    good = tmp_path / "good.toml"
    good.write_text('mode = "vanilla"\nsystem = "You are {responder}. Personas:\\n{personas}"\n'
                    'user = "{context}\\n{output_format}"\noutput_format = "Reply as {responder} in JSON: '
                    '{\\"response\\": \\"...\\"}"\n', encoding="utf-8")
    [sample] = load_dataset("sample", limit=1)
    system, user = build_messages(sample, load_template(good))
    assert "{" + "personas}" not in system["content"] and "{responder}" not in system["content"]
    assert sample.personas[0].sentences[0] in system["content"]
    assert f"Reply as {sample.responder}" in user["content"] and '{"response": "..."}' in user["content"]

    for field in ("system", "user", "output_format"):
        bad = tmp_path / f"bad_{field}.toml"
        fields = {"system": "s", "user": "{context} {output_format}", "output_format": '{"response": "x"}'}
        fields[field] += " {Personas}"
        bad.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in fields.items()), encoding="utf-8")
        with pytest.raises(TemplateError) as info:
            load_template(bad)
        assert str(bad) in str(info.value) and "{Personas}" in str(info.value) and field in str(info.value)
