"""The ranges of a run's numbers, checked in one place for the CLI and the app.

``run --timeout nan`` used to be accepted (every sample then failed) and ``--temperature nan`` put
``NaN`` into manifest.json. :func:`check_numbers` runs at the start of
:func:`~persobench.generation.plan.plan_generation`, the step both the CLI (``run``, ``--dry-run``)
and the app's New run page (:func:`~persobench.jobs.plan_launch`) go through, so both refuse the same
values with the same one line naming the flag.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any, Callable

from persobench.config.fields import number_requirement
from persobench.errors import ConfigurationError
from persobench.generation.config import GenerationConfig



@dataclass(frozen=True)
class NumberRule:
    """The values one number of a run may take."""

    flag: str
    """The CLI flag that sets it (named in the error)."""
    low: float
    """Smallest value allowed (or bound, see ``low_open``)."""
    low_open: bool = False
    """True when ``low`` itself is refused (a timeout must be more than 0)."""
    high: float | None = None
    """Largest value allowed; ``None``: no upper bound (but still finite)."""
    whole: bool = False
    """Only whole numbers."""
    unit: str = ""
    """What the number counts, for the message ("seconds")."""

    def requirement(self) -> str:
        return number_requirement(whole=self.whole, low=self.low, low_open=self.low_open, high=self.high,
                                  unit=self.unit)

    def allows(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.whole and not isinstance(value, int):
            return False
        if not math.isfinite(value):
            return False
        if value < self.low or (self.low_open and value == self.low):
            return False
        return self.high is None or value <= self.high


#: Every checked number of a run, by its :class:`GenerationConfig` / :class:`RetryPolicy` field name.
NUMBER_RULES: dict[str, NumberRule] = {
    "timeout": NumberRule("--timeout", 0, low_open=True, unit="seconds for the whole request"),
    # The judge's deadline (score --judge), checked by the same rule as a run's --timeout.
    "judge_timeout": NumberRule("--judge-timeout", 0, low_open=True, unit="seconds for the whole request"),
    "temperature": NumberRule("--temperature", 0, high=2),  # 2: the most any chat API takes
    "top_p": NumberRule("--top-p", 0, low_open=True, high=1),
    "max_tokens": NumberRule("--max-tokens", 1, whole=True),
    "limit": NumberRule("--limit", 1, whole=True),
    "concurrency": NumberRule("--concurrency", 1, whole=True),
    "max_concurrency": NumberRule("--max-concurrency", 1, whole=True),
    "max_attempts": NumberRule("--max-attempts", 1, whole=True),
    "checkpoint_every": NumberRule("--checkpoint-every", 1, whole=True),
    "batch_size": NumberRule("--batch-size", 1, whole=True),
    # 1 GiB: a bigger "cap" (a 23-digit one) is a typo that would read any reply whole.
    "max_reply_bytes": NumberRule("--max-reply-bytes", 1, whole=True, high=2**30, unit="bytes"),
}


def _shown(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else repr(value)


def check_number(name: str, value: Any) -> None:
    """Refuse ``value`` for the number ``name`` (a key of :data:`NUMBER_RULES`) unless it is in
    range: a :class:`ConfigurationError` of one line naming the field and its flag."""
    rule = NUMBER_RULES[name]
    if not rule.allows(value):
        raise ConfigurationError(f"{name} must be {rule.requirement()}, got {_shown(value)} ({rule.flag})")


def number_argument(name: str) -> Callable[[str], float]:
    """An argparse ``type`` for the number ``name`` (a key of :data:`NUMBER_RULES`): the flag's
    text as a float, refused at parse time with the rule's own words (whole-number rules as ints)."""
    rule = NUMBER_RULES[name]

    def parse(text: str) -> float:
        try:
            value: Any = int(text) if rule.whole else float(text)
        except ValueError:
            value = None
        if not rule.allows(value):
            raise argparse.ArgumentTypeError(f"must be {rule.requirement()}, got {text!r}")
        return value

    return parse


def check_numbers(config: "GenerationConfig") -> None:
    """Check every number of ``config`` (fields left at ``None`` mean "the default" and pass)."""
    values: dict[str, Any] = {
        "timeout": config.retry.timeout, "max_attempts": config.retry.max_attempts,
        "temperature": config.temperature, "top_p": config.top_p, "max_tokens": config.max_tokens,
        "limit": config.limit, "max_concurrency": config.max_concurrency,
        "checkpoint_every": config.checkpoint_every, "batch_size": config.batch_size,
        "concurrency": None if config.concurrency == "auto" else config.concurrency,
        "max_reply_bytes": dict(config.options).get("max_reply_bytes"),
    }
    for name, value in values.items():
        if value is not None:
            check_number(name, value)
