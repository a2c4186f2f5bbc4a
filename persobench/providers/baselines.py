"""Baselines, not models: they bound every leaderboard from above and below.

``baseline:reference``
    Returns the gold reply: the ceiling a perfect model would reach on reference-based metrics.
``baseline:persona-echo``
    Returns the responder's persona sentence that shares the most words with the last turn
    (first in source order on ties): a deterministic floor that "mentions the persona" with no
    model at all.

Both answer in the JSON format the prompt asks for, so they go through the same post-processing,
cache and tables as real models.
"""

from __future__ import annotations

import json
import re
from typing import Any

from persobench.providers.base import Completion, Request

from persobench.errors import ConfigurationError, ErrorKind, ProviderError

BASELINES = ("reference", "persona-echo")

#: Function words that would make every sentence "overlap" with every turn.
_STOPWORDS = frozenset(
    "a an and are as at be but by do does for from have how i i'm in is it its me my of on or so that "
    "the their them they this to was we what when where which who why with you your".split()
)
_WORD = re.compile(r"[a-z0-9']+")

#: Reply when a sample has no persona sentence to echo.
FALLBACK_REPLY = "That sounds interesting, tell me more."


def _content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS}


def persona_echo(sample: Any) -> str:
    """The responder's persona sentence most related to the last turn (word overlap)."""
    candidates = sample.persona_sentences(sample.responder) or sample.persona_sentences()
    if not candidates:
        return FALLBACK_REPLY
    last = _content_words(sample.context[-1].text) if sample.context else set()
    # max() keeps the first of equal scores, so ties resolve to source order.
    return max(candidates, key=lambda sentence: len(_content_words(sentence) & last))


class BaselineProvider:
    """``baseline:reference`` or ``baseline:persona-echo``."""

    name = "baseline"
    max_concurrency: int | None = None
    #: The reply comes from the sample (its reference / personas), not only from the messages.
    sample_dependent = True
    key_env: str | None = None  # no key: nothing leaves this machine
    key_optional_with_base_url = False

    def __init__(self, spec: Any, *, api_key: str | None = None, timeout: float = 60.0) -> None:
        del api_key, timeout
        if spec.model not in BASELINES:
            raise ConfigurationError(f"unknown baseline {spec.model!r}; known baselines: {', '.join(BASELINES)}")
        self.spec = spec
        self.model = spec.model

    def check(self) -> None:
        """Nothing to reach."""

    async def generate(self, request: Request) -> Completion:
        sample = request.sample
        if sample is None:
            raise ProviderError(ErrorKind.BAD_REQUEST, f"baseline:{self.model} needs the sample, not only messages")
        if self.model == "reference":
            reply, why = sample.reference, "baseline: the gold reference reply"
        else:
            reply, why = persona_echo(sample), "baseline: the persona sentence sharing most words with the last turn"
        text = json.dumps({"reasoning": why, "response": reply}, ensure_ascii=False)
        return Completion(text=text, finish_reason="stop", prompt_tokens=0, completion_tokens=0, model=self.model)

    async def aclose(self) -> None:
        """Nothing to release."""
