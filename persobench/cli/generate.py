"""Generation commands: ``run`` (generate + post-process into a run) and ``export`` (a run as CSV/JSONL)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import threading
from typing import Any

from persobench.cli.command_support import CLIError, store_from_args, write_stdout
from persobench.config import add_config_flags, config_from_args
from persobench.generation import GenerationConfig
from persobench.core import url_with_credentials
from persobench import pipeline
from persobench.errors import RunAborted
from persobench.generation import BatchPending
from persobench.generation import EXIT_NO_SAMPLE_SUCCEEDED, no_sample_succeeded
from persobench.llm import estimated_max_batch_cost
from persobench.llm import batch_listing
from persobench.generation import batch_notes
from persobench.store import resolve_run as find
from persobench.generation import COLUMNS, TABLE
from persobench.generation import interruption
from persobench.store import csv_text
from persobench.store import write_output
from persobench.core import ProgressBar
from persobench.generation import STARTING, every_reply_failed, run_state


def register(subparsers: argparse._SubParsersAction) -> None:
    run = subparsers.add_parser(
        "run", help="generate replies for a dataset with a model and store the run",
        description="Generate, post-process and store a run. Exit 0 when the run completes with at least one "
        "reply (even with failed samples); 1 when it was cancelled (cancel file or SIGTERM; run again to resume); "
        "2 with a one-line reason for a configuration error; 3 when it completed but no sample succeeded (every "
        "request failed: the error column says why).",
    )
    # every flag but --dry-run and --no-progress from GenerationConfig's field table, in --help's order
    add_config_flags(run, GenerationConfig, RUN_FLAG_ORDER)
    run.add_argument("--dry-run", action="store_true",
                     help="print requests to send, cache hits and estimated prompt tokens; send nothing")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.set_defaults(handler=cmd_run)

    batches = subparsers.add_parser(
        "batches", help="list the batches submitted with run --batch and score --judge --batch",
        description="The batches of the store as their state files record them (no key needed, nothing sent): "
                    "run (or judge), provider, batch id, state, requests, succeeded, failed, collected, submitted. "
                    "Run the same command again to collect a batch that is not collected yet.")
    batches.add_argument("--format", choices=("text", "json"), default="text")
    batches.set_defaults(handler=cmd_batches)

    export = subparsers.add_parser("export", help="write a run's generations as CSV or JSONL")
    export.add_argument("run", help="run id (or a unique prefix of one)")
    export.add_argument("--format", choices=("csv", "jsonl"), default="csv")
    export.add_argument("--output", "-o", default="-",
                        help="output file, written atomically; a device or FIFO is written into (default: - for "
                             "standard output)")
    export.set_defaults(handler=cmd_export)


#: ``run``'s flags in ``--help``: GenerationConfig's fields (``options.max_reply_bytes``: the option's
#: own flag, after the retry flags).
RUN_FLAG_ORDER = ("dataset", "model", "base_url", "mode", "template", "chat_template", "limit", "seed", "concurrency",
                  "max_concurrency", "max_tokens", "temperature", "top_p", "structured", "batch_size", "policy",
                  "models_file", "options", "retry", "options.max_reply_bytes", "checkpoint_every", "batch",
                  "batch_wait", "batch_poll", "batch_fallback")


def add_template_arguments(parser: argparse.ArgumentParser) -> None:
    """``--template``, ``--mode`` and ``--chat-template``, shared by ``run`` and ``show``."""
    add_config_flags(parser, GenerationConfig, ("mode", "template", "chat_template"))


def _config(args: argparse.Namespace) -> Any:
    """The parsed flags as a :class:`GenerationConfig` (its field table's flags, checked by it: a bad
    value is one line naming the flag)."""

    # a job passes a base URL's credentials in the environment, its public form on the command line
    return config_from_args(GenerationConfig, args, base_url=url_with_credentials(args.base_url))


def cmd_run(args: argparse.Namespace) -> int:

    store = store_from_args(args)
    try:
        config = _config(args)
        if args.dry_run:
            plan = pipeline.plan(config, store=store)
            return _dry_run(plan, batch_notes(plan, store.run_path(plan.run_id)))
        bar = _ProgressBar(disabled=args.no_progress)
        cancel = threading.Event()
        # SIGTERM (e.g. the app stopping its subprocess) ends the run like the cancel file does:
        # finished rows saved, status "cancelled", resumable.
        in_main = threading.current_thread() is threading.main_thread()  # signals need the main thread
        previous = signal.signal(signal.SIGTERM, lambda *_: cancel.set()) if in_main else None
        try:
            run = pipeline.generate(config, store=store, progress=bar.update, cancel=cancel)
        finally:
            if in_main:
                signal.signal(signal.SIGTERM, previous)
            bar.close()
    except RunAborted as exc:
        raise CLIError(f"run {exc.run.run_id} stopped: {exc}") from None
    except BatchPending as exc:  # the batch keeps running on the provider; the same command collects it
        print(str(exc), file=sys.stderr)
        return 1 if exc.cancelled else 0
    manifest = run.manifest
    details = manifest.details
    counts = {k: v for k, v in (details.counts or {}).items() if v}
    usage, cost = details.usage, details.cost_usd
    print(f"run {manifest.run_id}: {manifest.status}")
    print(f"  statuses: {', '.join(f'{k}={v}' for k, v in counts.items()) or '-'}")
    print(f"  requests: {usage.requests}  cached: {usage.cached}  "
          f"tokens: {usage.prompt_tokens} in / {usage.completion_tokens} out"
          + (f"  est. cost: ${cost:.4f}" if cost is not None else ""))
    pacing = details.pacing
    if pacing is not None and pacing.limits:
        names = {"requests": "requests", "tokens": "tokens", "input_tokens": "input tokens", "output_tokens": "output tokens"}
        stated = ", ".join(f"{float(v):,.0f} {names.get(k, k)}" for k, v in pacing.limits.items())
        print(f"  paced by the server's stated limits ({stated} a minute): {pacing.paced or 0} request(s) waited "
              f"{float(pacing.waited_s or 0):.1f} s in all; {pacing.refused or 0} refused (HTTP 429)")
    batch = (manifest.extra or {}).get("batch")
    if isinstance(batch, dict) and batch.get("batch_ids"):
        batch_cost = batch.get("cost_usd")
        print(f"  batch: {batch.get('replies', 0)} replies from {', '.join(map(str, batch['batch_ids']))}"
              + (f"  at batch prices: ${batch_cost:.4f} (part of est. cost above)"
                 if isinstance(batch_cost, (int, float)) else ""))
    print(f"  table: {run.table_path('generations')}")
    if manifest.status == "cancelled":
        pending = (details.counts or {}).get("pending", 0)
        print(f"run {manifest.run_id} cancelled with {pending} sample(s) pending; run the same command "
              "again to resume", file=sys.stderr)
        return 1

    if no_sample_succeeded(details.counts or {}):
        failed = (details.counts or {}).get("api_error", 0)
        print(f"run {manifest.run_id}: no sample succeeded ({failed} request(s) failed; the error column of "
              f"`export {manifest.run_id}` says why); running the same command again retries them", file=sys.stderr)
        return EXIT_NO_SAMPLE_SUCCEEDED
    return 0


def _dry_run(plan: Any, notes: list[str]) -> int:

    cost = plan.estimated_max_cost()
    print(f"run {plan.run_id}")
    print(f"model: {plan.spec.name}  dataset: {plan.config.dataset}  samples: {len(plan.samples)}  "
          f"mode: {plan.template.mode}  max_tokens: {plan.params.max_tokens}  temperature: {plan.params.temperature}")
    chat = {None: "n/a (chat API)", True: "on", False: "off (raw text)"}[plan.manifest.chat_template]
    print(f"template: {plan.template.name} (family {plan.template.family}, {plan.template.version_hash})  "
          f"chat template: {chat}  parse policy: {plan.config.policy}")
    if plan.params.response_schema is not None:
        print("structured output: on (reply schema " + json.dumps(plan.params.response_schema) + ")")
    print(f"requests to send: {plan.n_requests}")
    print(f"cached hits: {len(plan.hits)}")
    print(f"estimated prompt tokens: {plan.estimated_prompt_tokens}")
    if cost is not None:
        print(f"estimated cost: at most ${cost:.4f}  (interactive)")
    batch = estimated_max_batch_cost(plan)
    if batch is not None:
        print(f"estimated batch cost: at most ${batch:.4f}  (batch API" + (", this run: --batch)" if plan.config.batch
                                                                            else "; add --batch)"))
    for note in notes:  # a batch of this run still on the provider, or one that failed
        print(note)
    return 0


#: Seconds without progress after which ``run`` says it is starting (a local model loading): a run that
#: starts at once, or stops at once with a one-line error, prints no such line.
STARTING_AFTER_S = 1.0


class _ProgressBar:
    """Progress on stderr (plain lines every few seconds off a terminal): "starting (loading the
    model)" when the first progress takes a while, then done/failed/cached with the run's ETA once a
    few replies came back, then how it ended ("done", "done, every reply failed", "cancelled",
    "failed") in the last line's label."""

    def __init__(self, *, disabled: bool, starting_after: float = STARTING_AFTER_S) -> None:
        self.bar: Any = None
        self.disabled = disabled
        self.note = ""
        self._started = threading.Lock()  # held once the run reported progress (or ended)
        self._timer: threading.Timer | None = None
        if not disabled:
            self._timer = threading.Timer(starting_after, self._starting)
            self._timer.daemon = True
            self._timer.start()

    def _starting(self) -> None:
        if self._started.acquire(blocking=False):
            print(STARTING, file=sys.stderr, flush=True)  # the model loads (or the server is checked) first
            self._started.release()

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._started.acquire()  # waits for a line being printed; no line after this
            self._timer = None

    def update(self, info: Any) -> None:
        self._stop_timer()
        note = getattr(info, "note", "")
        if note and note != self.note:  # a long wait is said at once, even without a bar
            self._say(note)
        self.note = note
        if self.disabled:
            return
        if self.bar is None:

            self.bar = ProgressBar(total=info.total, unit="sample", own_eta=True)
        self.bar.postfix.pop("eta", None)
        eta = {"eta": f"{int(info.eta) // 60}:{int(info.eta) % 60:02d}"} if info.eta else {}
        if info.status not in ("running", "pending"):
            progress = dataclasses.asdict(info)
            self.bar.set_description(run_state(progress, expected=False)
                                     + (", every reply failed" if every_reply_failed(progress) else ""))
        self.bar.update_to(info.done, failed=info.failed, cached=info.cached, **eta)

    def _say(self, line: str) -> None:
        tqdm_bar = getattr(self.bar, "_bar", None)
        if tqdm_bar is not None:
            tqdm_bar.write(line, file=sys.stderr)  # above the live bar, not through it
        else:
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        self._stop_timer()
        if self.bar is not None:
            self.bar.close()


def cmd_batches(args: argparse.Namespace) -> int:

    listing = batch_listing(store_from_args(args).home)
    for problem in listing.problems:  # one line naming each damaged state file; the others are listed
        print(f"warning: {problem}", file=sys.stderr)
    rows = listing.rows
    if args.format == "json":
        write_stdout(json.dumps(rows, indent=2) + "\n")
        return 0
    if not rows:
        print("no batches in this store (run --batch, score --judge ... --batch)")
        return 0
    columns = ("run_id", "provider", "batch_id", "state", "requests", "succeeded", "failed", "collected", "submitted")
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in columns]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(str(r[c]).ljust(w) for c, w in zip(columns, widths)) for r in rows]
    write_stdout("\n".join(lines) + "\n")
    return 0


def resolve_run(store: Any, name: str) -> Any:
    """A run by id or unique id prefix (:func:`persobench.store.resolve_run`)."""

    return find(store, name)


def cmd_export(args: argparse.Namespace) -> int:

    run = resolve_run(store_from_args(args), args.run)
    killed = interruption(run)
    if killed is not None and not run.has_table(TABLE):
        raise CLIError(f"run {run.run_id} was {killed.describe()} (then export again)")
    frame = run.read_table(TABLE)
    frame = frame[[c for c in COLUMNS if c in frame.columns]]
    if killed is not None:  # the rows of the last checkpoint are written; say what is missing
        print(f"note: run {run.run_id} has {len(frame)} of {killed.total} rows (its last checkpoint); it was "
              f"{killed.describe()}", file=sys.stderr)
    if args.format == "csv":

        text = csv_text(frame)
    else:
        text = frame.to_json(orient="records", lines=True, force_ascii=False)
        text = text if text.endswith("\n") or not text else text + "\n"
    if args.output == "-":
        write_stdout(text, data=True)
    else:  # a file (atomically), or into a device or FIFO; never in place of one
        write_output(args.output, text.encode("utf-8"))
        print(f"wrote {len(frame)} rows to {args.output}", file=sys.stderr)
    return 0
