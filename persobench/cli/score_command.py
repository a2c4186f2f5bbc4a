"""The ``score`` command: compute per-sample metrics for stored runs (cached, never recomputed)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from persobench.cli.command_support import CLIError, store_from_args, warn_skipped
from persobench.cli import judge_flags
from persobench.config import add_config_flags, config_from_args
from persobench.scoring import ScoreConfig
from persobench import pipeline
from persobench.store import resolve_runs
from persobench.core import public_address
from persobench.scoring import import_ray
from persobench.core import ProgressBar
from persobench.llm import BatchFailed
from persobench.errors import PersoBenchError


def register(subparsers: argparse._SubParsersAction) -> None:
    score = subparsers.add_parser(
        "score", help="score runs that lack the requested metrics (cached; never recomputed)",
        description="Score the valid replies of stored runs. Metrics whose model is unavailable in the "
        "chosen profile are listed with the reason and get no number. Exit 0 when every run was "
        "scored (unavailable metrics included), 1 when a run could not be scored or a metric named in "
        "--metrics is unavailable, 2 for a configuration error.",
    )
    score.add_argument("runs", nargs="*", metavar="RUN", help="run ids or unique prefixes (default: every run)")
    # ScoreConfig's field table gives the flags, in --help's order; --model (SLOT=ID_OR_PATH, repeatable)
    # fills ``overrides`` in a form of its own.
    add_config_flags(score, ScoreConfig, ("profile", "metrics"))
    score.add_argument("--model", action="append", default=[], metavar="SLOT=ID_OR_PATH",
                       help="override a slot's model (bertscore, nli, word_vectors, unieval, wordnet, embedding; "
                            "or bertscore.num_layers=N) with a hub id or local path; repeatable")
    add_config_flags(score, ScoreConfig, ("precision", "executor", "ray_address", "input_layout", "unieval_scorer"))
    score.add_argument("--no-progress", action="store_true", help="no progress bar")

    judge_flags.add_arguments(score)  # --judge, --judge-base-url, --judge-concurrency, --judge-max-cost, --dry-run
    score.set_defaults(handler=cmd_score)


def _parse_models(items: list[str]) -> dict[str, str]:
    overrides: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CLIError(f"--model expects SLOT=ID_OR_PATH, got {item!r}")
        overrides[key.strip()] = value.strip()
    return overrides


def score_config_from_args(args: argparse.Namespace, home: Any) -> Any:
    """The :class:`~persobench.scoring.score_config.ScoreConfig` of the flags (its field table's, checked
    by it: a bad value is one line), ``--model`` as its overrides and the judge's flags as its judge."""

    return config_from_args(ScoreConfig, args, overrides=_parse_models(args.model or []),
                            judge=judge_flags.judge_from_args(args, home))


def cmd_score(args: argparse.Namespace) -> int:

    if args.ray_address and args.executor != "ray":
        raise CLIError("--ray-address needs --executor ray")
    if args.executor == "ray":

        import_ray()  # without Ray: one line saying what to install, before any work

    store = store_from_args(args)
    config = score_config_from_args(args, store.home)
    requested = list(config.checked_metrics()) if config.metrics is not None else None
    profile = config.resolve_profile()
    readable = None
    if not args.runs:
        readable, problems = store.scan()
        warn_skipped((str(p.path), p.reason) for p in problems)
        if not any(r.has_table("generations") for r in readable):
            print(f"no runs with generations in {store.runs_dir}")
            return 0

    runs = resolve_runs(store, args.runs or None, runs=readable)  # every manifest read once
    samples_cache: dict[str, dict] = {}
    if args.dry_run:
        return judge_flags.dry_run(profile, runs, lambda run: _samples_for(run, samples_cache), requested)
    if profile.judge is not None:
        judge_flags.check_cost(profile, runs, lambda run: _samples_for(run, samples_cache), requested)

    shown = public_address(args.ray_address) if args.ray_address else "RAY_ADDRESS or a local instance"
    where = f"Ray actors ({shown})" if args.executor == "ray" \
        else profile.device
    print(f"profile {profile.key} on {where}" +
          (f" (overrides: {', '.join(f'{k}={v}' for k, v in profile.overrides.items())})" if profile.overrides else ""))
    if profile.layout_matters and config.input_layout == "auto":
        # The key above is the pairs layout's: say where paper-protocol runs' values go instead.
        print(f"NLI/UniEval inputs: auto (runs under the paper protocol: the notebooks' layout, stored under "
              f"{replace(profile, input_layout='notebook').key}; --nli-inputs to choose)")
    bars = _StageBars(args.no_progress)

    def on_run(result: Any) -> None:
        bars.close()
        _print_result(result)

    try:
        report = pipeline.score(runs, config, store=store, progress=bars, on_run=on_run)
    except PersoBenchError as exc:
        if isinstance(exc.__cause__, BatchFailed) and profile.judge is not None:  # the exact command, here known
            raise CLIError(f"judge {profile.judge.model_name}: {exc.__cause__.failure}; to send them one by one at "
                           f"full price: {judge_flags.fallback_command(args)}") from None
        raise
    finally:
        bars.close()
    _report("unavailable (no number stored)", dict(report.unavailable))
    _report("degraded (stored, labelled in provenance)", dict(report.degraded))
    judge_flags.report(profile, report)  # pairs left without an answer: those scores are missing
    if not report.complete:
        return 1
    if requested and any(m in report.unavailable for m in requested):
        return 1
    return 0


class _StageBars:
    """One progress bar per scoring stage, on stderr (plain lines every few seconds off a terminal)."""

    def __init__(self, disabled: bool) -> None:
        self.disabled = disabled
        self.bar: Any = None
        self.stage = ""

    def __call__(self, stage: str, done: int, total: int) -> None:
        if self.disabled:
            return
        if stage != self.stage or self.bar is None:
            self.close()

            self.stage = stage
            self.bar = ProgressBar(total=total, desc=stage, unit="item", leave=False)
        self.bar.update_to(done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _print_result(result: Any) -> None:
    if result.summary is None:
        print(f"{result.run_id}: not scored: {result.error}")
        return
    summary = result.summary
    new = sum(summary.computed.values())
    cached = sum(summary.cached.values())
    metrics_done = sorted(m for m, n in summary.computed.items() if n)
    line = f"{result.run_id}: {new} new value(s)"
    if metrics_done:
        line += f" for {', '.join(metrics_done)}"
    line += f"; {cached} cached"
    if summary.skipped_invalid:
        line += f"; {summary.skipped_invalid} invalid repl{'y' if summary.skipped_invalid == 1 else 'ies'} not scored"
    print(line)


def _report(title: str, items: dict[str, str]) -> None:
    if not items:
        return
    by_reason: dict[str, list[str]] = {}
    for metric, reason in items.items():
        by_reason.setdefault(reason, []).append(metric)
    print(f"{title}:")
    for reason, metrics in by_reason.items():
        print(f"  {', '.join(metrics)}: {reason}")


def _samples_for(run: Any, cache: dict[str, dict]) -> dict:
    """Samples of ``run`` by id (:func:`persobench.pipeline.run_samples`)."""

    return pipeline.run_samples(run, datasets=cache)
