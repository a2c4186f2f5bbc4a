"""Registry, profiles, score_samples / score_run (caching, invalid replies, provenance) and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from persobench import metrics
from persobench.scoring import score_run
from persobench.errors import ScoringError
from persobench.metrics import backends, sample_scores as scoring
from persobench.records import PersonaSet, Sample, Turn
from persobench.store.run_store import RunManifest, RunStore

# --- Registry ------------------------------------------------------------------------------------


#: The paper's per-sample metrics, in its order. Other families (built in or registered) may follow:
#: the registry is the list, this test checks only the paper's part of it.
PAPER_METRICS = ("bleu", "rouge1", "rouge2", "rougeL", "meteor", "bertscore_p", "bertscore_r", "bertscore_f1",
                 "dist1", "dist2", "ue_score", "unieval_coherence", "c_score", "p_consistency")


def test_registry_names_and_info():
    names = metrics.metric_names()
    assert [n for n in names if n in PAPER_METRICS] == list(PAPER_METRICS) and len(set(names)) == len(names)
    assert names[:len(PAPER_METRICS)] == PAPER_METRICS  # the paper's come first, as its tables list them
    assert metrics.metric_names(level="run") == ("failure_ratio", "instructability", "response_time")
    c = metrics.metric_info("c_score")
    assert (c.dimension, c.range, c.worst_value, c.needs) == ("personalization", (-1.0, 1.0), -1.0, "nli")
    assert metrics.metric_info("ue_score").range == (0.0, 2.0)
    assert metrics.metric_info("dist2").dimension == "diversity"
    assert metrics.metric_info("response_time").higher_is_better is False
    assert metrics.metric_info("unieval_engagingness").range[1] is None
    assert all(metrics.metric_info(n).worst_value == 0.0 for n in metrics.metric_names() if n != "c_score")
    with pytest.raises(metrics.UnknownMetricError, match="known metrics"):
        metrics.metric_info("nope")
    with pytest.raises(metrics.UnknownMetricError, match="run-level"):
        metrics.validate_metric_names(["bleu", "failure_ratio"])
    assert metrics.validate_metric_names(["dist2", "bleu", "bleu"]) == ("bleu", "dist2")


def test_every_sample_metric_has_a_family_and_a_known_backend_slot():
    infos = [metrics.metric_info(n) for n in metrics.metric_names()]
    assert all(i.family in metrics.family_names() for i in infos)
    assert {i.slot for i in infos} - {None} <= set(backends.SLOTS)
    assert metrics.metric_info("meteor").slot == "wordnet" and metrics.metric_info("bleu").slot is None
    # The facts the scorer used to keep in parallel lists, now read from MetricInfo.
    none = metrics.metric_names(needs="none")
    assert {"bleu", "rouge1", "rouge2", "rougeL", "dist1", "dist2", "idf_overlap"} <= set(none)
    assert all(metrics.metric_info(n).needs == "none" and metrics.metric_info(n).slot is None for n in none)
    assert metrics.metric_names(family="nli") == ("ue_score", "c_score", "p_consistency")
    reference = {n for n in metrics.metric_names() if metrics.metric_info(n).needs_reference}
    assert reference >= {"bleu", "rouge1", "rouge2", "rougeL", "meteor", "bertscore_p", "bertscore_r", "bertscore_f1",
                         "ue_score"}
    assert not reference & {"dist1", "dist2", "c_score", "p_consistency", "persona_coverage"}
    persona = {n for n in metrics.metric_names() if metrics.metric_info(n).needs_persona}
    assert persona >= {"c_score", "p_consistency", "ue_score", "persona_distance", "idf_overlap", "persona_coverage",
                       "unieval_groundedness", "unieval_overall"}
    assert not persona & {"bleu", "dist1", "dist2", "meteor", "bertscore_f1"}


def test_importing_the_registry_is_light():
    code = ("import sys, persobench.metrics as m; m.metric_info('bleu'); "
            "print(sorted(x for x in ('torch','nltk','pandas','transformers','bert_score') if x in sys.modules))")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root, env=env)
    assert out.stdout.strip() == "[]"


# --- Profiles --------------------------------------------------------------------------------------


def test_profiles_and_overrides(tmp_path):
    offline = metrics.get_profile("offline")
    assert offline.key == "offline"
    assert offline.spec("nli").model_id is None and "from the hub" in offline.spec("nli").unavailable_reason
    assert offline.spec("bertscore").options["num_layers"] == 4
    standard = metrics.get_profile("standard")
    assert standard.spec("bertscore").model_id == "roberta-large"
    assert standard.spec("bertscore").options["num_layers"] == 17
    assert standard.spec("nli").model_id == "cross-encoder/nli-deberta-v3-base"
    assert standard.spec("unieval").model_id == "MingZhong/unieval-dialog"
    # A metric name maps to its slot; a local path is resolved; overrides change the key.
    custom = metrics.get_profile("offline", {"c_score": str(tmp_path), "bertscore": "roberta-base"})
    assert custom.spec("nli").source == "path" and custom.spec("nli").model_id == str(tmp_path.resolve())
    assert custom.spec("bertscore").model_id == "roberta-base" and "num_layers" not in custom.spec("bertscore").options
    assert custom.key.startswith("offline+") and custom.key != metrics.get_profile("offline", {"nli": "x/y"}).key
    layered = metrics.get_profile("standard", {"bertscore.num_layers": "9"})
    assert layered.spec("bertscore").options["num_layers"] == 9
    with pytest.raises(ValueError, match="unknown profile"):
        metrics.get_profile("fast")
    with pytest.raises(ValueError, match="not a model slot"):
        metrics.get_profile("offline", {"bleu": "x"})
    with pytest.raises(ValueError, match="no such file"):
        metrics.get_profile("offline", {"nli": str(tmp_path / "missing")})


def test_no_gpu_device_means_cpu_without_importing_torch():
    if backends.gpu_device_node():
        pytest.skip("this machine has GPU device nodes")
    code = ("import sys; from persobench.metrics.backends import get_profile; "
            "print(get_profile('offline').device, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PERSOBENCH_DEVICE": ""}).stdout.split()
    assert out == ["cpu", "False"]  # a lexical-only score does not pay seconds of torch import


def test_gpu_used_when_present(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.delenv("PERSOBENCH_DEVICE", raising=False)
    monkeypatch.setattr(backends, "gpu_device_node", lambda: True)  # as on a machine with a GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert backends.default_device() == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert backends.default_device() == "cpu"


def test_model_cache_loads_once_and_remembers_failures():
    calls = []

    def factory():
        calls.append(1)
        return object()

    key = ("test-slot", "model-x")
    first = backends.cached(key, factory)
    assert backends.cached(key, factory) is first and len(calls) == 1

    def broken():
        calls.append(2)
        raise OSError("gone")

    for _ in range(2):
        with pytest.raises(backends.BackendUnavailable, match="gone"):
            backends.cached(("test-slot", "broken"), broken)
    assert calls.count(2) == 1


# --- score_samples -----------------------------------------------------------------------------------


def _samples():
    return [
        Sample("s:0", "s", (PersonaSet("User2", ("I love cats.", "I have two dogs.")),),
               (Turn("User1", "Do you like pets?"),), "User2", "Yes, I love my cats and dogs."),
        Sample("s:1", "s", (PersonaSet("User2", ("I am a teacher.",)),), (Turn("User1", "What do you do?"),),
               "User2", "I teach kids at school."),
        Sample("s:2", "s", (), (Turn("User1", "Hi"),), "User2", ""),
    ]


def test_score_samples_skips_invalid_replies_and_inapplicable_metrics():
    replies = {"s:0": "I love cats and I have two dogs.", "s:1": "   ", "s:2": "Hello there friend"}
    result = metrics.score_samples(_samples(), replies, metrics=["bleu", "dist1", "idf_overlap"])
    table = result.scores
    assert list(table.columns) == ["sample_id", "metric", "value"]
    assert table["value"].dtype == "float64"
    assert "s:1" not in set(table["sample_id"])  # blank reply: invalid, not scored (no worst value)
    got = set(zip(table["sample_id"], table["metric"]))
    assert ("s:2", "dist1") in got
    assert ("s:2", "bleu") not in got and ("s:2", "idf_overlap") not in got  # no reference / no persona
    assert result.provenance["bleu"]["n"] == 1 and result.provenance["dist1"]["n"] == 2
    assert set(result.provenance) == {"bleu", "dist1", "idf_overlap"}


def test_references_override_replaces_sample_reference():
    samples = _samples()[:1]
    plain = metrics.score_samples(samples, {"s:0": "User2: hi"}, metrics=["rouge1"])
    override = metrics.score_samples(samples, {"s:0": "User2: hi"}, metrics=["rouge1"],
                                     references={"s:0": "User2: hi"})
    assert plain.scores["value"].iloc[0] == 0.0
    assert override.scores["value"].iloc[0] == pytest.approx(1.0, abs=1e-6)


def test_progress_is_reported_per_stage():
    seen = []
    metrics.score_samples(_samples(), {"s:0": "I love cats"}, metrics=["bleu", "meteor"],
                          progress=lambda stage, done, total: seen.append((stage, done, total)))
    assert ("lexical", 1, 1) in seen and ("meteor", 1, 1) in seen


# --- score_run ----------------------------------------------------------------------------------------


def _run(home, samples, rows):
    store = RunStore(home)
    manifest = RunManifest(run_id="s__test__vanilla__0", dataset="s", sample_ids=tuple(s.id for s in samples),
                           model={"label": "test"}, mode="vanilla", template="t", template_hash="h")
    run = store.create(manifest)
    frame = pd.DataFrame(rows, columns=["sample_id", "status", "response", "latency"])
    run.write_table("generations", frame)
    return store, run


def test_score_run_writes_tables_provenance_and_never_recomputes(tmp_path, monkeypatch):
    samples = _samples()
    by_id = {s.id: s for s in samples}
    _, run = _run(tmp_path, samples, [("s:0", "ok", "I love cats and dogs.", 1.0),
                                      ("s:1", "parse_error", "", 2.0),
                                      ("s:2", "ok", "Hello there friend", 1.5)])
    calls = []
    real = scoring.score_samples

    def spy(samples_, replies, **kwargs):
        calls.append((sorted(replies), list(kwargs["metrics"])))
        return real(samples_, replies, **kwargs)

    monkeypatch.setattr(scoring, "score_samples", spy)
    first = score_run(run, by_id, metrics=["bleu", "dist1", "persona_coverage", "c_score"])
    assert first.skipped_invalid == 1
    assert first.computed == {"bleu": 1, "dist1": 2, "persona_coverage": 1, "c_score": 0}
    assert "from the hub" in first.unavailable()["c_score"]
    stored = run.read_table("scores")
    assert list(stored.columns) == ["sample_id", "metric", "value", "profile", "basis"]
    assert set(stored["profile"]) == {"offline"}
    assert "s:1" not in set(stored["sample_id"])
    details = run.read_table("persona_details")
    assert len(details) == 2 and set(details["sample_id"]) == {"s:0"}
    extra = RunStore(tmp_path).get(run.run_id).manifest.extra["scores"]["offline"]
    assert extra["metrics"]["bleu"]["status"] == "ok"
    assert extra["metrics"]["c_score"]["status"] == "unavailable"
    assert extra["profile"]["slots"]["bertscore"]["options"]["num_layers"] == 4

    # Second call: everything applicable is cached; only the unavailable metric is tried again.
    second = score_run(run, by_id, metrics=["bleu", "dist1", "persona_coverage", "c_score"])
    assert second.computed == {"c_score": 0}
    assert second.cached["bleu"] == 1 and second.cached["dist1"] == 2
    assert calls[-1][1] == ["c_score"]
    assert len(run.read_table("scores")) == len(stored)

    # A new metric on the same run scores only that metric; earlier values are untouched.
    third = score_run(run, by_id, metrics=["bleu", "dist2"])
    assert third.computed == {"dist2": 2}
    assert calls[-1] == (["s:0", "s:2"], ["dist2"])
    after = run.read_table("scores")
    pd.testing.assert_frame_equal(after.iloc[: len(stored)].reset_index(drop=True), stored.reset_index(drop=True))


def test_score_run_keeps_profiles_apart(tmp_path):
    samples = _samples()
    _, run = _run(tmp_path, samples, [("s:0", "ok", "I love cats and dogs.", 1.0)])
    by_id = {s.id: s for s in samples}
    score_run(run, by_id, metrics=["meteor"])
    summary = score_run(run, by_id, metrics=["meteor"], overrides={"wordnet": "none"})
    assert summary.computed == {"meteor": 1}  # a different backend is a different key, not a cache hit
    stored = run.read_table("scores")
    assert sorted(stored["profile"]) == sorted(["offline", summary.profile])
    prov = RunStore(tmp_path).get(run.run_id).manifest.extra["scores"]
    assert prov[summary.profile]["metrics"]["meteor"]["status"] == "degraded"
    assert prov["offline"]["metrics"]["meteor"]["status"] == "ok"


def test_score_run_rejects_unknown_sample_ids(tmp_path):
    _, run = _run(tmp_path, _samples(), [("zzz:9", "ok", "hi", 1.0)])
    with pytest.raises(ScoringError, match="not in dataset"):
        score_run(run, {}, metrics=["dist1"])


# --- CLI ----------------------------------------------------------------------------------------------


def _sample_dataset_run(home):
    from persobench.datasets import load_dataset

    samples = load_dataset("sample", limit=4)
    store = RunStore(home)
    manifest = RunManifest(run_id="sample__cli__vanilla__0", dataset="sample",
                           sample_ids=tuple(s.id for s in samples), model={"label": "cli"}, mode="vanilla",
                           template="t", template_hash="h")
    run = store.create(manifest)
    rows = [(s.id, "ok" if i else "refused", s.reference if i else "", 0.5) for i, s in enumerate(samples)]
    run.write_table("generations", pd.DataFrame(rows, columns=["sample_id", "status", "response", "latency"]))
    return run


def test_cli_score_caches_and_reports_unavailable(tmp_path, capsys):
    from persobench.cli import main

    run = _sample_dataset_run(tmp_path)
    assert main(["--home", str(tmp_path), "score", "--no-progress", "--metrics", "bleu,dist2", run.run_id[:10]]) == 0
    out = capsys.readouterr().out
    assert "6 new value(s) for bleu, dist2" in out and "1 invalid reply not scored" in out
    assert main(["--home", str(tmp_path), "score", "--no-progress", "--metrics", "bleu,dist2"]) == 0
    assert "0 new value(s); 6 cached" in capsys.readouterr().out
    bleu = run.read_table("scores").query("metric == 'bleu'")["value"]
    assert (bleu > 0.99).all()  # replies equal their references

    assert main(["--home", str(tmp_path), "score", "--no-progress", "--metrics", "c_score,dist1"]) == 1
    out = capsys.readouterr().out
    assert "unavailable (no number stored)" in out
    assert "c_score: needs cross-encoder/nli-deberta-v3-base from the hub" in out

    assert main(["--home", str(tmp_path), "score", "--metrics", "bogus"]) == 2
    assert "unknown per-sample metric" in capsys.readouterr().err
    assert main(["--home", str(tmp_path), "score", "--model", "nli"]) == 2
    manifest = json.loads((run.path / "manifest.json").read_text())
    assert manifest["extra"]["scores"]["offline"]["metrics"]["dist2"]["n"] == 3


def test_a_run_with_no_valid_reply_still_records_what_the_profile_covers(tmp_path):
    samples = _samples()
    store, run = _run(tmp_path / "home", samples, [("s:0", "truncated", None, 1.0), ("s:1", "empty", "", 1.0)])
    run.update(status="completed")
    summary = score_run(run, {s.id: s for s in samples}, profile="offline", metrics=["dist1", "c_score"])
    prov = store.get(run.run_id).manifest.extra["scores"]["offline"]["metrics"]
    assert prov["dist1"]["status"] == "ok" and prov["dist1"]["n"] == 0
    assert prov["dist1"]["model_id"] == ""  # nothing ran: must not count as another model in comparisons
    assert prov["c_score"]["status"] == "unavailable" and "from the hub" in prov["c_score"]["reason"]
    assert summary.computed == {} or sum(summary.computed.values()) == 0
    from persobench import aggregate

    board = aggregate.leaderboard(aggregate.load_results(store), invalid="worst")
    dist1 = board[board["metric"] == "dist1"].iloc[0]
    assert dist1["mean"] == 0.0 and dist1["n"] == 2
    c_rows = board[board["metric"] == "c_score"]
    assert c_rows.empty or c_rows["mean"].isna().all()


def test_a_lexical_pass_reads_personas_only_for_idf_overlap():
    """Items are built without persona sentences when no family of the pass reads them; IDF
    overlap (the lexical family's persona metric) still sees them."""
    from persobench.metrics.lexical import idf_overlap
    from persobench.metrics.metric_registry import get_family

    lexical = get_family("lexical")
    assert lexical.reads_personas(["bleu", "rouge1", "dist2"]) is False
    assert lexical.reads_personas(["bleu", "idf_overlap"]) is True
    assert get_family(metrics.metric_info("c_score").family).reads_personas(["c_score"]) is True
    sample = Sample("s1", "t", (PersonaSet("User2", ("I love hiking in the alps.",)),),
                    (Turn("User1", "Any plans?"),), "User2", "I will go hiking.")
    reply = "Hiking in the alps, as always."
    both = scoring.score_samples([sample], {"s1": reply}, metrics=["bleu", "idf_overlap"]).scores
    alone = scoring.score_samples([sample], {"s1": reply}, metrics=["bleu"]).scores
    value = dict(zip(both["metric"], both["value"]))
    assert value["idf_overlap"] == pytest.approx(idf_overlap("I love hiking in the alps.", reply)) and value["idf_overlap"] > 0
    assert value["bleu"] == float(alone["value"].iloc[0])


def test_score_rows_of_any_family_become_the_same_frame_as_before():
    """The scores frame is built as Arrow columns: ids, metric names and values of any Python or
    numpy type a registered family may give come out as pandas made them (str, str, float64)."""
    import numpy as np

    rows = [("a", "bleu", 0.5), ("b", "bleu", None), (3, "x", float("nan")), ("c", "y", 1),
            ("d", "z", np.float32(0.25)), ("e", "z", np.bool_(True)), ("f", "z", np.int64(2))]
    frame = scoring._score_frame([scoring._row_columns(rows)])
    expected = pd.DataFrame(rows, columns=["sample_id", "metric", "value"])
    expected["value"] = expected["value"].astype("float64")
    expected["sample_id"] = expected["sample_id"].astype(str)
    expected["metric"] = expected["metric"].astype(str)
    pd.testing.assert_frame_equal(frame, expected)
    empty = scoring._score_frame([])
    assert list(empty.columns) == ["sample_id", "metric", "value"] and empty.empty
    assert empty.dtypes.to_dict() == expected.dtypes.to_dict()

    # Whole columns (a family's add_column), sharing their ids, before and after rows: same frame,
    # in the order given.
    ids = ["a", "b", "c"]
    mixed = scoring._score_frame([(ids, "bleu", [0.1, 0.2, 0.3]), scoring._row_columns(rows[:2]),
                                  (ids, "dist1", [1, np.float32(0.5), None])])
    expected = pd.DataFrame([("a", "bleu", 0.1), ("b", "bleu", 0.2), ("c", "bleu", 0.3), *rows[:2],
                             ("a", "dist1", 1.0), ("b", "dist1", 0.5), ("c", "dist1", None)],
                            columns=["sample_id", "metric", "value"]).astype({"value": "float64",
                                                                               "sample_id": str, "metric": str})
    pd.testing.assert_frame_equal(mixed, expected)


def test_a_family_column_must_give_one_value_per_sample():
    from persobench.metrics.family import FamilyResult

    result = FamilyResult()
    from persobench.metrics import MetricRegistryError

    with pytest.raises(MetricRegistryError, match="'bleu': 2 values for 3 samples"):
        result.add_column(["a", "b", "c"], "bleu", [0.1, 0.2])
