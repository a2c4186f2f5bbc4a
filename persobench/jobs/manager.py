"""Launching, listing, cancelling and resuming background jobs (the app's side of a job).

The job itself runs in a detached process (``python -m persobench.jobs.job_process job DIR``):
reruns of a page, a closed tab or a second click neither stop it
nor start it twice.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from persobench.jobs.model import (
    LAUNCH_GRACE_S,
    RUNNER_MARKER,
    RUNNER_MODULE,
    JobStatus,
    JobStep,
    job_id_for,
    read_json,
    read_steps,
)
from persobench.errors import ConfigurationError
from persobench.core import pid_alive
from persobench.store import atomic_write_json, utc_now
from persobench.core import credentials_environment, public_text, redact
from persobench.store import default_home
from persobench.store import lock_holder
from persobench.generation import request_cancel
import shutil
from persobench.store import RunStore
from persobench.generation import read_progress
from persobench.generation import every_reply_failed, run_state


def tail_text(path: Path, *, lines: int = 30, max_bytes: int = 20000) -> str:
    """The last lines of a log file, redacted (progress-bar carriage returns collapsed)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            data = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    cleaned = [line.rsplit("\r", 1)[-1] for line in data.split("\n")]
    kept = [line for line in cleaned if line.strip()][-lines:]
    return public_text(redact("\n".join(kept)))


def step_base_urls(steps: Sequence[JobStep]) -> list[str]:
    """The base URLs of the run steps and the mirror URLs of the fetch steps (public forms: their
    credentials are not in job.json)."""
    return [url for step in steps for url in step.request.base_urls()]


def lock_alive(lock: Path) -> bool:
    """True while the runner that wrote ``lock`` (its pid) is alive, or a fresh lock awaits its pid."""
    try:
        text = lock.read_text().strip()
        age = time.time() - lock.stat().st_mtime
    except OSError:
        return False
    if not text:
        return age < LAUNCH_GRACE_S
    try:
        pid = int(text.split()[0])
    except ValueError:
        return False
    # Right after the launch the child may not have exec'd yet (its command line is still the
    # app's); later, the marker guards against a recycled pid.
    return pid_alive(pid, marker=None if age < LAUNCH_GRACE_S else RUNNER_MARKER)


class JobManager:
    """Launches, lists, cancels and resumes background jobs under ``<home>/jobs``."""

    def __init__(self, home: str | os.PathLike[str] | None = None) -> None:
        self.home = Path(home) if home is not None else default_home()
        self.jobs_dir = self.home / "jobs"

    def job_dir(self, job_id: str) -> Path:
        if not re.fullmatch(r"[A-Za-z0-9._-]+", job_id):
            raise ConfigurationError(f"invalid job id {job_id!r}")
        return self.jobs_dir / job_id

    # -- launching -----------------------------------------------------------------------------
    def launch(self, title: str, steps: Sequence[JobStep], *, env: Mapping[str, str] | None = None) -> tuple[str, bool]:
        """Start the job in a detached process; ``(job_id, started)``.

        ``started`` is False when the same job is already running (a second click, a page rerun or
        another browser tab): nothing new is started. A finished, cancelled or crashed job with the
        same configuration is started again, which resumes it from the caches.
        """
        steps = list(steps)
        return self._start(job_id_for(title, steps), title, steps, env=env)

    def _start(self, job_id: str, title: str, steps: list[JobStep], *,
               env: Mapping[str, str] | None) -> tuple[str, bool]:
        """:meth:`launch` in the folder ``job_id`` (a resumed job keeps its own, whatever today's id of
        its steps: an older ``job.json`` reads into today's form, whose id differs)."""
        wanted = {s.run_id for s in steps if s.run_id}
        for other in self.jobs():  # another job already writing one of these runs: do not race it
            if other.job_id != job_id and other.active and wanted & {s.run_id for s in other.steps if s.run_id}:
                return other.job_id, False
        folder = self.job_dir(job_id)
        folder.mkdir(parents=True, exist_ok=True)
        lock = folder / "lock"
        if not self._acquire(lock):
            return job_id, False
        try:
            (folder / "cancel").unlink(missing_ok=True)
            atomic_write_json(folder / "job.json", {"job_id": job_id, "title": title,
                                                    "steps": [s.to_dict() for s in steps],
                                                    "created_at": utc_now(), "home": str(self.home.resolve())})
            atomic_write_json(folder / "state.json", {"state": "launching", "step": 0, "updated_at": utc_now()})
            child_env = dict(os.environ if env is None else env)
            child_env["PERSOBENCH_HOME"] = str(self.home.resolve())
            child_env.setdefault("PYTHONUNBUFFERED", "1")
            # Base URLs are stored in their public form; their credentials travel in the environment.
            child_env.update(credentials_environment(step_base_urls(steps)))
            # The child imports this same persobench, installed or not.
            package_root = str(Path(__file__).resolve().parents[2])
            paths = [p for p in child_env.get("PYTHONPATH", "").split(os.pathsep) if p]
            child_env["PYTHONPATH"] = os.pathsep.join([package_root, *[p for p in paths if p != package_root]])
            log = open(folder / "log.txt", "ab")
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-m", RUNNER_MODULE, "job", str(folder.resolve())],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=child_env,
                    cwd=str(Path.cwd()), start_new_session=True, close_fds=True,
                )
            finally:
                log.close()
            lock.write_text(f"{proc.pid}\n")
        except BaseException:
            lock.unlink(missing_ok=True)
            raise
        return job_id, True

    def _acquire(self, lock: Path) -> bool:
        for _ in range(2):
            try:
                fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if lock_alive(lock):
                    return False
                lock.unlink(missing_ok=True)  # stale: the runner died without cleaning up
                continue
            with os.fdopen(fd, "w") as handle:
                handle.write("")
            return True
        return False

    # -- reading -------------------------------------------------------------------------------
    def job_ids(self) -> list[str]:
        if not self.jobs_dir.exists():
            return []
        folders = [p for p in self.jobs_dir.iterdir() if (p / "job.json").exists()]
        folders.sort(key=lambda p: (p / "job.json").stat().st_mtime, reverse=True)
        return [p.name for p in folders]

    def status(self, job_id: str) -> JobStatus | None:
        folder = self.job_dir(job_id)
        spec = read_json(folder / "job.json")
        if spec is None:
            return None
        state = read_json(folder / "state.json") or {}
        value = str(state.get("state") or "launching")
        if value in ("launching", "running") and not lock_alive(folder / "lock"):
            value = "interrupted"  # the process died (killed, machine restart) without finishing
        try:
            steps, unreadable = read_steps(spec, folder / "job.json"), ""
        except ConfigurationError as exc:  # listed, with its one line, never run or resumed
            steps, unreadable = (), str(exc)
            value = value if value in ("launching", "running") else "failed"
        log_tail = tail_text(folder / "log.txt") if value in ("failed", "interrupted") else ""
        status = JobStatus(
            job_id=job_id, title=str(spec.get("title", job_id)), state=value, steps=steps,
            unreadable=bool(unreadable),
            step_index=int(state.get("step") or 0),
            message=public_text(redact(unreadable or state.get("message") or "")),
            created_at=str(spec.get("created_at", "")), finished_at=str(state.get("finished_at") or ""),
            log_tail=log_tail, run_ids=tuple(state.get("run_ids") or ()),
            step_errors={int(k): public_text(redact(str(v))) for k, v in (state.get("step_errors") or {}).items()},
            configuration_errors=tuple(int(i) for i in state.get("configuration_errors") or ()),
            skipped=tuple(int(i) for i in state.get("skipped") or ()),
        )
        if value != "interrupted":
            return status
        busy = self._busy_run(status)
        if busy is None:
            return status
        run_dir, pid = busy
        holder = f"process {pid}" if pid else "another process"
        return dataclasses.replace(status, busy_run=run_dir.name, message=(
            f"the job's runner stopped, but run {run_dir.name} is still being generated by {holder}; "
            "Resume is offered once it finishes (Cancel stops it)"))

    def _busy_run(self, status: JobStatus) -> tuple[Path, int] | None:
        """The first of the job's runs whose lock a live process holds, with that pid (0 if unread)."""

        for run_dir in self._run_dirs(status):
            pid = lock_holder(run_dir)
            if pid is not None:
                return run_dir, pid
        return None

    def jobs(self) -> list[JobStatus]:
        return [s for s in (self.status(j) for j in self.job_ids()) if s is not None]

    # -- acting --------------------------------------------------------------------------------
    def cancel(self, job_id: str) -> None:
        """Ask the job to stop: the runner forwards it to the run in progress (its ``cancel`` file)."""

        folder = self.job_dir(job_id)
        (folder / "cancel").write_text(utc_now())
        status = self.status(job_id)
        if status is not None:
            for run_dir in self._run_dirs(status):
                request_cancel(run_dir)

    def resume(self, job_id: str, *, env: Mapping[str, str] | None = None) -> tuple[str, bool]:
        """Start a cancelled, failed or interrupted job again (cached replies are not requested again)."""
        spec = read_json(self.job_dir(job_id) / "job.json")
        if spec is None:
            raise ConfigurationError(f"no job {job_id!r}")
        status = self.status(job_id)
        if status is not None and status.busy:
            raise ConfigurationError(status.message)
        steps = read_steps(spec, self.job_dir(job_id) / "job.json")
        return self._start(job_id, str(spec.get("title", job_id)), list(steps), env=env)

    def forget(self, job_id: str) -> None:
        """Remove a finished job's folder (its runs stay in the store)."""

        status = self.status(job_id)
        if status is not None and status.active:
            raise ConfigurationError("the job is still running; cancel it first")
        shutil.rmtree(self.job_dir(job_id), ignore_errors=True)

    def _run_dirs(self, status: JobStatus) -> list[Path]:

        store = RunStore(self.home)
        dirs = [store.run_path(r) for r in status.run_ids if store.run_path(r).is_dir()]
        for step in status.steps:
            found = step.run_dir(self.home)
            if found is not None and found not in dirs:
                dirs.append(found)
        return dirs

    def progress(self, status: JobStatus) -> list[dict[str, Any]]:
        """One row per step: label, kind, ``state`` and, for run steps, the run's ``progress.json``
        counts (``done``, ``failed``, ``cached``, ``eta`` ...) and ``every_reply_failed``.

        ``state`` is what the step is doing, in words: ``starting (loading the model)`` (its process
        runs, the run has no progress yet), ``running``, ``done``, ``cancelled``, ``failed: <its error
        line>``, ``interrupted``, ``waiting`` (a later step of a running job), ``not run (cancelled)``,
        ``not run`` or ``skipped (no run to score)``."""

        rows = []
        for index, step in enumerate(status.steps):
            row: dict[str, Any] = {"step": step.label, "kind": step.kind}
            run_dir = step.run_dir(self.home)
            progress = read_progress(run_dir) if run_dir is not None else None
            if run_dir is not None:
                row["run_id"] = run_dir.name
                row.update(progress or {})
            current = index == status.step_index
            if index in status.step_errors:
                state = f"failed: {status.step_errors[index]}"
            elif index in status.skipped:
                state = "skipped (no run to score)"
            elif current and status.active:
                state = run_state(progress, expected=True) if step.kind == "run" else "running"
            elif index > status.step_index and status.state != "completed":
                state = {"cancelled": "not run (cancelled)", "launching": "waiting", "running": "waiting"}.get(
                    status.state, "not run")
            elif current and status.state in ("cancelled", "interrupted"):
                state = status.state
            else:
                state = run_state(progress, expected=False) if step.kind == "run" else "done"
            row["state"] = state
            row["every_reply_failed"] = every_reply_failed(progress)
            rows.append(row)
        return rows
