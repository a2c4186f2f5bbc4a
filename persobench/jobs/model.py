"""What a background job is: its steps, its status and the files it keeps under ``<home>/jobs/<id>/``.

A job folder holds ``job.json`` (title and steps, written once by the launcher), ``state.json``
(written by the runner as it goes), ``lock`` (the runner's pid while it is alive), ``cancel`` (a stop
request) and ``log.txt`` (the runner's output).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

JOB_STATES = ("launching", "running", "completed", "failed", "cancelled", "interrupted")
#: A lock without a pid yet is considered alive for this long (the launcher writes it first).
LAUNCH_GRACE_S = 30.0
#: After a cancel request, the runner waits this long for the child to stop on its own.
CANCEL_GRACE_S = 20.0
#: What the runner's command line contains (guards the lock against a recycled pid).
RUNNER_MODULE = "persobench.jobs"


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object file, or None when it is missing, unreadable or not an object."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


@dataclass(frozen=True)
class JobStep:
    """One command of a job: ``python -m persobench ARGV``."""

    label: str
    """What the page shows for this step."""
    argv: tuple[str, ...]
    """Arguments of ``python -m persobench``."""
    expect: Mapping[str, str] = field(default_factory=dict)
    """The dataset, model and mode the step generates (kept in ``job.json`` for display)."""
    kind: str = "run"
    """``run`` (generation), ``score`` or ``import``."""
    run_id: str | None = None
    """The run the step writes, when known in advance (``plan_generation`` computes it)."""
    withhold_keys: bool = False
    """Run the step without the app's API keys in its environment: its server is a base URL typed
    into the page, which the operator did not configure (see :func:`persobench.secrets.key_allowed`)."""

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "argv": list(self.argv), "expect": dict(self.expect), "kind": self.kind,
                "run_id": self.run_id, "withhold_keys": self.withhold_keys}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "JobStep":
        return cls(str(data["label"]), tuple(data["argv"]), dict(data.get("expect") or {}),
                   str(data.get("kind") or "run"), data.get("run_id"), bool(data.get("withhold_keys", False)))

    def run_dir(self, home: Path) -> Path | None:
        """The folder of the run this step writes (None until it exists, or when it writes no run)."""
        if not self.run_id:
            return None
        path = Path(home) / "runs" / self.run_id
        return path if path.is_dir() else None


@dataclass(frozen=True)
class JobStatus:
    """What the page shows about a job."""

    job_id: str
    """Folder name under ``<home>/jobs``."""
    title: str
    """Given at launch."""
    state: str
    """One of :data:`JOB_STATES`."""
    steps: tuple[JobStep, ...]
    """The job's steps, in order."""
    step_index: int = 0
    """The step running (or last run)."""
    message: str = ""
    """Failures or the cancel note, redacted."""
    created_at: str = ""
    """When the job was (last) launched."""
    finished_at: str = ""
    """When the runner ended, '' while it runs."""
    log_tail: str = ""
    """Last lines of the log (redacted), for failed or interrupted jobs."""
    run_ids: tuple[str, ...] = ()
    """Runs the job's run steps finished."""
    busy_run: str = ""
    """A run of this interrupted job that a live process still generates (the runner died, its
    ``persobench run`` child did not); '' when none. Resuming waits for it: a second process on
    the same run would stop at its lock."""

    @property
    def busy(self) -> bool:
        """Interrupted, but one of its runs is still being generated (cancel stops it)."""
        return bool(self.busy_run)

    @property
    def active(self) -> bool:
        return self.state in ("launching", "running")

    @property
    def resumable(self) -> bool:
        return self.state in ("failed", "cancelled", "interrupted") and not self.busy_run


def job_id_for(title: str, steps: Sequence[JobStep]) -> str:
    """Deterministic id: the same configuration is the same job (so it cannot run twice at once)."""
    payload = json.dumps([title, [s.to_dict() for s in steps]], sort_keys=True)
    digest = hashlib.sha256(payload.encode()).hexdigest()[:10]
    slug = re.sub(r"[^A-Za-z0-9]+", "-", title).strip("-")[:40] or "job"
    return f"{slug}-{digest}"


def score_step_marker() -> str:
    """Placeholder in a score step's argv replaced by the ids of the runs the job wrote."""
    return "@RUNS"
