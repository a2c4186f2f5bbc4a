"""A sample's ``personas`` and ``context`` as the paper's prepared tables write them.

The paper's prompt (``create_prompt`` in its notebooks) inserts two table cells as they are: the
``personas`` cell and the ``context`` cell. Rows of the prepared tables (and user files with the
same columns) keep their own cells in the metadata (``personas_cell``, ``context_cell``) and are
returned verbatim. Every other sample (the hub and raw loaders, the built-in ``sample`` dataset) is
rendered in the annotated form the paper's ``pre_processing.ipynb`` gave that kind of data, so any
dataset can run under the paper's protocol:

``bst``
    ``[User 1 persona]: ['s1' 's2']`` (the numpy array text the table holds, line-wrapped the same
    way) and ``User1: ...``/``User2: ...`` lines.
``spc``
    ``[User 1 personas] :s1\\ns2 <SEP> [User 2 personas] :s3`` and ``User 1: ...`` lines.
``pec``
    ``[Responder persona]: s1, s2`` and the thread's utterances joined with ", " (unlabelled).
``focus``, ``it-convai2``
    the sentences glued with no separator and ``User1: ...`` lines.
``generic``
    speaker-labelled persona blocks (``[User 1 personas] :...``, ``<SEP>`` between speakers) and
    ``User1: ...`` lines: the tables' annotated form for data that has personas for either speaker.

The text itself is kept verbatim: the paper's cleaning (apostrophes and non-ASCII characters
removed from PEC and Synthetic-Persona-Chat) was a CSV workaround, not part of the protocol.
"""

from __future__ import annotations

import re
from typing import Callable

from persobench.records import USER1, USER2, Sample

__all__ = ["FORMS", "paper_cells", "paper_form", "paper_persona_text"]

#: Dataset name -> table form, for samples that do not say (``metadata["paper_form"]``).
FORMS = {
    "blended-skill-talk-hub": "bst",
    "synthetic-personachat-hub": "spc",
    "pec-hub": "pec",
    "focus-raw": "focus",
    "it-convai2-raw": "it-convai2",
}


def paper_form(sample: Sample) -> str:
    """The table form used for ``sample`` ("table" when it carries its own cells)."""
    meta = sample.metadata
    if isinstance(meta.get("personas_cell"), str) and isinstance(meta.get("context_cell"), str):
        return "table"
    form = meta.get("paper_form") or FORMS.get(sample.dataset)
    return form if form in _RENDERERS else "generic"


def paper_cells(sample: Sample) -> tuple[str, str]:
    """(personas cell, context cell) of ``sample`` in the paper's table form."""
    form = paper_form(sample)
    if form == "table":
        return str(sample.metadata["personas_cell"]), str(sample.metadata["context_cell"])
    return _RENDERERS[form](sample)


def _labelled_lines(sample: Sample, *, spaced: bool = False) -> str:
    def label(speaker: str) -> str:
        return f"User {speaker[-1]}" if spaced and speaker in (USER1, USER2) else speaker

    return "\n".join(f"{label(turn.speaker)}: {turn.text}" for turn in sample.context)


def _bst(sample: Sample) -> tuple[str, str]:
    import numpy as np  # the table cell is numpy's text of the persona array

    return f"[User 1 persona]: {np.array(sample.persona_sentences())}", _labelled_lines(sample)


def _spc(sample: Sample) -> tuple[str, str]:
    return _speaker_blocks(sample, both=True), _labelled_lines(sample, spaced=True)


def _pec(sample: Sample) -> tuple[str, str]:
    personas = ", ".join(sample.persona_sentences())
    return f"[Responder persona]: {personas}", ", ".join(turn.text for turn in sample.context)


def _glued(sample: Sample) -> tuple[str, str]:
    return "".join(sample.persona_sentences()), _labelled_lines(sample)


def _speaker_blocks(sample: Sample, *, both: bool = False) -> str:
    """``[User 1 personas] :s1\\ns2 <SEP> [User 2 personas] :s3``; ``both`` writes an empty block for
    a speaker without persona, as Synthetic-Persona-Chat rows always have two."""
    blocks = []
    for speaker in (USER1, USER2):
        sentences = sample.persona_sentences(speaker)
        if sentences or both:
            blocks.append(f"[User {speaker[-1]} personas] :" + "\n".join(sentences))
    return " <SEP> ".join(blocks)


def _generic(sample: Sample) -> tuple[str, str]:
    return _speaker_blocks(sample), _labelled_lines(sample)


_RENDERERS: dict[str, Callable[[Sample], tuple[str, str]]] = {
    "bst": _bst, "spc": _spc, "pec": _pec, "focus": _glued, "it-convai2": _glued, "generic": _generic,
}


#: What ``evaluation.ipynb`` stripped from the ``personas`` cell before scoring, by table form: the
#: speaker label, brackets and quotes of the BST and PEC cells; the other tables' cells were used as
#: they are.
_EVALUATION_CLEANING = {
    "bst": re.compile(r"\[User 1 persona\]:|\[|\]|\"|'"),
    "pec": re.compile(r"\[Responder persona\]:|\[|\]|\"|'"),
}
#: Prepared tables (which carry their own cells) by registered name -> their table form.
_TABLE_FORMS = {"blended-skill-talk": "bst", "pec": "pec"}


def paper_persona_text(sample: Sample) -> str:
    """The persona text the paper's evaluation gave its persona metrics (IDF overlap, persona
    distance, the NLI and UniEval inputs): the sample's ``personas`` cell, cleaned as
    ``evaluation.ipynb`` cleaned it (label, brackets and quotes removed for BST and PEC)."""
    personas, _ = paper_cells(sample)
    form = paper_form(sample)
    if form == "table":
        form = _TABLE_FORMS.get(sample.dataset, form)
    cleaning = _EVALUATION_CLEANING.get(form)
    return cleaning.sub("", personas).strip() if cleaning is not None else personas
