"""PersoBench beside its closest peer: the same FoCus prompts through ``persobench run`` and through
inspect_ai's ``inspect eval`` against the same fake servers, in one run.

inspect_ai has adaptive connections driven by rate-limit feedback; PersoBench has ``--concurrency
auto`` and pacing by stated limits. Three servers (``python -m tests.fakes``, a process of its own,
real HTTP on 127.0.0.1, a fresh one for every measured command):

1. ``fixed``: answers after 0.1 s; both tools at 8 in flight (``--concurrency 8``,
   ``--max-connections 8``): the latency allows ``n x 0.1 / 8`` s;
2. ``capacity``: answers after 0.1 s and refuses (429, ``retry-after-ms: 1000``) a request arriving
   while more than 8 are in flight; both tools adapt (``--concurrency auto``, inspect's default
   adaptive connections);
3. ``bucket``: 600 requests a minute, 20 left when the first arrives, 0.2 s latency, stated in
   OpenAI's headers, 429 with ``retry-after`` when empty; both adapt: ``(n - 20) / 10 + 0.2`` s.

The prompts are the first ``--samples`` of ``run --dataset focus`` (the paper's FoCus prompt table,
found through ``PERSOBENCH_REFERENCE``), written to a JSON file that ``benchmarks/inspect_task.py``
turns into inspect samples; both ask for 110 tokens at temperature 0 of model ``gpt-4o-mini``
(``-M responses_api=false``: inspect's OpenAI provider then uses chat completions). Each command is
timed whole (process start included) with its CPU time (user + system of the process and its
children); PersoBench runs in a store where the FoCus table was parsed before (a user's store) and
nothing is cached or remembered. ``--repeats`` rounds, interleaved; every round is printed.

inspect_ai lives in an environment of its own (``make bench-peer`` creates ``.venv-peer`` from
``benchmarks/requirements-peer.txt`` and runs this script; PersoBench's ``.venv`` never gets it)::

    python benchmarks/peer.py --inspect .venv-peer/bin/inspect [--samples 400] [--repeats 2]
                              [--only fixed,capacity,bucket] [--checkout DIR]

``--inspect`` defaults to ``$PERSOBENCH_INSPECT``. ``--checkout DIR`` also times ``persobench run``
from another version of the code (``git archive <commit> | tar -x -C DIR``): before and after in one
run. Prints a table and one JSON line; exits 1 when PersoBench is not ahead of inspect_ai on every
line (wall time, and refusals where they happen).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.pacing import BENCH_KEY, FakeServer  # noqa: E402

MODEL = "gpt-4o-mini"
MAX_TOKENS = 110
SCENARIOS: dict[str, dict[str, Any]] = {
    "fixed": {"title": "fixed 8 in flight, 0.1 s latency", "server": ["--latency", "0.1"],
              "persobench": ["--concurrency", "8"], "inspect": ["--max-connections", "8"],
              "allows": lambda n: n * 0.1 / 8},
    "capacity": {"title": "a server refusing above 8 in flight (retry-after-ms 1000), 0.1 s latency; both adapt",
                 "server": ["--latency", "0.1", "--capacity", "8", "--retry-after-ms", "1000"],
                 "persobench": ["--concurrency", "auto"], "inspect": [], "allows": lambda n: n * 0.1 / 8},
    "bucket": {"title": "600 requests a minute, 20 to start, 0.2 s latency, stated in headers; both adapt",
               "server": ["--latency", "0.2", "--rpm", "600", "--start", "requests=20"],
               "persobench": ["--concurrency", "auto"], "inspect": [], "allows": lambda n: (n - 20) / 10 + 0.2},
}


def timed(argv: list[str], *, env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process and its children) of one command, which must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} ... failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def focus_prompts(samples: int, home: Path) -> list[list[dict[str, str]]]:
    """The messages ``run --dataset focus --limit samples`` sends (planned here, nothing sent)."""
    from persobench.generation import GenerationConfig, plan_generation
    from persobench.store.run_store import RunStore

    config = GenerationConfig(dataset="focus", model=f"openai:{MODEL}", base_url="http://127.0.0.1:9/v1",
                              limit=samples, max_tokens=MAX_TOKENS)
    plan = plan_generation(config, store=RunStore(home))
    return [[dict(m) for m in messages] for messages in plan.messages]


class Tools:
    """How each tool is started against a base URL (``command(name, base_url, extra, folder)``)."""

    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.args, self.tmp = args, tmp
        self.env = {**os.environ, "OPENAI_API_KEY": BENCH_KEY}
        self.roots = {"persobench": REPO}
        if args.checkout:
            self.roots["before"] = Path(args.checkout).resolve()
        for root in self.roots.values():  # as `make bytecode` does: no process compiles the modules again
            subprocess.run([sys.executable, "-m", "compileall", "-q", "persobench"], cwd=root, check=True,
                           stdout=subprocess.DEVNULL)
        self.homes: dict[str, Path] = {}
        for name, root in self.roots.items():  # a user's store: the FoCus table parsed, nothing cached
            home = tmp / f"{name}-prepared"
            self._persobench(home, "http://127.0.0.1:9/v1", ["--dry-run"], root)
            self.homes[name] = home
        self.messages = tmp / "messages.json"
        self.messages.write_text(json.dumps(focus_prompts(args.samples, tmp / "plan-home")), encoding="utf-8")

    def _argv(self, home: Path, base_url: str, extra: list[str]) -> list[str]:
        return [sys.executable, "-m", "persobench", "--home", str(home), "run", "--dataset", "focus", "--limit",
                str(self.args.samples), "--model", f"openai:{MODEL}", "--base-url", base_url, "--max-tokens",
                str(MAX_TOKENS), "--no-progress", *extra]

    def _persobench(self, home: Path, base_url: str, extra: list[str], root: Path) -> tuple[float, float]:
        env = {**self.env, "PYTHONPATH": str(root)}
        return timed(self._argv(home, base_url, extra), env=env, cwd=root)

    def run(self, name: str, base_url: str, extra: list[str], folder: Path) -> tuple[float, float]:
        if name == "inspect":
            argv = [str(self.args.inspect), "eval", "inspect_task.py", "-T", f"messages={self.messages}",
                    "--model", f"openai/{MODEL}", "--model-base-url", base_url, "-M", "responses_api=false",
                    "--max-tokens", str(MAX_TOKENS), "--temperature", "0", "--log-dir", str(folder / "logs"),
                    "--display", "none", *extra]
            return timed(argv, env=self.env, cwd=REPO / "benchmarks")
        home = folder / "home"
        shutil.copytree(self.homes[name], home)
        return self._persobench(home, base_url, extra, self.roots[name])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inspect", type=Path, default=os.environ.get("PERSOBENCH_INSPECT"),
                        help="the `inspect` command of an environment with inspect_ai (make bench-peer makes one); "
                             "default $PERSOBENCH_INSPECT")
    parser.add_argument("--samples", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated scenarios")
    parser.add_argument("--checkout", type=Path, default=None,
                        help="also time `persobench run` from this folder (another version of the code)")
    args = parser.parse_args(argv)
    if not args.inspect or not Path(args.inspect).exists():
        print("inspect_ai not found: `make bench-peer` installs it in .venv-peer and runs this benchmark, or pass "
              "--inspect PATH/bin/inspect (or set PERSOBENCH_INSPECT)", file=sys.stderr)
        return 2
    os.environ.setdefault("PERSOBENCH_REFERENCE", str(REPO.parent / "shared" / "persobench-reference"))
    print(f"load average at start: {', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    scenarios = [s for s in args.only.split(",") if s]
    results: dict[str, dict[str, list[dict[str, float]]]] = {s: {} for s in scenarios}
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        tools = Tools(args, tmp)
        names = [*tools.roots, "inspect"]
        for round_ in range(args.repeats):
            for scenario in scenarios:
                spec = SCENARIOS[scenario]
                for name in names:
                    server = FakeServer(*spec["server"])
                    try:
                        extra = spec["inspect" if name == "inspect" else "persobench"]
                        wall, cpu = tools.run(name, server.base_url, extra, tmp / f"{scenario}-{name}-{round_}")
                    finally:
                        seen = server.stop()
                    assert seen["replies"] == args.samples, f"{name} in {scenario}: {seen}"
                    results[scenario].setdefault(name, []).append(
                        {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "refused": seen["refused"],
                         "requests": seen["requests"]})
    ok = report(results, names, args.samples)
    print(json.dumps({"samples": args.samples, "results": results}))
    return 0 if ok else 1


def _span(values: list[float], unit: str = "", digits: int = 1) -> str:
    low, high = min(values), max(values)
    return f"{low:.{digits}f}{unit}" if low == high else f"{low:.{digits}f}-{high:.{digits}f}{unit}"


def report(results: dict[str, dict[str, list[dict[str, float]]]], names: list[str], samples: int) -> bool:
    """Print the side-by-side table; whether PersoBench is ahead on every line."""
    ok = True
    label = {"persobench": "PersoBench", "before": "PersoBench before", "inspect": "inspect_ai"}
    for scenario, by_tool in results.items():
        spec = SCENARIOS[scenario]
        print(f"{spec['title']} ({samples} prompts; the server allows {spec['allows'](samples):.1f} s)")
        for name in names:
            runs = by_tool[name]
            print(f"  {label[name]:<18} wall {_span([r['wall_s'] for r in runs], ' s'):<12} "
                  f"CPU {_span([r['cpu_s'] for r in runs], ' s'):<12} refused {_span([r['refused'] for r in runs], digits=0)}")
        ours, theirs = by_tool["persobench"], by_tool["inspect"]
        ahead = max(r["wall_s"] for r in ours) < min(r["wall_s"] for r in theirs) and \
            max(r["refused"] for r in ours) <= min(r["refused"] for r in theirs)
        print(f"  PersoBench ahead on every round: {'yes' if ahead else 'NO'}")
        ok = ok and ahead
    return ok


if __name__ == "__main__":
    sys.exit(main())
