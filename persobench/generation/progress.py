"""The files a run keeps in its folder while it generates, for pollers in other processes.

``progress.json``
    ``{"run_id", "status", "total", "done", "failed", "cached", "requests", "elapsed", "eta",
    "pid", "note", "updated_at"}`` (:class:`ProgressInfo` plus ``updated_at``), rewritten atomically at
    most twice a second and at the end. A "running" file whose ``pid`` no longer exists belongs to
    a killed run (start it again to resume).
``cancel``
    Created by :func:`request_cancel` to stop the run between requests; removed when a run starts.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from persobench.core.processes import pid_alive

from persobench.store.files import atomic_write_json, utc_now

PROGRESS_FILE = "progress.json"
CANCEL_FILE = "cancel"
#: A run estimates the time left once it has this many new replies (not from the cache): before,
#: one quick or slow first reply says little about the rest.
ETA_AFTER_REPLIES = 3
#: What a run's step says before its progress file exists: its process loads the model (or checks
#: the server) before the first request.
STARTING = "starting (loading the model)"


@dataclass(frozen=True)
class ProgressInfo:
    """A progress snapshot (also the content of ``progress.json``)."""

    run_id: str
    """The run being generated."""
    status: str
    """"running", "completed", "cancelled" or "failed"; "pending" while the run's batch is still
    running on the provider (``run --batch --batch-wait``)."""
    total: int
    """Samples in the run."""
    done: int
    """Samples finished, whatever their status (cached ones included)."""
    failed: int
    """Finished samples whose status is not "ok"."""
    cached: int
    """Finished samples served from the cache."""
    requests: int
    """HTTP attempts made by this process (retries included)."""
    elapsed: float
    """Seconds since this process started the run."""
    eta: float | None
    """Estimated seconds to finish; ``None`` until :data:`ETA_AFTER_REPLIES` new replies arrived, and
    once the run is no longer running."""
    pid: int
    """Process generating the run (lets a poller tell a live run from a killed one)."""
    note: str = ""
    """What the run is waiting for, when it waits long (``waiting 590 s before retrying: the server
    asked for it (Retry-After) with rate_limit HTTP 429``); ``""`` otherwise."""


def write_progress(run_path: str | os.PathLike[str], info: ProgressInfo) -> None:
    """Replace the run's ``progress.json`` atomically (a poller never reads half a file). Not fsynced:
    it is rewritten twice a second and at every announced wait, from the event loop that sends the
    requests, and after a power cut the run is interrupted whatever the file says."""
    atomic_write_json(Path(run_path) / PROGRESS_FILE, {**dataclasses.asdict(info), "updated_at": utc_now()},
                      durable=False)


def read_progress(run_path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The run's ``progress.json`` (``None`` before the run wrote one). ``alive`` is added: whether
    the generating process still exists."""
    path = Path(run_path) / PROGRESS_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    data["alive"] = pid_alive(int(data.get("pid") or 0))
    return data


def run_state(progress: Mapping[str, Any] | None, *, expected: bool) -> str:
    """What a run's progress (a ``progress.json`` as :func:`read_progress` returns it, or a
    :class:`ProgressInfo` as a dict) says it is doing, in a word a person reads: :data:`STARTING`,
    ``"running"``, ``"done"``, ``"cancelled"``, ``"failed"``, ``"interrupted"`` or ``"not started"``.

    ``expected``: a process is meant to be generating the run right now (a job's current step, the
    command line's own run). Without a progress file yet, or with one a dead process left (an earlier
    attempt), such a run is still starting: it loads the model or checks the server first. A finished
    run whose every reply failed is ``"done"``: :func:`every_reply_failed` says so apart."""
    alive = progress is not None and progress.get("alive", True)
    if progress is None or (expected and not alive):
        return STARTING if expected else "not started"
    status = str(progress.get("status") or "")
    if status in ("running", "pending"):
        return "running" if alive else "interrupted"
    return {"completed": "done", "cancelled": "cancelled", "failed": "failed"}.get(status, status or "not started")


def every_reply_failed(progress: Mapping[str, Any] | None) -> bool:
    """Whether a finished run's every reply (one at least) failed: done, but nothing to show for it."""
    if not progress or progress.get("status") != "completed":
        return False
    done, failed = int(progress.get("done") or 0), int(progress.get("failed") or 0)
    return done > 0 and failed >= done


def request_cancel(run_path: str | os.PathLike[str]) -> None:
    """Ask the run generating in ``run_path`` to stop; requests in flight are abandoned at once."""
    Path(run_path).mkdir(parents=True, exist_ok=True)
    (Path(run_path) / CANCEL_FILE).touch()


def cancel_requested(run_path: str | os.PathLike[str]) -> bool:
    """Whether :func:`request_cancel` was called for the run in ``run_path``."""
    return (Path(run_path) / CANCEL_FILE).exists()


def clear_cancel(run_path: str | os.PathLike[str]) -> None:
    """Forget an earlier cancel request (a run starting again)."""
    (Path(run_path) / CANCEL_FILE).unlink(missing_ok=True)

