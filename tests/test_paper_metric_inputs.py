"""Under the paper protocol, persona metrics read the paper's ``personas`` cell (as its evaluation did)."""

from __future__ import annotations

import csv

import pandas as pd
import pytest

from persobench.datasets.paper_cells import paper_persona_text
from persobench.datasets.tables import read_prompt_table
from persobench.metrics import lexical
from persobench.scoring import score_run
from persobench.store.run_store import RunManifest, RunStore


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


# ---- NLI and UniEval inputs as the notebooks sent them -----------------------------------------

def _published_items(reference_dir, n=4):
    """The first ``n`` FoCus rows with gpt-4o-mini's published replies, as the scorer builds them under
    the paper protocol (the personas cell as the persona text)."""
    from persobench.metrics.family import Item

    samples, cells = _table(reference_dir, "FoCus", "focus", "partner")
    replies = pd.read_csv(reference_dir / "Responses" / "FoCus" / "gpt-4o-mini.csv")["gen_response"].tolist()
    with open(reference_dir / "Prompts" / "FoCus.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    items = [Item(s, replies[i], s.reference, tuple((p.speaker, x) for p in s.personas for x in p.sentences),
                  paper_persona_text(s)) for i, s in enumerate(samples[:n])]
    return items, rows[:n], replies[:n]


def test_notebook_layout_sends_the_strings_evaluation_ipynb_built(reference_dir):
    """calculate_c_score(personas, gen_response) on a (gen_response, persona) signature: one string,
    reply first; calculate_ue_score: '{persona} [SEP] {reply}' and '{reference} [SEP] {reply}'."""
    from persobench.metrics.nli_inputs import NOTEBOOK, PAIRS, build_nli_inputs

    items, rows, replies = _published_items(reference_dir)
    inputs, slots = build_nli_inputs(items, ("c_score", "p_consistency", "ue_score"), False, NOTEBOOK)
    by_kind = {(kind, it.sid): x for x, (kind, it, _) in zip(inputs, slots)}
    for it, row, reply in zip(items, rows, replies):
        cell = row["personas"]
        c_input = by_kind[("persona", it.sid)]
        assert c_input.text == f"{reply} {cell}" and tuple(c_input) == (reply, cell)  # the judge: reply first
        assert by_kind[("ue_persona", it.sid)].text == f"{cell} [SEP] {reply}"
        assert by_kind[("reference", it.sid)].text == f"{it.reference} [SEP] {reply}"
    assert len(inputs) == 3 * len(items)
    pairs, pair_slots = build_nli_inputs(items, ("c_score", "p_consistency", "ue_score"), False, PAIRS)
    assert [p.text for p in pairs] == [None] * len(pairs) and len(pairs) == 2 * len(items)
    assert [tuple(p) for p, (kind, _, _) in zip(pairs, pair_slots) if kind == "persona"] == [
        (row["personas"], reply) for row, reply in zip(rows, replies)]


def test_notebook_layout_gives_unieval_the_context_cell_as_it_is(reference_dir):
    from persobench.metrics.nli_inputs import NOTEBOOK, PAIRS, unieval_histories

    from persobench.metrics.family import Item

    items, rows, _ = _published_items(reference_dir)
    assert unieval_histories(items, NOTEBOOK) == [row["context"] for row in rows]
    # PEC's cell joins the thread's utterances with ", " and no speaker: rebuilt lines differ from it
    pec, _ = _table(reference_dir, "PEC", "pec")
    with open(reference_dir / "Prompts" / "PEC.csv", newline="", encoding="utf-8") as handle:
        cells = [row["context"] for row, _ in zip(csv.DictReader(handle), range(4))]
    pec_items = [Item(s, "a reply", s.reference, (), paper_persona_text(s)) for s in pec[:4]]
    assert unieval_histories(pec_items, NOTEBOOK) == cells
    assert all(a != b for a, b in zip(unieval_histories(pec_items, PAIRS), cells))


@pytest.mark.hub_loading
def test_paper_runs_are_classified_in_the_notebook_layout_under_a_key_of_their_own(reference_dir, tmp_path):
    """A tiny NLI model through the real loading path: under the paper protocol every value is the
    model's label of the notebook's single string, stored under ``<profile>+inputs=notebook``; under
    PersoBench's protocol the pairs, under the plain key."""
    pytest.importorskip("transformers")
    from persobench.metrics.backends import get_profile
    from persobench.metrics.nli import c_score_of, load_nli, ue_score_of
    from persobench.metrics.nli_inputs import NLIInput
    from tests.fakes.tiny_models import build_tiny_nli

    items, rows, replies = _published_items(reference_dir)
    words = sorted({w for it in items for text in (it.reply, it.persona_text, it.reference)
                    for w in text.replace(".", " ").split()})
    model_dir = build_tiny_nli(tmp_path / "nli", words=words)
    overrides = {"nli": str(model_dir)}
    model = load_nli(get_profile("offline", overrides).spec("nli"), "cpu")
    samples = [it.sample for it in items]
    store = RunStore(tmp_path / "store")
    values = {}
    for template in ("paper", "persobench"):
        run = _run(store, samples, source="generated", template=template, replies=replies)
        summary = score_run(run, {s.id: s for s in samples}, metrics=["c_score", "ue_score"], overrides=overrides)
        key = summary.profile
        scores = run.read_table("scores")
        assert set(scores["profile"]) == {key}
        values[template] = scores.pivot(index="sample_id", columns="metric", values="value")
        layout = run.manifest.details.profile_scores(key).metrics["c_score"].other["input_layout"]
        if template == "paper":
            assert key.endswith("+inputs=notebook") and layout == "notebook"
        else:
            assert "+inputs=" not in key and layout == "pairs"
    paper = values["paper"]
    for it, row, reply in zip(items, rows, replies):
        cell = row["personas"]
        c_label = model.predict([NLIInput(reply, cell, f"{reply} {cell}")])[0].label
        ue_labels = model.predict([NLIInput(cell, reply, f"{cell} [SEP] {reply}"),
                                   NLIInput(it.reference, reply, f"{it.reference} [SEP] {reply}")])
        assert paper.loc[it.sid, "c_score"] == c_score_of(c_label)
        assert paper.loc[it.sid, "ue_score"] == ue_score_of(ue_labels[0].label, ue_labels[1].label)
    single = model.predict([NLIInput(items[0].reply, rows[0]["personas"], f"{items[0].reply} {rows[0]['personas']}")])
    paired = model.predict([(rows[0]["personas"], items[0].reply)])
    assert single[0].probabilities != pytest.approx(paired[0].probabilities)  # the layouts really differ


def test_the_notebook_layout_has_its_own_profile_key_only_where_it_can_change_a_value():
    from dataclasses import replace

    from persobench.metrics.backends import get_profile

    offline, standard = get_profile("offline"), get_profile("standard")
    assert replace(offline, input_layout="notebook").key == "offline"  # no NLI or UniEval model: nothing differs
    assert replace(standard, input_layout="notebook").key == "standard+inputs=notebook"
    assert replace(standard, input_layout="pairs").key == standard.key == "standard"
