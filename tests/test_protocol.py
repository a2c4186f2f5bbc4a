"""protocol_of: one function decides which runs are comparable."""

from __future__ import annotations

import dataclasses

import pytest

from persobench.protocol import Protocol, paper_protocol, protocol_of
from persobench.store import RunManifest


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
