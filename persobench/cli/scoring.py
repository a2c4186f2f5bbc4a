"""The ``score`` command: compute per-sample metrics for stored runs (cached, never recomputed)."""

from __future__ import annotations

import argparse
from typing import Any

from persobench.cli import CLIError, store_from_args, warn_skipped
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
    score.add_argument("--profile", choices=("offline", "standard"), default="offline",
                       help="backend profile (default offline: packaged models only)")
    score.add_argument("--metrics", default=None, metavar="A,B,...",
                       help="comma-separated metric names (default: all per-sample metrics)")
    score.add_argument("--model", action="append", default=[], metavar="SLOT=ID_OR_PATH",
                       help="override a slot's model (bertscore, nli, word_vectors, unieval, wordnet, embedding; "
                            "or bertscore.num_layers=N) with a hub id or local path; repeatable")
    score.add_argument("--precision", choices=("float32", "bfloat16"), default="float32",
                       help="arithmetic of the embedding models (BERTScore, persona similarity): float32 "
                            "(default), or bfloat16, about 3x faster on CPUs with AMX/AVX512-BF16, values "
                            "within ~1e-3, stored under a profile key of their own")
    score.add_argument("--no-progress", action="store_true", help="no progress bar")
    from persobench.cli import judge

    judge.add_arguments(score)  # --judge, --judge-base-url, --judge-concurrency, --judge-max-cost, --dry-run
    score.set_defaults(handler=cmd_score)


def _parse_models(items: list[str]) -> dict[str, str]:
    overrides: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CLIError(f"--model expects SLOT=ID_OR_PATH, got {item!r}")
        overrides[key.strip()] = value.strip()
    return overrides


class _StageBar:
    """One progress bar per scoring stage, on stderr (plain lines every few seconds off a terminal)."""

    def __init__(self, label: str, disabled: bool) -> None:
        self.label = label
        self.disabled = disabled
        self.bar: Any = None
        self.stage = ""

    def __call__(self, stage: str, done: int, total: int) -> None:
        if self.disabled:
            return
        if stage != self.stage or self.bar is None:
            self.close()
            from persobench.cli.progress import ProgressBar

            self.stage = stage
            self.bar = ProgressBar(total=total, desc=f"{self.label} {stage}", unit="item", leave=False)
        self.bar.update_to(done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def cmd_score(args: argparse.Namespace) -> int:
    from persobench.metrics import validate_metric_names
    from persobench.metrics.backends import get_profile

    requested = None
    if args.metrics:
        requested = [m.strip() for m in args.metrics.split(",") if m.strip()]
        validate_metric_names(requested)
    from persobench.cli import judge

    store = store_from_args(args)
    profile = get_profile(args.profile, _parse_models(args.model), precision=args.precision,
                          judge=judge.judge_from_args(args, store.home))
    if args.runs:
        from persobench.cli.generate import resolve_run

        runs = [resolve_run(store, name) for name in args.runs]
    else:
        readable, problems = store.scan()
        warn_skipped((p.path, p.reason) for p in problems)
        runs = [r for r in readable if r.has_table("generations")]
        if not runs:
            print(f"no runs with generations in {store.runs_dir}")
            return 0

    from persobench.metrics.judge import JudgeError
    from persobench.metrics.scoring import score_run

    samples_cache: dict[str, dict] = {}
    if args.dry_run:
        return judge.dry_run(profile, runs, lambda run: _samples_for(run, samples_cache), requested)
    if profile.judge is not None:
        judge.check_cost(profile, runs, lambda run: _samples_for(run, samples_cache), requested)
    print(f"profile {profile.key} on {profile.device}" +
          (f" (overrides: {', '.join(f'{k}={v}' for k, v in profile.overrides.items())})" if profile.overrides else ""))
    unavailable: dict[str, str] = {}
    degraded: dict[str, str] = {}
    failures = 0
    from persobench.metrics import lexical

    lexical_wanted = requested is None or any(m in requested for m in (*lexical.REFERENCE_LEXICAL,
                                                                       *lexical.REPLY_LEXICAL))
    expected = sum(_valid_replies(run) for run in runs) if lexical_wanted else 0
    from persobench.metrics.encoder import TextEncoder, store_cache_root

    # One encoder for the whole command: the runs of a dataset are embedded together (their shared
    # references and persona sentences once), cached in the store, and the memory is given back
    # after each dataset.
    encoder = TextEncoder(profile, store_cache_root(store.home))
    with lexical.worker_pool(expected):  # both cores for the lexical metrics of a large job
        for group in _by_dataset(runs):
            ready = _embed_group(group, encoder, profile, requested, samples_cache, args.no_progress)
            for run in group:
                if not run.has_table("generations"):
                    print(f"{run.run_id}: no generations table, skipped")
                    failures += 1
                    continue
                if run.run_id not in ready:
                    print(f"{run.run_id}: not scored: {ready.get('!' + run.run_id, 'samples unavailable')}")
                    failures += 1
                    continue
                try:
                    bar = _StageBar(run.run_id[:48], args.no_progress)
                    try:
                        summary = score_run(run, ready[run.run_id], profile=profile, metrics=requested,
                                            progress=bar, encoder=encoder)
                    finally:
                        bar.close()
                except JudgeError:
                    raise  # no key, or a judge failing every request: one line, not one per run
                except PersoBenchError as exc:
                    print(f"{run.run_id}: not scored: {exc}")
                    failures += 1
                    continue
                _print_summary(run, summary, unavailable, degraded)
            encoder.release()
    _report("unavailable (no number stored)", unavailable)
    _report("degraded (stored, labelled in provenance)", degraded)
    if judge.report(profile):  # pairs left without an answer: those scores are missing
        failures += 1
    if failures:
        return 1
    if requested and any(m in unavailable for m in requested):
        return 1
    return 0


def _print_summary(run: Any, summary: Any, unavailable: dict[str, str], degraded: dict[str, str]) -> None:
    new = sum(summary.computed.values())
    cached = sum(summary.cached.values())
    metrics_done = sorted(m for m, n in summary.computed.items() if n)
    line = f"{run.run_id}: {new} new value(s)"
    if metrics_done:
        line += f" for {', '.join(metrics_done)}"
    line += f"; {cached} cached"
    if summary.skipped_invalid:
        line += f"; {summary.skipped_invalid} invalid repl{'y' if summary.skipped_invalid == 1 else 'ies'} not scored"
    print(line)
    for metric, prov in summary.provenance.items():
        if prov.get("status") == "unavailable":
            unavailable.setdefault(metric, prov.get("reason", ""))
        elif prov.get("status") == "degraded":
            degraded.setdefault(metric, prov.get("reason", ""))


def _by_dataset(runs: list[Any]) -> list[list[Any]]:
    """Runs grouped by dataset, in order of first appearance (the runs of a dataset share texts)."""
    groups: dict[str, list[Any]] = {}
    for run in runs:
        groups.setdefault(str(run.manifest.dataset), []).append(run)
    return list(groups.values())


def _embed_group(group: list[Any], encoder: Any, profile: Any, requested: list[str] | None,
                 samples_cache: dict[str, dict], no_progress: bool) -> dict[str, Any]:
    """Embed every text the runs of ``group`` need, in one pass; returns run id -> its samples (and
    ``"!" + run id`` -> the reason for a run whose samples or tables cannot be read)."""
    from persobench.metrics.encoder import EmbeddingRequest
    from persobench.metrics.family import Progress
    from persobench.metrics.scoring import prepare_embeddings, run_embedding_request

    ready: dict[str, Any] = {}
    pairs: dict[tuple[str, str], None] = {}
    sentences: dict[str, None] = {}
    for run in group:
        if not run.has_table("generations"):
            continue
        try:
            samples = _samples_for(run, samples_cache)
            request = run_embedding_request(run, samples, profile=profile, metrics=requested)
        except PersoBenchError as exc:
            ready["!" + run.run_id] = str(exc)
            continue
        ready[run.run_id] = samples
        pairs.update(dict.fromkeys(request.pairs))
        sentences.update(dict.fromkeys(request.sentences))
    if pairs or sentences:
        label = f"{group[0].manifest.dataset} ({len(group)} run{'s' if len(group) != 1 else ''})"
        bar = _StageBar(label[:48], no_progress)
        try:
            prepare_embeddings(encoder, EmbeddingRequest(tuple(pairs), tuple(sentences)), Progress(bar))
        finally:
            bar.close()
    return ready


def _valid_replies(run: Any) -> int:
    """The run's valid replies as its manifest counts them (0 when it does not say)."""
    counts = run.manifest.extra.get("counts") or {}
    try:
        return int(counts.get("ok", 0))
    except (TypeError, ValueError):
        return 0


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
    """Samples of ``run`` by id (:func:`persobench.metrics.scoring.run_samples`), one line on failure."""
    from persobench.metrics.scoring import run_samples

    try:
        return run_samples(run, cache)
    except (PersoBenchError, KeyError, ValueError, OSError) as exc:  # KeyError: a sample id missing
        raise CLIError(f"cannot load the samples of dataset {run.manifest.dataset!r}: {exc}") from None
