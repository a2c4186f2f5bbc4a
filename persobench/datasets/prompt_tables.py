"""Speaker-aware annotation of the paper's prepared prompt tables.

The five tables in the paper's ``Prompts/`` folder share three columns (``personas``, ``context``,
``act_response``) but not a format. Seen in the published files:

* personas: ``[User 1 persona]: ['i like x.' 'i hate y.']`` (a numpy-array repr, Blended Skill Talk),
  ``[Responder persona]: s1 ., s2, s3`` (comma-separated, PEC),
  ``[User 1 personas] :s1\\ns2 <SEP> [User 2 personas] :s3`` (Synthetic-PersonaChat), or unlabelled
  sentences glued with "." and no space (FoCus, IT-ConvAI2).
* context: ``User1:``/``User 1:`` prefixed lines, unlabelled continuation lines, a trailing empty
  ``User 1: `` line that only names the next speaker, or one unlabelled utterance (PEC).
* act_response: optionally prefixed with the responder's label.
"""

from __future__ import annotations

import ast
import re
from typing import Any, Mapping

from persobench.errors import DatasetError
from persobench.records import USER1, USER2, PersonaSet, Sample, Turn, other_speaker

#: A speaker label at the start of a context line or reply: "User1:", "User 1 :".
TURN_LABEL = re.compile(r"^\s*User\s?([12])\s*:\s?")
#: A persona block label: "[User 1 persona]:", "[User 2 personas] :", "[Responder persona]:".
PERSONA_LABEL = re.compile(r"^\s*\[(?P<label>[^\]]+)\]\s*:\s*")
#: A Python string literal, single or double quoted, with escapes.
STRING_LITERAL = re.compile(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"")
#: A sentence that lost its full stop before a glued pronoun ("forts interestingI live").
MISSING_STOP_BEFORE_I = re.compile(r"(?<=[a-z])(?=I[ '’])")
#: PEC separates sentences with ", "; its tokenised text writes in-sentence commas as " , ".
PEC_SEPARATOR = re.compile(r"(?<! ),\s+")


class PromptTableError(DatasetError):
    """A prompt-table row cannot be annotated; the message names file, row and column."""


def speaker_from_label(label: str, *, responder: str) -> str:
    """Map a persona block label to a canonical speaker."""
    if "responder" in label.lower():
        return responder
    match = re.search(r"([12])", label)
    if not match:
        raise ValueError(f"unrecognised persona label {label!r}")
    return USER1 if match.group(1) == "1" else USER2


def _is_abbreviation_stop(text: str, stop: int) -> bool:
    """True for a stop inside "D.C", "U.S.A" or "U.S opens": a lone capital before it and a capital
    after it, unless that capital is the pronoun "I" starting the next sentence ("D.C.I love art")."""
    before = text[stop - 1] if stop >= 1 else ""
    before2 = text[stop - 2] if stop >= 2 else " "
    after = text[stop + 1] if stop + 1 < len(text) else ""
    after2 = text[stop + 2] if stop + 2 < len(text) else ""
    lone_capital = before.isupper() and not before2.isalpha()
    pronoun_i = after == "I" and after2 in " '\u2019"
    return lone_capital and after.isupper() and not pronoun_i


def split_glued_sentences(text: str) -> list[str]:
    """Split sentences glued with no space after the stop ("...again.I love ..."), keeping
    abbreviations such as "Washington D.C." whole while still splitting "D.C.I love art"."""
    pieces, start = [], 0
    for index, char in enumerate(text):
        if char in ".!?" and index + 1 < len(text) and text[index + 1].isalpha():
            if not _is_abbreviation_stop(text, index):
                pieces.append(text[start:index + 1])
                start = index + 1
    pieces.append(text[start:])
    return pieces


def split_persona_body(body: str, *, style: str) -> list[str]:
    """Split one speaker's persona text into sentences according to the detected ``style``."""
    text = body.strip()
    if not text:
        return []
    if style == "list":
        sentences = [ast.literal_eval(lit) for lit in STRING_LITERAL.findall(text)]
    elif style == "lines":
        sentences = [line for line in text.split("\n")]
    elif style == "comma":
        sentences = PEC_SEPARATOR.split(text)
    else:
        sentences = [part for piece in split_glued_sentences(text) for part in MISSING_STOP_BEFORE_I.split(piece)]
    return [s.strip() for s in sentences if s and s.strip()]


def parse_personas(
    text: str, *, responder: str, unlabelled_owner: str, labels_name_owner: bool = True,
) -> tuple[PersonaSet, ...]:
    """Structured personas from a ``personas`` cell; unlabelled text belongs to ``unlabelled_owner``.

    ``labels_name_owner=False`` gives every block to the responder whatever its label says (Blended
    Skill Talk: see :data:`persobench.datasets.PAPER_TABLES`)."""
    sets: dict[str, list[str]] = {}
    for block in text.split("<SEP>"):
        if not block.strip():
            continue
        label = PERSONA_LABEL.match(block)
        if label:
            speaker = speaker_from_label(label.group("label"), responder=responder) if labels_name_owner else responder
            body = block[label.end():]
            responder_block = "responder" in label.group("label").lower()
        else:
            speaker, body, responder_block = unlabelled_owner, block, False
        stripped = body.strip()
        if stripped.startswith("[") and STRING_LITERAL.search(stripped):
            style = "list"
        elif "\n" in stripped:
            style = "lines"
        elif responder_block:
            style = "comma"
        else:
            style = "glued"
        sets.setdefault(speaker, []).extend(split_persona_body(stripped, style=style))
    return tuple(PersonaSet(speaker, tuple(sentences)) for speaker, sentences in sets.items() if sentences)


def parse_context(text: str) -> tuple[tuple[Turn, ...], str | None, str]:
    """Turns of a ``context`` cell, the speaker named by a trailing empty cue line (if any), and any
    unlabelled preamble before the first labelled line.

    Unlabelled lines continue the previous turn; a context with no label at all is one utterance
    by User1 (a single query). Text before the first label in a labelled context (a scene note such
    as "* * *") belongs to no speaker, so it is kept aside rather than invented into a turn.
    """
    lines = text.split("\n")
    if not any(TURN_LABEL.match(line) for line in lines):
        utterance = text.strip()
        return ((Turn(USER1, utterance),) if utterance else ()), None, ""
    turns: list[list[Any]] = []  # [speaker, [lines]]
    preamble: list[str] = []
    for line in lines:
        match = TURN_LABEL.match(line)
        if match:
            turns.append([USER1 if match.group(1) == "1" else USER2, [line[match.end():]]])
        elif turns:
            turns[-1][1].append(line)
        else:
            preamble.append(line)
    cue = None
    built = [Turn(speaker, "\n".join(chunk).strip()) for speaker, chunk in turns]
    if built and not built[-1].text:
        cue = built.pop().speaker
    return tuple(built), cue, "\n".join(preamble).strip()


def parse_prompt_row(
    row: Mapping[str, Any], *, dataset: str, index: int, source: str = "", unlabelled_owner: str = "responder",
    labels_name_owner: bool = True,
) -> Sample:
    """Annotate one prompt-table row.

    ``unlabelled_owner`` says whose persona unlabelled persona text is: "responder" (IT-ConvAI2:
    ConvAI2's "your persona") or "partner" (FoCus: the persona of the user being answered).
    ``labels_name_owner=False`` means the persona labels do not name the owner and every persona
    is the responder's (Blended Skill Talk's "[User 1 persona]" is the answering worker's).

    The row's own ``personas`` and ``context`` cells are kept verbatim in the metadata
    (``personas_cell``, ``context_cell``): the paper's prompt inserts them as they are.
    """
    where = f"{source or dataset}: row {index}"
    for column in ("personas", "context", "act_response"):
        if column not in row or row[column] is None:
            raise PromptTableError(f"{where}: missing column {column!r}")
    context_text = str(row["context"])
    query = str(row.get("query") or "").strip()
    turns, cue, preamble = parse_context(context_text)
    reference = str(row["act_response"])
    reference_label = TURN_LABEL.match(reference)
    if reference_label:
        responder = USER1 if reference_label.group(1) == "1" else USER2
        reference = reference[reference_label.end():]
    elif cue:
        responder = cue
    elif turns:
        responder = other_speaker(turns[-1].speaker)
    else:
        responder = USER2
    if query:
        turns = turns + (Turn(other_speaker(responder), query),)
    if not turns:
        raise PromptTableError(f"{where}: column 'context' is empty")
    owner = responder if unlabelled_owner == "responder" else other_speaker(responder)
    try:
        personas = parse_personas(
            str(row["personas"]), responder=responder, unlabelled_owner=owner, labels_name_owner=labels_name_owner
        )
    except (ValueError, SyntaxError) as exc:
        raise PromptTableError(f"{where}: column 'personas': {exc}") from exc
    return Sample(
        id=f"{dataset}:{index}",
        dataset=dataset,
        personas=personas,
        context=turns,
        responder=responder,
        reference=reference.strip(),
        metadata={"source": source, "row": index, "trailing_cue": cue is not None,
                  **({"preamble": preamble} if preamble else {}),
                  "personas_cell": str(row["personas"]),
                  "context_cell": context_text + (f"\n{query}" if query else "")},
    )
