"""Scoring benchmark, Ray case (``benchmarks/scoring.py --only ray``): the Ray executor on a local
Ray cluster of 2 workers against the local executor, on the same runs, in this process.

    .venv/bin/python benchmarks/scoring.py --only ray [--runs 4] [--dataset focus] [--metrics a,b]

The runs are the first ``--runs`` published runs of ``--dataset`` (imported into a scratch store,
not timed), or, without the paper's data, demo-like runs of the built-in ``sample`` dataset. The
store is copied, so both executors start from nothing (no stored value, no embedding cache). Then:

1. the local executor (``pipeline.score``, this process: models loaded here, torch on every core);
2. a local Ray cluster (``ray.init(num_cpus=2)``: 2 workers, so 2 actors), its start-up timed alone;
3. the Ray executor on the copy (``pipeline.score(executor="ray")``: actors load their models, score
   their shards; this process writes).

Prints each time as a ratio of the local executor's, and the largest |difference| between the two
stores' values (must be at most 1e-6, with the same (sample, metric) keys). On a 2-core machine no
speed-up is expected: the two actors share the two cores the local executor already uses (each
actor's torch runs one thread), and Ray adds its own processes, model loads per actor and the
transfer of shards and results. The executor exists for clusters with more machines and GPUs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

TOLERANCE = 1e-6


def _runs(ref: Path | None, home: Path, dataset: str, limit: int) -> str:
    """Fill ``home`` with the runs to score; returns where they come from."""
    from persobench import pipeline
    from persobench.store import open_store

    if ref is not None:
        pipeline.import_published(ref, home=home, datasets=[dataset])
        store = open_store(home)
        for run in sorted(store.runs(), key=lambda r: r.run_id)[limit:]:
            shutil.rmtree(run.path)
        return f"the first {limit} published {dataset} runs (by id)"
    from persobench.generation import GenerationConfig

    configs = [(m, mode) for m in ("baseline:reference", "baseline:persona-echo") for mode in ("vanilla", "cot")]
    for model, mode in configs[:limit]:
        pipeline.generate(GenerationConfig(dataset="sample", model=model, mode=mode), home=home)
    return f"{min(limit, len(configs))} demo-like runs of the built-in sample dataset (no reference folder)"


def _values(home: Path) -> dict[tuple[str, str, str], float]:
    from persobench.store.run_store import RunStore

    out: dict[tuple[str, str, str], float] = {}
    for run in RunStore(home).runs():
        if run.has_table("scores"):
            table = run.read_table("scores")
            out.update(((run.run_id, s, m), float(v)) for s, m, v in
                       zip(table["sample_id"], table["metric"], table["value"]))
    return out


def bench_ray(ref: Path | None, limit: int, dataset: str, metrics: list[str] | None) -> dict:
    import ray

    import persobench
    from persobench import pipeline

    scratch = Path(tempfile.mkdtemp(prefix="persobench-ray-bench-"))
    try:
        source = _runs(ref, scratch / "runs", dataset, limit)
        shutil.copytree(scratch / "runs", scratch / "on-ray")
        started = time.perf_counter()
        local = pipeline.score(home=scratch / "runs", metrics=metrics)
        local_s = time.perf_counter() - started

        started = time.perf_counter()
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING",
                 runtime_env={"py_modules": [persobench], "excludes": ["__pycache__", "*.pyc"]})
        startup_s = time.perf_counter() - started
        try:
            started = time.perf_counter()
            on_ray = pipeline.score(home=scratch / "on-ray", metrics=metrics, executor="ray")
            ray_s = time.perf_counter() - started
        finally:
            ray.shutdown()
        ours, theirs = _values(scratch / "runs"), _values(scratch / "on-ray")
        diff = max((abs(ours[k] - theirs[k]) for k in ours if k in theirs), default=0.0)
        return {"source": source, "runs": len(local.runs), "values": local.new_values,
                "ray_values": on_ray.new_values, "same_keys": set(ours) == set(theirs), "max_abs_diff": diff,
                "local_s": local_s, "startup_s": startup_s, "ray_s": ray_s,
                "failures": local.failures + on_ray.failures}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def bench_ray_report(ref: Path | None, limit: int | None, dataset: str | None, metrics: str | None) -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        print("Ray benchmark skipped: Ray is not installed (pip install 'persobench[ray]')")
        return True
    wanted = [m.strip() for m in metrics.split(",")] if metrics else None
    r = bench_ray(ref, limit or 4, dataset or "focus", wanted)
    print(f"Ray executor (local cluster, 2 workers) vs local executor on {r['source']}: {r['runs']} runs, "
          f"{r['values']} values, metrics {', '.join(wanted) if wanted else 'all (offline profile)'}, "
          f"{os.cpu_count()} CPUs")
    print(f"  local executor {r['local_s']:.1f} s (1.00); Ray executor {r['ray_s']:.1f} s "
          f"({r['ray_s'] / r['local_s']:.2f} of local), plus Ray start-up {r['startup_s']:.1f} s "
          f"({r['startup_s'] / r['local_s']:.2f}); max |diff| {r['max_abs_diff']:.1e}")
    if (os.cpu_count() or 1) <= 2:
        print("  on 2 cores no speed-up is expected: both actors share the cores the local executor uses")
    ok = r["same_keys"] and r["values"] == r["ray_values"] and r["max_abs_diff"] <= TOLERANCE and not r["failures"]
    if not ok:
        print(f"  FAIL: values differ (keys equal {r['same_keys']}, {r['values']} local vs {r['ray_values']} "
              f"Ray, max |diff| {r['max_abs_diff']:.1e}, {r['failures']} failed runs)")
    return ok
