"""Under the paper protocol, persona metrics read the paper's ``personas`` cell (as its evaluation did)."""

from __future__ import annotations

import csv

import pandas as pd
import pytest

from persobench.datasets.paper_cells import paper_persona_text
from persobench.datasets.tables import read_prompt_table
from persobench.metrics import lexical, score_run
from persobench.store import RunManifest, RunStore


def _table(reference_dir, stem, dataset, owner="responder"):
    path = reference_dir / "Prompts" / f"{stem}.csv"
    with open(path, newline="", encoding="utf-8") as handle:
        cells = [row["personas"] for row in csv.DictReader(handle)]
    return read_prompt_table(path, dataset=dataset, unlabelled_owner=owner), cells


def test_focus_persona_text_is_the_cell_as_it_is(reference_dir):
    samples, cells = _table(reference_dir, "FoCus", "focus", "partner")
    assert [paper_persona_text(s) for s in samples] == cells
    assert ".I " in cells[4]  # sentences glued with no space: what the paper's TF-IDF saw


def test_bst_and_pec_cells_are_cleaned_as_the_evaluation_notebook_did(reference_dir):
    samples, cells = _table(reference_dir, "Blended Skill Talk", "blended-skill-talk")
    text = paper_persona_text(samples[0])
    assert cells[0].startswith("[User 1 persona]: ['i hate talking to people.'")
    assert text.startswith("i hate talking to people. i believe dragons")
    assert not any(ch in paper_persona_text(s) for s in samples for ch in "[]'\"")
    pec, pec_cells = _table(reference_dir, "PEC", "pec")
    assert pec_cells[0].startswith("[Responder persona]:")
    assert not paper_persona_text(pec[0]).startswith("[") and paper_persona_text(pec[0]) == paper_persona_text(pec[0]).strip()


def _run(store, samples, *, source, template, replies):
    ids = tuple(s.id for s in samples)
    run = store.create(RunManifest(run_id=f"r-{template}-{source}", dataset="focus", sample_ids=ids,
                                   model={"provider": "test", "model": "m"}, mode="vanilla", template=template,
                                   template_hash="t", status="completed", source=source,
                                   parameters={"temperature": 0.0, "max_tokens": 110, "policy": "paper"}))
    run.write_table("generations", pd.DataFrame({"sample_id": list(ids), "status": ["ok"] * len(ids),
                                                 "response": replies}))
    return run


@pytest.mark.parametrize("source,template,paper", [("imported", "paper-open", True), ("generated", "paper", True),
                                                   ("generated", "persobench", False)])
def test_score_run_gives_persona_metrics_the_cell_under_the_paper_protocol(reference_dir, tmp_path, source,
                                                                           template, paper):
    samples, cells = _table(reference_dir, "FoCus", "focus", "partner")
    samples = samples[:5]
    replies = ["I love England and its churches, you would like the library there."] * 5
    run = _run(RunStore(tmp_path), samples, source=source, template=template, replies=replies)
    score_run(run, {s.id: s for s in samples}, metrics=["idf_overlap"])
    got = run.read_table("scores").set_index("sample_id")["value"]
    persona_texts = cells[:5] if paper else [" ".join(s.persona_sentences()) for s in samples]
    expected = [lexical.idf_overlap(text, reply) for text, reply in zip(persona_texts, replies)]
    assert [got[s.id] for s in samples] == pytest.approx(expected)
    # the two inputs really differ on FoCus (glued sentences), so this test can tell them apart
    other = [lexical.idf_overlap(" ".join(s.persona_sentences()) if paper else c, r)
             for s, c, r in zip(samples, cells, replies)]
    assert other != pytest.approx(expected)
    persona_input = run.manifest.details.profile_scores("offline").metrics["idf_overlap"].persona_input
    assert persona_input == ("paper personas cell" if paper else "persona sentences")
