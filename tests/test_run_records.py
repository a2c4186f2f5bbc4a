"""Typed, versioned run records: manifests written before the records existed (committed fixtures,
produced by that code) read without loss, and the writers still produce the same JSON keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from persobench.generation import run_generation
from persobench.store.run_records import (
    SCHEMA_VERSION,
    ConcurrencyRecord,
    GenerationRecord,
    MetricProvenance,
    ProfileScores,
    RunExtra,
    Usage,
)
from persobench.store.run_store import RunManifest, RunStore

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "manifests_v1"
MANIFESTS = sorted(FIXTURES.glob("*.json"))


def _load(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.stem)
def test_old_manifests_read_without_loss(path):
    data = json.loads(path.read_text(encoding="utf-8"))
    assert "schema_version" not in data  # written before the field existed
    manifest = RunManifest.from_dict(data)
    assert manifest.schema_version == 1
    # every key survives the typed form and comes back unchanged
    assert manifest.details.to_extra() == data["extra"]
    written = manifest.to_dict()
    assert written["schema_version"] == SCHEMA_VERSION
    assert {k: v for k, v in written.items() if k in data} == data  # same keys, same values


def test_typed_fields_of_a_generated_and_scored_run():
    details = RunManifest.from_dict(_load("openai_aborted.json")).details
    assert details.generation.failure_reason.startswith("the first 2 requests all failed: authentication")
    assert details.generation.finished and details.usage == Usage(requests=2)
    assert details.cost_usd is None and details.generation.baseline is False
    assert details.counts["api_error"] == 2 and details.counts["pending"] == 2
    scores = details.profile_scores("offline")
    assert scores.profile["key"] == "offline"
    assert scores.metrics["ue_score"].status == "unavailable" and "nli" in scores.metrics["ue_score"].reason
    assert scores.metrics["bleu"].reason == "no valid reply to score" and scores.metrics["bleu"].n == 0
    assert details.profile_scores("standard") == ProfileScores()

    completed = RunManifest.from_dict(_load("openai_completed.json")).details
    assert completed.usage.prompt_tokens > 0 and completed.usage.samples_with_usage == 3
    assert completed.generation.failure_reason is None and completed.imported is None


def test_typed_fields_of_an_imported_run():
    details = RunManifest.from_dict(_load("imported_scored.json")).details
    assert details.generation is None
    assert details.imported.source == "raw" and details.imported.policy == "paper"
    assert details.imported.import_version == 1
    assert details.imported.prompts_file.endswith(".csv") and len(details.imported.sha256) == 64
    assert set(details.counts) == {"total", "ok", "invalid"}
    bleu = details.profile_scores("offline").metrics["bleu"]
    assert bleu.status == "ok" and bleu.n > 0 and bleu.metric_version


def test_unknown_keys_are_kept_and_written_back():
    extra = _load("baseline_scored_twice.json")["extra"]
    extra = {**extra, "note": {"by": "another tool"}, "structured": "yes"}  # a structured value of no known form
    extra["scores"]["offline"]["metrics"]["bleu"] = {**extra["scores"]["offline"]["metrics"]["bleu"], "seconds": 1.5}
    extra["usage"] = {**extra["usage"], "reasoning_tokens": 7}
    details = RunExtra.from_extra(extra)
    assert details.other == {"note": {"by": "another tool"}, "structured": "yes"}
    assert details.profile_scores("offline").metrics["bleu"].other == {"seconds": 1.5}
    assert details.usage.other == {"reasoning_tokens": 7}
    assert details.to_extra() == extra


def test_the_first_scores_layout_and_mixed_models_read():
    legacy = RunExtra.from_extra({"scores": {"offline": {"bleu": {"status": "ok", "n": 3}}}})
    assert legacy.profile_scores("offline").metrics["bleu"] == MetricProvenance(status="ok", n=3)
    mixed = MetricProvenance.from_dict({"status": "ok", "model_id": "b", "reason": "",
                                        "mixed_with": {"model_id": "a"}})
    assert mixed.note == "values of this run mix b with earlier a"


def test_a_newer_schema_is_refused_with_one_line(tmp_path):
    data = {**_load("openai_completed.json"), "schema_version": SCHEMA_VERSION + 1}
    with pytest.raises(ValueError, match="newer PersoBench") as info:
        RunManifest.from_dict(data)
    assert "\n" not in str(info.value)
    # in a store, such a run is listed as unreadable rather than crashing the listing
    folder = tmp_path / "runs" / data["run_id"]
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps(data))
    runs, problems = RunStore(tmp_path).scan()
    assert runs == [] and "schema_version" in problems[0].reason


def test_writers_keep_the_keys_old_readers_know(tmp_path):
    run = run_generation(dataset="sample", model="baseline:reference", limit=2, home=tmp_path)
    on_disk = json.loads((run.path / "manifest.json").read_text())
    old = _load("openai_completed.json")
    assert on_disk["schema_version"] == SCHEMA_VERSION
    assert set(on_disk) - {"schema_version"} <= set(old)
    assert set(on_disk["extra"]) == set(old["extra"]) - {"scores"}
    assert set(on_disk["extra"]["usage"]) == set(old["extra"]["usage"])
    generation = RunManifest.from_dict(on_disk).details.generation
    assert generation == GenerationRecord(
        started_at=on_disk["extra"]["started_at"], failure_reason=None, finished_at=on_disk["extra"]["finished_at"],
        usage=Usage(**on_disk["extra"]["usage"]), cost_usd=on_disk["extra"]["cost_usd"], baseline=True,
    )
    assert generation.usage.requests == 2 and on_disk["extra"]["counts"]["ok"] == 2


def test_the_scoring_writer_keeps_the_keys_old_readers_know(tmp_path):
    from persobench.datasets import samples_by_id
    from persobench.scoring.compute import score_run

    run = run_generation(dataset="sample", model="baseline:reference", limit=2, home=tmp_path)
    score_run(run, samples_by_id("sample"), profile="offline", metrics=["bleu", "ue_score"])
    score_run(run, samples_by_id("sample"), profile="offline", metrics=["bleu", "dist1"])  # a second pass
    on_disk = json.loads((run.path / "manifest.json").read_text())["extra"]["scores"]["offline"]
    old = _load("baseline_scored_twice.json")["extra"]["scores"]["offline"]
    assert set(on_disk) == set(old)
    for metric in ("bleu", "ue_score"):  # every key an old reader knows (later stages may add more)
        assert set(old["metrics"][metric]) <= set(on_disk["metrics"][metric]), metric
    assert on_disk["metrics"]["bleu"]["n"] == 2 and "mixed_with" not in on_disk["metrics"]["bleu"]
    assert on_disk["metrics"]["ue_score"]["status"] == "unavailable"
    assert set(on_disk["metrics"]) == {"bleu", "ue_score", "dist1"}


def test_concurrency_and_metric_inputs_are_typed():
    extra = {"concurrency": {"mode": "auto", "final": 4, "highest": 8, "decreases": 1, "ceiling": 8},
             "dataset_file": {"path": "/data/x.csv", "sha256": "ab" * 32}}
    details = RunExtra.from_extra(extra)
    assert details.concurrency == ConcurrencyRecord("auto", final=4, highest=8, decreases=1, ceiling=8)
    assert details.dataset_file.path == "/data/x.csv" and details.dataset_file.sha256 == "ab" * 32
    assert details.other == {} and details.to_extra() == extra
    # layouts never written by PersoBench are kept as read, not interpreted
    foreign = {"template": {"name": "mine", "family": "ours"}, "template_family": "ours", "structured": True}
    assert RunExtra.from_extra(foreign).other == foreign and RunExtra.from_extra(foreign).to_extra() == foreign

    provenance = {"status": "ok", "reason": "", "model_id": "", "backend": "idf", "n": 3,
                  "persona_input": "paper personas cell", "reference": "given by the caller for 3 sample(s)"}
    record = MetricProvenance.from_dict(provenance)
    assert record.persona_input == "paper personas cell" and record.reference.startswith("given by the caller")
    assert record.other == {} and record.to_dict() == provenance
