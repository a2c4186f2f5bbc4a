"""Result commands: ``import-persobench`` (published replies into the store), ``leaderboard`` and
``compare`` (paired tests between two runs)."""

from __future__ import annotations

import argparse
import sys

from persobench.cli import CLIError, store_from_args

FORMATS = ("table", "csv", "markdown", "latex", "json")


def register(subparsers: argparse._SubParsersAction) -> None:
    imp = subparsers.add_parser(
        "import-persobench", help="import published replies laid out like the paper's repository",
        description="Import DIR in the layout of the paper's repository (Prompts/*.csv, "
        "Responses/<dataset>/<model>[-COT].csv, Raw Responses/...): one run per dataset, model and mode. "
        "A file in Raw Responses/ is parsed with the paper's post-processing; otherwise the processed "
        "twin is read, where an empty gen_response is an invalid reply. Importing again is idempotent.",
    )
    imp.add_argument("folder", metavar="DIR", help="folder with Prompts/ and Responses/ (and Raw Responses/)")
    imp.add_argument("--dataset", action="append", default=None, metavar="D",
                     help="only this dataset (registered name, e.g. focus); repeatable")
    imp.add_argument("--model", action="append", default=None, metavar="M", help="only this model; repeatable")
    imp.add_argument("--mode", choices=("vanilla", "cot"), default=None, help="only this mode")
    imp.set_defaults(handler=cmd_import)

    board = subparsers.add_parser(
        "leaderboard", help="aggregate scored runs into a leaderboard",
        description="Mean, population std, n and bootstrap 95%% CI of every metric per dataset, mode and "
        "model, with failure ratio, instructability, response time and the overall score. Numbers of "
        "one scoring profile only (--profile). csv is long format: dataset,mode,model,metric,mean,std,n.",
    )
    board.add_argument("--dataset", default=None, metavar="D", help="only this dataset")
    board.add_argument("--mode", choices=("vanilla", "cot"), default=None, help="only this mode")
    board.add_argument("--profile", default="offline", metavar="P",
                       help="scoring profile whose numbers to show (default offline)")
    board.add_argument("--invalid", choices=("worst", "exclude"), default="worst",
                       help="invalid replies: scored with each metric's worst value (paper, default) or left out")
    board.add_argument("--format", choices=FORMATS, default="table", help="output format (default table)")
    board.add_argument("--include-incomplete", action="store_true", help="also aggregate runs not completed")
    board.set_defaults(handler=cmd_leaderboard)

    cmp_ = subparsers.add_parser(
        "compare", help="paired tests between two runs on one metric",
        description="Paired t-test, Wilcoxon signed-rank test, paired bootstrap CI of the mean difference "
        "and win/tie/loss counts of RUN_A against RUN_B over their common sample ids.",
    )
    cmp_.add_argument("run_a", metavar="RUN_A", help="run id or unique prefix")
    cmp_.add_argument("run_b", metavar="RUN_B", help="run id or unique prefix")
    cmp_.add_argument("--metric", required=True, help="metric name (per-sample, response_time or failure_ratio)")
    cmp_.add_argument("--profile", default="offline", metavar="P", help="scoring profile (default offline)")
    cmp_.add_argument("--invalid", choices=("worst", "exclude"), default="worst", help="invalid-reply policy")
    cmp_.add_argument("--format", choices=("table", "json"), default="table", help="output format")
    cmp_.set_defaults(handler=cmd_compare)


def cmd_import(args: argparse.Namespace) -> int:
    from persobench.importer import ImportFolderError, import_persobench

    store = store_from_args(args)
    modes = [args.mode] if args.mode else None
    try:
        report = import_persobench(store, args.folder, datasets=args.dataset, models=args.model, modes=modes)
    except ImportFolderError as exc:
        raise CLIError(str(exc)) from None
    width = max((len(r.model) for r in report.runs), default=5)
    for r in report.runs:
        print(f"{r.action:9}  {r.dataset:22} {r.mode:7}  {r.model:{width}}  n={r.n:<5} invalid={r.invalid:<4} "
              f"from {r.source}  {r.run_id}")
    for path, reason in report.skipped:
        print(f"skipped {path}: {reason}")
    counts = {a: sum(1 for r in report.runs if r.action == a) for a in ("created", "updated", "unchanged")}
    print(f"{len(report.runs)} run(s) in {store.runs_dir}: {counts['created']} created, {counts['updated']} "
          f"updated, {counts['unchanged']} unchanged")
    if report.prompts_differ:
        print(f"note: the dataset loader reads different prompt tables for {', '.join(sorted(set(report.prompts_differ)))}; "
              f"scoring joins replies to the loader's samples, so point PERSOBENCH_PROMPTS at "
              f"{report.folder / 'Prompts'} before `python -m persobench score`.")
    if report.runs:
        print("next: python -m persobench score --metrics ...  then  python -m persobench leaderboard")
    return 0


def _results(args: argparse.Namespace):
    from persobench import aggregate

    store = store_from_args(args)
    results = aggregate.load_results(store, profile=args.profile,
                                     include_incomplete=getattr(args, "include_incomplete", False))
    if results.empty:
        raise CLIError(f"no completed runs with generations in {store.runs_dir}; "
                       "import (import-persobench) or generate runs first")
    return store, results


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from persobench import aggregate

    store, results = _results(args)
    for column, value, flag in (("dataset", args.dataset, "--dataset"), ("mode", args.mode, "--mode")):
        if value is not None and value not in set(results[column]):
            known = ", ".join(sorted(set(results[column])))
            raise CLIError(f"{flag} {value!r}: no runs; runs exist for: {known}")
    board = aggregate.leaderboard(results, dataset=args.dataset, mode=args.mode, invalid=args.invalid,
                                  profile=args.profile)
    scored = board[~board["metric"].isin(("failure_ratio", "instructability", "response_time"))]
    if scored.empty or (scored["status"] == "unavailable").all():
        profiles = aggregate.available_profiles(store, include_incomplete=args.include_incomplete)
        hint = (f"scores exist for profile(s): {', '.join(profiles)}" if profiles
                else "run `python -m persobench score` first")
        print(f"note: no per-sample scores for profile {args.profile!r} ({hint}); showing run-level numbers only",
              file=sys.stderr)
    text = aggregate.export_board(board, args.format)
    if args.format in ("csv", "json"):
        sys.stdout.write(text)
        notes = _notes(board)
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _notes(board) -> list[str]:
    from persobench import aggregate

    notes = []
    if len(board):
        notes.append(f"numbers of scoring profile {', '.join(sorted(set(board['profile'])))}; "
                     f"invalid replies: {', '.join(sorted(set(board['invalid'])))}")
    overall = aggregate.overall_table(board)
    for reason in sorted({r for r in overall["reason"] if r}):
        notes.append(f"overall score n/a: {reason}")
    for row in board[board["status"].isin(("unavailable", "degraded"))].drop_duplicates("metric").to_dict("records"):
        notes.append(f"{row['metric']}: {row['status']} ({row['reason']})")
    return notes


def cmd_compare(args: argparse.Namespace) -> int:
    import json

    from persobench import aggregate
    from persobench.cli.generate import resolve_run

    store, results = _results(args)
    run_a = resolve_run(store, args.run_a).run_id
    run_b = resolve_run(store, args.run_b).run_id
    try:
        result = aggregate.compare_models(results, run_a, run_b, args.metric, invalid=args.invalid)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    if args.format == "json":
        data = {k: (None if isinstance(v, float) and v != v else v) for k, v in result.to_dict().items()}
        print(json.dumps(data, indent=2))
        return 0
    direction = "higher" if result.higher_is_better else "lower"
    print(f"{args.metric} ({direction} is better), profile {args.profile}, invalid replies: {args.invalid}")
    print(f"  A = {run_a}\n  B = {run_b}")
    print(f"  n = {result.n} paired samples; mean A {result.mean_a:.4f}, mean B {result.mean_b:.4f}, "
          f"A - B = {result.mean_diff:+.4f}")
    print(f"  paired bootstrap {result.level:.0%} CI of A - B: [{result.ci_low:+.4f}, {result.ci_high:+.4f}] "
          f"(p = {result.bootstrap_pvalue:.4g}, {result.n_resamples} resamples)")
    print(f"  paired t-test: t = {result.t_statistic:.4f}, p = {result.t_pvalue:.4g}")
    print(f"  Wilcoxon signed-rank: W = {result.wilcoxon_statistic:.1f}, p = {result.wilcoxon_pvalue:.4g}")
    print(f"  A better on {result.wins}, tie on {result.ties}, worse on {result.losses}")
    return 0
