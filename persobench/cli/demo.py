"""``python -m persobench demo``: prepare the embedded offline demo that ``make run`` shows.

The demo is the built-in ``sample`` dataset answered by the offline SmolLM2-135M-Instruct model
(``local:smollm2``) and by both baselines (``baseline:reference``, the ceiling, and
``baseline:persona-echo``, the floor), in vanilla and chain-of-thought modes, with the paper's
generation settings (temperature 0, at most 110 / 220 new tokens), scored with the ``offline``
metric profile. Nothing is downloaded and no key is needed.

Everything is cached: runs live in the run store, replies in the response cache and scores in the
run folders, so a second call only checks and returns in about a second. An interrupted demo
(Ctrl-C) resumes where it stopped.

Time: the baselines take seconds and scoring well under a minute (loading the packaged models).
SmolLM2 runs on the CPU: on 2 idle cores it writes roughly 20 tokens per second, and most of its
replies run to the token limit, so a reply takes up to about 6 s (vanilla, 110 tokens) or 12 s (cot,
220 tokens). The default, 10 samples in both modes, is 20 replies: about 3 minutes once the model is
loaded (measured 10.5 minutes on a busy shared 2-core machine). ``--full`` answers all 30 samples
(60 replies, about 3 times longer). ``--no-local`` skips SmolLM2 altogether (baselines only).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from persobench.cli import CLIError, store_from_args
from persobench.errors import PersoBenchError

DEMO_DATASET = "sample"
DEMO_MODELS = ("local:smollm2", "baseline:reference", "baseline:persona-echo")
DEMO_MODES = ("vanilla", "cot")
#: Samples per demo run unless ``--full``: keeps the CPU-bound SmolLM2 part to a few minutes.
DEFAULT_LIMIT = 10
DEMO_PROFILE = "offline"
#: Rough seconds per SmolLM2 reply on 2 idle cores at the paper's token limits (for the estimate).
SMOLLM2_SECONDS = {"vanilla": 6.0, "cot": 12.0}


def register(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser(
        "demo", help="prepare the offline demo shown by the app (cached: a second call is a no-op)",
        description="Generate and score the embedded demo: the built-in sample dataset with local:smollm2 and "
        "both baselines in vanilla and cot modes, scored with the offline profile. Cached; resumable.",
    )
    demo.add_argument("--limit", type=int, default=DEFAULT_LIMIT,
                      help=f"samples per run, a deterministic subset (default {DEFAULT_LIMIT})")
    demo.add_argument("--full", action="store_true", help="use all 30 samples (SmolLM2 then takes several minutes)")
    demo.add_argument("--no-local", action="store_true", help="baselines only: skip the SmolLM2 runs")
    demo.add_argument("--no-progress", action="store_true", help="no progress bars")
    demo.set_defaults(handler=cmd_demo)


def demo_configs(*, limit: int | None, local: bool = True) -> list[Any]:
    """The generation configurations of the demo, in the order they run (baselines first)."""
    from persobench.generation import GenerationConfig

    models = [m for m in DEMO_MODELS if local or not m.startswith("local:")]
    models.sort(key=lambda m: m.startswith("local:"))  # the slow model last: the app fills up early
    return [GenerationConfig(dataset=DEMO_DATASET, model=model, mode=mode, limit=limit)
            for model in models for mode in DEMO_MODES]


def _generated(store: Any, run_id: str) -> bool:
    from persobench.store import StoreError

    try:
        run = store.get(run_id)
    except StoreError:
        return False
    return run.manifest.status == "completed" and run.has_table("generations")


def _scored(store: Any, run_id: str) -> bool:
    """True when every per-sample metric has a provenance record for the demo profile (computed, or
    recorded as unavailable offline), so scoring again would change nothing."""
    from persobench.metrics import METRIC_NAMES
    from persobench.store import StoreError

    try:
        run = store.get(run_id)
    except StoreError:
        return False
    recorded = run.manifest.details.profile_scores(DEMO_PROFILE).metrics
    return all(metric in recorded for metric in METRIC_NAMES)


def cmd_demo(args: argparse.Namespace) -> int:
    from persobench.generation import RunAborted, plan_generation, run_generation
    from persobench.providers.base import ConfigurationError

    started = time.monotonic()
    store = store_from_args(args)
    limit = None if args.full else args.limit
    if limit is not None and limit < 1:
        raise CLIError("--limit must be at least 1")
    plans = [plan_generation(config, store=store) for config in demo_configs(limit=limit, local=not args.no_local)]
    to_generate = [p for p in plans if not _generated(store, p.run_id)]
    to_score = [p for p in plans if not _scored(store, p.run_id)]
    if not to_generate and not to_score:
        print(f"demo ready (cached): {len(plans)} runs of the {DEMO_DATASET!r} dataset in {store.runs_dir}, "
              f"scored with the {DEMO_PROFILE} profile ({time.monotonic() - started:.1f} s)")
        return 0

    replies = sum(p.n_requests for p in to_generate)
    local_seconds = sum(SMOLLM2_SECONDS.get(p.template.mode, 9.0) * p.n_requests
                        for p in to_generate if p.spec.provider == "local")
    print(f"preparing the demo in {store.runs_dir}: {len(to_generate)} run(s) to generate "
          f"({replies} replies not cached yet), {len(to_score)} to score")
    if local_seconds:
        print(f"  SmolLM2 on the CPU: about {max(1, round(local_seconds / 60))} min on 2 idle cores (~20 tokens/s), "
              "several times longer on a busy machine. Ctrl-C is safe: run the demo again to resume.")

    bar = _Bar(total=sum(len(p.samples) for p in to_generate), desc="generating", disabled=args.no_progress)
    offset = 0
    try:
        for plan in to_generate:
            bar.set_description(f"{plan.spec.name} {plan.template.mode}")

            def on_progress(info: Any, base: int = offset) -> None:
                bar.update_to(base + info.done)

            try:
                run_generation(plan.config, store=store, progress=on_progress)
            except ConfigurationError as exc:
                raise CLIError(f"{plan.spec.name}: {exc}") from None
            except RunAborted as exc:
                raise CLIError(f"{plan.spec.name}: run stopped: {exc}") from None
            offset += len(plan.samples)
            bar.update_to(offset)
    finally:
        bar.close()

    failures = _score(store, [p.run_id for p in plans if not _scored(store, p.run_id)], args.no_progress)
    print(f"demo ready: {len(plans)} runs in {store.runs_dir} ({time.monotonic() - started:.0f} s). "
          "Start the app with: streamlit run app.py")
    return 1 if failures else 0


def _score(store: Any, run_ids: list[str], no_progress: bool) -> int:
    from persobench.datasets import samples_by_id
    from persobench.metrics import score_run
    if not run_ids:
        return 0
    samples = samples_by_id(DEMO_DATASET)
    bar = _Bar(total=len(run_ids), desc="scoring (offline profile)", disabled=no_progress)
    failures = 0
    try:
        for run_id in run_ids:
            try:
                score_run(store.get(run_id), samples, profile=DEMO_PROFILE)
            except PersoBenchError as exc:
                print(f"{run_id}: not scored: {exc}", file=sys.stderr)
                failures += 1
            bar.update_to(bar.n + 1)
    finally:
        bar.close()
    return failures


class _Bar:
    """A progress bar on stderr that can be moved to an absolute count."""

    def __init__(self, *, total: int, desc: str, disabled: bool) -> None:
        from persobench.cli.progress import ProgressBar

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