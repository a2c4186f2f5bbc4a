"""Background jobs: generation runs, scoring and imports launched from the app, run in a detached
process that writes to the run store. No Streamlit here: the app, the runner and the tests share it.

* :mod:`~persobench.jobs.model`: what a job is (:class:`JobStep`, :class:`JobStatus`, its files,
  :func:`read_steps`: a ``job.json``'s steps, or one line naming the file, step and field).
* :mod:`~persobench.jobs.step_requests`: what each step kind asks for, one typed request per kind
  (:class:`RunRequest`, :class:`ScoreRequest`, :class:`ImportRequest`, :class:`FetchRequest`).
* :mod:`~persobench.jobs.planning`: estimates before launching and the steps of a job.
* :mod:`~persobench.jobs.manager`: :class:`JobManager` launches, lists, cancels, resumes.
* :mod:`~persobench.jobs.job_process`: the detached process, ``python -m persobench.jobs.job_process job DIR``, and
  its step children, each running a typed step through :mod:`persobench.pipeline`.

A lock file makes a second click or a page rerun a no-op while the job is alive; progress is read
from each run's ``progress.json`` and a ``cancel`` file stops it. Relaunching a cancelled or crashed
job resumes it (the generation cache keeps every reply already received).
"""

from persobench.jobs.judging import estimate_for_launch, estimate_for_store, judge_step
from persobench.jobs.manager import JobManager, lock_alive, tail_text
from persobench.jobs.model import (
    CANCEL_GRACE_S,
    JOB_STATES,
    LAUNCH_GRACE_S,
    JobStatus,
    JobStep,
    job_id_for,
    local_time,
    read_steps,
    seconds_between,
)
from persobench.jobs.planning import (
    BUILTIN_MODEL_CHOICES,
    TEMPLATE_CHOICES,
    LaunchChoice,
    fetch_paper_steps,
    import_steps,
    launch_steps,
    missing_key,
    plan_launch,
    registry_models,
)
from persobench.jobs.step_requests import (
    STEP_REQUESTS,
    FetchRequest,
    ImportRequest,
    RunRequest,
    ScoreRequest,
    StepRequest,
)

__all__ = [
    "BUILTIN_MODEL_CHOICES", "CANCEL_GRACE_S", "JOB_STATES", "LAUNCH_GRACE_S", "JobManager", "TEMPLATE_CHOICES",
    "estimate_for_launch", "estimate_for_store", "judge_step",
    "JobStatus", "JobStep", "LaunchChoice", "fetch_paper_steps", "import_steps", "job_id_for", "launch_steps",
    "local_time", "lock_alive",
    "missing_key", "seconds_between", "plan_launch", "registry_models", "tail_text",
    "STEP_REQUESTS", "FetchRequest", "ImportRequest", "RunRequest", "ScoreRequest", "StepRequest", "read_steps",
]
