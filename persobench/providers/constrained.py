"""Grammar-constrained decoding for local models (``run --structured``), with llguidance.

Why llguidance: it is maintained (Microsoft; the engine behind llama.cpp's, vLLM's and SGLang's
structured output options), its Rust core computes a token mask over a 49k vocabulary in well under
a millisecond on a CPU, it reads JSON Schema (``maxLength`` included) and Lark grammars, and it
bridges any fast Hugging Face tokenizer (``llguidance.hf.from_tokenizer``) with no GPU and no
compiler. It is imported only when a structured local run decodes, so ``import persobench`` stays
light.

The reply schema of :mod:`persobench.core.structured` (an object of bounded strings) becomes a Lark
grammar that fixes the scaffolding (``{"reasoning": "...", "response": "..."}``, keys in order) and
bounds each string twice: in characters (the schema's ``maxLength``) and in tokens (llguidance's
``max_tokens`` on the rule), so that the object closes within the completion budget whatever the
model writes. A string cut at its token bound must still be valid JSON, so the strings take no
escape sequences: no double quote, backslash or control character inside (a reply's text rarely
needs them, and a model that wants a quote writes another character). Any other schema is compiled
as JSON Schema as it is, without the token guarantee.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from transformers import LogitsProcessor

#: Characters a string may hold: anything but a double quote, a backslash or a control character,
#: so that every prefix of a string is a valid JSON string body.
_STRING_CHARS = r'[^"\\\x00-\x1f]'

#: Tokens kept aside for the end of sequence and for the tokenizer splitting the scaffolding
#: differently next to the strings than on its own.
_SPARE_TOKENS = 3

_TOKENIZERS: dict[int, Any] = {}


def ll_tokenizer(tokenizer: Any) -> Any:
    """The llguidance view of a fast Hugging Face tokenizer (built once per tokenizer: ~1 s)."""
    key = id(tokenizer)
    if key not in _TOKENIZERS:
        import llguidance.hf

        _TOKENIZERS[key] = (tokenizer, llguidance.hf.from_tokenizer(tokenizer))
    return _TOKENIZERS[key][1]


def _bounded_strings(schema: Mapping[str, Any]) -> list[tuple[str, int]] | None:
    """``[(key, maxLength), ...]`` when ``schema`` is an object of required, bounded strings with no
    other property (the reply schema); ``None`` for any other schema."""
    properties = schema.get("properties")
    if schema.get("type") != "object" or not isinstance(properties, Mapping) or not properties:
        return None
    if list(schema.get("required") or []) != list(properties) or schema.get("additionalProperties") is not False:
        return None
    fields = []
    for key, prop in properties.items():
        if not isinstance(prop, Mapping) or prop.get("type") != "string" or set(prop) - {"type", "maxLength"}:
            return None
        if not isinstance(prop.get("maxLength"), int) or not key.replace("_", "").isalnum():
            return None
        fields.append((key, int(prop["maxLength"])))
    return fields


def grammar_for(schema: Mapping[str, Any], max_tokens: int, count_tokens: Any) -> str:
    """The llguidance grammar for ``schema`` within ``max_tokens``; ``count_tokens(text)`` is the
    number of tokens the model's tokenizer needs for ``text``."""
    import llguidance

    fields = _bounded_strings(schema)
    if fields is None:
        strict = {**dict(schema), "x-guidance": {"whitespace_flexible": False}}
        return llguidance.LLMatcher.grammar_from_json_schema(strict)
    pieces = [("{" if i == 0 else ", ") + json.dumps(key) + ': "' for i, (key, _) in enumerate(fields)]
    scaffold = count_tokens("".join(pieces) + '"' * len(fields) + "}")
    budget = max(len(fields), int(max_tokens) - scaffold - _SPARE_TOKENS)
    total_chars = sum(chars for _, chars in fields) or 1
    rules, terminals, body = [], [], []
    for i, ((_, chars), opening) in enumerate(zip(fields, pieces)):
        tokens = max(1, budget * chars // total_chars)
        closing = '"' + ("}" if i == len(fields) - 1 else "")
        body += [json.dumps(opening), f"text{i}", json.dumps(closing)]
        rules.append(f"text{i}[max_tokens={tokens}]: TEXT{i}")
        terminals.append(f"TEXT{i}: /{_STRING_CHARS}{{0,{chars}}}/")
    lark = "\n".join([f"start: {' '.join(body)}", *rules, *terminals])
    return llguidance.LLMatcher.grammar_from_lark(lark)


class GrammarConstraint(LogitsProcessor):
    """A transformers logits processor holding one llguidance matcher per sequence of the batch.

    At each step it feeds every matcher the token its sequence just got, then lets through only the
    tokens its grammar allows. A sequence whose matcher has stopped (the object closed and the end
    of sequence was taken) is left alone: generate pads it until the others are done.
    """

    def __init__(self, tokenizer: Any, grammars: Sequence[str]) -> None:
        import llguidance

        llt = ll_tokenizer(tokenizer)
        self.matchers = [llguidance.LLMatcher(llt, grammar, log_level=0) for grammar in grammars]
        self.errors: list[str | None] = [m.get_error() if m.is_error() else None for m in self.matchers]
        self.eos = tokenizer.eos_token_id
        self.consumed = [0] * len(self.matchers)
        self._started = False

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._started:  # the first call sees only the prompt
            for row, matcher in enumerate(self.matchers):
                if self.errors[row] is None and not matcher.is_stopped():
                    self._consume(row, int(input_ids[row, -1]))
        self._started = True
        vocab = scores.shape[-1]
        allowed = np.zeros((len(self.matchers), vocab), dtype=bool)
        for row, matcher in enumerate(self.matchers):
            if self.errors[row] is not None or matcher.is_stopped():
                allowed[row, self.eos] = True  # end it; the error is reported for this sample only
                continue
            bits = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
            n = min(vocab, bits.size)
            allowed[row, :n] = bits[:n].astype(bool)
        mask = torch.from_numpy(allowed).to(scores.device)
        # torch types the result as Tensor; LogitsProcessor's signature says FloatTensor, its legacy name
        return scores.masked_fill(~mask, float("-inf"))  # type: ignore[return-value]

    def _consume(self, row: int, token: int) -> None:
        self.consumed[row] += 1
        if not self.matchers[row].consume_token(token):
            self.errors[row] = self.matchers[row].get_error() or f"token {token} rejected by the grammar"

    def closed(self, row: int, new_tokens: Sequence[int]) -> bool:
        """Whether sequence ``row``, whose generated tokens are ``new_tokens``, completed its grammar
        (the JSON object closed). Feeds the matcher the tokens it has not seen (the last step's)."""
        matcher = self.matchers[row]
        for token in new_tokens[self.consumed[row]:]:
            if self.errors[row] is not None or matcher.is_stopped():
                break
            self._consume(row, int(token))
        return self.errors[row] is None and matcher.is_accepting()
