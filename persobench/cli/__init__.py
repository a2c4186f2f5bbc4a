"""``python -m persobench``: the command-line face of the same library the app uses.

* :mod:`~persobench.cli.command_line`: the parser of every subcommand (:func:`build_parser`), :func:`main`
  and :func:`run`, the entry point; every error leaves as one line.
* :mod:`~persobench.cli.command_support`: what the command modules share (:class:`CLIError`, the store
  ``--home`` names, standard output written whole).
* one module per group of subcommands, each with ``register(subparsers)``: ``data`` (datasets, show,
  runs), ``generate`` (run, batches, export), ``preset_command``, ``score_command`` (+ ``judge_flags``),
  ``result_commands`` (fetch-paper, import-persobench, leaderboard, compare), ``report_command``,
  ``demo_command``.
"""

from persobench.cli.command_line import COMMAND_MODULES, build_parser, main, run
from persobench.cli.command_support import CLIError, store_from_args, warn_skipped, write_stdout

__all__ = ["COMMAND_MODULES", "CLIError", "build_parser", "main", "run", "store_from_args", "warn_skipped",
           "write_stdout"]
