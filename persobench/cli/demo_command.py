"""``python -m persobench demo``: prepare the embedded offline demo that ``make run`` shows.

The demo is the built-in ``sample`` dataset answered by the offline SmolLM2-135M-Instruct model
twice, as it is asked (``local:smollm2``) and with structured output (``local:smollm2 +structured``,
grammar-constrained decoding of the reply's JSON shape), beside both baselines
(``baseline:reference``, the ceiling, and ``baseline:persona-echo``, the floor), in vanilla and
chain-of-thought modes, at temperature 0 with at most 110 / 220 new tokens, scored with the
``offline`` metric profile. Nothing is downloaded and no key is needed.

The story it tells: a model this small does not follow the output-format instruction (the plain
replies fail to parse, so every metric scores them worst), while the same model with its reply's
shape guaranteed produces replies the metrics can read. The demo uses PersoBench's own template
(``persobench``, with SmolLM2's chat template) rather than the paper's raw ``paper-open`` prompt:
under ``paper-open`` SmolLM2 copies the prompt's JSON example placeholder, which parses but says
nothing (docs/app.md, "The demo").

Everything is cached: runs live in the run store, replies in the response cache and scores in the
run folders, so a second call only checks and returns in about a second. An interrupted demo
(Ctrl-C) resumes where it stopped. Before generating, the demo prints an estimate (replies x tokens
at SmolLM2's measured speed); at the end the time it took and what each SmolLM2 run produced.
``--full`` answers all 30 samples; ``--no-local`` skips SmolLM2 altogether (baselines only).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable

from persobench.cli.command_support import CLIError, store_from_args
from persobench.generation import DEFAULT_LIMIT, DEMO_DATASET, DEMO_PROFILE, demo_configs, read_demo_state, write_demo_state
from persobench.errors import StoreError
from persobench.metrics import metric_names
from persobench import pipeline
from persobench.errors import ConfigurationError, PersoBenchError, RunAborted
from persobench.core import ProgressBar

#: SmolLM2-135M's decoding speed on 2 idle cores in batches of 8, new tokens per second summed over
#: the batch: ~24 tokens/s one at a time there, times the 2.3x that batches of 8 measured
#: (docs/performance.md, "Batched local generation").
SMOLLM2_TOKENS_PER_SECOND = 55.0
#: Allowance for what the first demo does besides SmolLM2's decoding on 2 idle cores: loading SmolLM2
#: and the offline profile's models, the baselines and scoring every run (an allowance, not a
#: measurement: docs/performance.md, "The demo").
FIXED_SECONDS = 40.0


def register(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser(
        "demo", help="prepare the offline demo shown by the app (cached: a second call is a no-op)",
        description="Generate and score the embedded demo: the built-in sample dataset with local:smollm2, plain and "
        "with structured output, and both baselines, in vanilla and cot modes, scored with the offline profile. "
        "Cached; resumable.",
    )
    demo.add_argument("--limit", type=int, default=DEFAULT_LIMIT,
                      help=f"samples per run, a deterministic subset (default {DEFAULT_LIMIT})")
    demo.add_argument("--full", action="store_true", help="use all 30 samples (SmolLM2 then takes several minutes)")
    demo.add_argument("--no-local", action="store_true", help="baselines only: skip the SmolLM2 runs")
    demo.add_argument("--no-progress", action="store_true", help="no progress bars")
    demo.set_defaults(handler=cmd_demo)


def _generated(store: Any, run_id: str) -> bool:

    try:
        run = store.get(run_id)
    except StoreError:
        return False
    return run.manifest.status == "completed" and run.has_table("generations")


def _scored(store: Any, run_id: str) -> bool:
    """True when every per-sample metric has a provenance record for the demo profile (computed, or
    recorded as unavailable offline), so scoring again would change nothing."""

    try:
        run = store.get(run_id)
    except StoreError:
        return False
    recorded = run.manifest.details.profile_scores(DEMO_PROFILE).metrics
    return all(metric in recorded for metric in metric_names())


def estimate_seconds(plans: list[Any]) -> tuple[float, int]:
    """(seconds on 2 idle cores, SmolLM2 tokens at most) to generate and score ``plans``: every local
    reply at its token limit at :data:`SMOLLM2_TOKENS_PER_SECOND`, plus :data:`FIXED_SECONDS`."""
    tokens = sum(p.n_requests * p.params.max_tokens for p in plans if p.spec.provider == "local")
    return FIXED_SECONDS + tokens / SMOLLM2_TOKENS_PER_SECOND, tokens


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def cmd_demo(args: argparse.Namespace) -> int:

    started = time.monotonic()
    store = store_from_args(args)
    limit = None if args.full else args.limit
    if limit is not None and limit < 1:
        raise CLIError("--limit must be at least 1")
    plans = [pipeline.plan(config, store=store) for config in demo_configs(limit=limit, local=not args.no_local)]
    run_ids = [p.run_id for p in plans]
    labels = [f"{p.manifest.model_label} · {p.template.mode}" for p in plans]
    to_generate = [p for p in plans if not _generated(store, p.run_id)]
    to_score = [p for p in plans if not _scored(store, p.run_id)]
    if not to_generate and not to_score:
        known = read_demo_state(store.home)
        if known is None or (known.state, known.runs) != ("ready", tuple(run_ids)):
            write_demo_state(store.home, "ready", "ready", run_ids, labels=labels)
        print(f"demo ready (cached): {len(plans)} runs of the {DEMO_DATASET!r} dataset in {store.runs_dir}, "
              f"scored with the {DEMO_PROFILE} profile ({time.monotonic() - started:.1f} s)")
        return 0

    replies = sum(p.n_requests for p in to_generate)
    print(f"preparing the demo in {store.runs_dir}: {len(to_generate)} run(s) to generate "
          f"({replies} replies not cached yet), {len(to_score)} to score")
    estimate, tokens = estimate_seconds(to_generate)
    local_replies = sum(p.n_requests for p in to_generate if p.spec.provider == "local")
    if local_replies:
        print(f"  estimate: about {_minutes(estimate)} on 2 idle cores: {local_replies} SmolLM2 replies of at most "
              f"{tokens:,} tokens in all at ~{SMOLLM2_TOKENS_PER_SECOND:.0f} tokens/s (batches of 8), plus "
              f"~{FIXED_SECONDS:.0f} s loading models, baselines and scoring. Longer on a busy machine; "
              "Ctrl-C is safe: run the demo again to resume.")

    def stage(text: str) -> None:
        write_demo_state(store.home, "preparing", text, run_ids, labels=labels)

    try:
        failures = _prepare(store, plans, {p.run_id for p in to_generate}, stage, args.no_progress)
    except PersoBenchError as exc:
        write_demo_state(store.home, "failed", "stopped", run_ids, labels=labels, message=str(exc))
        raise
    elapsed = time.monotonic() - started
    for line in _story(store, plans):
        print(line)
    if failures:
        write_demo_state(store.home, "failed", "stopped", run_ids, labels=labels,
                                  message=f"{failures} run(s) could not be scored")
    else:
        write_demo_state(store.home, "ready", "ready", run_ids, labels=labels)
    print(f"demo ready: {len(plans)} runs in {store.runs_dir} in {_minutes(elapsed)}"
          + (f" (estimate: {_minutes(estimate)} on 2 idle cores)" if local_replies else "")
          + ". Start the app with: streamlit run app.py")
    return 1 if failures else 0


def _prepare(store: Any, plans: list[Any], to_generate: set[str], stage: Callable[[str], None],
             no_progress: bool) -> int:
    """Generate and score the baselines first, then SmolLM2's runs: while ``make run`` prepares the
    demo behind the app, the landing page has the baselines' board within seconds and SmolLM2's story
    when its runs are scored. Scoring loads its models once for both groups. How many runs could not
    be scored."""
    failures = 0
    groups = (("the baselines", [p for p in plans if p.spec.provider != "local"]),
              ("SmolLM2's runs", [p for p in plans if p.spec.provider == "local"]))
    for name, group in groups:
        pending = [p for p in group if p.run_id in to_generate]
        bar = _Bar(total=sum(len(p.samples) for p in pending), desc="generating", disabled=no_progress)
        offset = 0
        try:
            for plan in pending:
                label = f"{plan.manifest.model_label} {plan.template.mode}"
                bar.set_description(label)
                stage(f"generating {label}" + (" (SmolLM2 loads first)" if plan.spec.provider == "local" and
                                               plan is pending[0] else ""))

                def on_progress(info: Any, base: int = offset, bar: _Bar = bar) -> None:
                    bar.update_to(base + info.done)

                try:
                    pipeline.generate(plan.config, store=store, progress=on_progress)
                except ConfigurationError as exc:
                    raise CLIError(f"{plan.spec.name}: {exc}") from None
                except RunAborted as exc:
                    raise CLIError(f"{plan.spec.name}: run stopped: {exc}") from None
                offset += len(plan.samples)
                bar.update_to(offset)
        finally:
            bar.close()
        unscored = [p.run_id for p in group if not _scored(store, p.run_id)]
        if unscored:
            stage(f"scoring {name} ({DEMO_PROFILE} profile)")
            failures += _score(store, unscored, no_progress)
    return failures


def _story(store: Any, plans: list[Any]) -> list[str]:
    """One line per SmolLM2 run: how many replies parsed, why the others did not, tokens written."""
    lines = []
    for plan in plans:
        if plan.spec.provider != "local" or not _generated(store, plan.run_id):
            continue
        table = store.get(plan.run_id).read_table("generations")
        counts = table["status"].value_counts()
        bad = ", ".join(f"{status} {n}" for status, n in counts.items() if status != "ok")
        tokens = int(table["completion_tokens"].fillna(0).sum())
        lines.append(f"  {plan.manifest.model_label:26} {plan.template.mode:7}: {int(counts.get('ok', 0))}/{len(table)} "
                     f"replies valid{f' ({bad})' if bad else ''}, {tokens:,} tokens")
    return lines


def _score(store: Any, run_ids: list[str], no_progress: bool) -> int:

    if not run_ids:
        return 0
    bar = _Bar(total=len(run_ids), desc="scoring (offline profile)", disabled=no_progress)

    def on_run(result: Any) -> None:
        if not result.ok:
            print(f"{result.run_id}: not scored: {result.error}", file=sys.stderr)
        bar.update_to(bar.n + 1)

    try:
        report = pipeline.score(run_ids, profile=DEMO_PROFILE, store=store, on_run=on_run)
    finally:
        bar.close()
    return report.failures


class _Bar:
    """A progress bar on stderr that can be moved to an absolute count."""

    def __init__(self, *, total: int, desc: str, disabled: bool) -> None:

        self._bar = ProgressBar(total=total, desc=desc, unit="reply" if "generat" in desc else "run",
                                disabled=disabled)

    @property
    def n(self) -> int:
        return self._bar.n

    def set_description(self, text: str) -> None:
        self._bar.set_description(text)

    def update_to(self, count: int) -> None:
        if count > self._bar.n:
            self._bar.update_to(count)

    def close(self) -> None:
        self._bar.close()
