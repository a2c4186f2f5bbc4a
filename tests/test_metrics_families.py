"""Metric families: a new family is one registration, and families run in their dependency order."""

from __future__ import annotations

import pandas as pd
import pytest

from persobench import aggregate, metrics
from persobench.scoring import score_run
from persobench.cli import main as cli_main
from persobench.metrics import MetricInfo, MetricRegistryError, register_family, unregister_family
from persobench.metrics.family import FamilyBatch, FamilyResult, MetricFamily, Requirement
from persobench.metrics.sample_scores import family_plan
from persobench.records import PersonaSet, Sample, Turn
from persobench.store.run_store import RunManifest, RunStore


def _samples() -> list[Sample]:
    return [
        Sample("s:0", "s", (PersonaSet("User2", ("I love cats.", "I have two dogs.")),),
               (Turn("User1", "Do you like pets?"),), "User2", "Yes, I love my cats."),
        Sample("s:1", "s", (), (Turn("User1", "What do you do?"),), "User2", "I teach."),
        Sample("s:2", "s", (PersonaSet("User2", ("I am a teacher.",)),), (Turn("User1", "Hi"),), "User2", ""),
    ]


def _info(name: str, family: str, **facts) -> MetricInfo:
    return MetricInfo(name, facts.pop("dimension", "diversity"), f"test metric {name}", (0.0, None), True, 0.0,
                      "none", family=family, **facts)


class ReplyWords(MetricFamily):
    """Words in the reply, and persona sentences per sample (for the persona flag)."""

    name = "toy_words"

    def score(self, batch: FamilyBatch) -> FamilyResult:
        result = FamilyResult()
        advance = batch.progress.stage("toy words", len(batch.items))
        for metric in batch.metrics:
            items = batch.applicable(metric)
            for it in items:
                value = len(it.reply.split()) if metric == "toy_reply_words" else len(it.persona_sentences)
                result.add(it.sid, metric, value)
            result.record(metric, "ok", version=f"{metric}/1", backend="python", n=len(items))
        advance(len(batch.items))
        return result


@pytest.fixture()
def toy_words():
    register_family(ReplyWords(), [_info("toy_reply_words", "toy_words"),
                                   _info("toy_persona_count", "toy_words", needs_persona=True,
                                         dimension="personalization")])
    yield
    unregister_family("toy_words")


@pytest.mark.usefixtures("toy_words")
def test_a_registered_family_is_scored_stored_and_aggregated_like_a_builtin(tmp_path, capsys):
    assert metrics.metric_names()[-2:] == ("toy_reply_words", "toy_persona_count")
    assert metrics.validate_metric_names(["toy_persona_count", "bleu"]) == ("bleu", "toy_persona_count")
    seen = []
    result = metrics.score_samples(_samples(), {"s:0": "I love cats", "s:1": "teaching is fun", "s:2": "ok"},
                                   metrics=["toy_reply_words", "toy_persona_count", "dist1"],
                                   progress=lambda *a: seen.append(a))
    wide = result.wide()
    assert wide["toy_reply_words"].to_dict() == {"s:0": 3.0, "s:1": 3.0, "s:2": 1.0}
    # needs_persona in its MetricInfo is what keeps s:1 (no persona) out: nothing else lists it.
    assert result.scores[result.scores["metric"] == "toy_persona_count"].set_index("sample_id")["value"].to_dict() \
        == {"s:0": 2.0, "s:2": 1.0}
    assert result.provenance["toy_reply_words"]["metric_version"] == "toy_reply_words/1"
    assert ("toy words", 3, 3) in seen

    # Stored in a run, given its worst value for an invalid reply on the leaderboard, shown by the CLI.
    store = RunStore(tmp_path)
    run = store.create(RunManifest(run_id="s__toy__vanilla__0", dataset="s", sample_ids=("s:0", "s:1", "s:2"),
                                   model={"label": "toy"}, mode="vanilla", template="t", template_hash="h"))
    run.write_table("generations", pd.DataFrame(
        [("s:0", "ok", "I love cats", 1.0), ("s:1", "ok", "two words", 1.0), ("s:2", "invalid", "", 1.0)],
        columns=["sample_id", "status", "response", "latency"]))
    run.update(status="completed")
    summary = score_run(run, {s.id: s for s in _samples()}, metrics=["toy_reply_words"])
    assert summary.computed == {"toy_reply_words": 2}
    stored = store.get(run.run_id)
    assert set(stored.read_table("scores")["metric"]) == {"toy_reply_words"}
    assert stored.manifest.extra["scores"]["offline"]["metrics"]["toy_reply_words"]["n"] == 2
    board = aggregate.leaderboard(aggregate.load_results(store))
    row = board[board["metric"] == "toy_reply_words"].iloc[0]
    assert (row["mean"], row["n"]) == (pytest.approx((3 + 2 + 0) / 3), 3)
    assert cli_main(["--home", str(tmp_path), "leaderboard", "--format", "csv"]) == 0
    assert "toy_reply_words" in capsys.readouterr().out


@pytest.mark.usefixtures("toy_words")
def test_unregistering_removes_the_family_and_its_metrics():
    assert "toy_words" in metrics.family_names()
    unregister_family("toy_words")
    try:
        assert "toy_reply_words" not in metrics.METRICS and "toy_words" not in metrics.family_names()
        with pytest.raises(metrics.UnknownMetricError):
            metrics.validate_metric_names(["toy_reply_words"])
    finally:
        register_family(ReplyWords(), [_info("toy_reply_words", "toy_words")])


def test_registration_rejects_clashes_and_misfiled_metrics():
    with pytest.raises(MetricRegistryError, match="already registered"):
        register_family(ReplyWords(), [_info("bleu", "toy_words")])
    with pytest.raises(MetricRegistryError, match="its family is 'other'"):
        register_family(ReplyWords(), [_info("toy_x", "other")])
    with pytest.raises(MetricRegistryError, match="needs 'gpu'"):
        register_family(ReplyWords(), [MetricInfo("toy_x", "fluency", "x", (0.0, 1.0), True, 0.0, "gpu",
                                                  family="toy_words")])
    with pytest.raises(MetricRegistryError, match="is already registered"):
        class Lexical(ReplyWords):
            name = "lexical"
        register_family(Lexical(), [_info("toy_x", "lexical")])
    with pytest.raises(MetricRegistryError, match="built-in"):
        unregister_family("nli")
    assert "toy_x" not in metrics.METRICS and "toy_words" not in metrics.family_names()


# --- Dependencies ---------------------------------------------------------------------------------

RUNS: list[str] = []


class Counts(MetricFamily):
    """Provides per-sample reply lengths to later families, and one metric of its own."""

    name = "toy_counts"
    provides = ("lengths",)

    def score(self, batch: FamilyBatch) -> FamilyResult:
        RUNS.append(f"{self.name}:{','.join(batch.metrics)}:{','.join(sorted(batch.outputs_wanted))}")
        result = FamilyResult()
        for metric in batch.metrics:
            for it in batch.items:
                result.add(it.sid, metric, len(it.reply))
        if "lengths" in batch.outputs_wanted:
            result.outputs["lengths"] = {it.sid: len(it.reply) for it in batch.items}
        return result


class Ratio(MetricFamily):
    """Reads ``lengths`` from ``toy_counts``: it must run after it."""

    name = "toy_ratio"
    requires = (Requirement("toy_counts", "lengths"),)

    def score(self, batch: FamilyBatch) -> FamilyResult:
        RUNS.append(self.name)
        lengths = batch.inputs["lengths"]
        result = FamilyResult()
        for it in batch.items:
            result.add(it.sid, "toy_ratio", len(it.reply.split()) / lengths[it.sid])
        return result


@pytest.fixture()
def chained():
    RUNS.clear()
    # The dependent family is registered FIRST: only its declared requirement puts the provider first.
    register_family(Ratio(), [_info("toy_ratio", "toy_ratio")])
    register_family(Counts(), [_info("toy_chars", "toy_counts")])
    yield
    unregister_family("toy_ratio")
    unregister_family("toy_counts")


@pytest.mark.usefixtures("chained")
def test_a_family_runs_after_the_family_it_requires_and_gets_its_output():
    steps = family_plan(["toy_ratio"])
    assert [(s.family.name, s.metrics, set(s.outputs_wanted)) for s in steps] == [
        ("toy_counts", (), {"lengths"}), ("toy_ratio", ("toy_ratio",), set())]
    result = metrics.score_samples(_samples(), {"s:0": "ab cd", "s:1": "abc"}, metrics=["toy_ratio"])
    assert RUNS == ["toy_counts::lengths", "toy_ratio"]
    # The provider ran for its output only: its own metric was not asked for, so it has no rows.
    assert result.wide()["toy_ratio"].to_dict() == {"s:0": 2 / 5, "s:1": 1 / 3}
    RUNS.clear()
    metrics.score_samples(_samples(), {"s:0": "ab"}, metrics=["toy_chars"])
    assert RUNS == ["toy_counts:toy_chars:"]  # nobody needs its output: it is not asked to compute it


def test_builtin_persona_coverage_declares_and_gets_the_nli_labels():
    steps = family_plan(["persona_coverage", "bleu"])
    assert [s.family.name for s in steps] == ["lexical", "nli", "persona_coverage"]
    assert steps[1].metrics == () and steps[1].outputs_wanted == {"sentence_labels"}
    # Offline there is no NLI model: the NLI family still delivers (no labels, with the reason), and
    # coverage falls back to embedding similarity saying why.
    result = metrics.score_samples(_samples()[:1], {"s:0": "I love cats"}, metrics=["persona_coverage"])
    assert "no NLI model (needs cross-encoder/nli-deberta-v3-base" in result.provenance["persona_coverage"]["reason"]
    assert result.persona_details["nli_label"].isna().all() and len(result.persona_details) == 2


class CycleA(MetricFamily):
    name = "toy_cycle_a"
    requires = (Requirement("toy_cycle_b", "b"),)
    provides = ("a",)


class CycleB(MetricFamily):
    name = "toy_cycle_b"
    requires = (Requirement("toy_cycle_a", "a"),)
    provides = ("b",)


class Broken(MetricFamily):
    name = "toy_broken"
    requires = (Requirement("toy_counts", "widths"),)


class Silent(Counts):
    """Claims to provide ``lengths`` but never delivers it."""

    name = "toy_silent"

    def score(self, batch: FamilyBatch) -> FamilyResult:
        return FamilyResult()


class NeedsSilent(Ratio):
    name = "toy_needs_silent"
    requires = (Requirement("toy_silent", "lengths"),)


@pytest.mark.usefixtures("chained")
def test_dependency_errors_are_named():
    register_family(Broken(), [_info("toy_broken", "toy_broken")])
    register_family(Silent(), [_info("toy_silent", "toy_silent")])
    register_family(NeedsSilent(), [_info("toy_needs_silent", "toy_needs_silent")])
    try:
        with pytest.raises(MetricRegistryError, match="requires 'widths' of 'toy_counts', which provides lengths"):
            family_plan(["toy_broken"])
        with pytest.raises(MetricRegistryError, match="'toy_silent' did not deliver lengths"):
            metrics.score_samples(_samples(), {"s:0": "x"}, metrics=["toy_needs_silent"])
        register_family(CycleA(), [_info("toy_cycle_a", "toy_cycle_a")])
        register_family(CycleB(), [_info("toy_cycle_b", "toy_cycle_b")])
        with pytest.raises(MetricRegistryError, match="toy_cycle_a, toy_cycle_b require each other in a cycle"):
            family_plan(["toy_cycle_a"])
    finally:
        for name in ("toy_broken", "toy_silent", "toy_needs_silent", "toy_cycle_a", "toy_cycle_b"):
            if name in metrics.family_names():
                unregister_family(name)


def test_families_use_the_package_registry_and_needs_follow_the_slots():
    """One registry mechanism: the metric families sit on persobench.core.registry.Registry, loaded lazily in
    registration order, and a metric's ``needs`` is 'none' or exactly one of the profiles' slots."""
    from persobench.metrics import backends, metric_registry
    from persobench.core.registry import Registry

    assert isinstance(metric_registry.FAMILIES, Registry)
    assert metric_registry.FAMILIES.in_order()[:3] == ("lexical", "meteor", "bertscore")
    assert metric_registry.NEEDS == ("none", *backends.SLOTS)
    assert {info.needs for info in metrics.METRICS.values()} <= set(metric_registry.NEEDS)
    assert metrics.get_family("lexical") is metrics.get_family("lexical")  # built once, then reused
