"""The detached job process: ``python -m persobench.jobs job DIR`` runs a job's steps in order."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from persobench.jobs.model import CANCEL_GRACE_S, RUNNER_MODULE, JobStep, read_json, score_step_marker
from persobench.secrets import public_text, redact
from persobench.store import atomic_write_json, default_home, utc_now


def run_job(folder: Path) -> int:
    """Execute a job's steps in order; the body of ``python -m persobench.jobs job DIR``.

    A failing run step is recorded and the next step still runs (one unreachable model does not
    stop the others); a score step scores the runs whose generation succeeded. A ``cancel`` file in
    the job folder stops the job: it is forwarded to the run in progress, which ends "cancelled".
    """
    from persobench.generation.rows import EXIT_NO_SAMPLE_SUCCEEDED

    folder = Path(folder)
    spec = read_json(folder / "job.json")
    if spec is None:
        print(f"{folder}: no job.json", file=sys.stderr)
        return 2
    lock = folder / "lock"
    lock.write_text(f"{os.getpid()}\n")
    home = Path(spec.get("home") or default_home())
    steps = [JobStep.from_dict(s) for s in spec["steps"]]
    state: dict[str, Any] = {"state": "running", "step": 0, "pid": os.getpid(), "started_at": utc_now(),
                             "run_ids": [], "failures": []}

    def save(**changes: Any) -> None:
        state.update(changes, updated_at=utc_now())
        atomic_write_json(folder / "state.json", state)

    def on_term(signum: int, frame: Any) -> None:  # noqa: ARG001
        (folder / "cancel").write_text(utc_now())

    signal.signal(signal.SIGTERM, on_term)
    save()
    outcome = "completed"
    try:
        for index, step in enumerate(steps):
            if (folder / "cancel").exists():
                outcome = "cancelled"
                break
            save(step=index, message=f"running {step.label}")
            argv = list(step.argv)
            if score_step_marker() in argv:
                position = argv.index(score_step_marker())
                argv[position:position + 1] = list(state["run_ids"])
                if not state["run_ids"]:
                    continue
            print(public_text(f"\n=== {step.label}: python -m persobench {' '.join(argv)}"), flush=True)
            returncode = _run_child(argv, folder, home, step)
            if step.kind == "run":
                run_dir = step.run_dir(home)
                if returncode == 0 and run_dir is not None and run_dir.name not in state["run_ids"]:
                    state["run_ids"].append(run_dir.name)
            if (folder / "cancel").exists():
                outcome = "cancelled"
                break
            if returncode != 0:
                state["failures"].append(f"{step.label} exited with status {returncode}" + (
                    " (no sample succeeded)" if step.kind == "run" and returncode == EXIT_NO_SAMPLE_SUCCEEDED else ""))
            save()
    except Exception as exc:  # noqa: BLE001 - recorded for the page; the traceback goes to the log
        import traceback

        traceback.print_exc()
        state["failures"].append(f"{type(exc).__name__}: {exc}")
    finally:
        if outcome == "completed" and state["failures"]:
            outcome = "failed"
        message = "; ".join(state["failures"]) if state["failures"] else ""
        if outcome == "cancelled":
            message = "cancelled by request" + (f"; {message}" if message else "")
        save(state=outcome, message=public_text(redact(message)), finished_at=utc_now())
        lock.unlink(missing_ok=True)
    return 0 if outcome == "completed" else 1


def _run_child(argv: list[str], folder: Path, home: Path, step: JobStep) -> int:
    """Run ``python -m persobench ARGV``, forwarding a cancel request to the run it writes."""
    from persobench.generation import request_cancel

    from persobench.secrets import is_secret_name

    env = dict(os.environ)
    if step.withhold_keys:  # a server typed into the page gets no key of the operator's
        env = {name: value for name, value in env.items() if not is_secret_name(name)}
    proc = subprocess.Popen([sys.executable, "-m", "persobench", *argv], stdin=subprocess.DEVNULL, env=env)
    cancel_sent_at: float | None = None
    while proc.poll() is None:
        time.sleep(0.3)
        if cancel_sent_at is None and (folder / "cancel").exists():
            cancel_sent_at = time.monotonic()
            run_dir = step.run_dir(home)
            if run_dir is not None:
                request_cancel(run_dir)
            elif step.kind != "run":
                proc.terminate()
        if cancel_sent_at is not None and time.monotonic() - cancel_sent_at > CANCEL_GRACE_S:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
    return int(proc.returncode)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 2 and args[0] == "job":
        return run_job(Path(args[1]))
    print(f"usage: python -m {RUNNER_MODULE} job JOB_DIR", file=sys.stderr)
    return 2
