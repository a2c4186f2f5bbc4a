"""``python -m persobench``: the command-line face of the same library the app uses.

Each stage contributes its subcommands from its own module (``register(subparsers)``), so the CLI
never imports a heavy dependency before a command that needs it runs.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
from typing import NoReturn, Sequence

from persobench.pipeline import EscapingStream, is_terminal, printable
from persobench.errors import ConfigurationError, PersoBenchError, StoreWriteError
from persobench import __version__
import os
import io
from persobench.pipeline import RunStore, landing_kept_current
from persobench.pipeline import write_refused

#: Modules that add subcommands, in help order. Each defines ``register(subparsers)``.
COMMAND_MODULES = (
    "persobench.cli.data",
    "persobench.cli.generate",
    "persobench.cli.preset_command",
    "persobench.cli.score_command",
    "persobench.cli.result_commands",
    "persobench.cli.report_command",
    "persobench.cli.demo_command",
)


class CLIError(ConfigurationError):
    """A bad flag or argument found by the CLI itself: printed as one line, exit status 2."""


def build_parser() -> argparse.ArgumentParser:

    parser = argparse.ArgumentParser(
        prog="python -m persobench",
        description="PersoBench: benchmark personalized response generation of LLMs.",
    )
    parser.add_argument("--version", action="version", version=f"persobench {__version__}")
    parser.add_argument(
        "--home", default=None,
        help="run store folder (default: $PERSOBENCH_HOME or ./cache)",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:  # stage not installed in this build
                continue
            raise
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.command_line = list(sys.argv[1:] if argv is None else argv)  # for a command printed back (public form)
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return 2
    # Model names, dataset text, replies and server messages are untrusted: every line a command
    # prints goes out with its control characters escaped (stderr keeps "\r" for progress bars).
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = EscapingStream(stdout), EscapingStream(stderr, keep="\n\t\r")
    try:
        return _dispatch(args)
    finally:
        sys.stdout, sys.stderr = stdout, stderr


def run(argv: Sequence[str] | None = None) -> NoReturn:
    """The command line's entry point (``python -m persobench``, the ``persobench`` script): :func:`main`,
    then the process exits with its code."""
    # Arrow's default pool (mimalloc) maps memory of its own for a command's small, short-lived
    # tables: 50 MB more at the peak of a lexical ``score`` and twice its page faults. In the
    # process's heap, Python and numpy reuse those pages (docs/performance.md). Read when Arrow
    # starts, which no command has done yet; a pool the user chose is kept.
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    code = main(argv)
    # The process ends here. At shutdown the collector walked every object still alive (a scoring
    # pass's samples, tables and caches) several times: a quarter of a second of a 4 s lexical
    # ``score``. Frozen, they are only freed, by their reference counts, as the interpreter exits.
    gc.freeze()
    sys.exit(code)


def _dispatch(args: argparse.Namespace) -> int:
    try:
        # A command that changed the store leaves the app's landing view built for it: the first app
        # process opened on the store then renders it from two small files (docs/performance.md).
        with landing_kept_current(args.home):
            return int(args.handler(args) or 0)
    except PersoBenchError as exc:  # every deliberate error: its message says what to change
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _closed_output()
    except OSError as exc:  # unreadable file or folder, full disk: the message names the path
        print(f"error: {exc.filename or ''}{': ' if exc.filename else ''}{exc.strerror or exc}", file=sys.stderr)
        return 2


def _closed_output() -> int:
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


def store_from_args(args: argparse.Namespace):
    """The run store selected by ``--home`` (or the environment)."""

    return RunStore(args.home)


def warn_skipped(skipped) -> None:
    """One ``warning:`` line on stderr per unreadable run that a command left out."""
    for path, reason in skipped:
        print(f"warning: skipped unreadable run {path}: {reason}", file=sys.stderr)
