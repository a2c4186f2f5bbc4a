"""One scoring pass over stored runs (:func:`score_runs`): the executor ``--executor`` names
(:data:`~persobench.scoring.score_config.EXECUTORS`) runs it, taking every step the same way
(:class:`~persobench.scoring.pass_steps.PassSteps`).

Plan, label and write happen only in the process that was asked to score: the plan reads what each
run lacks (:func:`~persobench.scoring.work_plan.plan_run`), the pass's judge session labels each
run's NLI pairs (:func:`~persobench.scoring.pass_steps.label_work`), the write merges new values under
the run's lock (:func:`~persobench.scoring.writing.write_run`). So whichever executor computed, the
judge's requests, the stored values, the report and the judge's counts are the same, and a killed
pass resumes with only the values it had not written.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Sequence

from persobench.errors import ConfigurationError
from persobench.metrics.backends import Profile
from persobench.metrics.judge.labeller import JudgeStats
from persobench.metrics.judge.judge_session import judge_session
from persobench.store.run_lookup import open_store, resolve_run, resolve_runs
from persobench.scoring.executors import ScoreExecutor
from persobench.scoring.outcome import RunScore, ScoreReport
from persobench.scoring.pass_steps import PassSteps, ScoreProgress
from persobench.scoring.score_config import EXECUTORS, ScoreConfig
from persobench.scoring.work_plan import by_dataset
from persobench.store.run_store import Run, RunStore


def score(runs: Sequence[str | Run] | None = None, config: "ScoreConfig | None" = None, *,
          home: str | os.PathLike[str] | None = None, store: RunStore | None = None,
          progress: ScoreProgress | None = None, on_run: "Callable[[RunScore], None] | None" = None,
          **settings: Any) -> ScoreReport:
    """Score runs (ids, prefixes or handles; default every run with generations) as ``config`` says
    (:class:`~persobench.scoring.score_config.ScoreConfig`: profile, metrics, judge, executor ...).

    ``settings`` instead of ``config``: its fields by name (``profile="standard", metrics=[...],
    executor="ray"``); ``profile`` may also be a resolved :class:`~persobench.metrics.backends.Profile`
    (its judge included). Only values a run lacks are computed, and each run's values are merged
    into what is stored under its lock (:func:`persobench.scoring.score_pass.score_runs`). ``on_run``
    is called after each run (the CLI prints a line per run). The report carries the judge's counts,
    summed over every process that computed."""

    profile = settings.get("profile")
    resolved = profile if isinstance(profile, Profile) else None
    if resolved is not None:  # a resolved profile: its name, overrides, precision and judge make the config
        settings = {**settings, "profile": resolved.name, "judge": resolved.judge, "precision": resolved.precision,
                    "overrides": {k: v for k, v in resolved.overrides.items() if k != "precision"},
                    "input_layout": resolved.input_layout}
    if config is not None and settings:
        raise ConfigurationError(f"score: give a config or settings, not both ({', '.join(settings)})")
    try:
        config = config if config is not None else ScoreConfig(**settings)
    except TypeError as exc:
        raise ConfigurationError(f"score: {exc}") from None
    store = open_store(home, store)
    chosen = (resolve_runs(store, None) if not runs
              else [r if isinstance(r, Run) else resolve_run(store, r) for r in runs])
    return score_runs(chosen, config, store=store, profile=resolved, progress=progress, on_run=on_run)


def score_runs(runs: Sequence["Run"], config: "ScoreConfig", *, store: "RunStore", profile: "Profile | None" = None,
               progress: ScoreProgress | None = None,
               on_run: Callable[[RunScore], None] | None = None) -> ScoreReport:
    """Score ``runs`` as ``config`` says (``profile``: already resolved from it, else resolved here)
    on the executor it names: each run planned and labelled here, computed by the executor, written
    here as its values come back.

    Only values a run lacks are computed: a (sample, metric, profile) already stored from the same
    reply and inputs is kept. ``on_run`` is called after each run is written (or found unscorable).
    The report's judge counts are the pass's judge session's."""
    executor_class: type[ScoreExecutor] = EXECUTORS.get(config.executor)
    wanted = config.checked_metrics()
    prof = profile if profile is not None else config.resolve_profile()
    device = executor_class.where(config, prof)  # before any work: one line when it cannot run here
    chosen = list({run.run_id: run for run in runs}.values())  # a run named twice is scored once
    results: list[RunScore] = []
    unavailable: dict[str, str] = {}
    degraded: dict[str, str] = {}
    judged = JudgeStats() if prof.judge is not None else None

    def finish(result: RunScore) -> None:
        results.append(result)
        if result.summary is not None:
            for metric, prov in result.summary.provenance.items():
                if prov.get("status") == "unavailable":
                    unavailable.setdefault(metric, prov.get("reason", ""))
                elif prov.get("status") == "degraded":
                    degraded.setdefault(metric, prov.get("reason", ""))
        if on_run is not None:
            on_run(result)

    if chosen:  # nothing to score: no models to load, no cluster to start
        steps = PassSteps(chosen, prof, wanted)
        # With a cost cap, the pass's judge keeps it in a ledger file of its own under the store.
        with judge_session(prof.judge, home=store.home) as judge, \
                executor_class.open(config, prof, store, chosen) as executor, \
                contextlib.closing(executor.run_pass(steps, judge, progress)) as outcomes:
            device = executor.device
            for result in outcomes:
                finish(result)
            judged = judge.stats if judge is not None else None
    order = {run.run_id: k for k, run in enumerate(r for group in by_dataset(chosen) for r in group)}
    results.sort(key=lambda result: order[result.run_id])
    return ScoreReport(prof.key, device, tuple(results), unavailable, degraded, judged)
