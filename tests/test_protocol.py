"""protocol_of: one function decides which runs are comparable."""

from __future__ import annotations

import dataclasses

import pytest

from persobench.prompts.protocol import Protocol, paper_protocol, protocol_of
from persobench.store.run_store import RunManifest


def manifest(**changes) -> RunManifest:
    base = RunManifest(run_id="r", dataset="sample", sample_ids=("sample:0",), model={"provider": "openai", "model": "m"},
                       mode="vanilla", template="paper", template_hash="abc",
                       parameters={"temperature": 0.0, "max_tokens": 110, "seed": 0, "limit": None, "policy": "paper"})
    return dataclasses.replace(base, **changes)


def test_paper_template_family_with_paper_settings_is_the_paper_protocol():
    proto = protocol_of(manifest())
    assert proto == paper_protocol("vanilla") and proto.is_paper
    assert proto.label == "paper · vanilla · 110 tokens · T=0 · policy paper"


def test_paper_and_paper_open_are_one_family():
    closed = protocol_of(manifest(template="paper"))
    local = protocol_of(manifest(template="paper-open", model={"provider": "local", "model": "x"}))
    assert closed == local


def test_recorded_family_wins_over_the_template_name():
    assert protocol_of(manifest(template="mine.toml", template_family="paper", parameters={
        "max_tokens": 110, "temperature": 0, "policy": "paper"})).is_paper
    # Layouts PersoBench never wrote are not read: a family noted in extra is not the run's family.
    extra_family = manifest(template="x", extra={"template": {"name": "x", "family": "ours"}})
    assert protocol_of(extra_family).name != "ours"


@pytest.mark.parametrize("change", [
    {"parameters": {"temperature": 0.7, "max_tokens": 110, "policy": "paper"}},
    {"parameters": {"temperature": 0.0, "max_tokens": 300, "policy": "paper"}},
    {"parameters": {"temperature": 0.0, "max_tokens": 110, "policy": "robust"}},
    {"parameters": {"temperature": 0.0, "max_tokens": 110, "policy": "paper", "structured": True}},
    {"template": "vanilla"},
])
def test_any_setting_that_changes_outputs_changes_the_protocol(change):
    assert protocol_of(manifest(**change)) != paper_protocol("vanilla")


def test_structured_output_is_read_from_the_runs_parameters_only():
    plain = {"temperature": 0.0, "max_tokens": 110, "policy": "paper"}
    assert protocol_of(manifest(parameters={**plain, "structured": True})).structured
    assert not protocol_of(manifest(parameters=plain, extra={"structured": True})).structured


def test_old_manifests_default_sensibly():
    old = manifest(template="vanilla", parameters={"temperature": 0.0, "max_tokens": 110})
    proto = protocol_of(old.to_dict())  # dict form works too
    assert proto == Protocol("persobench", "vanilla", 110, 0.0, "robust", False)  # "vanilla" was persobench's
    assert "structured" not in proto.label


def test_imported_runs_are_the_paper_protocol_whatever_their_recorded_template():
    for template in ("paper-vanilla", "paper-cot", "paper", "paper-open"):
        imported = manifest(template=template, mode="cot", source="imported", parameters={})
        assert protocol_of(imported) == paper_protocol("cot")
        assert protocol_of(imported).max_tokens == 220


@pytest.mark.parametrize("proto", [
    paper_protocol("cot"), Protocol("my · family", "vanilla", None, None, "robust", True),
    Protocol("persobench", "vanilla", 300, 0.7, "robust", False),
    Protocol("paper", "vanilla", 110, 0.0, "paper", False, chat_template=True),
    Protocol("persobench", "cot", 220, 0.0, "robust", True, chat_template=False),
])
def test_label_round_trips(proto):
    assert Protocol.from_label(proto.label) == proto
    with pytest.raises(ValueError):
        Protocol.from_label("gpt-4o-mini")


# ---- the settings the key left out: top_p, seed, stop, extra_body, local dtype (issue 26) -------

PAPER_PARAMETERS = {"temperature": 0.0, "max_tokens": 110, "seed": 0, "limit": None, "policy": "paper"}


@pytest.mark.parametrize("change,field,value", [
    ({"parameters": {**PAPER_PARAMETERS, "top_p": 0.9}}, "top_p", 0.9),
    ({"model": {"provider": "openai", "model": "m", "options": {"top_p": 0.5}}}, "top_p", 0.5),
    ({"model": {"provider": "openai", "model": "m", "options": {"stop": ["\n\n", "User1:"]}}}, "stop", ("\n\n", "User1:")),
    ({"model": {"provider": "openai", "model": "m", "options": {"top_k": 40, "repetition_penalty": 1.1}}},
     "extra_body", '{"repetition_penalty": 1.1, "top_k": 40}'),
    ({"model": {"provider": "local", "model": "x", "options": {"dtype": "bfloat16"}}}, "dtype", "bfloat16"),
])
def test_each_setting_the_key_left_out_now_changes_it(change, field, value):
    proto = protocol_of(manifest(**change))
    assert getattr(proto, field) == value and proto != paper_protocol("vanilla") and not proto.is_paper
    assert Protocol.from_label(proto.label) == proto


def test_the_seed_counts_only_when_sampling():
    greedy = protocol_of(manifest(parameters={**PAPER_PARAMETERS, "seed": 7}))
    assert greedy.seed is None and greedy.is_paper  # greedy decoding has nothing to seed
    sampled = [protocol_of(manifest(parameters={**PAPER_PARAMETERS, "temperature": 0.7, "seed": s})) for s in (1, 2)]
    assert sampled[0].seed == 1 and sampled[0] != sampled[1]
    assert sampled[0].label.endswith(" · seed=1") and Protocol.from_label(sampled[0].label) == sampled[0]


def test_what_is_not_a_setting_leaves_the_paper_protocol_alone():
    """The model's identity (gguf file, revision), transport options, the Gemini preset's prompt
    placement, float32 local weights (the paper's) and the local mode's batch size are not settings."""
    for model in ({"provider": "local", "model": "x", "options": {"dtype": "float32", "batch_size": 1,
                                                                    "local_mode": "paper", "gguf_file": "m.gguf"}},
                  {"provider": "openai", "model": "m", "options": {"timeout": 30, "system_in_user": True,
                                                                    "completions_endpoint": True}},
                  {"provider": "baseline", "model": "reference", "options": {"kind": "reference"}}):
        assert protocol_of(manifest(model=model)).is_paper, model


def test_old_stored_keys_still_read_and_old_runs_keep_theirs():
    """Labels written before these fields existed parse to the same protocol, and a run that set
    none of them keeps its label (only runs that did set one get a new key)."""
    for label in ("paper · vanilla · 110 tokens · T=0 · policy paper",
                  "persobench · cot · 220 tokens · T=0 · policy robust · raw text · structured",
                  "persobench · vanilla · 300 tokens · T=0.7 · policy robust"):
        proto = Protocol.from_label(label)
        assert proto.label == label and (proto.top_p, proto.seed, proto.stop, proto.extra_body, proto.dtype) == (
            None, None, None, None, None)
    assert protocol_of(manifest()).label == "paper · vanilla · 110 tokens · T=0 · policy paper"
    full = Protocol("persobench", "vanilla", 300, 0.7, "robust", True, False, top_p=0.95, seed=3,
                    stop=("a · b", "x=y"), extra_body='{"top_k": 40}', dtype="bfloat16")
    assert Protocol.from_label(full.label) == full
    with pytest.raises(ValueError):
        Protocol.from_label("paper · vanilla · 110 tokens · T=0 · policy paper · seed=x")


def test_every_transport_option_is_kept_out_of_the_protocol():
    from persobench.prompts.protocol import NOT_PROTOCOL_OPTIONS
    from persobench.providers.spec import NON_OUTPUT_OPTIONS, SYSTEM_IN_USER

    assert NON_OUTPUT_OPTIONS | {SYSTEM_IN_USER} <= NOT_PROTOCOL_OPTIONS
