"""Reading JSON whose integers may be longer than Python converts.

Python refuses to convert an integer literal of more than 4,300 digits (``sys.get_int_max_str_digits``,
a guard against quadratic-time conversion), so ``json.loads`` of such a number raises a bare
``ValueError`` that names neither the row nor the field. :func:`loads` and :func:`load` read such
a number as a :class:`HugeInteger` marker instead, and :func:`find_huge` says where it is, so the
reader can refuse it in one line naming the file, row and column.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import IO, Any, Iterable


@dataclass(frozen=True)
class HugeInteger:
    """An integer literal too long to convert, kept as its length only."""

    digits: int
    """How many digits it has."""

    def problem(self, advice: str = "write it as text (in quotes)") -> str:
        """Why it is refused and what to do, for the error line."""
        return f"an integer of {self.digits} digits, more than the {max_digits()} Python reads; {advice}"


def max_digits() -> int:
    return sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 0


def _parse_int(text: str) -> int | HugeInteger:
    limit = max_digits()
    digits = len(text) - text.startswith("-")
    return HugeInteger(digits) if limit and digits > limit else int(text)


def loads(text: str) -> Any:
    """``json.loads``, with an integer too long to convert read as a :class:`HugeInteger`."""
    return json.loads(text, parse_int=_parse_int)


def load(handle: IO[str]) -> Any:
    """``json.load``, with an integer too long to convert read as a :class:`HugeInteger`."""
    return json.load(handle, parse_int=_parse_int)


def find_huge(value: Any, path: tuple[str | int, ...] = ()) -> tuple[tuple[str | int, ...], HugeInteger] | None:
    """The path (keys and list positions) to the first :class:`HugeInteger` in ``value``, and it;
    None when there is none."""
    if isinstance(value, HugeInteger):
        return path, value
    children: Iterable[tuple[str | int, Any]]
    if isinstance(value, dict):
        children = value.items()
    elif isinstance(value, list):
        children = enumerate(value)
    else:
        return None
    for key, child in children:
        found = find_huge(child, (*path, key))
        if found is not None:
            return found
    return None
