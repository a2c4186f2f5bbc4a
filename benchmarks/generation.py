"""Generation throughput: sequential (how the paper's notebooks ran) vs. concurrency 8, and a rerun
served from the cache.

200 prompts against the fake OpenAI-compatible server (a separate process, real HTTP on 127.0.0.1)
answering each request after 100 ms. All three runs go through ``run_generation`` in this process,
each with a fresh store, so the ratio measures concurrency and nothing else.

    python benchmarks/generation.py [--prompts 200] [--latency 0.1] [--concurrency 8]

Prints the figures and one JSON line; exits 1 when the speed-up is below the 6x target.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from persobench.datasets import load_dataset  # noqa: E402
from persobench.generation import run_generation  # noqa: E402
from persobench.records import Sample, Turn  # noqa: E402

TARGET_RATIO = 6.0


def make_samples(n: int) -> list[Sample]:
    """``n`` distinct samples (distinct prompts) built from the built-in dialogues."""
    base = load_dataset("sample")
    samples = []
    for i in range(n):
        src = base[i % len(base)]
        last = src.context[-1]
        context = src.context[:-1] + (Turn(last.speaker, f"{last.text} (variant {i})"),)
        samples.append(dataclasses.replace(src, id=f"bench:{i}", dataset="bench", context=context))
    return samples


def timed_run(samples: list[Sample], home: Path, base_url: str, concurrency: int) -> tuple[float, dict]:
    start = time.perf_counter()
    run = run_generation(dataset="bench", model="openai:bench", base_url=base_url, samples=samples, home=home,
                         concurrency=concurrency, checkpoint_every=100)
    elapsed = time.perf_counter() - start
    return elapsed, dict(run.manifest.extra)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args(argv)

    server = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes", "--flavour", "openai", "--latency", str(args.latency)],
        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        base_url = server.stdout.readline().strip()
        samples = make_samples(args.prompts)
        with tempfile.TemporaryDirectory() as tmp:
            seq_s, seq = timed_run(samples, Path(tmp) / "sequential", base_url, 1)
            par_s, par = timed_run(samples, Path(tmp) / "concurrent", base_url, args.concurrency)
            cached_s, cached = timed_run(samples, Path(tmp) / "concurrent", base_url, args.concurrency)
    finally:
        server.stdin.close()
        server.wait(timeout=10)
    for name, extra in (("sequential", seq), ("concurrent", par)):
        assert extra["counts"]["ok"] == args.prompts, f"{name} run had failures: {extra['counts']}"
    assert cached["usage"]["requests"] == 0 and cached["usage"]["cached"] == args.prompts

    ratio = seq_s / par_s
    per_1000 = cached_s / args.prompts * 1000
    print(f"{args.prompts} prompts, fake server latency {args.latency * 1000:.0f} ms")
    print(f"  sequential (concurrency 1):   {seq_s:7.2f} s  ({args.prompts / seq_s:6.1f} req/s)")
    print(f"  concurrency {args.concurrency}:              {par_s:7.2f} s  ({args.prompts / par_s:6.1f} req/s)")
    print(f"  speed-up:                     {ratio:7.2f}x  (target >= {TARGET_RATIO:.0f}x)")
    print(f"  cached rerun:                 {cached_s:7.2f} s  = {per_1000:.2f} s per 1000 samples, 0 requests")
    print(json.dumps({"prompts": args.prompts, "latency": args.latency, "sequential_s": round(seq_s, 3),
                      "concurrent_s": round(par_s, 3), "concurrency": args.concurrency, "speedup": round(ratio, 2),
                      "cached_rerun_s": round(cached_s, 3), "cached_s_per_1000": round(per_1000, 3)}))
    return 0 if ratio >= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
