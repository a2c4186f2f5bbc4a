"""What a background job is: its steps, its status and the files it keeps under ``<home>/jobs/<id>/``.

A job folder holds ``job.json`` (title and typed steps, written once by the launcher), ``state.json``
(written by the runner as it goes), ``lock`` (the runner's pid while it is alive), ``cancel`` (a stop
request), ``log.txt`` (the runner's output) and ``step-N.error.json`` (the one-line error a failed
step left, and whether it was a configuration error).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from persobench.errors import ConfigurationError
from persobench.jobs.step_requests import STEP_REQUESTS, ScoreRequest, StepRequest
from persobench.scoring import ScoreConfig
from persobench.store import RunStore

JOB_STATES = ("launching", "running", "completed", "failed", "cancelled", "interrupted")
#: A lock without a pid yet is considered alive for this long (the launcher writes it first).
LAUNCH_GRACE_S = 30.0
#: After a cancel request, the runner waits this long for the child to stop on its own.
CANCEL_GRACE_S = 20.0
#: The module the job process and its step children run (``python -m``): the runner's own file, so a
#: job goes from the launcher to its steps through one module.
RUNNER_MODULE = "persobench.jobs.job_process"
#: What a runner's command line contains (guards the lock against a recycled pid); also matches a
#: runner started as ``python -m persobench.jobs`` (that entry point still works).
RUNNER_MARKER = "persobench.jobs"


def step_error_path(folder: Path, index: int) -> Path:
    """Where step ``index`` of the job in ``folder`` leaves its one-line error for the runner."""
    return Path(folder) / f"step-{index}.error.json"


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object file, or None when it is missing, unreadable or not an object."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


#: What a step does, each through the library's front door (:mod:`persobench.pipeline`).
STEP_KINDS = tuple(STEP_REQUESTS)


@dataclass(frozen=True)
class JobStep:
    """One step of a job: a typed request the job's child process runs through :mod:`persobench.pipeline`."""

    label: str
    """What the page shows for this step."""
    request: StepRequest
    """What the step asks for, one model per kind (:mod:`persobench.jobs.step_requests`): a
    :class:`~persobench.jobs.step_requests.RunRequest` (generation), a
    :class:`~persobench.jobs.step_requests.ScoreRequest`, an
    :class:`~persobench.jobs.step_requests.ImportRequest` or a
    :class:`~persobench.jobs.step_requests.FetchRequest` (download the paper's data, then import it)."""
    expect: Mapping[str, str] = field(default_factory=dict)
    """The dataset, model and mode the step generates (kept in ``job.json`` for display)."""
    run_id: str | None = None
    """The run the step writes, when known in advance (``plan_generation`` computes it)."""
    withhold_keys: bool = False
    """Run the step without the app's API keys in its environment: its server is a base URL typed
    into the page, which the operator did not configure (see :func:`persobench.core.secrets.key_allowed`)."""

    @property
    def kind(self) -> str:
        """One of :data:`STEP_KINDS`: ``run``, ``score``, ``import`` or ``fetch``."""
        return self.request.kind

    def to_dict(self) -> dict[str, Any]:
        """The step as ``job.json`` holds it: its request's stored form under ``config``."""
        return {"label": self.label, "kind": self.kind, "config": self.request.to_dict(), "expect": dict(self.expect),
                "run_id": self.run_id, "withhold_keys": self.withhold_keys}

    @classmethod
    def from_dict(cls, data: Any) -> "JobStep":
        """The step of a ``job.json`` entry, its config read through its kind's request model (older
        ``job.json`` forms too); one :class:`ConfigurationError` line naming the field for a bad one
        (:func:`read_steps` adds the file and the step)."""
        if not isinstance(data, Mapping):
            raise ConfigurationError(f"expected an object, got {type(data).__name__}")
        label, kind, expect, run_id = (data.get(name) for name in ("label", "kind", "expect", "run_id"))
        if not isinstance(label, str):
            raise ConfigurationError(f"label: expected text, got {label!r}")
        if kind not in STEP_REQUESTS:
            raise ConfigurationError(f"kind: unknown job step kind {kind!r}; expected one of {', '.join(STEP_KINDS)}")
        if not isinstance(expect or {}, Mapping):
            raise ConfigurationError(f"expect: expected an object, got {expect!r}")
        if run_id is not None and not isinstance(run_id, str):
            raise ConfigurationError(f"run_id: expected text or null, got {run_id!r}")
        request = STEP_REQUESTS[kind].from_dict(data.get("config") or {})
        return cls(label, request, {str(k): str(v) for k, v in (expect or {}).items()}, run_id or None,
                   data.get("withhold_keys") is True)

    def run_dir(self, home: Path) -> Path | None:
        """The folder of the run this step writes (None until it exists, or when it writes no run)."""
        if not self.run_id:
            return None

        path = RunStore(home).run_path(self.run_id)
        return path if path.is_dir() else None


def read_steps(spec: Mapping[str, Any], source: Path) -> tuple[JobStep, ...]:
    """The steps of ``job.json`` content ``spec`` (read from ``source``); a bad one is one
    :class:`ConfigurationError` line naming the file, the step (from 1, with its label) and the field:
    ``<home>/jobs/x/job.json: step 2 (score): runs must be 'job', 'all' or a list of run ids, got 'some'``."""
    steps = spec.get("steps")
    if not isinstance(steps, list):
        raise ConfigurationError(f"{source}: steps: expected a list of steps, got {type(steps).__name__}")
    read = []
    for number, data in enumerate(steps, 1):
        try:
            read.append(JobStep.from_dict(data))
        except ConfigurationError as exc:
            label = data.get("label") if isinstance(data, Mapping) else None
            named = f" ({label})" if isinstance(label, str) and label else ""
            raise ConfigurationError(f"{source}: step {number}{named}: {' '.join(str(exc).split())}") from None
    return tuple(read)


def score_step(label: str, config: ScoreConfig, runs: "str | Sequence[str]" = "job", *,
               withhold_keys: bool = False) -> JobStep:
    """A ``score`` step: ``config`` (its judge kept as the user gave it) and which ``runs`` (``"job"``,
    ``"all"`` or run ids)."""
    return JobStep(label=label, request=ScoreRequest.of(config, runs), withhold_keys=withhold_keys)


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
    step_errors: Mapping[int, str] = field(default_factory=dict)
    """Step index -> the one-line error it failed with (redacted)."""
    configuration_errors: tuple[int, ...] = ()
    """The steps that failed for their configuration (unknown model or dataset, missing key, bad
    option): running them again fails the same way."""
    skipped: tuple[int, ...] = ()
    """The score steps left out because no run of the job completed."""
    unreadable: bool = False
    """``job.json`` does not read as a job (:func:`read_steps`; :attr:`message` says why in one line):
    no step is listed, and Resume would fail the same way."""

    @property
    def busy(self) -> bool:
        """Interrupted, but one of its runs is still being generated (cancel stops it)."""
        return bool(self.busy_run)

    @property
    def active(self) -> bool:
        return self.state in ("launching", "running")

    @property
    def configuration_error(self) -> bool:
        """Every failed step failed for its configuration: Resume would fail again; launch anew."""
        return bool(self.step_errors) and set(self.step_errors) <= set(self.configuration_errors)

    @property
    def resumable(self) -> bool:
        return (self.state in ("failed", "cancelled", "interrupted") and not self.busy_run and not self.unreadable
                and not (self.state == "failed" and self.configuration_error))


def local_time(stamp: str, zone: str | None = None) -> str:
    """An ISO-8601 time as stored (UTC, ``2026-12-03T00:00:00+00:00``) as a person reads it: in the
    time zone ``zone`` (an IANA name such as the browser's; default: this machine's), with its
    abbreviation: ``2026-12-03 09:00:00 JST``. Text that is not a time comes back as it is."""
    try:
        moment = dt.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return str(stamp)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    target = None
    if zone:
        try:
            target = ZoneInfo(zone)
        except (ValueError, KeyError, ZoneInfoNotFoundError):  # an unknown zone name: this machine's
            target = None
    local = moment.astimezone(target)
    return local.strftime("%Y-%m-%d %H:%M:%S %Z").strip()


def seconds_between(start: str, end: str) -> float | None:
    """Seconds from ``start`` to ``end`` (ISO-8601 times), or ``None`` when either is not one."""
    try:
        return (dt.datetime.fromisoformat(end) - dt.datetime.fromisoformat(start)).total_seconds()
    except (TypeError, ValueError):
        return None


def job_id_for(title: str, steps: Sequence[JobStep]) -> str:
    """Deterministic id: the same configuration is the same job (so it cannot run twice at once)."""
    payload = json.dumps([title, [s.to_dict() for s in steps]], sort_keys=True)
    digest = hashlib.sha256(payload.encode()).hexdigest()[:10]
    slug = re.sub(r"[^A-Za-z0-9]+", "-", title).strip("-")[:40] or "job"
    return f"{slug}-{digest}"
