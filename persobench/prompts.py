"""Prompt construction: pure functions from a :class:`~persobench.records.Sample` to chat messages.

A template is plain text with named placeholders. Placeholders are substituted by name only (no
``str.format``), so the JSON examples inside a template need no brace escaping.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from persobench.records import Sample

MODES = ("vanilla", "cot")

#: Placeholders a template may use.
PLACEHOLDERS = ("role", "personas", "context", "instructions", "output_format", "responder", "partner")

#: Paper defaults (Section 4 of arXiv 2410.03198): greedy decoding and a 110-token reply budget,
#: doubled in chain-of-thought mode to leave room for the reasoning.
DEFAULT_TEMPERATURE = 0.0
DEFAULT_MAX_TOKENS = {"vanilla": 110, "cot": 220}
REASONING_WORD_LIMIT = 110

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


class TemplateError(ValueError):
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

    @property
    def version_hash(self) -> str:
        """12 hex digits of sha256 over everything that shapes the prompt text."""
        payload = json.dumps(
            [self.mode, self.system, self.user, self.output_format, ROLE, INSTRUCTIONS], ensure_ascii=False
        )
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:12]

    @property
    def requires_reasoning(self) -> bool:
        return self.mode == "cot"


BUILTIN_TEMPLATES: dict[str, PromptTemplate] = {
    "vanilla": PromptTemplate(
        name="vanilla", mode="vanilla", system=SYSTEM_MESSAGE, user=USER_TEMPLATE,
        output_format=OUTPUT_VANILLA, max_tokens=DEFAULT_MAX_TOKENS["vanilla"],
    ),
    "cot": PromptTemplate(
        name="cot", mode="cot", system=SYSTEM_MESSAGE, user=USER_TEMPLATE,
        output_format=OUTPUT_COT, max_tokens=DEFAULT_MAX_TOKENS["cot"],
    ),
}

_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


def _check_placeholders(text: str, origin: str) -> None:
    unknown = sorted({m for m in _PLACEHOLDER.findall(text) if m not in PLACEHOLDERS})
    if unknown:
        raise TemplateError(
            f"{origin}: unknown placeholder(s) {', '.join('{' + u + '}' for u in unknown)}; "
            f"known: {', '.join('{' + p + '}' for p in PLACEHOLDERS)}"
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
        base = BUILTIN_TEMPLATES[mode]
        _check_field_types(path, data)
        template = PromptTemplate(
            name=path.stem, mode=mode, system=data.get("system", base.system), user=data["user"],
            output_format=data.get("output_format", base.output_format),
            max_tokens=int(data.get("max_tokens", base.max_tokens)),
            temperature=float(data.get("temperature", base.temperature)),
        )
    else:
        base = BUILTIN_TEMPLATES["vanilla"]
        template = PromptTemplate(
            name=path.stem, mode="vanilla", system=base.system, user=text,
            output_format=base.output_format, max_tokens=base.max_tokens,
        )
    _check_placeholders(template.user, str(path))
    if "{output_format}" not in template.user and '"response"' not in template.user:
        raise TemplateError(f"{path}: the template never asks for the JSON output format; add {{output_format}}")
    return template


def get_template(name_or_path: str) -> PromptTemplate:
    """A built-in template by name ("vanilla", "cot") or a user template file by path."""
    if name_or_path in BUILTIN_TEMPLATES:
        return BUILTIN_TEMPLATES[name_or_path]
    if Path(name_or_path).exists():
        return load_template(name_or_path)
    raise TemplateError(
        f"unknown template {name_or_path!r}: not a built-in ({', '.join(BUILTIN_TEMPLATES)}) and no such file"
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
    """The chat messages (system, then user) that ask a model for ``sample``'s next turn."""
    partner = next((t.speaker for t in reversed(sample.context) if t.speaker != sample.responder), "")
    values = {
        "responder": sample.responder,
        "partner": partner,
        "personas": render_personas(sample),
        "context": render_context(sample),
        "instructions": INSTRUCTIONS,
        "output_format": template.output_format,
    }
    values["role"] = _substitute(ROLE, values)
    return [
        {"role": "system", "content": template.system},
        {"role": "user", "content": _substitute(template.user, values)},
    ]
