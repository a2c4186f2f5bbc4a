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

from persobench.generation.batch_run import BatchPending, WaitingBatch, batch_notes, waiting_batch
from persobench.generation.config import GenerationConfig, config_command, public_config
from persobench.generation.demo import (DEFAULT_LIMIT, DEMO_DATASET, DEMO_PROFILE, DemoState, demo_configs, demo_runs,
                                        read_demo_state, write_demo_state)
from persobench.generation.importer import (ImportFolderError, ImportReport, dataset_for_folder, find_response_files,
                                            import_persobench, run_references, samples_for_run)
from persobench.generation.lock import Interruption, RunLocked, interruption, resume_command
from persobench.generation.plan import GenerationPlan, default_template_for, messages_for, plan_generation
from persobench.generation.postprocess import POLICIES, ParsedOutput, Status, parse_output, summarize
from persobench.generation.progress import (CANCEL_FILE, PROGRESS_FILE, STARTING, ProgressInfo, every_reply_failed,
                                            read_progress, request_cancel, run_state)
from persobench.generation.rows import COLUMNS, EXIT_NO_SAMPLE_SUCCEEDED, TABLE, build_row, no_sample_succeeded
from persobench.generation.runner import RunAborted, run_generation
from persobench.llm.retry import CallOutcome, PauseGate, RetryPolicy
from persobench.llm.session import call_with_retries

__all__ = [
    "CANCEL_FILE", "COLUMNS", "DEFAULT_LIMIT", "DEMO_DATASET", "DEMO_PROFILE", "EXIT_NO_SAMPLE_SUCCEEDED",
    "POLICIES", "PROGRESS_FILE", "STARTING", "TABLE", "BatchPending", "CallOutcome",
    "GenerationConfig", "GenerationPlan", "ImportFolderError", "ImportReport", "Interruption", "ParsedOutput",
    "PauseGate", "DemoState", "ProgressInfo", "RetryPolicy", "RunAborted", "RunLocked", "Status", "WaitingBatch", "batch_notes", "build_row",
    "call_with_retries", "config_command", "dataset_for_folder", "default_template_for",
    "demo_configs", "demo_runs", "every_reply_failed", "find_response_files", "import_persobench", "interruption",
    "messages_for", "no_sample_succeeded", "parse_output", "plan_generation", "public_config",
    "read_demo_state", "read_progress", "request_cancel", "resume_command", "run_generation", "run_references", "run_state",
    "samples_for_run", "summarize", "waiting_batch", "write_demo_state",
]
