"""The detached job process and its step children.

``python -m persobench.jobs.job_process job DIR`` runs a job's steps in order, each in a child process
``python -m persobench.jobs.job_process step DIR INDEX`` that reads the step's typed request from ``job.json``
and runs it through the library's front door (:mod:`persobench.pipeline`): no step is ever turned
into command-line arguments. A child per step keeps a cancel (or a crash) of one step from taking
the runner down with it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from persobench.store import atomic_write_json, utc_now
from persobench.jobs.model import CANCEL_GRACE_S, RUNNER_MODULE, JobStep, read_json, read_steps, step_error_path
from persobench.jobs.step_requests import FetchRequest, ImportRequest, RunRequest, ScoreRequest, StepRequest
from persobench.core import public_text, redact
from persobench.store import default_home
from persobench.generation import EXIT_NO_SAMPLE_SUCCEEDED
from persobench.generation import request_cancel
from persobench.core import is_secret_name
from persobench.errors import ConfigurationError, DatasetError, PersoBenchError
import threading
from persobench import pipeline
from persobench.config import changed
from persobench.core import url_with_credentials
from persobench.generation import no_sample_succeeded
from persobench.core import ProgressBar
from persobench.pipeline import landing_kept_current
import traceback

def run_job(folder: Path) -> int:
    """Execute a job's steps in order; the body of ``python -m persobench.jobs.job_process job DIR``.

    A failing run step is recorded and the next step still runs (one unreachable model does not
    stop the others); a score step scores the runs whose generation succeeded. A ``cancel`` file in
    the job folder stops the job: it is forwarded to the run in progress, which ends "cancelled".
    """

    folder = Path(folder)
    spec = read_json(folder / "job.json")
    if spec is None:
        print(f"{folder}: no job.json", file=sys.stderr)
        return 2
    lock = folder / "lock"
    lock.write_text(f"{os.getpid()}\n")
    home = Path(spec.get("home") or default_home())
    state: dict[str, Any] = {"state": "running", "step": 0, "pid": os.getpid(), "started_at": utc_now(),
                             "run_ids": [], "failures": [], "step_errors": {}, "configuration_errors": [],
                             "skipped": []}

    def save(**changes: Any) -> None:
        state.update(changes, updated_at=utc_now())
        atomic_write_json(folder / "state.json", state)

    try:
        steps = read_steps(spec, folder / "job.json")
    except ConfigurationError as exc:  # nothing of it runs: its one line for the log and the page
        print(f"error: {redact(str(exc))}", file=sys.stderr, flush=True)
        save(state="failed", message=public_text(redact(str(exc))), finished_at=utc_now())
        lock.unlink(missing_ok=True)
        return 2

    def on_term(_signum: int, _frame: Any) -> None:
        (folder / "cancel").write_text(utc_now())

    signal.signal(signal.SIGTERM, on_term)
    # The app's first views are prepared for what the job wrote, after it is marked done (as the
    # CLI does after a command): the first page opened on the store then builds nothing.
    with landing_kept_current(home):
        save()
        outcome = "completed"
        try:
            for index, step in enumerate(steps):
                if (folder / "cancel").exists():
                    outcome = "cancelled"
                    break
                if isinstance(step.request, ScoreRequest) and step.request.runs == "job" and not state["run_ids"]:
                    state["skipped"].append(index)  # no run of this job completed: nothing to score
                    continue
                save(step=index, message=f"running {step.label}")
                print(public_text(f"\n=== {step.label}"), flush=True)
                step_error_path(folder, index).unlink(missing_ok=True)  # an earlier attempt's
                returncode = _run_child(folder, index, home, step)
                if step.kind == "run":
                    run_dir = step.run_dir(home)
                    if returncode == 0 and run_dir is not None and run_dir.name not in state["run_ids"]:
                        state["run_ids"].append(run_dir.name)
                if (folder / "cancel").exists():
                    outcome = "cancelled"
                    break
                if returncode != 0:
                    # The step's own one-line error when it left one, else how its process ended.
                    error = read_json(step_error_path(folder, index)) or {}
                    line = str(error.get("error") or f"its process exited with status {returncode}" + (
                        " (no sample succeeded)" if step.kind == "run" and returncode == EXIT_NO_SAMPLE_SUCCEEDED else ""))
                    state["failures"].append(f"{step.label}: {line}")
                    state["step_errors"][str(index)] = line
                    if error.get("configuration"):
                        state["configuration_errors"].append(index)
                save()
        except Exception as exc:  # noqa: BLE001 - recorded for the page; the traceback goes to the log

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


def _run_child(folder: Path, index: int, home: Path, step: JobStep) -> int:
    """Run step ``index`` in ``python -m persobench.jobs.job_process step DIR INDEX``, forwarding a cancel request
    to the run it writes."""

    env = dict(os.environ)
    if step.withhold_keys:  # a server typed into the page gets no key of the operator's
        env = {name: value for name, value in env.items() if not is_secret_name(name)}
    proc = subprocess.Popen([sys.executable, "-m", RUNNER_MODULE, "step", str(folder), str(index)],
                            stdin=subprocess.DEVNULL, env=env)
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


def run_step(folder: Path, index: int) -> int:
    """The body of ``python -m persobench.jobs.job_process step DIR INDEX``: one step through the pipeline.
    Exit 0 when it succeeded, 1 when it was cancelled or scored nothing, 2 with a one-line error."""

    spec = read_json(Path(folder) / "job.json")
    if spec is None:
        print(f"error: {folder}: no job.json", file=sys.stderr)
        return 2
    home = Path(spec.get("home") or default_home())
    state = read_json(Path(folder) / "state.json") or {}
    try:
        step = read_steps(spec, Path(folder) / "job.json")[index]
        return _run_request(step.request, home, list(state.get("run_ids") or ()), Path(folder), index)
    except PersoBenchError as exc:
        print(f"error: {redact(str(exc))}", file=sys.stderr)
        # A configuration or dataset error fails the same way however often it is resumed.
        _record_error(Path(folder), index, str(exc), configuration=isinstance(exc, (ConfigurationError, DatasetError)))
        return 2
    except Exception as exc:  # noqa: BLE001 - a bug: the traceback goes to the log, one line to the page
        traceback.print_exc()
        _record_error(Path(folder), index, f"internal error: {type(exc).__name__}: {exc}", configuration=False)
        return 2


def _record_error(folder: Path, index: int, line: str, *, configuration: bool) -> None:
    """Leave the step's one-line error (redacted) for the job's runner, which shows it on the page."""
    one_line = " ".join(public_text(redact(line)).split())
    atomic_write_json(step_error_path(folder, index), {"error": one_line, "configuration": configuration})


def _run_request(request: StepRequest, home: Path, run_ids: list[str], folder: Path, index: int) -> int:
    """Step ``index``'s request through the pipeline, by its kind."""
    if isinstance(request, RunRequest):
        return _generate(request, home, folder, index)
    if isinstance(request, ScoreRequest):
        return _score(request, home, run_ids, folder, index)
    if isinstance(request, ImportRequest):
        return _import(request, home)
    if isinstance(request, FetchRequest):
        return _fetch(request, home)
    raise ConfigurationError(f"a job step cannot run a {type(request).__name__}")


def _generate(request: RunRequest, home: Path, folder: Path, index: int) -> int:
    # job.json holds the base URL's public form; its credentials come in the environment
    config = changed(request.config, base_url=url_with_credentials(request.config.base_url))
    cancel = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: cancel.set())
    run = pipeline.generate(config, home=home, cancel=cancel)
    counts = {k: v for k, v in (run.manifest.details.counts or {}).items() if v}
    print(f"run {run.run_id}: {run.manifest.status} ({', '.join(f'{k}={v}' for k, v in counts.items()) or '-'})",
          flush=True)
    if run.manifest.status == "cancelled":
        return 1
    if no_sample_succeeded(run.manifest.details.counts or {}):
        _record_error(folder, index, f"no reply arrived: {_request_errors(run)}", configuration=False)
        return EXIT_NO_SAMPLE_SUCCEEDED
    return 0


def _request_errors(run: Any) -> str:
    """``all 3 requests failed: <the most common error>`` from the run's table (its error column)."""
    try:
        errors = run.read_table("generations")["error"].dropna().astype(str)
    except (PersoBenchError, KeyError):
        errors = None
    if errors is None or errors.empty:
        return "every request failed (the error column of `export RUN` says why)"
    common = errors.value_counts()
    return f"all {len(errors)} request(s) failed, {common.iloc[0]} with: {common.index[0]}"


def _score(request: ScoreRequest, home: Path, run_ids: list[str], folder: Path, index: int) -> int:
    bars: dict[str, ProgressBar] = {}

    def progress(stage: str, done: int, total: int) -> None:
        if stage not in bars:
            for bar in bars.values():
                bar.close()
            bars.clear()
            bars[stage] = ProgressBar(total=total, desc=stage, unit="item", leave=False)
        bars[stage].update_to(done)

    def on_run(result: Any) -> None:
        for bar in bars.values():
            bar.close()
        bars.clear()
        if result.ok:
            print(f"{result.run_id}: {sum(result.summary.computed.values())} new value(s)", flush=True)
        else:
            print(f"{result.run_id}: not scored: {redact(result.error)}", flush=True)

    config = request.score_config(home=home)  # the judge resolved here: an unknown model fails this step
    report = pipeline.score(request.chosen_runs(run_ids), config, home=home, progress=progress, on_run=on_run)
    for metric, reason in report.unavailable.items():
        print(f"unavailable: {metric}: {reason}", flush=True)
    if report.judge is not None and config.judge is not None:
        tally = report.judge
        print(f"judge {config.judge.model_name}: {tally.pairs} pair(s), {tally.sent} answered now, "
              f"{tally.unparseable} unparseable, {tally.unanswered} unanswered, {tally.attempts} request(s), "
              f"cost {'unknown' if tally.cost_usd is None else f'${tally.cost_usd:.4f}'}", flush=True)
    if report.complete:
        return 0
    failed = [f"{r.run_id}: {r.error}" for r in report.runs if not r.ok]
    _record_error(folder, index, (f"{len(failed)} run(s) not scored ({failed[0]})" if failed else
                                  f"{report.unlabelled} judge pair(s) left unanswered"), configuration=False)
    return 1


def _import(request: ImportRequest, home: Path) -> int:
    report = pipeline.import_published(request.folder, home=home)
    print(f"imported {len(report.runs)} run(s) from {report.folder}", flush=True)
    return 0


def _fetch(request: FetchRequest, home: Path) -> int:
    result = pipeline.fetch_published(home=home, url=url_with_credentials(request.url),
                                      trust_unpinned=request.trust_unpinned)
    print(f"unpacked {result.files} files into {result.folder}", flush=True)
    report = pipeline.import_published(str(result.folder), home=home)
    print(f"imported {len(report.runs)} run(s) from {report.folder}", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 2 and args[0] == "job":
        return run_job(Path(args[1]))
    if len(args) == 3 and args[0] == "step" and args[2].isdigit():
        return run_step(Path(args[1]), int(args[2]))
    print(f"usage: python -m {RUNNER_MODULE} job JOB_DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":  # the job process and its step children run this file itself (RUNNER_MODULE)
    sys.exit(main())
