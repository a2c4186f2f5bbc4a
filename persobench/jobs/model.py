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

from persobench.config import JudgeConfig, validated
from persobench.errors import ConfigurationError
from persobench.generation import GenerationConfig
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
STEP_KINDS = ("run", "score", "import", "fetch")


@dataclass(frozen=True)
class JobStep:
    """One step of a job: a typed request the job's child process runs through :mod:`persobench.pipeline`."""

    label: str
    """What the page shows for this step."""
    kind: str
    """One of :data:`STEP_KINDS`: ``run`` (generation), ``score``, ``import`` or ``fetch`` (download
    the paper's data, then import it)."""
    config: Mapping[str, Any] = field(default_factory=dict)
    """The step's typed request as JSON (its model's ``model_dump``; read back through the model by
    :func:`typed_config`). ``run``: a :class:`~persobench.generation.GenerationConfig`
    (:meth:`~persobench.generation.GenerationConfig.to_dict`, credentials left out); ``score``: a
    :class:`~persobench.scoring.score_config.ScoreConfig` (:meth:`~persobench.scoring.score_config.ScoreConfig.to_dict`,
    its judge a :class:`~persobench.config.judge.JudgeConfig`, no key) plus ``runs``
    (``"job"``: the runs this job's run steps completed, ``"all"``: every run in the store, or a
    list of run ids); older jobs' loose ``profile``/``metrics``/``judge`` dict reads the same way;
    ``import``: ``folder``;
    ``fetch``: ``url`` (``None``: the pinned archive)."""
    expect: Mapping[str, str] = field(default_factory=dict)
    """The dataset, model and mode the step generates (kept in ``job.json`` for display)."""
    run_id: str | None = None
    """The run the step writes, when known in advance (``plan_generation`` computes it)."""
    withhold_keys: bool = False
    """Run the step without the app's API keys in its environment: its server is a base URL typed
    into the page, which the operator did not configure (see :func:`persobench.core.secrets.key_allowed`)."""

    def __post_init__(self) -> None:
        if self.kind not in STEP_KINDS:
            raise ConfigurationError(f"unknown job step kind {self.kind!r}; expected one of {', '.join(STEP_KINDS)}")

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "kind": self.kind, "config": dict(self.config), "expect": dict(self.expect),
                "run_id": self.run_id, "withhold_keys": self.withhold_keys}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "JobStep":
        """The step of a ``job.json`` entry, its config read through its typed model (:func:`typed_config`),
        so an older ``job.json`` resumes in today's form."""
        kind = str(data["kind"])
        return cls(str(data["label"]), kind, typed_config(kind, dict(data.get("config") or {})),
                   dict(data.get("expect") or {}), data.get("run_id"), bool(data.get("withhold_keys", False)))

    def run_dir(self, home: Path) -> Path | None:
        """The folder of the run this step writes (None until it exists, or when it writes no run)."""
        if not self.run_id:
            return None

        path = RunStore(home).run_path(self.run_id)
        return path if path.is_dir() else None


def typed_config(kind: str, config: dict[str, Any]) -> dict[str, Any]:
    """A stored step config as its typed model writes it today: a ``run`` step's through
    :class:`~persobench.generation.GenerationConfig`, a ``score`` step's judge through
    :class:`~persobench.config.judge.JudgeConfig` (whose reader takes the older forms: a flat
    ``timeout``, ``null`` batch fields). A config its model refuses is kept as it is: the step fails
    with the model's one line when it runs, and the job still lists."""
    try:
        if kind == "run":
            return GenerationConfig.from_dict(config).to_dict()
        if kind == "score" and isinstance(config.get("judge"), Mapping):
            return {**config, "judge": validated(JudgeConfig, config["judge"]).model_dump(mode="json")}
    except ConfigurationError:
        pass
    return config


def score_step(label: str, config: Any, runs: "str | Sequence[str]" = "job", *, withhold_keys: bool = False) -> JobStep:
    """A ``score`` step: ``config`` (a :class:`~persobench.scoring.score_config.ScoreConfig`) stored as
    its :meth:`~persobench.scoring.score_config.ScoreConfig.to_dict`, plus which ``runs`` (``"job"``,
    ``"all"`` or run ids)."""
    return JobStep(label=label, kind="score", withhold_keys=withhold_keys,
                   config={**config.to_dict(), "runs": runs if isinstance(runs, str) else list(runs)})


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
        return (self.state in ("failed", "cancelled", "interrupted") and not self.busy_run
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
