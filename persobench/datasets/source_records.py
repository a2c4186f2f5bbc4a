"""Pure conversions of raw public-source records into :class:`Sample` objects (one record -> one
sample), with errors that name the source, record and field. :mod:`persobench.datasets.sources`
reads the records (hub, local files, URLs) and calls these; see its docstring for which turn becomes
the reference in each source and how sample ids are formed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from persobench.errors import DatasetError
from persobench.records import USER1, USER2, PersonaSet, Sample, Turn

__all__ = [
    "SPC_TRAILING_TURNS_DROPPED",
    "SourceFormatError",
    "bst_record_to_sample",
    "focus_record_to_sample",
    "it_convai2_record_to_sample",
    "parse_spc_conversation",
    "pec_record_to_sample",
    "spc_record_to_sample",
]

#: Synthetic-Persona-Chat: how many turns at the end of a dialogue are not used. The paper's table
#: ends each context one exchange before the end of the conversation (its first notebook split off
#: the last two lines as query/response, the published table then took the line before them as
#: the reference), which avoids scoring models on "Bye." / "You too, bye!".
SPC_TRAILING_TURNS_DROPPED = 2

#: "User 1:", "User2:", "**User 1:**", "user 2 :" at the start of a Synthetic-Persona-Chat line.
_SPC_LABEL = re.compile(r"^[\s*_]*user\s*([12])[\s*_]*:[\s*_]*(.*)$", re.IGNORECASE | re.DOTALL)


class SourceFormatError(DatasetError):
    """A source record lacks a field or has one of the wrong shape.

    The message names the file (or hub name and split), the record index and the field.
    """

    def __init__(self, source: str, row: int, field: str, problem: str) -> None:
        self.source = source
        self.row = row
        self.field = field
        super().__init__(f"{source}: record {row}: field {field!r}: {problem}")


# ---------------------------------------------------------------------------------------------
# Field access with errors that say where the problem is
# ---------------------------------------------------------------------------------------------


def _get(record: Mapping[str, Any], field: str, source: str, row: int, name: str | None = None) -> Any:
    """``record[field]``; ``name`` is how the field is called in messages (e.g. a nested path)."""
    name = name or field
    if not isinstance(record, Mapping):
        raise SourceFormatError(source, row, name, f"record is a {type(record).__name__}, expected an object")
    value = record.get(field)
    if value is None:  # the datasets library fills a key missing from one row with None
        raise SourceFormatError(source, row, name, "missing")
    return value


def _text(
    record: Mapping[str, Any], field: str, source: str, row: int, *, allow_empty: bool = False, name: str | None = None
) -> str:
    name = name or field
    value = _get(record, field, source, row, name)
    if not isinstance(value, str):
        raise SourceFormatError(source, row, name, f"expected text, got {type(value).__name__}")
    value = _clean(value)
    if not value and not allow_empty:
        raise SourceFormatError(source, row, name, "empty")
    return value


def _texts(
    record: Mapping[str, Any], field: str, source: str, row: int, *, min_items: int = 0, name: str | None = None
) -> list[str]:
    """A list of strings, each whitespace-trimmed (empty items kept so positions stay meaningful)."""
    name = name or field
    value = _get(record, field, source, row, name)
    # Lists from the datasets library, tuples or numpy arrays from pandas: any non-text iterable.
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise SourceFormatError(source, row, name, f"expected a list of texts, got {type(value).__name__}")
    items: list[str] = []
    for position, item in enumerate(value):
        if not isinstance(item, str):
            raise SourceFormatError(source, row, f"{name}[{position}]", f"expected text, got {type(item).__name__}")
        items.append(_clean(item))
    if len(items) < min_items:
        raise SourceFormatError(source, row, name, f"needs at least {min_items} item(s), has {len(items)}")
    return items


def _clean(text: str) -> str:
    # Sources mix \r\n and \n and pad utterances with spaces; the text itself is kept verbatim
    # (the paper's apostrophe stripping was a CSV workaround, not something to reproduce).
    return text.replace("\r\n", "\n").replace("\r", "\n").strip()


def _persona_set(speaker: str, sentences: Iterable[str]) -> tuple[PersonaSet, ...]:
    kept = tuple(s for s in (_clean(x) for x in sentences) if s)
    return (PersonaSet(speaker, kept),) if kept else ()


def _alternating(texts: Sequence[str], first: str = USER1) -> list[Turn]:
    second = USER2 if first == USER1 else USER1
    return [Turn(first if i % 2 == 0 else second, t) for i, t in enumerate(texts)]


# ---------------------------------------------------------------------------------------------
# Pure conversions: one source record -> one Sample
# ---------------------------------------------------------------------------------------------


def bst_record_to_sample(
    record: Mapping[str, Any], index: int, dataset: str, *, source: str = "blended_skill_talk", split: str = ""
) -> Sample:
    """One Blended Skill Talk dialogue -> the sample the paper used: its first guided reply.

    Hub schema: ``previous_utterance`` = [free worker's seed turn, guided worker's seed turn],
    then ``free_messages[i]`` and ``guided_messages[i]`` alternate. ``personas`` is the guided
    worker's persona (the hub keeps ``personas[1]`` of the ParlAI data), so it belongs to User2,
    the responder. Context = seed turns + ``free_messages[0]``; reference = ``guided_messages[0]``.
    """
    where = f"{source} [{split}]" if split else source  # record indices count within the split
    personas = _texts(record, "personas", where, index)
    seeds = _texts(record, "previous_utterance", where, index)
    free = _texts(record, "free_messages", where, index, min_items=1)
    guided = _texts(record, "guided_messages", where, index, min_items=1)
    if not free[0]:
        raise SourceFormatError(where, index, "free_messages[0]", "empty")
    if not guided[0]:
        raise SourceFormatError(where, index, "guided_messages[0]", "empty")
    # Seed turns keep their role-based speaker even if one of them is empty and dropped.
    context = [t for t in _alternating(seeds) if t.text] + [Turn(USER1, free[0])]
    target_turn = len(seeds) + 1
    metadata: dict[str, Any] = {"source": source, "split": split, "row": index, "target_turn": target_turn,
                                "paper_form": "bst"}
    context_dataset = record.get("context")
    if isinstance(context_dataset, str) and context_dataset:
        metadata["context_dataset"] = context_dataset
    topic = record.get("additional_context")
    if isinstance(topic, str) and topic.strip():
        metadata["topic"] = topic.strip()
    return Sample(
        id=f"{dataset}:{index}/{target_turn}",
        dataset=dataset,
        personas=_persona_set(USER2, personas),
        context=tuple(context),
        responder=USER2,
        reference=guided[0],
        metadata=metadata,
    )


def parse_spc_conversation(text: str) -> tuple[list[Turn], int]:
    """Split a "Best Generated Conversation" into turns; also return how many lines were dropped.

    Each turn starts with a "User 1:" / "User 2:" label (sometimes in ``**bold**``). A line
    without a label continues the previous turn; unlabelled lines before the first label and
    separator lines such as ``* * *`` are dropped.
    """
    turns: list[Turn] = []
    dropped = 0
    for line in _clean(text).split("\n"):
        stripped = line.strip()
        if not stripped.strip("*_- "):
            continue
        match = _SPC_LABEL.match(stripped)
        if match:
            speaker = USER1 if match.group(1) == "1" else USER2
            turns.append(Turn(speaker, match.group(2).strip().strip("*").strip()))
        elif turns:
            previous = turns[-1]
            turns[-1] = Turn(previous.speaker, f"{previous.text} {stripped}".strip())
        else:
            dropped += 1
    return [t for t in turns if t.text], dropped


def spc_record_to_sample(
    record: Mapping[str, Any],
    index: int,
    dataset: str,
    *,
    source: str = "google/Synthetic-Persona-Chat",
    split: str = "",
) -> Sample:
    """One Synthetic-Persona-Chat dialogue -> one sample with both speakers' personas.

    The target is the turn just before the final exchange (see :data:`SPC_TRAILING_TURNS_DROPPED`);
    dialogues too short for that use their last turn. The reference keeps no "User N:" label.
    """
    where = f"{source} [{split}]" if split else source  # record indices count within the split
    field = "Best Generated Conversation"
    conversation = _text(record, field, where, index)
    user1 = _text(record, "user 1 personas", where, index, allow_empty=True)
    user2 = _text(record, "user 2 personas", where, index, allow_empty=True)
    turns, dropped = parse_spc_conversation(conversation)
    if len(turns) < 2:
        raise SourceFormatError(where, index, field, f"needs at least 2 'User N:' turns, found {len(turns)}")
    if len(turns) >= SPC_TRAILING_TURNS_DROPPED + 2:
        target_turn = len(turns) - 1 - SPC_TRAILING_TURNS_DROPPED
    else:
        target_turn = len(turns) - 1
    target = turns[target_turn]
    metadata: dict[str, Any] = {
        "source": source, "split": split, "row": index, "target_turn": target_turn, "dialogue_turns": len(turns),
        "paper_form": "spc",
    }
    if dropped:
        metadata["unlabelled_lines_dropped"] = dropped
    return Sample(
        id=f"{dataset}:{index}/{target_turn}",
        dataset=dataset,
        personas=_persona_set(USER1, user1.split("\n")) + _persona_set(USER2, user2.split("\n")),
        context=tuple(turns[:target_turn]),
        responder=target.speaker,
        reference=target.text,
        metadata=metadata,
    )


def pec_record_to_sample(
    record: Mapping[str, Any], index: int, dataset: str, *, source: str = "pec", split: str = "", subset: str = ""
) -> Sample:
    """One PEC record (a Reddit thread and one reply) -> one sample.

    The replier (``response_speaker``) is User2 and owns ``personas``; every other poster in the
    thread is User1 (the benchmark is two-party); their user names stay in the metadata.
    """
    where = f"{source} [{split}]" if split else source  # record indices count within the split
    personas = _texts(record, "personas", where, index)
    context_texts = _texts(record, "context", where, index, min_items=1)
    speakers = _texts(record, "context_speakers", where, index)
    if len(speakers) != len(context_texts):
        raise SourceFormatError(
            where, index, "context_speakers", f"has {len(speakers)} names for {len(context_texts)} context turns"
        )
    response = _text(record, "response", where, index)
    responder_name = _text(record, "response_speaker", where, index)
    context = tuple(
        Turn(USER2 if name == responder_name else USER1, text)
        for name, text in zip(speakers, context_texts)
        if text
    )
    if not context:
        raise SourceFormatError(where, index, "context", "all turns are empty")
    target_turn = len(context_texts)
    metadata: dict[str, Any] = {
        "source": source, "split": split, "row": index, "target_turn": target_turn,
        "response_speaker": responder_name, "context_speakers": speakers, "paper_form": "pec",
    }
    if subset:
        metadata["subset"] = subset
    return Sample(
        id=f"{dataset}:{index}/{target_turn}",
        dataset=dataset,
        personas=_persona_set(USER2, personas),
        context=context,
        responder=USER2,
        reference=response,
        metadata=metadata,
    )


def focus_record_to_sample(record: Mapping[str, Any], index: int, dataset: str, *, source: str = "valid_focus.json") -> Sample:
    """One FoCus dialogue -> the sample the paper used: the machine's last answer.

    ``utterance[k]["dialogue{k+1}"]`` holds the whole history up to round k+1 (human question,
    machine answer, ...), so the last entry is the full dialogue. The persona is the human's
    (User1); the machine (User2) answers with it in mind.
    """
    dialog_id = _text(record, "dialogID", source, index)
    persona = _texts(record, "persona", source, index)
    rounds = _get(record, "utterance", source, index)
    if not isinstance(rounds, list) or not rounds:
        raise SourceFormatError(source, index, "utterance", "expected a non-empty list of rounds")
    last = rounds[-1]
    last_field = f"utterance[{len(rounds) - 1}]"
    if not isinstance(last, Mapping):
        raise SourceFormatError(source, index, last_field, f"expected an object, got {type(last).__name__}")
    key = f"dialogue{len(rounds)}"
    if key not in last:  # tolerate renumbered rounds, but only one dialogue key per round
        keys = [k for k in last if str(k).startswith("dialogue")]
        if len(keys) != 1:
            raise SourceFormatError(source, index, f"{last_field}.{key}", "missing")
        key = keys[0]
    history = _texts(last, key, source, index, min_items=2, name=f"{last_field}.{key}")
    turns = _alternating(history)  # the human always opens a FoCus round
    target_turn = len(turns) - 1
    target = turns[target_turn]
    if not target.text:
        raise SourceFormatError(source, index, f"{last_field}.{key}[{target_turn}]", "empty")
    metadata: dict[str, Any] = {"source": source, "row": index, "dialog_id": dialog_id, "target_turn": target_turn,
                                "paper_form": "focus"}
    link = record.get("landmark_link")
    if isinstance(link, str) and link:
        metadata["landmark_link"] = link
    return Sample(
        id=f"{dataset}:{dialog_id}/{target_turn}",
        dataset=dataset,
        personas=_persona_set(USER1, persona),
        context=tuple(t for t in turns[:target_turn] if t.text),
        responder=target.speaker,
        reference=target.text,
        metadata=metadata,
    )


def it_convai2_record_to_sample(
    record: Mapping[str, Any], index: int, dataset: str, *, source: str = "data_valid_v2.json"
) -> Sample:
    """One IT-ConvAI2 record -> a single-question sample: User1 asks ``input``, User2 answers ``label``.

    ``full_personas`` is the answering speaker's persona (the paper used the full set, not the
    deliberately reduced ``insuf_personas``).
    """
    question = _text(record, "input", source, index)
    answer = _text(record, "label", source, index)
    personas = _texts(record, "full_personas", source, index, min_items=1)
    metadata: dict[str, Any] = {"source": source, "row": index, "target_turn": 1, "paper_form": "it-convai2"}
    removed = record.get("rm_persona")
    if isinstance(removed, str) and removed:
        metadata["rm_persona"] = removed
    return Sample(
        id=f"{dataset}:{index}/1",
        dataset=dataset,
        personas=_persona_set(USER2, personas),
        context=(Turn(USER1, question),),
        responder=USER2,
        reference=answer,
        metadata=metadata,
    )
