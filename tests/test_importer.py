"""Importing a folder in the paper's layout: runs, statuses, ids, idempotence, errors."""

from __future__ import annotations

import csv
import os
import json
from pathlib import Path

import pandas as pd
import pytest

from persobench.cli import main
from persobench.generation.importer import ImportFolderError, import_persobench, paper_references, samples_for_run
from persobench.store.run_store import RunStore

PROMPTS = [
    {"personas": "I love hiking.I have two dogs.", "context": "User1: Hi there!\nUser2: Hello, how are you?\nUser1: Any plans?",
     "act_response": "User2: I will walk my dogs in the hills."},
    {"personas": "I am a chef.I live in Rome.", "context": "User1: What do you cook?",
     "act_response": "User2: Pasta, mostly: it is quick."},
    {"personas": "I play chess.", "context": "User1: Do you like games?\nUser2: Yes!\nUser1: Which ones?",
     "act_response": "User2: Chess, every evening."},
]


def _write_csv(path: Path, rows: list[dict], columns: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def make_paper_folder(root: Path) -> Path:
    _write_csv(root / "Prompts" / "FoCus.csv", PROMPTS, ["personas", "context", "act_response"])
    # Processed only: one empty reply (invalid), response times with many digits.
    _write_csv(root / "Responses" / "FoCus" / "gpt-x.csv", [
        {"gen_response": "Hiking with the dogs, of course!", "response_time": "1.2345678901234567"},
        {"gen_response": "", "response_time": "0.5"},
        {"gen_response": "Chess is my favourite.", "response_time": "2.25"},
    ], ["gen_response", "response_time"])
    # COT processed file with a reasoning column.
    _write_csv(root / "Responses" / "FoCus" / "gpt-x-COT.csv", [
        {"gen_response": "Dogs and hills.", "reasoning": "persona: dogs", "response_time": "3.0"},
        {"gen_response": "Pasta.", "reasoning": "persona: chef", "response_time": "3.5"},
        {"gen_response": "Chess.", "reasoning": "persona: chess", "response_time": "4.0"},
    ], ["gen_response", "reasoning", "response_time"])
    # Raw file (preferred) and a processed twin that disagrees: the raw one must win.
    raw_rows = [
        {"gen_response": 'Sure! {"response": "I will take the dogs out."}', "response_time": "5.0"},
        {"gen_response": '{"response": "cut off', "response_time": "6.0"},
        {"gen_response": '```json\n{"response": "Chess, always."}\n```', "response_time": "7.0"},
    ]
    _write_csv(root / "Raw Responses" / "FoCus" / "open-7b.csv", raw_rows, ["gen_response", "response_time"])
    _write_csv(root / "Responses" / "FoCus" / "open-7b.csv", [
        {"gen_response": "DIFFERENT", "response_time": "5.0"},
        {"gen_response": "DIFFERENT", "response_time": "6.0"},
        {"gen_response": "DIFFERENT", "response_time": "7.0"},
    ], ["gen_response", "response_time"])
    return root


@pytest.fixture()
def folder(tmp_path):
    return make_paper_folder(tmp_path / "paper")


@pytest.fixture()
def store(tmp_path):
    return RunStore(tmp_path / "home")


def _by_model_mode(report):
    return {(r.model, r.mode): r for r in report.runs}


def test_import_makes_one_run_per_dataset_model_mode(folder, store):
    report = import_persobench(store, folder)
    runs = _by_model_mode(report)
    assert set(runs) == {("gpt-x", "vanilla"), ("gpt-x", "cot"), ("open-7b", "vanilla")}
    assert all(r.dataset == "focus" and r.n == 3 and r.action == "created" for r in report.runs)
    assert runs[("open-7b", "vanilla")].source == "raw"
    assert runs[("gpt-x", "vanilla")].source == "processed"

    run = store.get(runs[("gpt-x", "vanilla")].run_id)
    m = run.manifest
    assert m.source == "imported" and m.status == "completed"
    assert m.model == {"provider": "imported", "model": "gpt-x", "label": "gpt-x"}
    assert m.template == "paper" and m.mode == "vanilla"  # closed-source: the closed-source notebook's prompt
    assert m.sample_ids == ("focus:0", "focus:1", "focus:2")
    assert m.extra["import"]["prompts_file"].endswith("FoCus.csv")
    gens = run.read_table("generations")
    assert list(gens.columns) == ["sample_id", "status", "response", "reasoning", "raw_text", "finish_reason",
                                  "latency", "prompt_tokens", "completion_tokens", "error", "attempts", "cached",
                                  "prompt"]
    assert list(gens["status"]) == ["ok", "empty", "ok"]
    assert pd.isna(gens["response"].iloc[1])
    assert gens["latency"].iloc[0] == 1.2345678901234567  # exactly as written
    assert gens["latency"].dtype == "float64"

    cot = store.get(runs[("gpt-x", "cot")].run_id)
    assert cot.manifest.template == "paper"
    assert store.get(runs[("open-7b", "vanilla")].run_id).manifest.template == "paper-open"
    from persobench.prompts.protocol import paper_protocol, protocol_of

    assert protocol_of(cot.manifest) == paper_protocol("cot")
    assert protocol_of(run.manifest) == protocol_of(store.get(runs[("open-7b", "vanilla")].run_id).manifest)
    assert list(cot.read_table("generations")["reasoning"]) == ["persona: dogs", "persona: chef", "persona: chess"]


def test_raw_file_is_parsed_with_the_paper_policy(folder, store):
    report = import_persobench(store, folder)
    run = store.get(_by_model_mode(report)[("open-7b", "vanilla")].run_id)
    gens = run.read_table("generations")
    assert list(gens["status"])[0] == "ok" and gens["response"].iloc[0] == "I will take the dogs out."
    assert gens["status"].iloc[1] != "ok"  # unterminated JSON: invalid for the paper
    assert gens["response"].iloc[2] == "Chess, always."
    assert gens["raw_text"].iloc[1] == '{"response": "cut off'
    assert "DIFFERENT" not in set(gens["response"].dropna())
    assert _by_model_mode(report)[("open-7b", "vanilla")].invalid == 1


def test_import_is_idempotent(folder, store):
    first = import_persobench(store, folder)
    gens_before = {r.run_id: store.get(r.run_id).read_table("generations") for r in first.runs}
    second = import_persobench(store, folder)
    assert [r.run_id for r in second.runs] == [r.run_id for r in first.runs]
    assert {r.action for r in second.runs} == {"unchanged"}
    assert len(store.runs()) == len(first.runs) == 3
    for run_id, before in gens_before.items():
        pd.testing.assert_frame_equal(store.get(run_id).read_table("generations"), before)


def test_changed_file_updates_the_run_and_drops_stale_scores(folder, store):
    report = import_persobench(store, folder)
    run_id = _by_model_mode(report)[("gpt-x", "vanilla")].run_id
    run = store.get(run_id)
    run.write_table("scores", pd.DataFrame({"sample_id": ["focus:0"], "metric": ["dist1"], "value": [1.0],
                                            "profile": ["offline"]}))
    run.update(extra={"scores": {"offline": {"metrics": {"dist1": {"status": "ok"}}}}})
    path = folder / "Responses" / "FoCus" / "gpt-x.csv"
    path.write_text(path.read_text(encoding="utf-8").replace("Chess is my favourite.", "Chess!"), encoding="utf-8")
    again = _by_model_mode(import_persobench(store, folder))
    assert again[("gpt-x", "vanilla")].action == "updated"
    assert again[("gpt-x", "vanilla")].run_id == run_id
    run = store.get(run_id)
    assert not run.has_table("scores")
    assert run.manifest.extra["scores"] == {}
    assert run.read_table("generations")["response"].iloc[2] == "Chess!"
    assert again[("gpt-x", "cot")].action == "unchanged"


def test_length_mismatch_names_both_files(folder, store):
    path = folder / "Responses" / "FoCus" / "gpt-x.csv"
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    with pytest.raises(ImportFolderError) as info:
        import_persobench(store, folder)
    message = str(info.value)
    assert str(path) in message and str(folder / "Prompts" / "FoCus.csv") in message
    assert "2 replies" in message and "3 prompt rows" in message


def test_filters_and_folder_errors(folder, store, tmp_path):
    report = import_persobench(store, folder, models=["gpt-x"], modes=["cot"])
    assert [(r.model, r.mode) for r in report.runs] == [("gpt-x", "cot")]
    with pytest.raises(ImportFolderError, match="no Prompts"):
        import_persobench(store, tmp_path)
    with pytest.raises(ImportFolderError, match="unknown dataset"):
        import_persobench(store, folder, datasets=["nope"])
    (folder / "Responses" / "Mystery").mkdir()
    (folder / "Responses" / "Mystery" / "m.csv").write_text("gen_response,response_time\nx,1\n", encoding="utf-8")
    report = import_persobench(store, folder)
    assert any("Mystery" in reason for _path, reason in report.skipped)


def test_sample_ids_join_the_prompt_rows(folder, store):
    report = import_persobench(store, folder)
    run = store.get(report.runs[0].run_id)
    samples = samples_for_run(run)
    assert list(samples) == ["focus:0", "focus:1", "focus:2"]
    assert samples["focus:1"].reference == "Pasta, mostly: it is quick."
    refs = paper_references(run.manifest.extra["import"]["prompts_file"], "focus")
    assert refs["focus:1"] == "User2: Pasta, mostly: it is quick."  # as published, label kept


def test_paper_references_read_the_table_once_per_version_of_the_file(folder, store, monkeypatch):
    import persobench.generation.importer as importer

    report = import_persobench(store, folder)
    prompts = Path(store.get(report.runs[0].run_id).manifest.extra["import"]["prompts_file"])
    reads = []
    real = importer.prompt_table_rows
    monkeypatch.setattr(importer, "prompt_table_rows", lambda path: reads.append(path) or real(path))
    importer._REFERENCE_CELLS.clear()
    first = paper_references(prompts, "focus")
    first["focus:1"] = "changed by the caller"
    second = paper_references(prompts, "focus")
    assert len(reads) == 1 and second["focus:1"] == "User2: Pasta, mostly: it is quick."  # a copy each time
    text = prompts.read_text(encoding="utf-8").replace("Pasta, mostly", "Rice, mostly")
    prompts.write_text(text, encoding="utf-8")
    os.utime(prompts, ns=(prompts.stat().st_atime_ns, prompts.stat().st_mtime_ns + 10**9))
    assert paper_references(prompts, "focus")["focus:1"] == "User2: Rice, mostly: it is quick."
    assert len(reads) == 2


def test_cli_import(folder, tmp_path, capsys):
    home = tmp_path / "clihome"
    assert main(["--home", str(home), "import-persobench", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "3 run(s)" in out and "3 created" in out
    assert main(["--home", str(home), "import-persobench", str(folder)]) == 0
    assert "3 unchanged" in capsys.readouterr().out
    assert main(["--home", str(home), "import-persobench", str(tmp_path / "missing")]) == 2
    assert "no such folder" in capsys.readouterr().err
    manifest = json.loads(next((home / "runs").glob("*/manifest.json")).read_text())
    assert manifest["source"] == "imported"


def test_runs_imported_before_templates_were_named_keep_their_ids_and_scores(folder, store):
    """A store imported when the template was recorded as paper-vanilla: re-importing renames the
    template in place (same run id, scores kept), nothing is duplicated."""
    report = import_persobench(store, folder)
    run = store.get(_by_model_mode(report)[("open-7b", "vanilla")].run_id)
    run.update(template="paper-vanilla")
    run.write_table("scores", pd.DataFrame({"sample_id": ["focus:0"], "metric": ["dist1"], "value": [1.0],
                                            "profile": ["offline"]}))
    again = import_persobench(store, folder)
    assert [r.run_id for r in again.runs] == [r.run_id for r in report.runs]
    assert {r.action for r in again.runs} == {"unchanged"} and len(store.runs()) == 3
    assert store.get(run.run_id).manifest.template == "paper-open" and store.get(run.run_id).has_table("scores")


def test_published_runs_are_scored_against_the_reference_the_paper_used(tmp_path, store):
    """``score`` with no reference given: vanilla gpt-3.5-turbo (recorded raw) is scored against the
    "User2: ..." cell, vanilla gpt-4o-mini (recorded stripped) and an unknown model against the
    label-free reference."""
    from persobench.generation.importer import run_references
    from persobench.scoring import score_run

    root = tmp_path / "published"
    _write_csv(root / "Prompts" / "FoCus.csv", PROMPTS, ["personas", "context", "act_response"])
    replies = [{"gen_response": row["act_response"].removeprefix("User2: "), "response_time": "1"} for row in PROMPTS]
    for model in ("gpt-3.5-turbo", "gpt-4o-mini", "gpt-x"):
        _write_csv(root / "Responses" / "FoCus" / f"{model}.csv", replies, ["gen_response", "response_time"])
    report = import_persobench(store, root)
    rouge1 = {}
    for r in report.runs:
        run = store.get(r.run_id)
        score_run(run, samples_for_run(run), metrics=["rouge1"])
        scores = run.read_table("scores")
        rouge1[r.model] = [round(v, 6) for v in scores[scores["metric"] == "rouge1"]["value"]]
        references = run_references(run)
        if r.model == "gpt-3.5-turbo":
            assert references == {f"focus:{i}": row["act_response"] for i, row in enumerate(PROMPTS)}
        else:
            assert references is None
    assert rouge1["gpt-4o-mini"] == rouge1["gpt-x"] == [1.0, 1.0, 1.0]  # the reply is the label-free reference
    assert all(value < 1.0 for value in rouge1["gpt-3.5-turbo"])  # "user2" is a token the reply lacks
