"""A fake LLM judge: the fake OpenAI-compatible server (real HTTP on 127.0.0.1) answering NLI labels
from a fixed map of (premise, hypothesis) -> label, in the form the request asks for.

The pair is read back from the judge prompt's ``<premise>``/``<hypothesis>`` tags. A label that is
not entailment/neutral/contradiction is sent as it is (a malformed answer); a pair missing from the
map is answered ``default``.
"""

from __future__ import annotations

import json
import re
from typing import Mapping

from tests.fakes.servers import Action, RequestInfo, Script, reply, requested_schema

_PAIR = re.compile(r"<premise>\n(.*)\n</premise>\n<hypothesis>\n(.*)\n</hypothesis>", re.DOTALL)


def pair_of(info: RequestInfo) -> tuple[str, str]:
    match = _PAIR.search(info.prompt)
    assert match is not None, f"not a judge prompt: {info.prompt[:200]!r}"
    return match.group(1), match.group(2)


def judge_script(labels: Mapping[tuple[str, str], str], *, default: str = "neutral",
                 then: Script | None = None) -> Script:
    """Answer each judge request with its pair's label: ``{"label": ...}`` when the request carries
    a schema (structured output), else the bare word. ``then`` may override the action (delays, errors)."""

    def script(info: RequestInfo) -> Action | None:
        if then is not None and (action := then(info)) is not None:
            return action
        label = labels.get(pair_of(info), default)
        known = label in ("entailment", "neutral", "contradiction")
        text = json.dumps({"label": label}) if requested_schema(info.body) is not None and known else label
        return reply(text, usage=(120, 5))

    return script
