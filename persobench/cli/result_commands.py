"""Result commands: ``fetch-paper`` (the paper's data in one step), ``import-persobench`` (published
replies into the store), ``leaderboard`` and ``compare`` (paired tests between two runs)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from persobench import pipeline
from persobench.cli.command_support import CLIError, store_from_args, warn_skipped, write_stdout
from persobench.datasets import PAPER_ARCHIVE, ArchiveLimits
from persobench.config import GenerationConfig, offered_field
from persobench.datasets import reference_dir
import json
from persobench.cli.generate import resolve_run
from persobench.store import RunStore

if TYPE_CHECKING:
    import pandas as pd

    from persobench.aggregate import Results

FORMATS = ("table", "csv", "markdown", "latex", "html", "json")


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

    fetch = subparsers.add_parser(
        "fetch-paper", help="download the paper's published data (prompts, replies, evaluations)",
        description="Download the repository archive of salehafzoon/PersoBench at the pinned commit, unpack "
        "Prompts/, Responses/, Raw Responses/ and Evaluations/, check every unpacked file against the packaged "
        "sha256 manifest of that commit, and only then move the folder into $PERSOBENCH_HOME/reference, the "
        "default reference folder from then on. The packaged manifest pins all 94 files of the commit; an "
        "incomplete one (--manifest) is refused unless --trust-unpinned accepts the files it does not pin, whose "
        "sha256 are then recorded in reference/FETCHED.json. An interrupted download resumes; a failed one leaves "
        "nothing half-unpacked.",
    )
    fetch.add_argument("--url", default=None, help="archive URL of a mirror (.zip, .tar.gz or .tar)")
    fetch.add_argument("--sha256", default=None, help="expected sha256 of the archive")
    fetch.add_argument("--size", type=int, default=None, help="expected size of the archive in bytes")
    fetch.add_argument("--manifest", default=None, metavar="FILE",
                       help="content manifest to check the unpacked files against (default: the packaged one for "
                            "the pinned archive, none for a --url mirror)")
    fetch.add_argument("--trust-unpinned", action="store_true",
                       help="accept unpacked files an incomplete manifest does not pin and record their "
                            "sha256 in reference/FETCHED.json; pinned files are still checked")
    fetch.add_argument("--import", dest="do_import", action="store_true",
                       help="then import the published runs into the store (as import-persobench)")
    fetch.add_argument("--timeout", type=float, default=60.0, help="network timeout in seconds (default 60)")
    fetch.add_argument("--max-archive-bytes", type=int, default=None, metavar="N",
                       help="largest archive downloaded, declared or counted (default 536870912 = 512 MiB)")
    fetch.add_argument("--max-member-bytes", type=int, default=None, metavar="N",
                       help="largest file unpacked, declared or counted (default 67108864 = 64 MiB; the paper's "
                            "largest is under 5 MB)")
    fetch.add_argument("--max-unpacked-bytes", type=int, default=None, metavar="N",
                       help="largest total unpacked (default 1073741824 = 1 GiB)")
    fetch.add_argument("--no-progress", action="store_true", help="no progress lines")
    fetch.set_defaults(handler=cmd_fetch_paper)

    board = subparsers.add_parser(
        "leaderboard", help="aggregate scored runs into a leaderboard",
        description="Mean, population std, n and bootstrap 95%% CI of every metric per dataset, mode and "
        "model, with failure ratio, instructability, response time and the overall score. Numbers of "
        "one scoring profile only (--profile). A board is one dataset, mode and protocol (template family, "
        "max tokens, temperature, parse policy, structured output), named in its header; runs of a board "
        "are compared on their common sample ids. Models are listed in rank order (by the overall score when "
        "the profile has one, else by the app's default metric; ties where 95%% CIs overlap). csv is long "
        "format: dataset,mode,protocol,model,metric,mean,std,n,ci_low,ci_high,rank,rank_by,profile,invalid; "
        "html is a self-contained page.",
    )
    board.add_argument("--dataset", default=None, metavar="D", help="only this dataset")
    board.add_argument("--mode", choices=("vanilla", "cot"), default=None, help="only this mode")
    board.add_argument("--profile", default="offline", metavar="P",
                       help="scoring profile whose numbers to show (default offline)")
    board.add_argument("--invalid", choices=("worst", "exclude"), default="worst",
                       help="invalid replies: scored with each metric's worst value (paper, default) or left out")
    board.add_argument("--format", choices=FORMATS, default="table", help="output format (default table)")
    board.add_argument("--include-incomplete", action="store_true", help="also aggregate runs not completed")
    board.add_argument("--side-by-side", action="store_true",
                       help="one board per dataset and mode with every protocol, the protocol in each row label "
                            "(default: one board per protocol)")
    board.add_argument("--all-samples", action="store_true",
                       help="aggregate each run over all its samples (default: the sample ids all runs of a board share)")
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


def cmd_fetch_paper(args: argparse.Namespace) -> int:


    offered_field(GenerationConfig, "retry", "timeout").check(args.timeout)  # run --timeout's bounds and line
    caps = {name: getattr(args, name) for name in ("max_archive_bytes", "max_member_bytes", "max_unpacked_bytes")
            if getattr(args, name) is not None}
    limits = ArchiveLimits(**caps)  # out of range: one line naming the flag
    store = store_from_args(args)
    last: dict[str, int] = {}

    def progress(stage: str, done: int, total: int | None) -> None:
        mark = 10 * done // total if total else done >> 23  # every 10%, or every 8 MiB when the size is unknown
        if args.no_progress or last.get(stage) == mark:
            return
        last[stage] = mark
        what = f"{done / 2**20:.1f} MiB" if stage == "download" else f"{done} files"
        print(f"{stage}: {what}" + (f" of {total / 2**20:.1f} MiB" if total and stage == "download" else ""),
              flush=True)

    url = args.url or PAPER_ARCHIVE.url
    print(f"fetching {url}" + ("" if args.url else f" ({PAPER_ARCHIVE.repository} at {PAPER_ARCHIVE.commit[:12]})"),
          flush=True)
    result = pipeline.fetch_published(store=store, url=args.url, sha256=args.sha256, size=args.size,
                                      timeout=args.timeout, progress=progress, manifest=args.manifest,
                                      trust_unpinned=args.trust_unpinned, limits=limits)
    check = "verified" if result.verified else "not verified: no checksum given (pass --sha256 to check a mirror)"
    print(f"archive {result.archive} ({result.size} bytes, sha256 {result.sha256}, {check})")
    if result.resumed_from:
        print(f"resumed after {result.resumed_from} bytes")
    print(f"unpacked {result.files} files into {result.folder}")
    if result.manifest is None:
        print("content: not checked (no manifest for a mirror; pass --manifest FILE to check one)")
    else:
        print(f"content: {result.content_verified} files match the sha256 pinned by {result.manifest}")
    if result.unpinned:
        print(f"warning: {result.unpinned} files are not pinned by the manifest and were accepted (--trust-unpinned); "
              f"their sha256 are in {result.folder / 'FETCHED.json'} (content.unpinned_files)")

    if reference_dir().resolve() != result.folder.resolve():
        print(f"note: the default reference here is {reference_dir()}; set PERSOBENCH_REFERENCE={result.folder} "
              f"(or PERSOBENCH_HOME={store.home}) to use the fetched copy")
    if args.do_import:
        args.folder, args.dataset, args.model, args.mode = str(result.folder), None, None, None
        return cmd_import(args)
    print(f"next: python -m persobench import-persobench {result.folder}  (or fetch-paper --import)")
    return 0


def cmd_import(args: argparse.Namespace) -> int:

    store = store_from_args(args)
    modes = [args.mode] if args.mode else None
    report = pipeline.import_published(args.folder, store=store, datasets=args.dataset, models=args.model,
                                       modes=modes)
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


def _results(args: argparse.Namespace) -> tuple[RunStore, Results]:

    from persobench.aggregate import load_results  # pandas: loaded by the commands that read boards only

    store = store_from_args(args)
    results = load_results(store, profile=args.profile,
                                     include_incomplete=getattr(args, "include_incomplete", False))
    warn_skipped(results.skipped_runs)
    if results.empty:
        raise CLIError(f"no completed runs with generations in {store.runs_dir}; "
                       "import (import-persobench) or generate runs first")
    return store, results


def cmd_leaderboard(args: argparse.Namespace) -> int:

    store = store_from_args(args)
    found = pipeline.leaderboard(store=store, dataset=args.dataset, mode=args.mode, invalid=args.invalid,
                                 profile=args.profile, include_incomplete=args.include_incomplete,
                                 side_by_side=args.side_by_side, all_samples=args.all_samples)
    warn_skipped(found.skipped_runs)
    board = found.table
    scored = board[~board["metric"].isin(("failure_ratio", "instructability", "response_time"))]
    if scored.empty or (scored["status"] == "unavailable").all():
        from persobench.aggregate import available_profiles

        profiles = available_profiles(store, include_incomplete=args.include_incomplete)
        hint = (f"scores exist for profile(s): {', '.join(profiles)}" if profiles
                else "run `python -m persobench score` first")
        print(f"note: no per-sample scores for profile {args.profile!r} ({hint}); showing run-level numbers only",
              file=sys.stderr)
    write_stdout(found.export(args.format), data=args.format in ("csv", "json", "html"))
    if args.format in ("csv", "json"):
        for note in _notes(board):
            print(note if note.startswith("warning: ") else f"note: {note}", file=sys.stderr)
    return 0


def _notes(board: "pd.DataFrame") -> list[str]:
    from persobench.aggregate import overall_table, sample_set_note, structured_note

    notes = []
    for _, group in board.groupby(["dataset", "mode", "board"], sort=True) if len(board) else ():
        if warning := sample_set_note(group):
            where = f"{group['dataset'].iloc[0]} · {group['mode'].iloc[0]} · protocol {group['board'].iloc[0]}"
            notes.append(f"warning: {where}: {warning.removeprefix('warning: ')}")
    if len(board):
        notes.append(f"numbers of scoring profile {', '.join(sorted(set(board['profile'])))}; "
                     f"invalid replies: {', '.join(sorted(set(board['invalid'])))}")
    if note := structured_note(board):
        notes.append(note)
    overall = overall_table(board)
    for reason in sorted({r for r in overall["reason"] if r}):
        notes.append(f"overall score n/a: {reason}")
    for row in board[board["status"].isin(("unavailable", "degraded"))].drop_duplicates("metric").to_dict("records"):
        notes.append(f"{row['metric']}: {row['status']} ({row['reason']})")
    return notes


def cmd_compare(args: argparse.Namespace) -> int:


    store, results = _results(args)
    run_a = resolve_run(store, args.run_a).run_id
    run_b = resolve_run(store, args.run_b).run_id
    from persobench.aggregate import compare_models

    result = compare_models(results, run_a, run_b, args.metric, invalid=args.invalid)
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
