"""Generation throughput: sequential (how the paper's notebooks ran) vs. concurrency 8, a rerun
served from the cache, and ``--concurrency auto`` against a server that refuses load.

1. 200 prompts against the fake OpenAI-compatible server (a separate process, real HTTP on
   127.0.0.1) answering each request after 100 ms. All runs go through ``run_generation`` in this
   process, each with a fresh store, so the ratio measures concurrency and nothing else.
2. ``--prompts-auto`` prompts (160 and 400 by default, each size measured on its own) against a
   second fake server that answers 429 (``retry-after-ms``, 1 s by default) to any request arriving
   while more than ``--capacity`` are in flight: fixed concurrencies (half, equal, double and four
   times the capacity) and ``auto`` (ceiling 32). ``auto`` runs in a store that has run against
   this server before (one untimed run first), so it starts from the level that held last time;
   ``auto-cold`` in a fresh store each time. Prints each one's throughput and auto's share of the
   best fixed one at each size (target: at least 90%, warm). Each level runs ``--repeats`` times,
   interleaved, and its fastest run counts.
4. Client throughput: ``--client-prompts`` requests against a fake server answering at once, through
   ``run_generation`` at concurrency 64 and through the bare ``openai.AsyncOpenAI`` client (64 in
   flight, the same requests), interleaved in this process; prints requests per second, their ratio
   (target: at least 0.8) and the CPU milliseconds this process spends per request. ``--profile``
   prints the generation path's top functions by cumulative time (cProfile).

3. ``--local`` (instead of 1 and 2): SmolLM2 (``local:smollm2``) on the demo's samples, all in this
   process with the weights loaded once: ``--batch-size`` 1, 2, 4 and 8 (speed-up over batch 1,
   and whether the greedy replies equal batch 1's), then plain vs ``--structured`` at the default
   batch size (the constraint's overhead). Each configuration gets a fresh store, so nothing is
   served from the cache; the order is interleaved (1, 2, 4, 8, 1 again) so that load changes on a
   shared machine show as the two batch-1 times differing.

    python benchmarks/generation.py [--prompts 200] [--latency 0.1] [--concurrency 8]
                                    [--prompts-auto 160,400] [--capacity 8] [--retry-after-ms 1000]
                                    [--repeats 2] [--client-prompts 2000] [--profile]
    python benchmarks/generation.py --only auto|client|concurrency
    python benchmarks/generation.py --local [--local-samples 8] [--local-max-tokens 48]

Prints the figures and one JSON line; exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from persobench.datasets import load_dataset  # noqa: E402
from persobench.generation import RetryPolicy, run_generation  # noqa: E402
from persobench.records import Sample, Turn  # noqa: E402

TARGET_RATIO = 6.0
TARGET_AUTO_SHARE = 0.9
TARGET_CLIENT_SHARE = 0.8
#: Requests in flight for the client-throughput comparison.
CLIENT_CONCURRENCY = 64


def make_samples(n: int, first: int = 0) -> list[Sample]:
    """``n`` distinct samples (distinct prompts) built from the built-in dialogues, numbered from ``first``."""
    base = load_dataset("sample")
    samples = []
    for i in range(first, first + n):
        src = base[i % len(base)]
        last = src.context[-1]
        context = src.context[:-1] + (Turn(last.speaker, f"{last.text} (variant {i})"),)
        samples.append(dataclasses.replace(src, id=f"bench:{i}", dataset="bench", context=context))
    return samples


def timed_run(samples: list[Sample], home: Path, base_url: str, concurrency: int | str,
              retry: RetryPolicy | None = None, cache_dir: Path | None = None) -> tuple[float, dict]:
    start = time.perf_counter()
    run = run_generation(dataset="bench", model="openai:bench", base_url=base_url, samples=samples, home=home,
                         concurrency=concurrency, checkpoint_every=100, retry=retry or RetryPolicy(),
                         cache_dir=str(cache_dir) if cache_dir else None)
    elapsed = time.perf_counter() - start
    return elapsed, dict(run.manifest.extra)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--prompts-auto", default="160,400", help="comma-separated run sizes for the auto section")
    parser.add_argument("--capacity", type=int, default=8)
    parser.add_argument("--retry-after-ms", type=int, default=1000)
    parser.add_argument("--fixed", default=None,
                        help="fixed levels to compare auto with (default: half, equal, double and four times the "
                             "capacity; above it each 429 pauses every worker, so those runs take minutes)")
    parser.add_argument("--client-prompts", type=int, default=2000)
    parser.add_argument("--profile", action="store_true", help="also profile the generation path (cProfile)")
    parser.add_argument("--only", choices=("concurrency", "auto", "client"), default=None,
                        help="run one section (default: all but --local)")
    parser.add_argument("--repeats", type=int, default=2,
                        help="runs of each level against the refusing server; the fastest counts (on a shared "
                             "machine a one-second stall in one run is not the level's doing)")
    parser.add_argument("--local", action="store_true", help="benchmark batched SmolLM2 generation instead")
    parser.add_argument("--local-samples", type=int, default=8)
    parser.add_argument("--local-max-tokens", type=int, default=48)
    parser.add_argument("--local-batch-sizes", default="1,2,4,8")
    parser.add_argument("--local-threads", type=int, default=None,
                        help="torch threads (default: torch's, one per core); on a busy shared machine 1 avoids "
                             "the threads waiting for each other and makes the figures steadier")
    args = parser.parse_args(argv)
    print(f"load average at start: {', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    if args.local:
        return bench_local(args)
    if args.only == "auto":
        return 0 if bench_auto(args) else 1
    if args.only == "client":
        return 0 if bench_client(args) else 1

    server = fake_server("--latency", str(args.latency))
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
    if args.only == "concurrency":
        return 0 if ratio >= TARGET_RATIO else 1
    auto_ok = bench_auto(args)
    client_ok = bench_client(args)
    return 0 if ratio >= TARGET_RATIO and auto_ok and client_ok else 1


def fake_server(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.fakes", "--flavour", "openai", *args],
                            cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def bench_auto(args: argparse.Namespace) -> bool:
    sizes = [int(x) for x in str(args.prompts_auto).split(",")]
    fixed = sorted({max(1, args.capacity // 2), args.capacity, 2 * args.capacity, 4 * args.capacity})
    if args.fixed:
        fixed = [int(x) for x in args.fixed.split(",")]
    server = fake_server("--latency", str(args.latency), "--capacity", str(args.capacity),
                         "--retry-after-ms", str(args.retry_after_ms))
    # Enough attempts that every level does the same work: a fixed 32 against a capacity of 8 can
    # see one sample refused six times in a row (the default gives up after six).
    retry = RetryPolicy(max_attempts=50)
    results: dict[int, dict[str, tuple[float, dict]]] = {n: {} for n in sizes}
    try:
        base_url = server.stdout.readline().strip()
        with tempfile.TemporaryDirectory() as tmp:
            # One store for every warm auto run: each starts from the level the previous one left
            # (remembered per server); its own response cache, so nothing is served from it.
            warm_home = Path(tmp) / "auto-home"
            timed_run(make_samples(max(sizes), first=10**6), warm_home, base_url, "auto", retry=retry,
                      cache_dir=Path(tmp) / "teach-cache")  # an earlier run against this server, untimed
            for n in sizes:
                samples = make_samples(n)
                for attempt in range(args.repeats):
                    for level in [*fixed, "auto-cold", "auto"]:
                        name = f"{n}-{level}-{attempt}"
                        if level == "auto":
                            measured = timed_run(samples, warm_home, base_url, "auto", retry=retry,
                                                 cache_dir=Path(tmp) / f"cache-{name}")
                        else:
                            concurrency = "auto" if level == "auto-cold" else level
                            measured = timed_run(samples, Path(tmp) / name, base_url, concurrency, retry=retry)
                        best = results[n].get(str(level))
                        if best is None or measured[0] < best[0]:
                            results[n][str(level)] = measured
    finally:
        server.stdin.close()
        server.wait(timeout=10)
    print(f"server latency {args.latency * 1000:.0f} ms, 429 (retry-after-ms {args.retry_after_ms}) above "
          f"{args.capacity} requests in flight; best of {args.repeats} run(s) of each level, interleaved; "
          "auto: in a store that ran against this server before, auto-cold: in a fresh store")
    ok = True
    summary: dict[str, dict] = {}
    for n in sizes:
        print(f"  {n} prompts")
        rates = {}
        for name, (seconds, extra) in results[n].items():
            assert extra["counts"]["ok"] == n, f"concurrency {name} lost samples: {extra['counts']}"
            rates[name] = n / seconds
            note = ""
            if name.startswith("auto"):
                c = extra["concurrency"]
                note = (f"  (started at {c.get('start', '?')}, limit reached {c['highest']}, "
                        f"lowered {c['decreases']} times, ended at {c['final']})")
            print(f"    concurrency {name:>9}: {seconds:7.2f} s  ({rates[name]:6.1f} req/s){note}")
        best = max((k for k in rates if not k.startswith("auto")), key=rates.__getitem__)
        share, cold = rates["auto"] / rates[best], rates["auto-cold"] / rates[best]
        print(f"    auto / best fixed ({best}): {share:.2f}  (target >= {TARGET_AUTO_SHARE:.2f}); "
              f"auto-cold / best fixed: {cold:.2f}")
        ok = ok and share >= TARGET_AUTO_SHARE
        summary[str(n)] = {"req_per_s": {k: round(v, 2) for k, v in rates.items()}, "best_fixed": best,
                           "auto_share": round(share, 3), "auto_cold_share": round(cold, 3)}
    print(json.dumps({"capacity": args.capacity, "retry_after_ms": args.retry_after_ms, "sizes": summary}))
    return ok


def bench_client(args: argparse.Namespace) -> bool:
    """Requests per second through ``run_generation`` against the bare SDK client, same requests,
    same server (answering at once), same process, interleaved; and CPU ms per request."""
    import asyncio

    from persobench.generation import GenerationConfig, plan_generation
    from persobench.store.run_store import RunStore

    n = args.client_prompts
    samples = make_samples(n)
    server = fake_server("--latency", "0")
    gen: list[tuple[float, float]] = []
    bare: list[tuple[float, float]] = []
    try:
        base_url = server.stdout.readline().strip()
        with tempfile.TemporaryDirectory() as tmp:
            config = GenerationConfig(dataset="bench", model="openai:bench", base_url=base_url,
                                      concurrency=CLIENT_CONCURRENCY, checkpoint_every=100)
            plan = plan_generation(config, store=RunStore(Path(tmp) / "plan"), samples=samples)
            requests = [[dict(m) for m in messages] for messages in plan.messages]
            kwargs = {"model": plan.spec.model, "temperature": plan.params.temperature,
                      "max_tokens": plan.params.max_tokens}
            for attempt in range(args.repeats + 1):
                cpu, wall = time.process_time(), time.perf_counter()
                _, extra = timed_run(samples, Path(tmp) / f"gen-{attempt}", base_url, CLIENT_CONCURRENCY)
                gen.append((time.perf_counter() - wall, time.process_time() - cpu))
                assert extra["counts"]["ok"] == n and extra["usage"]["requests"] == n, extra["counts"]
                cpu, wall = time.process_time(), time.perf_counter()
                replies = asyncio.run(bare_client(base_url, requests, kwargs))
                bare.append((time.perf_counter() - wall, time.process_time() - cpu))
                assert len(replies) == n and all(replies)
            if args.profile:
                profile_generation(samples, Path(tmp) / "profiled", base_url)
    finally:
        server.stdin.close()
        server.wait(timeout=10)
    gen, bare = gen[1:], bare[1:]  # the first pair warms imports and connections up
    gen_rate, bare_rate = n / min(w for w, _ in gen), n / min(w for w, _ in bare)
    gen_cpu, bare_cpu = (min(c for _, c in gen) / n * 1000), (min(c for _, c in bare) / n * 1000)
    share = gen_rate / bare_rate
    print(f"{n} requests, {CLIENT_CONCURRENCY} in flight, fake server answering at once; best of {len(gen)} "
          "interleaved runs each")
    print(f"  run_generation:    {gen_rate:7.1f} req/s, {gen_cpu:5.2f} CPU ms per request")
    print(f"  bare AsyncOpenAI:  {bare_rate:7.1f} req/s, {bare_cpu:5.2f} CPU ms per request")
    print(f"  run_generation / bare client: {share:.2f}  (target >= {TARGET_CLIENT_SHARE:.2f})")
    print(json.dumps({"client_requests": n, "concurrency": CLIENT_CONCURRENCY,
                      "generation": {"req_per_s": round(gen_rate, 1), "cpu_ms_per_request": round(gen_cpu, 3),
                                     "runs_s": [round(w, 3) for w, _ in gen]},
                      "bare": {"req_per_s": round(bare_rate, 1), "cpu_ms_per_request": round(bare_cpu, 3),
                               "runs_s": [round(w, 3) for w, _ in bare]},
                      "share": round(share, 3)}))
    return share >= TARGET_CLIENT_SHARE


async def bare_client(base_url: str, requests: list[list[dict]], kwargs: dict) -> list[str]:
    """The same requests through ``openai.AsyncOpenAI`` alone: CLIENT_CONCURRENCY workers, one queue."""
    import openai

    client = openai.AsyncOpenAI(api_key="sk-bench", base_url=base_url, max_retries=0)
    todo = iter(range(len(requests)))
    replies: list[str] = [""] * len(requests)

    async def worker() -> None:
        for i in todo:
            response = await client.chat.completions.create(messages=requests[i], **kwargs)
            replies[i] = response.choices[0].message.content or ""

    import asyncio

    try:
        await asyncio.gather(*(worker() for _ in range(CLIENT_CONCURRENCY)))
    finally:
        await client.close()
    return replies


def profile_generation(samples: list[Sample], home: Path, base_url: str) -> None:
    """One run_generation under cProfile: the functions with the most cumulative and own time."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    timed_run(samples, home, base_url, CLIENT_CONCURRENCY)
    profiler.disable()
    stats = pstats.Stats(profiler).strip_dirs()
    print(f"cProfile of run_generation, {len(samples)} requests (profiling slows everything down):")
    stats.sort_stats("cumulative").print_stats(45)
    stats.sort_stats("tottime").print_stats(30)


def bench_local(args: argparse.Namespace) -> int:
    """Batched vs one-at-a-time SmolLM2, and the cost of the grammar constraint (see the module)."""
    from persobench.providers import local

    import torch

    if args.local_threads:
        torch.set_num_threads(args.local_threads)
    sizes = [int(x) for x in args.local_batch_sizes.split(",")]
    common = dict(dataset="sample", model="local:smollm2", limit=args.local_samples,
                  max_tokens=args.local_max_tokens, checkpoint_every=100)
    local.load_model(local.resolve_local_model("smollm2", {}), {})  # load once, outside the timings
    times: dict[str, float] = {}
    replies: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        def timed(name: str, **fields: object) -> None:
            start = time.perf_counter()
            run = run_generation(home=Path(tmp) / name, **common, **fields)  # type: ignore[arg-type]
            times[name] = time.perf_counter() - start
            frame = run.read_table("generations")
            replies[name] = dict(zip(frame["sample_id"], frame["raw_text"]))
            print(f"  {name:<22} {times[name]:7.2f} s", flush=True)

        print(f"SmolLM2, {args.local_samples} demo samples, vanilla, max_tokens {args.local_max_tokens}, "
              f"{torch.get_num_threads()} torch thread(s)")
        for size in [*sizes, sizes[0]]:
            timed(f"batch {size}" if f"batch {size}" not in times else f"batch {size} again", batch_size=size)
        timed("plain", batch_size=local.DEFAULT_BATCH_SIZE)
        timed("structured", batch_size=local.DEFAULT_BATCH_SIZE, structured=True)
    base = min(times[f"batch {sizes[0]}"], times[f"batch {sizes[0]} again"])
    speedup = {size: round(base / times[f"batch {size}"], 2) for size in sizes}
    equal = {size: sum(replies[f"batch {size}"][k] == v for k, v in replies[f"batch {sizes[0]}"].items())
             for size in sizes}
    overhead = times["structured"] / times["plain"]
    for size in sizes:
        print(f"  batch {size}: {speedup[size]:.2f}x batch {sizes[0]}, "
              f"{equal[size]}/{args.local_samples} replies equal to batch {sizes[0]}'s")
    print(f"  batch {sizes[0]} measured twice: {times[f'batch {sizes[0]}']:.1f} s and "
          f"{times[f'batch {sizes[0]} again']:.1f} s (load noise)")
    print(f"  structured / plain at batch {local.DEFAULT_BATCH_SIZE}: {overhead:.2f}x time")
    print(json.dumps({"local_samples": args.local_samples, "max_tokens": args.local_max_tokens,
                      "threads": torch.get_num_threads(),
                      "seconds": {k: round(v, 2) for k, v in times.items()}, "speedup": speedup,
                      "equal_to_batch_1": equal, "structured_over_plain": round(overhead, 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
