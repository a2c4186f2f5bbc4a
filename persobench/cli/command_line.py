"""``python -m persobench``: the parser of every subcommand, and the one place errors become one line.

Each command module adds its subcommands (``register(subparsers)``) and imports the stages that load
pandas, Plotly or a model inside its command functions, so ``--help`` never loads them.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from typing import NoReturn, Sequence

from persobench import __version__
from persobench.cli import data, demo_command, generate, preset_command, report_command, result_commands, score_command
from persobench.cli.command_support import closed_output
from persobench.errors import PersoBenchError
from persobench.core import EscapingStream
from persobench.pipeline import landing_kept_current

#: The modules that add subcommands, in help order. Each defines ``register(subparsers)``.
COMMAND_MODULES = (data, generate, preset_command, score_command, result_commands, report_command, demo_command)


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
    for module in COMMAND_MODULES:
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
        return closed_output()
    except OSError as exc:  # unreadable file or folder, full disk: the message names the path
        print(f"error: {exc.filename or ''}{': ' if exc.filename else ''}{exc.strerror or exc}", file=sys.stderr)
        return 2
