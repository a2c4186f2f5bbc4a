"""Pacing by stated rate limits: ``persobench run`` against a fake server limited to 600 requests
and 40,000 tokens a minute, alone and as two concurrent runs on one key, measured against the time
the server's buckets allow.

The server (``python -m tests.fakes``, a separate process, real HTTP on 127.0.0.1) keeps a request
bucket and a token bucket (:mod:`tests.fakes.buckets`): 600 and 40,000 a minute, starting with 20
requests and 2,000 tokens left when the first request arrives, 0.2 s latency; it states both in
OpenAI's headers and refuses (429, ``retry-after``) what they cannot pay for. Each request costs its
prompt's tokens and its whole ``max_tokens`` (20) when it arrives; the reply gives back what it did
not use. The workload: 400 samples of a user file, the first half short (about 47 tokens a request,
so the request limit binds), the second half long (about 165, so the token limit binds once the
tokens saved meanwhile are spent).

1. **one run**, cold (a fresh store): ``run --concurrency auto`` over the 400 samples;
2. **two runs on one key** in one store, started together: 200 samples each (half short, half long);
3. ``--no-headers`` also runs the no-header comparison of ``benchmarks/generation.py --only auto``
   (a server refusing above 8 in flight, stating nothing): ``auto`` against the best fixed level.

For 1 and 2 the figure is the server's span (first request in to last reply out) over the least
time the buckets allow the same requests in the same order (:func:`tests.fakes.buckets.min_seconds`:
each sent as soon as both buckets hold it, the last reply ``latency`` later), and the share of
requests refused; the commands' wall time is printed too (it adds the process start and the plan).
Targets: one run at most 1.05x and 1% refused; two runs together at most 1.1x and 2% refused.

    python benchmarks/pacing.py [--only single|shared|no-headers] [--samples 400] [--latency 0.2]
                                [--concurrency auto|N] [--checkout DIR] [--no-headers]

Prints the figures and one JSON line; exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fakes.buckets import min_seconds  # noqa: E402

TARGET_SINGLE, TARGET_SINGLE_REFUSED = 1.05, 0.01
TARGET_SHARED, TARGET_SHARED_REFUSED = 1.10, 0.02
#: The key both runs send (one key: one budget). A made-up one: the server checks nothing.
BENCH_KEY = "sk-bench-pacing-0000"
TEMPLATE = """mode = "vanilla"
system = "Write the next turn."
user = "{personas}\\n{context}\\n{output_format}"
output_format = 'JSON: {"response": "..."}'
max_tokens = 20
"""


class FakeServer:
    """``python -m tests.fakes`` in a process of its own; :attr:`summary` is what it saw, after exit."""

    def __init__(self, *args: str, flavour: str = "openai") -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "tests.fakes", "--flavour", flavour, *args],
                                        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        self.base_url = self.process.stdout.readline().strip()
        self.summary: dict[str, Any] = {}

    def stop(self) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        out = self.process.stdout.read()
        self.process.wait(timeout=30)
        self.summary = json.loads(out.strip().splitlines()[-1])
        return self.summary

    def __enter__(self) -> "FakeServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.process.poll() is None:
            self.stop()


def write_workload(folder: Path, name: str, short: int, long: int, first: int = 0) -> Path:
    """A user file of ``short`` short samples then ``long`` long ones (distinct prompts), numbered
    from ``first``; the template beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pacing.toml").write_text(TEMPLATE, encoding="utf-8")
    path = folder / f"{name}.jsonl"
    with path.open("w", encoding="utf-8") as out:
        for i in range(first, first + short + long):
            text = f"hi there, number {i}" if i - first < short else f"number {i}: " + "I like long walks by the sea. " * 16
            out.write(json.dumps({"id": f"p{i}", "personas": ["I like tea."], "context": [f"User1: {text}"],
                                  "act_response": "ok"}) + "\n")
    return path


def persobench_run(home: Path, dataset: Path, base_url: str, *extra: str, checkout: Path | None = None
                   ) -> subprocess.Popen:
    """``python -m persobench run`` on ``dataset`` against ``base_url`` (a process of its own), from
    this checkout or ``checkout`` (another version of the code, e.g. ``git archive`` of an older commit)."""
    root = Path(checkout) if checkout else REPO
    env = {**os.environ, "OPENAI_API_KEY": BENCH_KEY, "PYTHONPATH": str(root)}
    argv = [sys.executable, "-m", "persobench", "--home", str(home), "run", "--dataset", str(dataset),
            "--template", str(dataset.parent / "pacing.toml"), "--model", "openai:bench", "--base-url", base_url,
            "--no-progress", *extra]
    return subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(process: subprocess.Popen) -> None:
    out, err = process.communicate(timeout=900)
    if process.returncode != 0:
        raise SystemExit(f"persobench run failed ({process.returncode}): {err.strip()[-2000:]}")


def limited_server(args: argparse.Namespace) -> FakeServer:
    return FakeServer("--latency", str(args.latency), "--rpm", str(args.rpm), "--tpm", str(args.tpm),
                      "--start", f"requests={args.start_requests}", "--start", f"tokens={args.start_tokens}")


def figures(summary: dict[str, Any], args: argparse.Namespace, wall: float) -> dict[str, Any]:
    """Span, bound, ratios and refusals of one measured run (or pair of runs) from the server's summary."""
    limits = summary["limits"]
    start = {"requests": args.start_requests, "tokens": args.start_tokens}
    bound = min_seconds(limits["admitted"], limits["limits"], start, args.latency)
    span = summary["last_reply"] - summary["first_arrival"]
    sent = summary["requests"]
    return {"requests": sent, "replies": summary["replies"], "refused": summary["refused"],
            "refused_share": round(summary["refused"] / sent, 4) if sent else 0.0,
            "bound_s": round(bound, 2), "span_s": round(span, 2), "wall_s": round(wall, 2),
            "ratio": round(span / bound, 3), "wall_ratio": round(wall / bound, 3)}


def binding(summary: dict[str, Any], args: argparse.Namespace) -> str:
    """Which limit the workload's demand exceeds in each half (both must bind at some point)."""
    admitted = summary["limits"]["admitted"]
    half = len(admitted) // 2
    out = []
    for name, part in (("first half", admitted[:half]), ("second half", admitted[half:])):
        tokens = sum(r["prompt"] + r.get("completion", r["max_tokens"]) for r in part) / max(1, len(part))
        at_rpm = tokens * args.rpm
        out.append(f"{name}: {tokens:.0f} tokens a request, {at_rpm:,.0f} a minute at the request limit "
                   f"({'tokens bind' if at_rpm > args.tpm else 'requests bind'})")
    return "; ".join(out)


def bench_single(args: argparse.Namespace, tmp: Path) -> tuple[bool, dict[str, Any]]:
    dataset = write_workload(tmp / "single", "single", args.samples // 2, args.samples - args.samples // 2)
    return measure(args, tmp / "single-home", [dataset], TARGET_SINGLE, TARGET_SINGLE_REFUSED,
                   f"one run, {args.samples} samples, --concurrency {args.concurrency}, cold (fresh store)")


def bench_shared(args: argparse.Namespace, tmp: Path) -> tuple[bool, dict[str, Any]]:
    half, quarter = args.samples // 2, args.samples // 4
    datasets = [write_workload(tmp / "shared", f"run{k}", quarter, half - quarter, first=k * half) for k in (0, 1)]
    return measure(args, tmp / "shared-home", datasets, TARGET_SHARED, TARGET_SHARED_REFUSED,
                   f"two runs of {half} samples each on one key, one store, started together, "
                   f"--concurrency {args.concurrency}")


def measure(args: argparse.Namespace, home: Path, datasets: list[Path], target: float, refused_target: float,
            title: str) -> tuple[bool, dict[str, Any]]:
    """``run`` on each of ``datasets`` at once, in one store, against a fresh limited server."""
    with limited_server(args) as server:
        started = time.perf_counter()
        runs = [persobench_run(home, d, server.base_url, "--concurrency", args.concurrency, checkout=args.checkout)
                for d in datasets]
        for run in runs:
            finished(run)
        wall = time.perf_counter() - started
        summary = server.stop()
    result = figures(summary, args, wall)
    print(title + (f" (the code in {args.checkout})" if args.checkout else ""))
    print(f"  {binding(summary, args)}")
    _report(result, target, refused_target)
    return result["ratio"] <= target and result["refused_share"] <= refused_target, result


def _report(result: dict[str, Any], target: float, refused_target: float) -> None:
    print(f"  the buckets allow {result['bound_s']:.2f} s; the server saw {result['span_s']:.2f} s from the first "
          f"request to the last reply: {result['ratio']:.3f}x (target <= {target})")
    print(f"  refused: {result['refused']} of {result['requests']} requests ({result['refused_share']:.1%}, target "
          f"<= {refused_target:.0%}); wall time of the command(s) {result['wall_s']:.2f} s "
          f"({result['wall_ratio']:.3f}x, process start and plan included)")


def bench_no_headers(args: argparse.Namespace) -> bool:
    """``benchmarks/generation.py --only auto``'s comparison: a server that states nothing."""
    import benchmarks.generation as generation

    options = argparse.Namespace(prompts_auto=args.no_headers_prompts, capacity=8, retry_after_ms=1000,
                                 latency=0.1, fixed=args.no_headers_fixed, repeats=args.repeats)
    return generation.bench_auto(options)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("single", "shared", "no-headers"), default=None)
    parser.add_argument("--samples", type=int, default=400)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--rpm", type=float, default=600)
    parser.add_argument("--tpm", type=float, default=40_000)
    parser.add_argument("--start-requests", type=float, default=20)
    parser.add_argument("--start-tokens", type=float, default=2_000)
    parser.add_argument("--concurrency", default="auto")
    parser.add_argument("--checkout", type=Path, default=None,
                        help="run `persobench run` from this folder instead (another version of the code: "
                             "`git archive <commit> | tar -x -C DIR`), to measure before and after")
    parser.add_argument("--no-headers", action="store_true", help="also run the no-header comparison (minutes)")
    parser.add_argument("--no-headers-prompts", default="400")
    parser.add_argument("--no-headers-fixed", default="4,8,16")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each level in the no-header comparison")
    args = parser.parse_args(argv)
    print(f"load average at start: {', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    ok, out = True, {}
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        if args.only in (None, "single"):
            good, out["single"] = bench_single(args, tmp)
            ok = ok and good
        if args.only in (None, "shared"):
            good, out["shared"] = bench_shared(args, tmp)
            ok = ok and good
    if args.only == "no-headers" or (args.only is None and args.no_headers):
        ok = bench_no_headers(args) and ok
    print(json.dumps({"rpm": args.rpm, "tpm": args.tpm, "latency": args.latency, **out}))
    return 0 if ok else 1



if __name__ == "__main__":
    sys.exit(main())
