"""Calibration of the LLM judge: how its NLI labels agree with the NLI model's on the published FoCus replies.

    .venv/bin/python benchmarks/judge.py --judge openai:gpt-4o-mini [--judge-base-url URL]
        [--nli cross-encoder/nli-deberta-v3-base | --nli /path/to/local/copy] [--pairs 300] [--seed 0]
        [--reference DIR] [--cache DIR] [--dry-run] [--require]

Pairs: the published FoCus runs (``$PERSOBENCH_REFERENCE``, default ../shared/persobench-reference) are
imported into a scratch store; the pairs are exactly those ``score`` labels for ``c_score``,
``ue_score`` and ``persona_coverage`` on those runs (:func:`persobench.scoring.work_plan.run_nli_pairs`:
persona text -> reply, reference -> reply, each persona sentence -> reply), deduplicated, and
``--pairs`` of them drawn with ``--seed``.

Both labellers label the same pairs: the NLI model (default the standard profile's
``cross-encoder/nli-deberta-v3-base``; ``--nli PATH`` for a local copy) and the judge, through the
response cache in ``--cache`` (default ``<PERSOBENCH_HOME>/responses``, shared with ``score``), so a
rerun pays nothing. Prints the number of pairs both labelled, accuracy, Cohen's kappa, the confusion
matrix (rows: NLI model, columns: judge, with the judge's unparseable and unanswered pairs), and the
judge's tokens and cost.

When a labeller is unavailable (no judge given, no key, no NLI model: the hub is unreachable offline
and no 3-way NLI model ships on PyPI) the script says which and why, prints the judge's cost estimate
for the pairs, sends no judge request, and exits 0 (1 with ``--require``).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.scoring import reference_dir  # noqa: E402 - the same lookup of the published data

METRICS = ("c_score", "ue_score", "persona_coverage")


def focus_pairs(ref: Path, n: int, seed: int) -> tuple[list[tuple[str, str]], int, int]:
    """``n`` distinct pairs drawn from those ``score`` labels on the published FoCus runs; also the
    number of runs and of distinct pairs they hold."""
    from persobench.generation.importer import import_persobench, samples_for_run
    from persobench.scoring.work_plan import run_nli_pairs
    from persobench.store.run_store import RunStore

    with tempfile.TemporaryDirectory() as tmp:
        store = RunStore(Path(tmp) / "home")
        import_persobench(store, ref, datasets=["focus"])
        runs = store.runs()
        every: dict[tuple[str, str], None] = {}
        for run in runs:
            every.update(dict.fromkeys(run_nli_pairs(run, samples_for_run(run), metrics=METRICS)))
    pairs = sorted(every)
    random.Random(seed).shuffle(pairs)
    return pairs[:n], len(runs), len(pairs)


def nli_labels(model_id: str, pairs: list[tuple[str, str]]) -> tuple[list[str] | None, str]:
    """The NLI model's labels, or (None, why it is unavailable)."""
    from persobench.metrics.backends import BackendUnavailable, get_profile
    from persobench.metrics.nli import load_nli

    try:
        spec = get_profile("standard", {"nli": model_id}).spec("nli")
        model = load_nli(spec, "cpu")
    except (BackendUnavailable, ValueError) as exc:
        return None, str(exc)
    return [p.label for p in model.predict(pairs)], model.name


def show_agreement(result, judge_name: str, nli_name: str) -> None:
    from persobench.metrics.nli_labels import LABELS

    print(f"agreement of judge {judge_name} with NLI model {nli_name}:")
    print(f"  pairs both labelled: {result.n} (judge left {result.unlabelled} unlabelled: unparseable or unanswered)")
    print(f"  accuracy: {result.accuracy:.3f}   Cohen's kappa: {result.kappa:.3f}")
    columns = list(next(iter(result.confusion.values())))
    width = max(len(c) for c in columns) + 2
    print("  confusion (rows: NLI model, columns: judge)")
    print("  " + " " * 15 + "".join(c.rjust(width) for c in columns))
    for label in LABELS:
        print("  " + label.ljust(15) + "".join(str(result.confusion[label][c]).rjust(width) for c in columns))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--judge", default=None, metavar="PROVIDER:MODEL", help="the judge (as score --judge)")
    parser.add_argument("--judge-base-url", default=None, metavar="URL")
    parser.add_argument("--judge-concurrency", default="8", metavar="N|auto")
    parser.add_argument("--nli", default=None, metavar="ID_OR_PATH",
                        help="the NLI model (default: the standard profile's cross-encoder/nli-deberta-v3-base)")
    parser.add_argument("--pairs", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reference", default=None, help="the paper's published data folder")
    parser.add_argument("--cache", default=None, help="response cache folder (default <PERSOBENCH_HOME>/responses)")
    parser.add_argument("--dry-run", action="store_true", help="print the judge's estimate only; send nothing")
    parser.add_argument("--require", action="store_true", help="exit 1 when a labeller is unavailable")
    args = parser.parse_args(argv)

    from persobench.llm.response_cache import default_cache_dir
    from persobench.errors import PersoBenchError
    from persobench.metrics.backends import HUB_NLI
    from persobench.metrics.judge.labeller import JudgeLabeller, agreement, make_judge
    from persobench.store.run_store import default_home

    ref = reference_dir(args.reference)
    if ref is None:
        print("unavailable: the paper's published data (set PERSOBENCH_REFERENCE or --reference): no FoCus pairs")
        return 1 if args.require else 0
    pairs, n_runs, n_distinct = focus_pairs(ref, args.pairs, args.seed)
    print(f"pairs: {len(pairs)} drawn (seed {args.seed}) from {n_distinct} distinct NLI pairs of {n_runs} published "
          f"FoCus runs ({', '.join(METRICS)})")

    missing: list[str] = []
    labeller = None
    if args.judge is None:
        missing.append("judge: none given (--judge PROVIDER:MODEL)")
    else:
        concurrency = args.judge_concurrency if args.judge_concurrency == "auto" else int(args.judge_concurrency)
        try:
            config = make_judge(args.judge, base_url=args.judge_base_url, concurrency=concurrency,
                                cache_dir=args.cache or str(default_cache_dir(default_home())))
        except PersoBenchError as exc:
            print(f"error: {exc}")
            return 2
        labeller = JudgeLabeller(config)
        est = labeller.estimate(pairs)
        cost = "unknown (no prices)" if est.cost_usd is None else f"at most ${est.cost_usd:,.4f}"
        print(f"judge {config.model_name}, prompt {labeller.template.version}: {est.cached} of {est.pairs} pairs "
              f"cached, {est.requests} request(s) to send, ~{est.prompt_tokens:,} prompt tokens, cost {cost}")
        if args.dry_run:
            return 0

    nli_id = args.nli or HUB_NLI
    reference, nli_name = nli_labels(nli_id, pairs)
    if reference is None:
        missing.append(f"NLI model {nli_id}: {nli_name}")
    if missing:
        for line in missing:
            print(f"unavailable: {line}")
        print("agreement not measured: it needs both a judge and a 3-way NLI model (no judge request was sent)")
        return 1 if args.require else 0

    assert labeller is not None
    try:
        judged = [p.label for p in labeller.predict(pairs)]
    except PersoBenchError as exc:  # no key, unreachable server, every request refused
        print(f"unavailable: {exc}")
        return 1 if args.require else 0
    show_agreement(agreement(reference, judged), labeller.config.model_name, nli_name)
    s = labeller.stats
    print(f"judge: {s.cached} cached, {s.sent} answered now ({s.attempts} request(s)), "
          f"~{s.prompt_tokens:,} prompt + {s.completion_tokens:,} completion tokens, cost "
          f"{'unknown' if s.cost_usd is None else f'${s.cost_usd:,.4f}'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
