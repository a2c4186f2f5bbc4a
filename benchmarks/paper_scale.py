"""Paper scale, simulated: the paper's whole grid (8 models x 5 datasets x 2 modes: 80 runs, 82,064
requests) generated with ``persobench run`` against fake providers at a stated rate-limit tier, then
scored with the offline profile's lexical metrics and built into the landing board, phase by phase.

**The tier.** Every model gets a fake server of its own (``python -m tests.fakes``, a process each,
real HTTP on 127.0.0.1, :class:`benchmarks.pacing.FakeServer`), so each model has its own buckets,
as a provider counts per model and key: ``--rpm`` requests and ``--tpm`` tokens a minute (default
5,000 and 2,000,000), stated in OpenAI's headers, 429 with ``retry-after`` when a bucket is empty,
every reply after ``--latency`` seconds (default 0.5). A request costs its prompt (characters / 4)
and its whole ``max_tokens`` (110 vanilla, 220 cot) when it arrives and gets the unused reply
tokens back with its reply (:mod:`tests.fakes.buckets`). The buckets start with
``--start-seconds`` of refill (default 1 s: a key used a moment ago; full buckets would let the
first 5,000 requests of every model through at once). Each model has its own key variable.

**The models.** The paper's eight presets (:mod:`persobench.presets`) by name, pointed at their
servers by the store's models file (``<home>/models.toml``, each preset's options kept): the four
API models through chat completions (Gemini with the system text in the user message), the four
open models as their ``-vllm`` presets (raw text to ``/v1/completions``).

**The launch** (``--launch``), each run one ``python -m persobench run`` with the paper's protocol
(the defaults) plus ``--concurrency auto --max-concurrency N`` (default 64: the tier needs
``rpm / 60 x latency`` = 42 requests in flight, above the CLI's default ceiling of 32):

- ``lanes`` (default): the way a user runs a grid from the shell, one loop per model side by side
  (models do not share limits), each running its model's ten runs one after another
  (``benchmarks/paper_grid.sh``);
- ``sequential``: one loop over all 80 runs (the obvious script);
- ``job``: the app's New run page with every dataset, model and mode chosen: one background job
  (:mod:`persobench.jobs`, planned by :func:`persobench.jobs.plan_launch` as the page plans it),
  its run steps one after another.

**The phases and their figures** (each a process tree; wall, CPU = user + system of every process
the phase waited for, from ``wait4``; peak memory = the largest sum of the tree's resident sets,
sampled every 0.5 s, and the largest single process's peak from ``wait4``):

1. **generation**: the launch, from its start to the last run's exit, against the
   **limit-implied minimum**: per model the least time its buckets allow its requests in the order
   they arrived (:func:`tests.fakes.buckets.min_seconds`); the grid's is the slowest model's (a
   sequential launch's, their sum). Goal: at most 1.1x. CPU per request, and the **CPU-implied
   minimum** (the launch's and the fake servers' CPU over the machine's cores): when it is above
   the limits' minimum, the machine, not the tier, sets the pace;
2. **score**: ``score --profile offline --metrics`` the lexical metrics (:data:`benchmarks.scoring.LEXICAL`:
   what needs no model);
3. **leaderboard**: ``leaderboard --format csv`` (every board);
4. **landing**: the app's first view (:func:`persobench.aggregate.landing.warm_landing`, the
   functions the landing page reads through) in a fresh process, on the store with its
   ``aggregate/`` cache deleted.

**Consistency**, checked and printed: every planned run is in the store, completed, with the
planned samples; the requests the fake servers answered = the requests the plan said would be sent
(:func:`persobench.jobs.plan_launch`, as the New run page estimates them) = the requests the runs'
manifests count; every run scored; the landing built.

``--scale F`` runs ``ceil(F x rows)`` samples of each table (``run --limit``); the grid keeps its
80 runs, so their start-up costs stay whole while the requests shrink. ``--models N`` and
``--datasets N`` take the first N of each (a smoke run: ``--scale 0.002 --models 1 --datasets 1``,
two runs, seconds).

    python benchmarks/paper_scale.py [--scale 1.0] [--launch lanes|sequential|job] [--rpm 5000]
        [--tpm 2000000] [--latency 0.5] [--max-concurrency 64] [--models 8] [--datasets 5]
        [--home DIR] [--keep] [--no-board]

Needs the paper's prompt tables (``$PERSOBENCH_REFERENCE``). Prints the figures and one JSON line;
exits 2 when a consistency check fails, 1 when the wall time is over 1.1x the minimum. The load
average is printed before and after: on a shared machine the figures are indicative only.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.app import PREPARE  # noqa: E402
from benchmarks.pacing import FakeServer  # noqa: E402
from benchmarks.scoring import LEXICAL  # noqa: E402
from tests.fakes.buckets import min_seconds  # noqa: E402

TARGET = 1.1
MODES = ("vanilla", "cot")
GRID_SCRIPT = REPO / "benchmarks" / "paper_grid.sh"
PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")
PHASES = ("generation", "score", "leaderboard", "landing")


def paper_models() -> tuple[str, ...]:
    """The paper's eight models as presets: the API models, then the open ones served by vLLM."""
    from persobench.providers.presets import OPEN_MODELS, PAPER_PRESETS

    api = [name for name, spec in PAPER_PRESETS.items() if spec.provider != "local" and not name.endswith("-vllm")]
    return (*api, *(f"{name}-vllm" for name in OPEN_MODELS))


def paper_datasets() -> tuple[str, ...]:
    """The paper's five prompt tables, in the paper's order."""
    from persobench.aggregate.landing import PAPER_DATASET_ORDER

    return PAPER_DATASET_ORDER


# -- processes: CPU and memory -----------------------------------------------------------------


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _descendants(roots: list[int], tree: dict[int, list[int]]) -> list[int]:
    out, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += tree.get(pid, [])
    return out


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as handle:
            return int(handle.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def cpu_seconds(pid: int) -> float:
    """User + system seconds of a live process (its threads included, its children not)."""
    with open(f"/proc/{pid}/stat", "rb") as handle:
        stat = handle.read()
    fields = stat[stat.rindex(b")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


class MemorySampler:
    """The largest sum of resident set sizes over some processes and their descendants, every
    ``interval`` seconds, in a thread."""

    def __init__(self, roots: list[int], interval: float = 0.5) -> None:
        self.roots, self.interval = roots, interval
        self.peak, self.peak_processes = 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            pids = _descendants(self.roots, _children())
            total = sum(rss_bytes(pid) for pid in pids)
            if total > self.peak:
                self.peak, self.peak_processes = total, len(pids)
            self._stop.wait(self.interval)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def timed(argv: list[str], *, env: dict[str, str]) -> dict[str, Any]:
    """Run ``argv`` to its end: wall and CPU seconds (it and every descendant it waited for, from
    ``wait4``), peak summed RSS of its tree and the largest single process's peak (MB), exit status."""
    started = time.perf_counter()
    process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    sampler = MemorySampler([process.pid])
    assert process.stderr is not None
    stderr_lines: list[str] = []
    reader = threading.Thread(target=lambda: stderr_lines.extend(process.stderr), daemon=True)  # type: ignore[arg-type]
    reader.start()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    reader.join()
    peak = sampler.stop()
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "user_s": usage.ru_utime,
            "system_s": usage.ru_stime, "peak_rss_mb": peak / 2**20, "peak_processes": sampler.peak_processes,
            "largest_process_mb": usage.ru_maxrss / 1024, "returncode": process.returncode,
            "stderr": "".join(stderr_lines)[-4000:]}


# -- the grid ----------------------------------------------------------------------------------


def write_models_file(home: Path, models: tuple[str, ...], servers: list[FakeServer]) -> dict[str, str]:
    """``<home>/models.toml``: each preset under its own name at its own server with its own key
    variable; returns the environment that holds the keys (made-up keys: the fakes check none)."""
    from persobench.providers import PAPER_PRESETS

    lines, env = [], {}
    for index, (name, server) in enumerate(zip(models, servers)):
        spec = PAPER_PRESETS[name]
        key_env = f"BENCH_KEY_{index}"
        env[key_env] = f"sk-bench-paper-scale-{index:04d}"
        options = ", ".join(f"{k} = {json.dumps(v)}" for k, v in spec.options.items())
        lines += [f"[models.{json.dumps(name)}]", f"provider = {json.dumps(spec.provider)}",
                  f"model = {json.dumps(spec.model)}", f"base_url = {json.dumps(server.base_url)}",
                  f"api_key_env = {json.dumps(key_env)}", f"label = {json.dumps(spec.label or name)}",
                  f"options = {{ {options} }}", ""]
    home.mkdir(parents=True, exist_ok=True)
    (home / "models.toml").write_text("\n".join(lines), encoding="utf-8")
    return env


def sample_limits(datasets: tuple[str, ...], scale: float) -> dict[str, int | None]:
    """Each table's ``run --limit`` at ``scale`` (``None``: the whole table)."""
    if scale >= 1:
        return dict.fromkeys(datasets)
    from persobench.datasets import load_dataset

    return {name: max(1, math.ceil(len(load_dataset(name)) * scale)) for name in datasets}


def plan_grid(args: argparse.Namespace, home: Path, limits: dict[str, int | None]) -> list[dict[str, Any]]:
    """Every run of the grid as the app's New run page plans it (:func:`persobench.jobs.plan_launch`):
    run id, samples, requests to send; nothing is sent."""
    from persobench.jobs import LaunchChoice, plan_launch

    plans = []
    for dataset in args.dataset_names:
        choices = [LaunchChoice(dataset, model, mode) for model in args.model_names for mode in MODES]
        plans += plan_launch(home, choices, limit=limits[dataset], env=dict(os.environ))
    problems = [f"{p['model']} {p['dataset']} {p['mode']}: {p['problem']}" for p in plans if p["problem"]]
    if problems:
        raise SystemExit("the grid cannot be planned: " + "; ".join(problems))
    return plans


def launch_argv(args: argparse.Namespace, home: Path, limits: dict[str, int | None],
                plans: list[dict[str, Any]]) -> list[str]:
    """The command that runs the grid the chosen way."""
    flags = ["--concurrency", "auto", "--max-concurrency", str(args.max_concurrency), "--no-progress"]
    if args.launch in ("lanes", "sequential"):
        limited = " ".join(f"{name}={n}" for name, n in limits.items() if n is not None)
        return ["bash", str(GRID_SCRIPT), "--home", str(home), "--parallel" if args.launch == "lanes" else "--serial",
                "--models", " ".join(args.model_names), "--datasets", " ".join(args.dataset_names),
                "--limits", limited, "--", *flags]
    return [sys.executable, "-m", "persobench.jobs.job_process", "job",
            str(write_job(home, plans, args.max_concurrency))]


def write_job(home: Path, plans: list[dict[str, Any]], max_concurrency: int) -> Path:
    """The job the New run page launches for the planned grid (no score step: the benchmark scores
    as a phase of its own; the runs' ceiling for ``auto`` set as the CLI's flag sets it), written as
    :class:`persobench.jobs.JobManager` writes it; the benchmark starts its runner itself so that it
    can wait for it."""
    from persobench.store import atomic_write_json
    from persobench.jobs import launch_steps
    from persobench.jobs.model import job_id_for

    plans = [{**plan, "config": {**plan["config"], "max_concurrency": max_concurrency}} for plan in plans]
    steps = launch_steps(plans, profile=None, concurrency="auto")
    job_id = job_id_for("paper grid", steps)
    folder = home / "jobs" / job_id
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_json(folder / "job.json", {"job_id": job_id, "title": "paper grid",
                                            "steps": [s.to_dict() for s in steps], "home": str(home)})
    return folder


def bench_env(home: Path, keys: dict[str, str]) -> dict[str, str]:
    """The launch's environment: no real key, the made-up ones, the store, this checkout."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(keys, PERSOBENCH_HOME=str(home), PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", PYTHON=sys.executable)
    env.setdefault("PERSOBENCH_REFERENCE", str(REPO.parent / "shared" / "persobench-reference"))
    return env


def generate(args: argparse.Namespace, home: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Start one limited fake server per model, plan the grid, launch it and wait: the figures, and
    the plans."""
    start = {"requests": args.rpm / 60 * args.start_seconds, "tokens": args.tpm / 60 * args.start_seconds}
    servers = [FakeServer("--latency", str(args.latency), "--rpm", str(args.rpm), "--tpm", str(args.tpm),
                          "--start", f"requests={start['requests']}", "--start", f"tokens={start['tokens']}")
               for _ in args.model_names]
    try:
        keys = write_models_file(home, args.model_names, servers)
        env = bench_env(home, keys)
        os.environ.update(keys, PERSOBENCH_HOME=str(home))  # the plan reads the keys as the page would
        limits = sample_limits(args.dataset_names, args.scale)
        plans = plan_grid(args, home, limits)
        argv = launch_argv(args, home, limits, plans)
        server_pids = [s.process.pid for s in servers]
        server_cpu0 = sum(cpu_seconds(pid) for pid in server_pids)
        server_memory = MemorySampler(server_pids)
        result = timed(argv, env=env)
        server_cpu = sum(cpu_seconds(pid) for pid in server_pids) - server_cpu0
        server_peak = server_memory.stop()
    finally:
        summaries = []
        for server in servers:
            try:
                summaries.append(server.stop())
            except Exception:  # noqa: BLE001 - a server that died: its figures are missing
                summaries.append({})
    if result["returncode"] != 0:
        print(f"the launch failed ({result['returncode']}): {result['stderr']}", file=sys.stderr)
    bounds = [min_seconds(s["limits"]["admitted"], s["limits"]["limits"], start, args.latency)
              if s.get("limits") and s["limits"]["admitted"] else 0.0 for s in summaries]
    replies = sum(s.get("replies", 0) for s in summaries)
    bound = sum(bounds) if args.launch != "lanes" else max(bounds)
    cpu_bound = (result["cpu_s"] + server_cpu) / (os.cpu_count() or 1)
    return {**result, "requests": sum(s.get("requests", 0) for s in summaries), "replies": replies,
            "refused": sum(s.get("refused", 0) for s in summaries), "bound_s": bound,
            "bounds_s": [round(b, 2) for b in bounds], "ratio": result["wall_s"] / bound if bound else None,
            "cpu_ms_per_request": 1000 * result["cpu_s"] / max(1, replies),
            "server_cpu_s": server_cpu, "server_cpu_ms_per_request": 1000 * server_cpu / max(1, replies),
            "server_peak_rss_mb": server_peak / 2**20, "cpu_bound_s": cpu_bound,
            "client_cpu_bound_s": result["cpu_s"] / (os.cpu_count() or 1),
            "spans_s": [round(s["last_reply"] - s["first_arrival"], 2) if s.get("last_reply") else None
                        for s in summaries]}, plans


def board(home: Path) -> dict[str, dict[str, Any]]:
    """The phases after generation, each a fresh process on the store."""
    env = bench_env(home, {})
    py = sys.executable
    phases = {"score": timed([py, "-m", "persobench", "score", "--profile", "offline", "--metrics", ",".join(LEXICAL),
                              "--no-progress"], env=env),
              "leaderboard": timed([py, "-m", "persobench", "leaderboard", "--format", "csv"], env=env)}
    from persobench.aggregate.disk_cache import CACHE_DIR

    shutil.rmtree(home / CACHE_DIR, ignore_errors=True)  # what `score` prepared: the landing built cold
    phases["landing"] = timed([py, "-c", PREPARE, str(home)], env=env)
    return phases


def consistency(home: Path, plans: list[dict[str, Any]], gen: dict[str, Any], scored: bool) -> dict[str, Any]:
    """What the store holds against what was planned and what the servers answered."""
    from persobench.aggregate.disk_cache import CACHE_DIR
    from persobench.store import RunStore

    runs = {run.run_id: run for run in RunStore(home).runs()}
    planned = {p["run_id"]: p for p in plans}
    completed = [rid for rid in planned if rid in runs and runs[rid].manifest.status == "completed"]
    samples = sum(sum(v for k, v in (runs[rid].manifest.details.counts or {}).items() if k != "pending")
                  for rid in completed)
    manifest_requests = sum(runs[rid].manifest.details.usage.requests for rid in completed)
    out = {"runs_planned": len(planned), "runs_completed": len(completed),
           "samples_planned": sum(p["samples"] for p in plans), "samples_stored": samples,
           "requests_planned": sum(p["requests"] for p in plans), "requests_in_manifests": manifest_requests,
           "replies_from_servers": gen["replies"]}
    checks = [out["runs_completed"] == out["runs_planned"], out["samples_stored"] == out["samples_planned"],
              out["requests_planned"] == out["requests_in_manifests"] == out["replies_from_servers"]]
    if scored:
        out["runs_scored"] = sum(1 for rid in completed if runs[rid].has_table("scores"))
        out["landing_built"] = any((home / CACHE_DIR).iterdir()) if (home / CACHE_DIR).is_dir() else False
        checks += [out["runs_scored"] == out["runs_planned"], out["landing_built"]]
    out["consistent"] = all(checks)
    return out


def _load() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def report(gen: dict[str, Any], phases: dict[str, dict[str, Any]], check: dict[str, Any],
           args: argparse.Namespace) -> None:
    replies = max(1, gen["replies"])
    print(f"generation: {gen['wall_s']:.1f} s wall against the limit-implied minimum {gen['bound_s']:.1f} s "
          f"({'slowest model' if args.launch == 'lanes' else 'the models one after another'}; per model "
          f"{', '.join(f'{b:.0f}' for b in gen['bounds_s'])} s): {gen['ratio'] or 0:.2f}x (goal <= {TARGET})")
    print(f"  {gen['replies']:,} replies, {gen['requests']:,} requests, {gen['refused']} refused (429); "
          f"the fake servers' spans {', '.join(f'{s:.0f}' for s in gen['spans_s'] if s is not None)} s")
    print(f"  CPU-implied minimum on {os.cpu_count()} cores: {gen['cpu_bound_s']:.1f} s (the launch's "
          f"{gen['cpu_s']:.1f} s + the fake servers' {gen['server_cpu_s']:.1f} s; the launch's alone "
          f"{gen['client_cpu_bound_s']:.1f} s)" + ("  <- the machine binds, not the tier"
                                                    if gen["cpu_bound_s"] > gen["bound_s"] else ""))
    print(f"  the fake servers: {gen['server_cpu_ms_per_request']:.2f} ms CPU per request, "
          f"peak {gen['server_peak_rss_mb']:.0f} MB together")
    print(f"\n{'phase':<12} {'wall s':>8} {'CPU s':>8} {'CPU ms/reply':>13} {'peak MB (tree)':>15} "
          f"{'processes':>10} {'largest MB':>11}")
    for name in PHASES:
        f = gen if name == "generation" else phases.get(name)
        if f is None:
            continue
        status = "" if f["returncode"] == 0 else f"  exit {f['returncode']}: {f['stderr'][-300:]}"
        print(f"{name:<12} {f['wall_s']:8.1f} {f['cpu_s']:8.1f} {1000 * f['cpu_s'] / replies:13.2f} "
              f"{f['peak_rss_mb']:15.0f} {f['peak_processes']:10d} {f['largest_process_mb']:11.0f}{status}")
    total = [gen, *phases.values()]
    print(f"{'total':<12} {sum(f['wall_s'] for f in total):8.1f} {sum(f['cpu_s'] for f in total):8.1f} "
          f"{1000 * sum(f['cpu_s'] for f in total) / replies:13.2f}")
    print(f"\nconsistency: {check['runs_completed']} of {check['runs_planned']} planned runs completed in the "
          f"store, {check['samples_stored']:,} of {check['samples_planned']:,} samples; requests planned "
          f"{check['requests_planned']:,}, counted by the runs {check['requests_in_manifests']:,}, answered by the "
          f"fake servers {check['replies_from_servers']:,}"
          + (f"; {check['runs_scored']} runs scored; landing {'built' if check['landing_built'] else 'NOT built'}"
             if "runs_scored" in check else "")
          + (": consistent" if check["consistent"] else ": INCONSISTENT"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of each table's rows (default 1: all)")
    parser.add_argument("--launch", choices=("lanes", "sequential", "job"), default="lanes")
    parser.add_argument("--rpm", type=float, default=5000)
    parser.add_argument("--tpm", type=float, default=2_000_000)
    parser.add_argument("--latency", type=float, default=0.5)
    parser.add_argument("--start-seconds", type=float, default=1.0,
                        help="how full the buckets are when the first request arrives, in seconds of refill")
    parser.add_argument("--max-concurrency", type=int, default=64)
    parser.add_argument("--models", type=int, default=8, help="the first N of the paper's 8 models")
    parser.add_argument("--datasets", type=int, default=5, help="the first N of the paper's 5 datasets")
    parser.add_argument("--home", type=Path, default=None, help="the store (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary store")
    parser.add_argument("--no-board", action="store_true", help="generate only")
    args = parser.parse_args(argv)
    args.model_names = paper_models()[:max(1, args.models)]
    args.dataset_names = paper_datasets()[:max(1, args.datasets)]
    load0 = os.getloadavg()
    home = args.home or Path(tempfile.mkdtemp(prefix="paper-scale-"))
    n_runs = len(args.model_names) * len(args.dataset_names) * len(MODES)
    print(f"load average at start: {_load()} on {os.cpu_count()} CPUs")
    print(f"grid: {len(args.model_names)} models x {len(args.dataset_names)} datasets x {len(MODES)} modes = "
          f"{n_runs} runs (scale {args.scale}); tier {args.rpm:,.0f} RPM and {args.tpm:,.0f} TPM per model, one key "
          f"per model, latency {args.latency} s; launch {args.launch}, --max-concurrency {args.max_concurrency}")
    try:
        gen, plans = generate(args, home)
        phases = {} if args.no_board or gen["returncode"] != 0 else board(home)
        check = consistency(home, plans, gen, scored=bool(phases))
        report(gen, phases, check, args)
        load1 = os.getloadavg()
        print(f"load average at the end: {_load()}")
        for figures in (gen, *phases.values()):
            figures.pop("stderr", None)
        print(json.dumps({"generation": gen, **phases, "consistency": check, "scale": args.scale,
                          "launch": args.launch, "models": list(args.model_names), "datasets": list(args.dataset_names),
                          "rpm": args.rpm, "tpm": args.tpm, "latency": args.latency,
                          "max_concurrency": args.max_concurrency, "runs": n_runs, "cpus": os.cpu_count(),
                          "load_start": load0, "load_end": load1},
                         default=str))
    finally:
        if args.home is None and not args.keep:
            shutil.rmtree(home, ignore_errors=True)
        elif args.home is None:
            print(f"store kept in {home}")
    if not check["consistent"]:
        return 2
    return 0 if gen["ratio"] is not None and gen["ratio"] <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
