"""The LLM judge's prompt: versioned templates shipped in the package, and the strict reading of
the label in an answer. Part of :mod:`persobench.metrics.judge.labeller` (which re-exports these names)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from persobench.errors import ConfigurationError
from persobench.metrics.nli_labels import LABELS
import tomllib

#: The answer of a judge that was not one of the labels in the strict form: counted, never guessed.
UNPARSEABLE = "unparseable"

#: The prompt template used unless another version is asked for.
DEFAULT_PROMPT = "nli-judge-1"
TEMPLATE_DIR = Path(__file__).with_name("judge_templates")

#: The structured answer: one label from the enum.
LABEL_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {"label": {"type": "string", "enum": list(LABELS)}},
    "required": ["label"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class JudgeTemplate:
    """One version of the judge's prompt (a ``judge_templates/<version>.toml`` file)."""

    version: str
    """Its name, part of every judge profile key (``nli-judge-1``)."""
    system: str
    """The system message: the task and the three labels."""
    user: str
    """The user message, with ``{premise}`` and ``{hypothesis}`` filled in."""
    answer_plain: str
    """Appended to the user message when the provider has no structured output."""
    answer_structured: str
    """Appended when the provider enforces :data:`LABEL_SCHEMA`."""
    max_tokens: int
    """Completion budget per pair."""
    sha256: str
    """Hash of the template file (in provenance: a template edited in place shows up)."""

    def messages(self, premise: str, hypothesis: str, *, structured: bool) -> tuple[dict[str, str], ...]:
        """The chat messages for one pair. Filled in one pass, so a premise that contains the text
        ``{hypothesis}`` stays as written."""
        values = {"premise": premise, "hypothesis": hypothesis}
        body = re.sub(r"\{(premise|hypothesis)\}", lambda m: values[m.group(1)], self.user)
        answer = self.answer_structured if structured else self.answer_plain
        return ({"role": "system", "content": self.system}, {"role": "user", "content": f"{body}\n\n{answer}"})


def template_versions() -> list[str]:
    """The prompt versions shipped in the package."""
    return sorted(p.stem for p in TEMPLATE_DIR.glob("*.toml"))


def load_template(version: str = DEFAULT_PROMPT) -> JudgeTemplate:
    """The template ``version`` (:class:`ConfigurationError` naming the known ones when unknown)."""

    path = TEMPLATE_DIR / f"{version}.toml"
    if "/" in version or "\\" in version or not path.is_file():
        raise ConfigurationError(f"unknown judge prompt {version!r}; known: {', '.join(template_versions())}")
    raw = path.read_bytes()
    data = tomllib.loads(raw.decode("utf-8"))
    if data.get("version") != version:
        raise ConfigurationError(f"{path}: version {data.get('version')!r} does not match the file name")
    return JudgeTemplate(version, data["system"], data["user"], data["answer_plain"], data["answer_structured"],
                         int(data["max_tokens"]), "sha256:" + hashlib.sha256(raw).hexdigest()[:16])


#: Longer answers are unparseable without being read: the strict forms are a few dozen characters.
MAX_ANSWER_CHARS = 1000


def parse_label(text: str, *, structured: bool) -> str:
    """The label in a judge's answer, or :data:`UNPARSEABLE`.

    One strict form each: with structured output the whole answer is a JSON object whose only key
    ``label`` is one of the labels; otherwise the whole answer is one label word (any case, an
    optional final period). "Probably entailment", two labels or an explanation are unparseable."""
    text = (text or "").strip()
    if len(text) > MAX_ANSWER_CHARS:  # no strict answer is this long; a hostile one may nest 100,000 deep
        return UNPARSEABLE
    if structured:
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            return UNPARSEABLE
        if not isinstance(data, dict) or set(data) != {"label"} or not isinstance(data["label"], str):
            return UNPARSEABLE
        word = data["label"].strip().lower()
    else:
        word = text.removesuffix(".").strip().lower()
    return word if word in LABELS else UNPARSEABLE


