"""Terminal output: untrusted text printed escaped, and progress on stderr (a live tqdm bar on a
terminal, a plain line every few seconds anywhere else).

Model names, dataset text, replies and server error messages are untrusted: an ``ESC`` sequence in
one could retitle the terminal, clear it or hide text. :func:`printable` escapes every control
character (C0, DEL, C1) and the bidirectional overrides that reorder what is shown, as ``\\uXXXX``
(valid in JSON and in Python, so a JSON output stays valid and decodes to the same value).
:class:`EscapingStream` applies it to everything written to a stream; the CLI writes through it.

A tqdm bar redrawn after every item is what a person at a terminal wants, but written to a file or
a pipe (the app's job log, CI, ``2> log``) every redraw is another line: one ``score`` wrote
thousands. Off a terminal, :class:`ProgressBar` therefore prints ``desc: done/total unit (pct%)``
at most once per :data:`QUIET_INTERVAL_S` seconds and a final line when it closes.
"""

from __future__ import annotations

import re
import sys
import time
from typing import Any, TextIO

#: C0 controls, DEL, C1 controls, and the bidirectional marks/overrides/isolates (U+200E, U+200F,
#: U+202A..U+202E, U+2066..U+2069) that make a terminal show text in another order than it is.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str, *, keep: str = "") -> str:
    """``text`` with every control character except those in ``keep`` (e.g. ``"\\n"``) written as
    ``\\uXXXX``: safe to print on a terminal."""
    return _UNSAFE.sub(lambda m: m.group(0) if m.group(0) in keep else f"\\u{ord(m.group(0)):04x}", text)


class EscapingStream:
    """A text stream that writes :func:`printable` text (keeping ``keep``) to ``stream``; every
    other attribute (``fileno``, ``isatty``, ``encoding`` ...) is the wrapped stream's."""

    def __init__(self, stream: TextIO, *, keep: str = "\n\t") -> None:
        self.stream = stream
        self.keep = keep

    def write(self, text: str) -> int:
        self.stream.write(printable(text, keep=self.keep))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)

#: Seconds between two progress lines when stderr is not a terminal.
QUIET_INTERVAL_S = 5.0


def is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class ProgressBar:
    """One progress display for ``total`` items, moved to absolute counts with :meth:`update_to`."""

    def __init__(self, *, total: int | None, desc: str = "", unit: str = "item", disabled: bool = False,
                 leave: bool = True, stream: TextIO | None = None, interval: float = QUIET_INTERVAL_S,
                 own_eta: bool = False) -> None:
        self.total = total
        self.desc = desc
        self.unit = unit
        self.disabled = disabled
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.postfix: dict[str, Any] = {}
        self._n = 0
        self._bar: Any = None
        self._printed_n: int | None = None
        self._printed_desc = desc
        self._last_line = time.monotonic()  # a job shorter than the interval prints one final line
        if not disabled and is_terminal(self.stream):
            from tqdm import tqdm

            # own_eta: the caller puts its own estimate in the postfix (tqdm's would show from the first item)
            bar_format = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]" if own_eta else None
            self._bar = tqdm(total=total, desc=desc, unit=unit, file=self.stream, dynamic_ncols=True, leave=leave,
                             bar_format=bar_format)

    @property
    def n(self) -> int:
        return self._n

    def set_description(self, text: str) -> None:
        self.desc = text
        if self._bar is not None:
            self._bar.set_description(text)

    def update_to(self, done: int, **postfix: Any) -> None:
        """Move to ``done`` items; ``postfix`` (e.g. ``failed=2``) is shown after the count."""
        if self.disabled:
            return
        self.postfix.update(postfix)
        if self._bar is not None:
            if postfix:
                self._bar.set_postfix(self.postfix, refresh=False)
            if done != self._bar.n:
                self._bar.update(done - self._bar.n)  # tqdm redraws at most every mininterval
            self._n = done
            return
        self._n = done
        now = time.monotonic()
        if now - self._last_line >= self.interval:
            self._line(now)

    def close(self) -> None:
        if self.disabled:
            return
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self._printed_n != self._n or self._printed_n is None or self._printed_desc != self.desc:
            self._line(time.monotonic())  # the final count and state, unless the last line already said them
        self.disabled = True

    def _line(self, now: float) -> None:
        count = f"{self._n}/{self.total}" if self.total else f"{self._n}"
        percent = f" ({100 * self._n / self.total:.0f}%)" if self.total else ""
        extra = "".join(f", {k} {v}" for k, v in self.postfix.items())
        label = f"{self.desc}: " if self.desc else ""
        print(f"{label}{count} {self.unit}{percent}{extra}", file=self.stream, flush=True)
        self._printed_n = self._n
        self._printed_desc = self.desc
        self._last_line = now
