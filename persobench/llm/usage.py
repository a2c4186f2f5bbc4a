"""Token usage: the one check of what a server reports, the prompt estimate, and the running totals.

A server's ``usage`` is untrusted input like its text. Token counts that are not whole numbers in
``0 .. MAX_REPORTED_TOKENS`` (negative, fractional, strings, absurd) would turn a cost cap off (a
negative count makes the spend go down), crash the table writer (a string in an integer column) or
print nonsense, so :func:`check_usage` refuses such a reply as a provider error (one line, counted,
not retried, never cached) and the spend counts the prompt's own estimate instead. Every reply goes
through it, in :func:`~persobench.llm.session.call_with_retries` and in the batch path; the response
cache drops such counts from entries an older version stored (:func:`usable_usage`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from persobench.errors import ErrorKind, ProviderError
from persobench.providers.base import Completion

#: More tokens than any request has: a count above this is a server bug or hostile, not usage.
MAX_REPORTED_TOKENS = 10**9

#: Characters per prompt token in the estimates (dry runs, the spend of a reply without usable usage).
CHARS_PER_TOKEN = 4


class UsageRefused(ProviderError):
    """A reply whose token counts cannot be used. Not retried: the same server reports the same."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorKind.BAD_RESPONSE, message)

    @property
    def retryable(self) -> bool:
        return False


def _count_problem(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        return f"{name} {str(value)[:40]!r} is not a whole number"
    if value < 0:
        return f"{name} {value} is negative"
    if value > MAX_REPORTED_TOKENS:
        return f"{name} {value} is more than {MAX_REPORTED_TOKENS:,}"
    return None


def usage_problem(completion: Completion) -> str | None:
    """Why ``completion``'s token counts are unusable, or ``None`` when they are fine (or absent)."""
    for name in ("prompt_tokens", "completion_tokens"):
        problem = _count_problem(name, getattr(completion, name))
        if problem is not None:
            return problem
    return None


def check_usage(completion: Completion) -> Completion:
    """``completion`` when its usage is usable; else :class:`UsageRefused` (one line)."""
    problem = usage_problem(completion)
    if problem is not None:
        raise UsageRefused(f"the server reported unusable token usage ({problem}); the reply is not used")
    return completion


def usable_usage(completion: Completion) -> Completion:
    """``completion`` without its token counts when they are unusable (a cache entry written before
    the check existed: the text was paid for and stays, the counts are dropped)."""
    if usage_problem(completion) is None:
        return completion
    return dataclasses.replace(completion, prompt_tokens=None, completion_tokens=None)


def estimate_prompt_tokens(messages: Sequence[Mapping[str, str]]) -> int:
    """Prompt tokens of ``messages`` estimated at :data:`CHARS_PER_TOKEN` characters per token."""
    return sum(len(m["content"]) for m in messages) // CHARS_PER_TOKEN + 1


@dataclass
class UsageTotals:
    """What the requests of one session sent and cost (replies from the cache excluded)."""

    requests: int = 0
    """HTTP requests made, retries included."""
    replies: int = 0
    """Replies received and kept."""
    refused_usage: int = 0
    """Replies refused for unusable token counts (counted at the prompt's estimate)."""
    timed_out: int = 0
    """Attempts that ran out of time under a spend cap (each counted at its reserved bound: the server
    may have answered and billed it)."""
    prompt_tokens: int = 0
    """Prompt tokens of the replies (reported, else estimated)."""
    completion_tokens: int = 0
    """Completion tokens of the replies (reported, else the token budget)."""
    cost_usd: float | None = 0.0
    """Estimated spend of every reply (refused ones at their estimate); ``None``: prices unknown."""

    def add(self, prompt_tokens: int, completion_tokens: int, cost: float | None) -> None:
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        self.cost_usd = None if cost is None or self.cost_usd is None else round(self.cost_usd + cost, 6)
