"""What every command module of the CLI uses: the one-line error of a bad flag, the store ``--home``
names, standard output written whole, and the warning for a run a command left out."""

from __future__ import annotations

import argparse
import io
import os
import sys
from typing import Iterable

from persobench.errors import ConfigurationError, StoreWriteError
from persobench.core import EscapingStream, is_terminal, printable
from persobench.store import RunStore, write_refused


class CLIError(ConfigurationError):
    """A bad flag or argument found by the CLI itself: printed as one line, exit status 2."""


def write_stdout(text: str, *, data: bool = False) -> None:
    """Write ``text`` to standard output whole, or fail: a short write (full disk, file size limit)
    is an error naming standard output, so a redirected export never ends cut with exit 0.

    Its control characters are escaped (:func:`~persobench.core.console.printable`), except for
    ``data`` (csv, json: a file's exact content) written anywhere but a terminal.

    Python's buffered stdout drops the rest of a short write silently; the bytes go out with
    ``os.write`` until all are written."""

    out = sys.stdout.stream if isinstance(sys.stdout, EscapingStream) else sys.stdout
    if not data or is_terminal(out):
        text = printable(text, keep="\n\t")
    try:
        fd = out.fileno()
    except (AttributeError, ValueError, io.UnsupportedOperation):  # captured output (tests, notebooks)
        out.write(text)
        return
    out.flush()
    view = memoryview(text.encode(out.encoding or "utf-8", errors="surrogateescape"))
    try:
        while view:
            view = view[os.write(fd, view):]
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            raise

        raise StoreWriteError(f"{write_refused('standard output', exc)}; the output is incomplete") from None


def store_from_args(args: argparse.Namespace) -> RunStore:
    """The run store selected by ``--home`` (or the environment)."""

    return RunStore(args.home)


def warn_skipped(skipped: Iterable[tuple[str, str]]) -> None:
    """One ``warning:`` line on stderr per unreadable run that a command left out."""
    for path, reason in skipped:
        print(f"warning: skipped unreadable run {path}: {reason}", file=sys.stderr)


def closed_output() -> int:
    """The reader of our output went away (``... | head -1``): say so in one line, exit 2.

    Standard output is pointed at /dev/null so the interpreter's final flush cannot raise again.
    """

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    print("error: standard output was closed before everything was written (broken pipe)", file=sys.stderr)
    return 2
