"""Prompt construction: pure functions from a :class:`~persobench.records.Sample` to chat messages.

A template is plain text with named placeholders, chosen by name *and* mode
(:func:`get_template`): the template says how the prompt is worded, the mode ("vanilla" or "cot")
whether it asks for reasoning. Placeholders are substituted by name only (no ``str.format``), so
the JSON examples inside a template need no brace escaping.

Built-in templates (every template has a ``family``; boards compare runs of one family only):

``paper`` (family "paper")
    What the paper's ``closed_source_models.ipynb`` sent, byte for byte: the system message "You
    are a helpful response generator to output JSON." and ``create_prompt(personas, context,
    include_cot)`` as the user message, with the ``personas`` and ``context`` table cells inserted as
    they are (:func:`persobench.datasets.paper_cells.paper_cells`). Its chain-of-thought JSON example
    has no comma between "reasoning" and "response": that is what the models saw, so it is kept.
``paper-open`` (family "paper")
    What ``open_source_models.ipynb`` sent: the same prompt whose response line ends "(in 110 words
    or less).", as one raw string: no system message, and for local models no chat template (the
    ``text-generation`` pipeline tokenized the string as it is). Chat APIs get it as one user message.
``persobench`` (family "persobench")
    PersoBench's own wording (the templates called ``vanilla`` and ``cot`` before the paper's were
    added; those names still select it): a role line, personas as bullets tagged with their owner,
    explicit instructions, a stricter JSON example. Its texts and version hashes are unchanged.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from persobench.errors import ConfigurationError
from persobench.records import Sample
from persobench.datasets.paper_cells import paper_cells

MODES = ("vanilla", "cot")

#: Placeholders a template may use.
PLACEHOLDERS = ("role", "personas", "context", "instructions", "output_format", "responder", "partner")

#: Paper defaults (Section 4 of arXiv 2410.03198): greedy decoding and a 110-token reply budget,
#: doubled in chain-of-thought mode to leave room for the reasoning.
DEFAULT_TEMPERATURE = 0.0
DEFAULT_MAX_TOKENS = {"vanilla": 110, "cot": 220}

SYSTEM_MESSAGE = (
    "You are a response generator for dialogues. You write the next turn of a conversation and you "
    "always answer with a single JSON object and nothing else."
)

ROLE = (
    "You are {responder}, a participant in the conversation below. Write your next turn as {responder} "
    "would say it."
)

INSTRUCTIONS = """\
- Reply with the next turn only, as plain conversational text, without a speaker label such as "User1:".
- If a persona is given only for one speaker, personalize your reply to that persona.
- If personas are given for both speakers, stay true to your own persona and take your partner's into account.
- If the conversation is a single question or message, answer it appropriately and helpfully.
- Keep the reply natural, concise and consistent with the conversation so far."""

OUTPUT_VANILLA = """\
Answer with exactly this JSON object and no other text:
{"response": "<your reply>"}"""

OUTPUT_COT = """\
First reflect on how well your reply aligns with the personas and the conversation, then write it.
Answer with exactly this JSON object and no other text:
{"reasoning": "<at most 110 words on how the reply aligns with the personas>", "response": "<your reply>"}"""

USER_TEMPLATE = """\
{role}

Personas:
{personas}

Conversation:
{context}

Task instructions:
{instructions}

Output format:
{output_format}"""


#: The paper's system message (closed-source models; Gemini got it prepended to the prompt).
PAPER_SYSTEM = "You are a helpful response generator to output JSON."

#: ``create_prompt`` of the paper's notebooks up to the task instructions; ``{personas}`` and
#: ``{context}`` are the table cells.
PAPER_USER = (
    "I will provide you with a conversation context and the personas of the participants, that can be "
    "annotated with speaker information.\n"
    "As a participant in this conversation, your task is to generate a personalized response, considering "
    "the conversation context and personas.\n\n"
    "Participant Personas:\n"
    "{personas}\n\n"
    "Conversation Context:\n"
    "{context}\n\n"
    "Task Instruction:\n"
    "* Provide an unannotated response.\n"
    "* If only one persona is available, personalize the response accordingly.\n"
    "* If the conversation context is a single query, respond appropriately to the query.\n"
    "{output_format}"
)

PAPER_COT_INSTRUCTION = "* Apply Chain of Thought reasoning to reflect on the alignment of your response with the personas.\n"
PAPER_FORMAT_HEAD = "\nOutput Format: only give a JSON of the following format:\n{\n"
#: No comma at the end of this line: the paper's CoT example is not valid JSON, and the models saw it so.
PAPER_REASONING_LINE = '  "reasoning": "briefly describe your personalization process (in 110 words or less)."\n'
PAPER_RESPONSE_LINE = '  "response": "provide the personalized natural language response here."\n'
PAPER_OPEN_RESPONSE_LINE = '  "response": "provide the personalized natural language response here (in 110 words or less)."\n'


def _paper_output_format(mode: str, response_line: str) -> str:
    cot = mode == "cot"
    return (
        (PAPER_COT_INSTRUCTION if cot else "") + PAPER_FORMAT_HEAD + (PAPER_REASONING_LINE if cot else "")
        + response_line + "}\n"
    )


#: Ways to fill ``{personas}`` and ``{context}`` (see :attr:`PromptTemplate.cells`).
CELL_STYLES = ("annotated", "paper")


class TemplateError(ConfigurationError):
    """A template file is unreadable or uses unknown placeholders; the message names the file."""


@dataclass(frozen=True)
class PromptTemplate:
    """A prompt template; its :attr:`version_hash` is recorded in every run that uses it."""

    name: str
    """Registry or file name of the template."""
    mode: str
    """"vanilla" (reply only) or "cot" (reasoning field, then reply)."""
    system: str
    """The system message."""
    user: str
    """The user message with placeholders."""
    output_format: str
    """Text substituted for ``{output_format}``."""
    max_tokens: int
    """Default completion budget for this mode."""
    temperature: float = DEFAULT_TEMPERATURE
    """Default sampling temperature."""
    family: str = ""
    """Family of the template: runs are comparable only within one family (with the same settings).
    "paper" for ``paper`` and ``paper-open``; defaults to the name."""
    cells: str = "annotated"
    """How ``{personas}`` and ``{context}`` are filled: "annotated" (PersoBench's bullets tagged with
    their owner, one labelled line per turn) or "paper" (the paper's table cells, as they are)."""
    chat_template: bool = True
    """Whether local models get the tokenizer's chat template by default (``False``: the text is
    tokenized as it is, as the paper's ``text-generation`` pipeline did for ``paper-open``)."""

    def __post_init__(self) -> None:
        if not self.family:
            object.__setattr__(self, "family", self.name)
        if self.cells not in CELL_STYLES:
            raise TemplateError(f"template {self.name!r}: cells must be one of {CELL_STYLES}, got {self.cells!r}")

    @property
    def version_hash(self) -> str:
        """12 hex digits of sha256 over everything that shapes the prompt text."""
        parts: list[str] = [self.mode, self.system, self.user, self.output_format]
        # The annotated form's hash is what it was before the paper's cells existed, so runs made
        # with the PersoBench templates keep their ids.
        parts += [ROLE, INSTRUCTIONS] if self.cells == "annotated" else ["cells:paper"]
        payload = json.dumps(parts, ensure_ascii=False)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:12]

    @property
    def requires_reasoning(self) -> bool:
        return self.mode == "cot"


#: The built-in templates by (name, mode).
BUILTIN_TEMPLATES: dict[tuple[str, str], PromptTemplate] = {}
for _mode in MODES:
    BUILTIN_TEMPLATES["paper", _mode] = PromptTemplate(
        name="paper", mode=_mode, system=PAPER_SYSTEM, user=PAPER_USER,
        output_format=_paper_output_format(_mode, PAPER_RESPONSE_LINE), max_tokens=DEFAULT_MAX_TOKENS[_mode],
        family="paper", cells="paper",
    )
    BUILTIN_TEMPLATES["paper-open", _mode] = PromptTemplate(
        name="paper-open", mode=_mode, system="", user=PAPER_USER,
        output_format=_paper_output_format(_mode, PAPER_OPEN_RESPONSE_LINE), max_tokens=DEFAULT_MAX_TOKENS[_mode],
        family="paper", cells="paper", chat_template=False,
    )
    BUILTIN_TEMPLATES["persobench", _mode] = PromptTemplate(
        name="persobench", mode=_mode, system=SYSTEM_MESSAGE, user=USER_TEMPLATE,
        output_format=OUTPUT_COT if _mode == "cot" else OUTPUT_VANILLA, max_tokens=DEFAULT_MAX_TOKENS[_mode],
    )

#: Names that select a built-in template; the old mode-named ones also fix the mode.
TEMPLATE_NAMES = ("paper", "paper-open", "persobench")
#: Former and imported names -> (built-in name, mode or ``None`` for "the mode asked for").
TEMPLATE_ALIASES: dict[str, tuple[str, str | None]] = {
    "vanilla": ("persobench", "vanilla"),
    "cot": ("persobench", "cot"),
    "paper-vanilla": ("paper", "vanilla"),
    "paper-cot": ("paper", "cot"),
}
#: Default template per kind of provider: the paper's protocol.
DEFAULT_TEMPLATE = "paper"
DEFAULT_LOCAL_TEMPLATE = "paper-open"


def default_template_name(provider: str) -> str:
    """The paper's protocol: ``paper-open`` for in-process local models, ``paper`` for the rest."""
    return DEFAULT_LOCAL_TEMPLATE if provider == "local" else DEFAULT_TEMPLATE


def template_family(name: str) -> str:
    """Family of a template as recorded by name in a run (built-ins, their aliases, or the name)."""
    built_in, _ = TEMPLATE_ALIASES.get(name, (name, None))
    template = BUILTIN_TEMPLATES.get((built_in, "vanilla"))
    return template.family if template is not None else name

_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


#: Anything shaped like a placeholder (any case, digits): ``{Personas}`` or ``{persona}`` is a typo
#: that would reach the model with its braces, so it is an error rather than text.
_PLACEHOLDER_LIKE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _check_placeholders(text: str, origin: str, field: str = "user") -> None:
    """A :class:`TemplateError` naming ``origin``, ``field`` and each placeholder that is not a known one."""
    unknown = sorted({m for m in _PLACEHOLDER_LIKE.findall(text) if m not in PLACEHOLDERS})
    if field == "output_format" and "output_format" in _PLACEHOLDER_LIKE.findall(text):
        unknown.append("output_format")  # the output format cannot contain itself
    if unknown:
        raise TemplateError(
            f"{origin}: unknown placeholder(s) {', '.join('{' + u + '}' for u in unknown)} in field {field!r}; "
            f"known: {', '.join('{' + p + '}' for p in PLACEHOLDERS)} (placeholders are lower case)"
        )


def _check_field_types(path: Path, data: Mapping[str, object]) -> None:
    """One-line :class:`TemplateError` for a TOML field of the wrong type (``max_tokens = "abc"``)."""
    for name in ("user", "system", "output_format", "mode"):
        if name in data and not isinstance(data[name], str):
            raise TemplateError(f"{path}: field {name!r} must be text, got {type(data[name]).__name__}")
    max_tokens = data.get("max_tokens", 1)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise TemplateError(f"{path}: field 'max_tokens' must be a positive integer, got {max_tokens!r}")
    temperature = data.get("temperature", 0.0)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature < 0:
        raise TemplateError(f"{path}: field 'temperature' must be a number >= 0, got {temperature!r}")


def load_template(path: str | Path) -> PromptTemplate:
    """Load a user template.

    ``.toml`` files set ``mode``, ``user`` and optionally ``system``, ``output_format``, ``max_tokens``
    and ``temperature``; any other file is the user message itself (vanilla mode).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TemplateError(f"{path}: cannot read template ({exc})") from exc
    if path.suffix == ".toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise TemplateError(f"{path}: invalid TOML ({exc})") from exc
        mode = data.get("mode", "vanilla")
        if mode not in MODES:
            raise TemplateError(f"{path}: field 'mode' must be one of {MODES}, got {mode!r}")
        if "user" not in data:
            raise TemplateError(f"{path}: missing field 'user' (the user message with placeholders)")
        base = BUILTIN_TEMPLATES["persobench", mode]
        _check_field_types(path, data)
        cells = data.get("cells", "annotated")
        if cells not in CELL_STYLES:
            raise TemplateError(f"{path}: field 'cells' must be one of {CELL_STYLES}, got {cells!r}")
        template = PromptTemplate(
            name=path.stem, mode=mode, system=data.get("system", base.system), user=data["user"],
            output_format=data.get("output_format", base.output_format),
            max_tokens=int(data.get("max_tokens", base.max_tokens)),
            temperature=float(data.get("temperature", base.temperature)),
            family=f"file:{path.stem}", cells=cells,
            chat_template=bool(data.get("chat_template", True)),
        )
    else:
        base = BUILTIN_TEMPLATES["persobench", "vanilla"]
        template = PromptTemplate(
            name=path.stem, mode="vanilla", system=base.system, user=text,
            output_format=base.output_format, max_tokens=base.max_tokens, family=f"file:{path.stem}",
        )
    for field in ("system", "user", "output_format"):  # every field is rendered, so every field is checked
        _check_placeholders(getattr(template, field), str(path), field)
    if "{output_format}" not in template.user and '"response"' not in template.user:
        raise TemplateError(f"{path}: the template never asks for the JSON output format; add {{output_format}}")
    return template


def get_template(name_or_path: str, mode: str | None = None) -> PromptTemplate:
    """A built-in template by name and mode, or a user template file by path (its mode is its own).

    Built-in names: ``paper``, ``paper-open``, ``persobench``; the former names ``vanilla`` and
    ``cot`` select ``persobench`` in that mode, and ``paper-vanilla``/``paper-cot`` (the names of
    older imported runs) ``paper``; an alias's own mode wins over ``mode`` (default "vanilla").
    """
    if mode is not None and mode not in MODES:
        raise TemplateError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
    name, alias_mode = TEMPLATE_ALIASES.get(name_or_path, (name_or_path, None))
    if name in TEMPLATE_NAMES:
        return BUILTIN_TEMPLATES[name, alias_mode or mode or "vanilla"]
    if Path(name_or_path).exists():
        return load_template(name_or_path)
    raise TemplateError(
        f"unknown template {name_or_path!r}: not a built-in ({', '.join(TEMPLATE_NAMES)}) and no such file"
    )


def render_personas(sample: Sample) -> str:
    """Persona sentences annotated with their speaker, one speaker block each."""
    if not sample.personas:
        return "(no persona given)"
    blocks = []
    for persona in sample.personas:
        owner = "your persona" if persona.speaker == sample.responder else "your partner's persona"
        lines = "\n".join(f"- {sentence}" for sentence in persona.sentences)
        blocks.append(f"[{persona.speaker} persona ({owner})]\n{lines}")
    return "\n".join(blocks)


def render_context(sample: Sample) -> str:
    """The dialogue turn by turn with speaker labels."""
    return "\n".join(f"{turn.speaker}: {turn.text}" for turn in sample.context)


def _substitute(text: str, values: Mapping[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), text)


def build_messages(sample: Sample, template: PromptTemplate) -> list[dict[str, str]]:
    """The chat messages that ask a model for ``sample``'s next turn: the system message (when the
    template has one), then the user message."""
    partner = next((t.speaker for t in reversed(sample.context) if t.speaker != sample.responder), "")
    if template.cells == "paper":

        personas, context = paper_cells(sample)
    else:
        personas, context = render_personas(sample), render_context(sample)
    values = {
        "responder": sample.responder,
        "partner": partner,
        "personas": personas,
        "context": context,
        "instructions": INSTRUCTIONS,
    }
    # Every field of a template is rendered the same way (a {personas} in the system message too).
    values["role"] = _substitute(ROLE, values)
    values["output_format"] = _substitute(template.output_format, values)
    system = _substitute(template.system, values)
    messages = [{"role": "system", "content": system}] if system else []
    return messages + [{"role": "user", "content": _substitute(template.user, values)}]
