"""What the NLI classifier (or the LLM judge standing in for it) and UniEval are given: the input layout.

Two named layouts, never mixed on a board (a profile scoring in the notebook layout has a key of its
own, :attr:`persobench.metrics.backends.Profile.key`):

``pairs`` (PersoBench's)
    (premise, hypothesis) pairs, the persona text first: ``c_score`` and ``p_consistency`` classify
    (persona text, reply), ``ue_score`` (persona text, reply) and (reference, reply); UniEval's
    dialogue history is the context turns as ``"<speaker>: <text>"`` lines.
``notebook`` (the paper's ``evaluation.ipynb`` and ``UniEval/usage.ipynb``, as they ran)
    ``calculate_c_score(gen_response, persona)`` is called as ``calculate_c_score(personas,
    gen_response)`` and classifies ``f"{persona} {gen_response}"``: one string, the **reply first**,
    ``"{reply} {personas}"`` (``calculate_consistency_score`` is defined and called the same way).
    ``calculate_ue_score`` classifies ``"{persona} [SEP] {reply}"`` and ``"{reference} [SEP] {reply}"``,
    each one string (a BERT tokenizer reads the literal ``[SEP]`` as its separator token, but the
    whole is one sequence). UniEval gets the ``context`` cell as it is (``src_list``) and the
    personas cell (``context_list``). The persona text is the paper's ``personas`` cell under its
    protocol (:func:`persobench.datasets.paper_cells.paper_persona_text`), as everywhere.

A classifier input is an :class:`NLIInput`: a ``(premise, hypothesis)`` tuple (what the judge's
prompt fills in; in the notebook layout the two texts in the notebook's order) with ``text``, the
one string a classifier reads instead of the pair (``None`` in the pairs layout). The per-persona-
sentence labels of ``persona_coverage`` (not in the notebooks) are (sentence, reply) pairs in both.

Which layout a run is scored in: :data:`AUTO` (the default) follows its protocol, the notebook
layout under the paper's (:func:`layout_for_run`), the pairs layout otherwise.
"""

from __future__ import annotations

from typing import Any, Sequence
from persobench.metrics.family import Item
from persobench.errors import ConfigurationError
from persobench.prompts.protocol import PAPER, protocol_of
from dataclasses import replace
from persobench.datasets.paper_cells import paper_cells


__all__ = ["AUTO", "LAYOUTS", "NOTEBOOK", "PAIRS", "NLIInput", "build_nli_inputs", "check_layout",
           "layout_for_run", "resolve_layout", "unieval_histories"]

PAIRS = "pairs"
NOTEBOOK = "notebook"
#: Not a layout: "the run's protocol decides" (resolved by :func:`layout_for_run`).
AUTO = "auto"
#: Layout name -> what it sends.
LAYOUTS = {
    PAIRS: "PersoBench's (premise, hypothesis) pairs, persona text first; UniEval history as speaker lines",
    NOTEBOOK: "evaluation.ipynb's single strings: C score '{reply} {personas}', UE '{persona} [SEP] {reply}' "
              "and '{reference} [SEP] {reply}'; UniEval the context and personas cells as they are",
}
_SEP = " [SEP] "


class NLIInput(tuple[str, str]):
    """``(premise, hypothesis)`` plus ``text``: the one string a classifier reads in place of the pair
    (the notebook layout), or ``None`` (the pair is classified as a pair). A plain 2-tuple to
    whoever unpacks it (the judge fills its prompt from the two texts)."""

    text: str | None

    def __new__(cls, premise: str, hypothesis: str, text: str | None = None) -> "NLIInput":
        self = super().__new__(cls, (premise, hypothesis))
        self.text = text
        return self

    def __reduce__(self) -> tuple[Any, ...]:  # pickles (process pools, Ray) keep ``text``
        return (NLIInput, (self[0], self[1], self.text))


def check_layout(name: str) -> str:
    """``name`` when it is a layout or :data:`AUTO`; else :class:`ConfigurationError` in one line."""

    if name not in LAYOUTS and name != AUTO:
        raise ConfigurationError(f"unknown NLI input layout {name!r}; known: {', '.join([AUTO, *LAYOUTS])}")
    return name


def layout_for_run(run: Any, requested: str = AUTO) -> str:
    """The layout ``run`` (a stored run, or the manifest of one being planned) is scored in:
    ``requested`` unless :data:`AUTO`, else the notebook layout under the paper protocol and the
    pairs layout under every other."""
    if requested != AUTO:
        return check_layout(requested)

    return NOTEBOOK if protocol_of(run).name == PAPER else PAIRS


def resolve_layout(profile: Any, run: Any) -> Any:
    """``profile`` with its input layout resolved for ``run`` (a run or a manifest,
    :func:`layout_for_run`); the profile
    key then says which layout its values were computed in."""

    layout = layout_for_run(run, profile.input_layout)
    return profile if layout == profile.input_layout else replace(profile, input_layout=layout)


def build_nli_inputs(items: Sequence["Item"], metrics: Sequence[str], need_labels: bool,
                     layout: str = PAIRS) -> tuple[list[NLIInput], list[tuple[str, "Item", int]]]:
    """The classifier inputs the NLI metrics of ``items`` need in ``layout``, and what each is for:
    ``(kind, item, persona index)``, kind ``persona`` (``c_score``/``p_consistency``; in the pairs
    layout ``ue_score`` reads it too), ``ue_persona`` (``ue_score``'s persona input, notebook layout
    only: a string of its own), ``reference`` (``ue_score``) or ``sentence`` (one persona sentence,
    for the per-sentence labels). ``score --judge --dry-run`` counts exactly these."""
    notebook = layout == NOTEBOOK
    if not notebook and layout != PAIRS:
        check_layout(layout)
        raise ValueError(f"layout {layout!r} must be resolved for a run first (layout_for_run)")
    persona_items = [it for it in items if it.persona_sentences]
    inputs: list[NLIInput] = []
    slots: list[tuple[str, "Item", int]] = []
    consistency = any(m in metrics for m in ("c_score", "p_consistency"))
    ue = "ue_score" in metrics
    for it in persona_items if metrics else ():
        persona, reply = it.persona_text, it.reply
        if notebook:
            if consistency:  # calculate_c_score(personas, gen_response) on a (gen_response, persona) signature
                inputs.append(NLIInput(reply, persona, f"{reply} {persona}"))
                slots.append(("persona", it, -1))
            if ue:
                inputs.append(NLIInput(persona, reply, f"{persona}{_SEP}{reply}"))
                slots.append(("ue_persona", it, -1))
        elif consistency or ue:
            inputs.append(NLIInput(persona, reply))
            slots.append(("persona", it, -1))
        if ue and it.reference.strip():
            reference = it.reference
            inputs.append(NLIInput(reference, reply, f"{reference}{_SEP}{reply}" if notebook else None))
            slots.append(("reference", it, -1))
    if need_labels:
        for it in persona_items:
            for index, (_, sentence) in enumerate(it.persona_sentences):
                inputs.append(NLIInput(sentence, it.reply))
                slots.append(("sentence", it, index))
    return inputs, slots


def unieval_histories(items: Sequence["Item"], layout: str = PAIRS) -> list[str]:
    """UniEval's dialogue history (``src``) per item: the ``context`` cell as the paper's table holds
    it in the notebook layout (:func:`persobench.datasets.paper_cells.paper_cells`), else the context
    turns as ``"<speaker>: <text>"`` lines. (The fact is :attr:`Item.persona_text` in both.)"""
    if layout == NOTEBOOK:

        return [paper_cells(it.sample)[1] for it in items]
    return ["\n".join(f"{t.speaker}: {t.text}" for t in it.sample.context) for it in items]
