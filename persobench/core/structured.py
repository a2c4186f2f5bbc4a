"""Structured output: the JSON shape a reply must have, as a JSON Schema providers can enforce.

With ``--structured`` a run asks the provider to guarantee the reply's shape instead of only asking
for it in the prompt: ``{"response": string}`` in vanilla mode, ``{"reasoning": string, "response":
string}`` in chain-of-thought mode. Each string is bounded (``maxLength``) so that the object can
close within the completion budget: an unbounded string lets a small model talk until the token
limit and the JSON never closes, which is exactly the failure structured output is meant to remove.

How each provider enforces the schema is its own business (OpenAI-compatible ``response_format``,
Anthropic's ``output_config.format``, grammar-constrained decoding for local models); the schema is
the same for all, and it is part of the cache key, so a structured reply is never served for a plain
request or the other way round.

What this changes in the benchmark's meaning: a structured run no longer measures whether a model
follows the output-format instruction (the paper's instructability, the share of valid replies),
only what it says once the format is guaranteed. Boards label such runs ``+structured``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BOARD_NOTE", "CHARS_PER_TOKEN", "FORMS", "JSON_OBJECT", "JSON_SCHEMA", "LABEL_SUFFIX", "SCHEMA_NAME",
           "reply_schema", "structured_label"]

#: Name of the schema in OpenAI's ``response_format`` (letters, digits, ``_`` and ``-`` only).
SCHEMA_NAME = "persobench_reply"

#: Conservative characters per token for English text: the string bounds are derived from the token
#: budget with it, so that even a tokenizer that splits finely closes the object in time.
CHARS_PER_TOKEN = 3.0

#: Tokens kept for the JSON scaffolding (braces, keys, quotes) and escapes.
_SCAFFOLD_TOKENS = 12

#: Shortest bound ever used, so that a tiny budget still leaves room for a sentence.
_MIN_CHARS = 40

#: The two request forms of OpenAI-compatible servers: ``response_format`` ``{"type": "json_schema",
#: "json_schema": {...}}`` (OpenAI, vLLM, llama.cpp's server) and ``{"type": "json_object", "schema":
#: {...}}`` (llama-cpp-python's server, which rejects the first form).
JSON_SCHEMA = "json_schema"
JSON_OBJECT = "json_object"
FORMS = (JSON_SCHEMA, JSON_OBJECT)

#: Appended to a model's display name on boards and pages.
LABEL_SUFFIX = " +structured"

#: What a board with structured runs says about them (CLI notes and the app's Leaderboard page).
BOARD_NOTE = ("instructability (failure ratio) is not measured for structured runs (+structured): the provider "
              "guarantees the reply's JSON shape, so their failure ratio counts replies the schema could not save "
              "(cut off at the token limit, or a server that ignored it), not whether the model follows the "
              "format instruction")


def reply_schema(mode: str, max_tokens: int) -> dict[str, Any]:
    """The JSON Schema of a reply in ``mode`` ("vanilla" or "cot") for a ``max_tokens`` budget.

    In cot mode the reasoning gets the larger share of the budget (the paper allows it up to 110
    words) and the reply the rest; both bounds are in characters (``maxLength``).
    """
    if mode not in ("vanilla", "cot"):
        raise ValueError(f"unknown mode {mode!r}; expected 'vanilla' or 'cot'")
    budget = max(_MIN_CHARS, int(CHARS_PER_TOKEN * max(0, int(max_tokens) - _SCAFFOLD_TOKENS)))
    properties: dict[str, Any] = {}
    if mode == "cot":
        reasoning = max(_MIN_CHARS, budget * 11 // 20)
        properties["reasoning"] = {"type": "string", "maxLength": reasoning}
        budget = max(_MIN_CHARS, budget - reasoning)
    properties["response"] = {"type": "string", "maxLength": budget}
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def structured_label(label: str, structured: bool) -> str:
    """``label`` with the ``+structured`` mark when the run asked for structured output."""
    return f"{label}{LABEL_SUFFIX}" if structured and not label.endswith(LABEL_SUFFIX) else label
