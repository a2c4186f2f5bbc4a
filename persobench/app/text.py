"""Untrusted text made inert, and numbers formatted for display.

Replies, personas, contexts, raw outputs and prompts are untrusted. They are shown with
``st.text``/``st.code``/``st.dataframe``, or through :func:`md_escape` when they must sit inside
Markdown (every ASCII punctuation character backslash-escaped, so no HTML, link, image, emoji or
directive can form). :func:`plot_escape` does the same for Plotly labels.
"""

from __future__ import annotations

import math
import string
from typing import Any

from persobench.records import natural_key  # noqa: F401 - re-exported for the pages
from persobench.report import plot_escape  # noqa: F401 - the pages' one import for untrusted text
from persobench.core import LABEL_SUFFIX, redact  # noqa: F401 - the pages take both from here (no core import in a page)

_PUNCTUATION = frozenset(string.punctuation)


def md_escape(text: Any, *, max_chars: int | None = None) -> str:
    """``text`` as inert Markdown: it renders as the same characters, never as markup.

    Every ASCII punctuation character is backslash-escaped (CommonMark allows escaping all of them),
    which defeats HTML tags and entities, links and autolinks, images, emphasis, headings, lists,
    tables, math (``$``), Streamlit's ``:color[...]`` directives and ``:emoji:`` shortcodes. Line
    breaks are kept as hard breaks; leading indentation is dropped so no code block forms.
    """
    if text is None:
        return ""
    value = str(text)
    if max_chars is not None and len(value) > max_chars:
        value = value[:max_chars] + "…"
    value = value.replace("\r\n", "\n").replace("\r", "\n")
    escaped_lines = []
    for line in value.split("\n"):
        line = line.strip()
        escaped_lines.append("".join("\\" + ch if ch in _PUNCTUATION else ch for ch in line))
    # A hard break is "two spaces + newline"; blank lines keep paragraphs apart.
    return "  \n".join(escaped_lines)


def safe_message(exc: BaseException | str) -> str:
    """An error for display inside Markdown (``st.error``/``st.warning``): redacted and escaped."""
    text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    return md_escape(redact(text), max_chars=2000)


_STATUS_COLOURS = {"ok": "green", "truncated": "orange", "invalid_json": "red", "missing_field": "red",
                   "empty": "gray", "refused": "violet", "api_error": "red"}


def status_badge(status: Any) -> str:
    """Markdown for a coloured reply-status badge; unknown statuses are shown escaped, uncoloured."""
    value = str(status)
    colour = _STATUS_COLOURS.get(value)
    if colour is None:
        return md_escape(value)
    return f":{colour}-badge[{value.replace('_', ' ')}]"


def format_seconds(seconds: float | None) -> str:
    """``75`` -> ``1 min 15 s``; ``None`` -> ``?``."""
    if seconds is None or seconds != seconds:
        return "?"
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    minutes, rest = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {rest:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def cell_text(mean: float, std: float | None, low: float, high: float, *, digits: int = 3) -> str:
    """``mean ± std [low, high]`` for display (numbers stay numbers everywhere else)."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "n/a"
    text = f"{mean:.{digits}f}"
    if std is not None and not (isinstance(std, float) and math.isnan(std)):
        text += f" ± {std:.{digits}f}"
    if low is not None and high is not None and not (math.isnan(low) or math.isnan(high)):
        text += f" [{low:.{digits}f}, {high:.{digits}f}]"
    return text


def model_kind(label: str) -> str:
    """"baseline (ceiling)", "baseline (floor)" or "model" for a model label."""
    text = str(label)
    if text.startswith("baseline:reference"):
        return "baseline (ceiling)"
    if text.startswith("baseline:"):
        return "baseline (floor)"
    return "model"
