"""Turn a model's raw text into a reply: extraction of the JSON object and a status per output.

Two policies:

``"paper"``
    Exactly what the PersoBench authors did, in one of two styles. ``paper_style="open"`` (the
    open-source models, ``post-processing.ipynb``): take every non-overlapping
    non-greedy ``{...}`` span (what ``re.findall(r"\\{.*?\\}", text, re.DOTALL)`` yields, i.e. from a
    "{" to the nearest following "}"), parse each with strict ``json.loads`` and keep the first one
    that has a "response" key. The value is used verbatim (not stripped); an empty value counts as a
    failure because the published tables store it as an empty cell. Verified row for row against
    every published ``Raw Responses``/``Responses`` pair. ``paper_style="closed"`` (the OpenAI models of
    ``closed_source_models.ipynb``: gpt-3.5-turbo, gpt-4-turbo, gpt-4o-mini): ``json.loads`` of the
    whole reply as it came; an object's "response" (missing counts as "") is the reply, anything else
    (prose around the JSON, code fences, two objects, a list) is invalid. ``paper_style="closed-fences"``
    (that notebook's Gemini cell): the same after removing every "```json" and "```" and stripping.

``"robust"`` (default)
    Decodes a full JSON object from every "{" (so nested braces, code fences, prose around the JSON
    and raw newlines inside strings are fine), picks the first object with a "response", and
    explains failures: ``truncated`` when the reply was cut off (``finish_reason`` says so, or the text
    ends inside a JSON string or object), ``invalid_json``, ``missing_field``, ``empty``, ``refused``.
    In chain-of-thought mode a reply with a response but no (or an empty) "reasoning" is still a
    reply, as the paper counted it; :attr:`ParsedOutput.note` records that the reasoning is missing.

Stdlib only: this module is imported by light code paths (CLI, app pages) and must not pull in
pandas or torch.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from persobench.errors import ConfigurationError

__all__ = [
    "POLICIES",
    "ParsedOutput",
    "Status",
    "parse_output",
    "summarize",
]


class Status(str, enum.Enum):
    """Outcome of post-processing one generation. The values are the public strings stored in runs."""

    OK = "ok"
    TRUNCATED = "truncated"
    INVALID_JSON = "invalid_json"
    MISSING_FIELD = "missing_field"
    EMPTY = "empty"
    REFUSED = "refused"
    API_ERROR = "api_error"  # set by the generation stage when the call itself failed

    def __str__(self) -> str:
        return self.value


#: The post-processing policies ``parse_output`` understands.
POLICIES: tuple[str, ...] = ("robust", "paper")

#: finish/stop reasons, as providers spell them, that mean "the token limit was hit".
_LENGTH_REASONS = frozenset({"length", "max_tokens", "max_output_tokens", "token_limit"})

#: Lower-case phrases of a model declining the task. Only consulted when the reply has no usable
#: JSON response and no JSON object at all: a persona reply inside the JSON such as
#: {"response": "I'm sorry, but I can't make it"} is a valid reply, not a refusal.
_REFUSAL_PHRASES: tuple[str, ...] = (
    "i'm sorry, but i can't",
    "i'm sorry, but i cannot",
    "i am sorry, but i cannot",
    "i am sorry, but i can't",
    "sorry, i can't help",
    "sorry, i cannot help",
    "i cannot help with",
    "i can't help with",
    "i cannot assist",
    "i can't assist",
    "i cannot fulfill",
    "i can't fulfill",
    "i cannot comply",
    "i can't comply",
    "i must decline",
    "i won't be able to help",
    "i'm not able to help",
    "i am not able to help",
    "i'm unable to help",
    "i am unable to help",
    "i'm unable to assist",
    "i am unable to assist",
    "as an ai language model, i cannot",
    "as an ai language model, i can't",
    "as an ai, i cannot",
    "as an ai, i can't",
)

#: Refusals open the reply; looking further would flag ordinary chit-chat deep inside prose.
_REFUSAL_WINDOW = 400

_STRICT_DECODER = json.JSONDecoder()
# strict=False admits raw control characters (a reply string broken over several lines).
_LENIENT_DECODER = json.JSONDecoder(strict=False)


@dataclass(frozen=True)
class ParsedOutput:
    """The result of post-processing one raw generation."""

    status: str
    """One of the :class:`Status` values, as a plain string."""
    response: str | None
    """The reply text when ``status`` is ``"ok"``, exactly as the model wrote it; ``None`` otherwise."""
    reasoning: str | None
    """The object's "reasoning" string when present (chain-of-thought mode), even on failure
    statuses such as ``missing_field``; ``None`` when absent or not a string."""
    error: str | None
    """Human-readable detail of what was wrong; ``None`` when ``status`` is ``"ok"``."""
    json_span: tuple[int, int] | None = None
    """``(start, end)`` character offsets in the raw text of the JSON object the reply came from
    (``raw_text[start:end]``); ``None`` when no object was used."""
    policy: str = "robust"
    """The policy that produced this result."""
    note: str | None = None
    """A remark on a usable reply, e.g. that a chain-of-thought reply has no "reasoning"."""

    @property
    def ok(self) -> bool:
        """True when a usable reply was extracted."""
        return self.status == Status.OK.value


def parse_output(
    raw_text: str | None,
    *,
    policy: str = "robust",
    finish_reason: str | None = None,
    require_reasoning: bool = False,
    paper_style: str = "open",
) -> ParsedOutput:
    """Extract the reply from a model's raw output and classify the outcome.

    ``finish_reason`` is the provider's stop reason when known ("length"/"max_tokens" mean the
    token limit was hit; "stop" means the model ended on its own). ``require_reasoning`` (chain-of-
    thought runs) notes a missing "reasoning" string in :attr:`ParsedOutput.note` without failing the
    reply. The "paper" policy ignores both, as the paper did; ``paper_style`` is "open", "closed" or
    "closed-fences" (the notebooks' cells, see the module docstring). For its failures it still reports the robust
    policy's diagnosis as the status (e.g. ``truncated``), so only the valid/invalid split is the paper's.

    Never raises for any string input; an unknown ``policy`` is a :class:`ConfigurationError` (a ``ValueError``).
    """
    if policy == "robust":
        return _parse_robust(raw_text, finish_reason, require_reasoning)
    if policy == "paper":
        if paper_style in PAPER_STYLES_CLOSED:
            return _parse_paper_closed(raw_text, strip_fences=paper_style == "closed-fences")
        if paper_style != "open":
            raise ConfigurationError(
                f"unknown paper_style {paper_style!r}; expected 'open', 'closed' or 'closed-fences'")
        return _parse_paper(raw_text)
    raise ConfigurationError(f"unknown post-processing policy {policy!r}; known: {', '.join(POLICIES)}")


def summarize(statuses: Iterable[str | Status | ParsedOutput]) -> dict[str, int]:
    """Count statuses. Every known status is present (zero when unseen), in :class:`Status` order,
    so tables and charts have stable columns. Accepts status strings, ``Status`` members or
    ``ParsedOutput`` records; an unknown status string is a ``ValueError``."""
    counts = {s.value: 0 for s in Status}
    for item in statuses:
        value = item.status if isinstance(item, ParsedOutput) else item
        key = value.value if isinstance(value, Status) else value
        if key not in counts:
            raise ValueError(f"unknown status {value!r}; known: {', '.join(counts)}")
        counts[key] += 1
    return counts


# --------------------------------------------------------------------------------------------
# policy "paper"


def _paper_spans(text: str) -> Iterable[tuple[int, int]]:
    """The spans ``re.findall(r"\\{.*?\\}", text, re.DOTALL)`` returns: from a "{" to the nearest
    following "}", scanning on after each match (non-overlapping)."""
    pos = 0
    while True:
        start = text.find("{", pos)
        if start < 0:
            return
        end = text.find("}", start + 1)
        if end < 0:
            return
        yield start, end + 1
        pos = end + 1


def _paper_value(value: Any, reasoning: Any, span: tuple[int, int] | None) -> ParsedOutput:
    """A decoded "response" value as the paper's tables kept it."""
    reasoning = reasoning if isinstance(reasoning, str) else None
    if value is None:
        return ParsedOutput(Status.MISSING_FIELD.value, None, reasoning, 'the "response" value is null', span, "paper")
    # The notebooks put the decoded value into a DataFrame column that pandas wrote with str():
    # numbers and booleans ended up as their Python text in the published table.
    response = value if isinstance(value, str) else str(value)
    if response == "":
        # The published table stores "" as an empty cell, which every consumer reads as a failure.
        return ParsedOutput(Status.EMPTY.value, None, reasoning, 'the "response" value is an empty string', span, "paper")
    return ParsedOutput(Status.OK.value, response, reasoning, None, span, "paper")


#: The closed-source notebook's two ways of reading a reply (``closed_source_models.ipynb``).
PAPER_STYLES_CLOSED = ("closed", "closed-fences")


def _parse_paper_closed(raw_text: str | None, *, strip_fences: bool) -> ParsedOutput:
    """``closed_source_models.ipynb``: the whole text parsed strictly, ``.get('response', '')``; the
    Gemini cell first removes code fences (``.strip().replace('```json', '').replace('```', '').strip()``),
    the OpenAI cell calls ``json.loads(response_text)`` on the reply as it came."""
    text = raw_text if isinstance(raw_text, str) else ""
    cleaned = text.strip().replace("```json", "").replace("```", "").strip() if strip_fences else text.strip()
    try:
        obj = json.loads(cleaned)
    except (ValueError, RecursionError):
        obj = None
    if isinstance(obj, dict):
        start = text.find(cleaned) if cleaned else -1
        span = (start, start + len(cleaned)) if start >= 0 else None
        if "response" not in obj:
            return ParsedOutput(Status.MISSING_FIELD.value, None, _reasoning_of(obj),
                                'the JSON object has no "response" key', span, "paper")
        return _paper_value(obj["response"], obj.get("reasoning"), span)
    diagnosis = _parse_robust(raw_text, None, False)
    if diagnosis.status == Status.OK.value:
        status = Status.INVALID_JSON.value
        what = "a JSON list or value" if cleaned and obj is not None else "text around the JSON object"
        fences = " once code fences are removed" if strip_fences else ""
        error: str | None = f"the reply is not one JSON object{fences} ({what}); the robust policy finds a reply"
    else:
        status, error = diagnosis.status, diagnosis.error
    return ParsedOutput(status, None, diagnosis.reasoning, error, None, "paper")


def _parse_paper(raw_text: str | None) -> ParsedOutput:
    text = raw_text if isinstance(raw_text, str) else ""
    found: tuple[int, int, Any, Any] | None = None
    for start, end in _paper_spans(text):
        try:
            obj = _STRICT_DECODER.decode(text[start:end])
        except (ValueError, RecursionError):
            continue
        # A "{...}" span always decodes to a dict; the notebook tests `"response" in obj`.
        if isinstance(obj, dict) and "response" in obj:
            found = (start, end, obj["response"], obj.get("reasoning"))
            break
    if found is not None:
        start, end, value, reasoning = found
        return _paper_value(value, reasoning, (start, end))
    # Invalid for the paper; the robust diagnosis says why (cut off, malformed, ...).
    diagnosis = _parse_robust(raw_text, None, False)
    if diagnosis.status == Status.OK.value:
        status = Status.INVALID_JSON.value
        error: str | None = (
            "no non-greedy {...} span parses as JSON with a \"response\" key (the robust policy "
            "finds one: nested braces or raw newlines inside strings)"
        )
    else:
        status, error = diagnosis.status, diagnosis.error
    return ParsedOutput(status, None, diagnosis.reasoning, error, None, "paper")


# --------------------------------------------------------------------------------------------
# policy "robust"


@dataclass(frozen=True)
class _Candidate:
    """A JSON object decoded from the raw text."""

    start: int
    """Offset of its opening brace."""
    end: int
    """Offset just past its closing brace."""
    obj: dict[str, Any]
    """The decoded object."""


def _looks_like_json_object(text: str, brace: int) -> bool:
    """Whether the "{" at ``brace`` opens what is meant to be a JSON object (a key string, an
    empty object, or nothing yet because the text ends), as opposed to a brace in prose."""
    i = brace + 1
    n = len(text)
    while i < n and text[i] in " \t\r\n":
        i += 1
    return i == n or text[i] in '"}'


def _quote_closes_string(text: str, quote: int, stack: list[str]) -> bool:
    """Whether the '"' at ``quote`` ends the string it is in.

    Models often put unescaped quotes inside a reply ("the "best" place"). A quote only closes a
    JSON string when what follows is JSON structure (":", "}", "]", or "," followed by the next key
    or value); otherwise it is treated as part of the text. This keeps one stray quote from making
    the rest of the reply look like an unterminated string.
    """
    n = len(text)
    i = quote + 1
    while i < n and text[i] in " \t\r\n":
        i += 1
    if i == n or text[i] in ":}]":
        return True
    if text[i] != ",":
        return False
    i += 1
    while i < n and text[i] in " \t\r\n":
        i += 1
    # A key follows, or a trailing comma before the closing bracket (invalid JSON, but structure).
    if i == n or text[i] in '"}]':
        return True
    # In an array the next element may be any value; in an object it must be a key string.
    return bool(stack) and stack[-1] == "[" and text[i] in "{[-0123456789tfn"


def _scan_object(text: str, brace: int) -> int | None:
    """Scan from the "{" at ``brace`` tracking strings, escapes and nesting. Returns the offset just
    past the brace that closes it, or ``None`` when the text ends first (inside a string or with
    brackets still open)."""
    stack: list[str] = []
    in_string = False
    i = brace
    n = len(text)
    while i < n:
        ch = text[i]
        if in_string:
            if ch == "\\":
                i += 2
                continue
            if ch == '"' and _quote_closes_string(text, i, stack):
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append(ch)
        elif ch in "}]":
            if stack:
                stack.pop()
            if not stack:
                return i + 1
        i += 1
    return None


@dataclass(frozen=True)
class _Failure:
    """A JSON-looking "{" from which no object decodes."""

    start: int
    """Offset of the brace."""
    message: str
    """The decoder's complaint, e.g. "Expecting ',' delimiter: line 3 column 5 (char 40)"."""


def _decode_candidates(text: str) -> tuple[list[_Candidate], list[_Failure]]:
    """All top-level JSON objects in ``text`` (decoded from each "{" not inside an earlier object),
    and the JSON-looking "{" that failed to decode."""
    candidates: list[_Candidate] = []
    failed: list[_Failure] = []
    pos = 0
    while True:
        start = text.find("{", pos)
        if start < 0:
            break
        try:
            obj, end = _LENIENT_DECODER.raw_decode(text, start)
        except RecursionError:
            failed.append(_Failure(start, "nested too deeply to decode"))
            pos = start + 1
            continue
        except ValueError as exc:
            if _looks_like_json_object(text, start):
                failed.append(_Failure(start, str(exc)))
            # Keep looking inside: a malformed wrapper may still hold a well-formed object.
            pos = start + 1
            continue
        candidates.append(_Candidate(start, end, obj))
        pos = end
    return candidates, failed


def _first_unterminated(text: str, failed: list[_Failure]) -> int | None:
    """Offset of the first JSON-looking object that does not decode when the text ends inside it.

    Only the first failure counts: when a malformed object is closed and a later one is cut off
    (a model repeating itself until the token limit), the reply was already broken before the cut.
    """
    if failed and _scan_object(text, failed[0].start) is None:
        return failed[0].start
    return None


def _find_with_response(obj: Any, depth: int = 0) -> dict[str, Any] | None:
    """The first dict (depth-first, the object itself first) that has a "response" key; covers
    wrappers such as {"output": {"response": ...}}."""
    if depth > 50:
        return None
    if isinstance(obj, dict):
        if "response" in obj:
            return obj
        children: Iterable[Any] = obj.values()
    elif isinstance(obj, list):
        children = obj
    else:
        return None
    for child in children:
        found = _find_with_response(child, depth + 1)
        if found is not None:
            return found
    return None


def _refusal(text: str) -> str | None:
    """The refusal phrase the reply opens with, if any."""
    head = " ".join(text[:_REFUSAL_WINDOW].replace("\u2019", "'").lower().split())
    for phrase in _REFUSAL_PHRASES:
        if phrase in head:
            return phrase
    return None


def _reasoning_of(obj: dict[str, Any] | None) -> str | None:
    value = obj.get("reasoning") if obj is not None else None
    return value if isinstance(value, str) else None


def _check_holder(holder: dict[str, Any], span: tuple[int, int], require_reasoning: bool) -> ParsedOutput:
    """Validate the object that carries "response"."""
    value = holder["response"]
    reasoning = _reasoning_of(holder)
    if not isinstance(value, str):
        kind = "null" if value is None else type(value).__name__
        return ParsedOutput(
            Status.MISSING_FIELD.value, None, reasoning, f'the "response" value is {kind}, not a string', span
        )
    if not value.strip():
        return ParsedOutput(Status.EMPTY.value, None, reasoning, 'the "response" value is empty', span)
    note = None
    if require_reasoning and reasoning is None:
        note = 'reasoning missing: the object has no "reasoning" string'
    elif require_reasoning and reasoning is not None and not reasoning.strip():
        note = 'reasoning missing: the "reasoning" value is empty'
    return ParsedOutput(Status.OK.value, value, reasoning, None, span, note=note)


def _parse_robust(raw_text: Any, finish_reason: str | None, require_reasoning: bool) -> ParsedOutput:
    if raw_text is None or (isinstance(raw_text, str) and not raw_text.strip()):
        return ParsedOutput(Status.EMPTY.value, None, None, "the model returned no text", None)
    if not isinstance(raw_text, str):
        return ParsedOutput(
            Status.INVALID_JSON.value, None, None, f"expected text, got {type(raw_text).__name__}", None
        )
    text = raw_text
    candidates, failed = _decode_candidates(text)

    # The first usable reply wins; failing that, the first object that at least has the key says why.
    first_problem: ParsedOutput | None = None
    for cand in candidates:
        holder = _find_with_response(cand.obj)
        if holder is None:
            continue
        result = _check_holder(holder, (cand.start, cand.end), require_reasoning)
        if result.ok:
            return result
        first_problem = first_problem or result
    if first_problem is not None:
        return first_problem

    # No usable reply. Say why, most specific cause first.
    first_dict = candidates[0] if candidates else None
    reasoning = _reasoning_of(first_dict.obj if first_dict is not None else None)
    if not candidates and not failed:
        phrase = _refusal(text)
        if phrase is not None:
            return ParsedOutput(Status.REFUSED.value, None, None, f'the model declined ("{phrase}")', None)

    reason = finish_reason.strip().lower() if isinstance(finish_reason, str) else None
    if reason in _LENGTH_REASONS:
        return ParsedOutput(
            Status.TRUNCATED.value,
            None,
            reasoning,
            f"the token limit was reached (finish_reason={finish_reason!r}) before a complete JSON "
            'object with "response"',
            None,
        )
    unterminated = _first_unterminated(text, failed)
    if unterminated is not None:
        if reason is None:
            return ParsedOutput(
                Status.TRUNCATED.value,
                None,
                reasoning,
                f"the text ends inside the JSON object opened at offset {unterminated} (cut off by "
                "the token limit)",
                None,
            )
        return ParsedOutput(
            Status.INVALID_JSON.value,
            None,
            reasoning,
            f"the JSON object opened at offset {unterminated} is never closed, though the model "
            f"stopped on its own (finish_reason={finish_reason!r})",
            None,
        )
    if first_dict is not None:
        keys = ", ".join(repr(k) for k in list(first_dict.obj)[:8]) or "none"
        return ParsedOutput(
            Status.MISSING_FIELD.value,
            None,
            reasoning,
            f'no JSON object has a "response" key (keys found: {keys})',
            (first_dict.start, first_dict.end),
        )
    if failed:
        return ParsedOutput(
            Status.INVALID_JSON.value,
            None,
            None,
            f"malformed JSON in the object opened at offset {failed[0].start}: {failed[0].message}",
            None,
        )
    return ParsedOutput(Status.INVALID_JSON.value, None, None, "no JSON object found in the text", None)
