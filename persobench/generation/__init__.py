"""Generation runs: samples -> prompts -> provider -> cache -> post-processing -> run store.

Python API (what the CLI and the Streamlit app call)::

    from persobench.generation import GenerationConfig, run_generation
    run = run_generation(GenerationConfig(dataset="sample", model="openai:gpt-4o-mini"), home="cache")

The package, one concern per module:

``config``    :class:`GenerationConfig`, everything that defines a run
``plan``      :func:`plan_generation`: model, template, samples, cache hits and run id; sends nothing
``rows``      one row of ``generations.parquet`` per finished sample (post-processing happens here)
``progress``  ``progress.json`` and the ``cancel`` file, for pollers in other processes
``runner``    :func:`run_generation`: workers, cache writes, checkpoints, cancel, fail-fast, summary

Files in the run folder while a run is going (for an app polling from another process):

``progress.json``
    ``{"run_id", "status", "total", "done", "failed", "cached", "requests", "elapsed", "eta",
    "pid", "updated_at"}``, rewritten atomically at most twice a second and at the end. ``done``
    counts finished samples of any status, ``failed`` those whose status is not "ok", ``cached``
    those served from the cache, ``eta`` is seconds (``null`` until measurable). ``status`` is
    "running", then "completed", "cancelled" or "failed"; a "running" file whose ``pid`` no
    longer exists belongs to a killed run (start it again to resume).
``cancel``
    Create this file (:func:`request_cancel`) to stop the run: it is checked between requests
    and during retry waits; requests in flight are abandoned at once (their samples stay pending),
    the table is written with the finished samples and the run ends "cancelled". Running the same
    configuration again resumes it; the file is removed when a run starts.
``lock``, ``resume.json``
    The generating process holds ``lock`` (one process per run) and writes ``resume.json`` (the
    resume command and the cache keys): see :mod:`persobench.generation.lock`.
``generations.parquet``
    Rewritten atomically every ``checkpoint_every`` completions and at the end, one row per
    finished sample (see :data:`COLUMNS`).
"""

from __future__ import annotations

from persobench.generation.config import GenerationConfig
from persobench.generation.plan import GenerationPlan, plan_generation
from persobench.generation.progress import (
    CANCEL_FILE,
    PROGRESS_FILE,
    ProgressInfo,
    read_progress,
    request_cancel,
)
from persobench.llm.retry import CallOutcome, PauseGate, RetryPolicy
from persobench.llm.session import call_with_retries
from persobench.generation.rows import COLUMNS, TABLE, build_row
from persobench.generation.runner import RunAborted, run_generation

__all__ = [
    "CANCEL_FILE", "COLUMNS", "CallOutcome", "GenerationConfig", "GenerationPlan", "PROGRESS_FILE", "PauseGate",
    "ProgressInfo", "RetryPolicy", "RunAborted", "TABLE", "build_row", "call_with_retries", "plan_generation",
    "read_progress", "request_cancel", "run_generation",
]
