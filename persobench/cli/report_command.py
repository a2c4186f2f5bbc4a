"""``report``: one self-contained HTML file with leaderboards, charts, the failure taxonomy and a few
dialogues (:mod:`persobench.report`)."""

from __future__ import annotations

import argparse
import sys

from persobench.cli.command_support import store_from_args, warn_skipped, write_stdout


def register(subparsers: argparse._SubParsersAction) -> None:
    report = subparsers.add_parser(
        "report", help="write a static HTML report (leaderboards, charts, failures, dialogues)",
        description="Write ONE self-contained HTML file: the leaderboards of the chosen datasets and modes with "
        "their protocol headers and notes (the numbers of `leaderboard`), interactive Plotly charts (the library "
        "inlined: the file opens offline), the failure taxonomy and a few dialogues with persona, context, "
        "reference and every run's reply side by side. Replies and dataset text are shown as plain text.",
    )
    report.add_argument("-o", "--output", required=True, metavar="FILE",
                        help="HTML file to write (atomically; a device or FIFO is written into; - for standard output)")
    report.add_argument("--dataset", action="append", default=None, metavar="D",
                        help="only this dataset; repeatable (default: every dataset with runs)")
    report.add_argument("--mode", action="append", choices=("vanilla", "cot"), default=None,
                        help="only this mode; repeatable (default: both)")
    report.add_argument("--profile", default="offline", metavar="P",
                        help="scoring profile whose numbers to show (default offline)")
    report.add_argument("--invalid", choices=("worst", "exclude"), default="worst",
                        help="invalid replies: scored with each metric's worst value (paper, default) or left out")
    report.add_argument("--include-incomplete", action="store_true", help="also aggregate runs not completed")
    report.add_argument("--side-by-side", action="store_true",
                        help="one board per dataset and mode with every protocol, the protocol in each row label")
    report.add_argument("--all-samples", action="store_true",
                        help="aggregate each run over all its samples (default: the sample ids all runs of a board share)")
    report.add_argument("--dialogues", type=int, default=3, metavar="N",
                        help="dialogues per dataset: the first N the runs all answered (default 3; 0 for none)")
    report.add_argument("--sample", action="append", default=None, metavar="ID", dest="samples",
                        help="show exactly this dialogue (sample id, e.g. focus:12); repeatable; overrides --dialogues")
    report.set_defaults(handler=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    from persobench.report import ReportOptions, build_report, render_report, write_report  # pandas, on use

    store = store_from_args(args)
    options = ReportOptions(datasets=tuple(args.dataset or ()), modes=tuple(args.mode or ()), profile=args.profile,
                            invalid=args.invalid, include_incomplete=args.include_incomplete,
                            side_by_side=args.side_by_side, all_samples=args.all_samples,
                            dialogues=args.dialogues, sample_ids=tuple(args.samples or ()))
    if args.output == "-":  # standard output, as Unix tools take "-"; the summary goes to stderr
        report = build_report(store, options)
        write_stdout(render_report(report), data=True)
        where, out = "standard output", sys.stderr
    else:
        report = write_report(store, options, args.output)
        where, out = args.output, sys.stdout
    warn_skipped(report.skipped_runs)
    print(f"wrote {where}: {len(report.sections)} board(s), {len(report.dialogues)} dialogue(s)", file=out)
    return 0
