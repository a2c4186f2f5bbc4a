"""The paper's prompts byte for byte, and the data they are built from.

``create_prompt_closed`` and ``create_prompt_open`` below are the ``create_prompt`` functions of the
paper's ``closed_source_models.ipynb`` and ``open_source_models.ipynb`` (salehafzoon/PersoBench),
written out again here from the notebook source as the reference; the tables are read with pandas
as the notebooks read them. The templates must reproduce them on every row of all five tables.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from persobench.datasets import load_all, load_dataset
from persobench.datasets.paper_cells import paper_cells
from persobench.prompts.templates import PAPER_SYSTEM, build_messages, get_template
from persobench.records import PersonaSet, Sample, Turn

REFERENCE = Path(os.environ.get("PERSOBENCH_REFERENCE") or Path(__file__).resolve().parents[2] / "shared" / "persobench-reference")
TABLES = {
    "blended-skill-talk": "Blended Skill Talk", "synthetic-personachat": "Synthetic-PersonaChat", "pec": "PEC",
    "focus": "FoCus", "it-convai2": "IT-ConvAI2",
}
needs_reference = pytest.mark.skipif(
    not (REFERENCE / "Prompts").is_dir(), reason=f"the paper's prompt tables are not at {REFERENCE}/Prompts"
)


def create_prompt_closed(personas, context, include_cot=True):
    prompt = (
        "I will provide you with a conversation context and the personas of the participants, that can be annotated with speaker information.\n"
        "As a participant in this conversation, your task is to generate a personalized response, considering the conversation context and personas.\n\n"
        "Participant Personas:\n"
        f"{personas}\n\n"
        "Conversation Context:\n"
        f"{context}\n\n"
        "Task Instruction:\n"
        "* Provide an unannotated response.\n"
        "* If only one persona is available, personalize the response accordingly.\n"
        "* If the conversation context is a single query, respond appropriately to the query.\n"
    )
    if include_cot:
        prompt += (
            "* Apply Chain of Thought reasoning to reflect on the alignment of your response with the personas.\n"
        )
    prompt += (
        "\nOutput Format: only give a JSON of the following format:\n"
        "{\n"
    )
    if include_cot:
        prompt += (
            '  "reasoning": "briefly describe your personalization process (in 110 words or less)."\n'
        )
    prompt += (
        '  "response": "provide the personalized natural language response here."\n'
        "}\n"
    )
    return prompt


def create_prompt_open(personas, context, include_cot=False):
    prompt = (
        "I will provide you with a conversation context and the personas of the participants, that can be annotated with speaker information.\n"
        "As a participant in this conversation, your task is to generate a personalized response, considering the conversation context and personas.\n\n"
        "Participant Personas:\n"
        f"{personas}\n\n"
        "Conversation Context:\n"
        f"{context}\n\n"
        "Task Instruction:\n"
        "* Provide an unannotated response.\n"
        "* If only one persona is available, personalize the response accordingly.\n"
        "* If the conversation context is a single query, respond appropriately to the query.\n"
    )
    if include_cot:
        prompt += (
            "* Apply Chain of Thought reasoning to reflect on the alignment of your response with the personas.\n"
        )
    prompt += (
        "\nOutput Format: only give a JSON of the following format:\n"
        "{\n"
    )
    if include_cot:
        prompt += (
            '  "reasoning": "briefly describe your personalization process (in 110 words or less)."\n'
        )
    prompt += (
        '  "response": "provide the personalized natural language response here (in 110 words or less)."\n'
        "}\n"
    )
    return prompt


@needs_reference
@pytest.mark.parametrize("dataset", sorted(TABLES))
def test_paper_templates_are_the_notebooks_prompts_on_every_row(dataset: str) -> None:
    import pandas as pd

    frame = pd.read_csv(REFERENCE / "Prompts" / f"{TABLES[dataset]}.csv")  # as the notebooks read it
    samples = load_all(dataset)
    assert [s.id for s in samples] == [f"{dataset}:{i}" for i in range(len(frame))]
    for mode in ("vanilla", "cot"):
        closed, open_ = get_template("paper", mode), get_template("paper-open", mode)
        for index, row in frame.iterrows():
            cot = mode == "cot"
            messages = build_messages(samples[index], closed)
            assert messages == [
                {"role": "system", "content": "You are a helpful response generator to output JSON."},
                {"role": "user", "content": create_prompt_closed(row["personas"], row["context"], include_cot=cot)},
            ], (dataset, mode, index)
            assert build_messages(samples[index], open_) == [
                {"role": "user", "content": create_prompt_open(row["personas"], row["context"], include_cot=cot)},
            ], (dataset, mode, index)


def test_the_cot_example_keeps_the_papers_missing_comma() -> None:
    text = build_messages(load_dataset("sample", limit=1)[0], get_template("paper", "cot"))[-1]["content"]
    assert ('"reasoning": "briefly describe your personalization process (in 110 words or less)."\n'
            '  "response": "provide the personalized natural language response here."\n}\n') in text
    assert PAPER_SYSTEM == "You are a helpful response generator to output JSON."


@needs_reference
def test_bst_personas_belong_to_the_responder() -> None:
    # The hub's BST "personas" is the guided worker's (row["personas"][1] of the ParlAI data); the
    # guided worker writes act_response, the table's User2. The table labels it "[User 1 persona]".
    samples = load_all("blended-skill-talk")
    for sample in samples:
        assert [p.speaker for p in sample.personas] == [sample.responder], sample.id
    # 73 rows lost their last turn to the notebook's list splitting (quotes inside an utterance), so
    # their context ends with User2 and the reply is read as User1's; the persona follows the reply.
    assert sum(s.responder == "User2" for s in samples) == 907
    first = load_all("blended-skill-talk")[3]  # "User2: ... i enjoy canning" / "i like canning and whittling."
    assert "i like canning and whittling." in first.persona_sentences("User2")
    # The raw-source loader agrees with the table on the owner.
    from persobench.datasets.sources import bst_record_to_sample

    raw = bst_record_to_sample({
        "personas": ["my favorite movie is good burger.", "i like canning and whittling."],
        "previous_utterance": ["that's awesome , i like running in the morning instead of night",
                               "sounds nice . i only eat meat even though i enjoy canning"],
        "free_messages": ["Canning is great for storing food."], "guided_messages": ["Wow, you've done a marathon?"],
    }, 3, "blended-skill-talk-hub")
    assert raw.responder == first.responder and [p.speaker for p in raw.personas] == ["User2"]


@needs_reference
@pytest.mark.parametrize("dataset,form", [("blended-skill-talk", "bst"), ("synthetic-personachat", "spc"),
                                          ("focus", "focus"), ("it-convai2", "it-convai2"), ("pec", "pec")])
def test_other_samples_are_rendered_in_the_tables_own_form(dataset: str, form: str) -> None:
    """Drop a table row's own cells and render it from its annotation as a raw loader's sample
    would be: the persona cell comes back exactly (PEC: the paper's ", " separator also occurs inside
    its sentences, so a few rows cannot) and the context up to whitespace."""
    samples = load_all(dataset)
    same_personas = same_context = 0
    for sample in samples:
        meta = dict(sample.metadata)
        personas_cell, context_cell = meta.pop("personas_cell"), meta.pop("context_cell")
        personas, context = paper_cells(dataclasses.replace(sample, metadata={**meta, "paper_form": form}))
        same_personas += personas == personas_cell
        same_context += " ".join(context.split()) == " ".join(context_cell.split())
    share = same_personas / len(samples)
    assert share == 1.0 if form != "pec" else share > 0.98
    # The few others are scene notes ("* * *") or bold markers the annotation keeps out of the turns.
    assert same_context / len(samples) > 0.99


def test_samples_without_cells_use_labelled_blocks_and_lines() -> None:
    sample = Sample("s:0", "s", (PersonaSet("User1", ("I sing.", "I cook.")), PersonaSet("User2", ("I fish.",))),
                    (Turn("User1", "Hi!"), Turn("User2", "Hello.")), "User1", "Bye.")
    assert paper_cells(sample) == ("[User 1 personas] :I sing.\nI cook. <SEP> [User 2 personas] :I fish.",
                                   "User1: Hi!\nUser2: Hello.")
    builtin = load_dataset("sample", limit=3)
    for item in builtin:
        text = build_messages(item, get_template("paper-open", "cot"))[0]["content"]
        assert "Participant Personas:\n[User " in text and f"{item.context[0].speaker}: {item.context[0].text}" in text
    bst = dataclasses.replace(sample, personas=(PersonaSet("User2", ("i like x.", "i hate y.")),),
                              metadata={"paper_form": "bst"})
    assert paper_cells(bst)[0] == "[User 1 persona]: ['i like x.' 'i hate y.']"
    pec = dataclasses.replace(bst, metadata={"paper_form": "pec"})
    assert paper_cells(pec) == ("[Responder persona]: i like x., i hate y.", "Hi!, Hello.")
