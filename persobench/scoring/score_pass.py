"""One scoring pass over stored runs (:func:`score_runs`): the driver plans each run, an executor
(:mod:`persobench.scoring.executors`) computes, the driver writes.

Plan and write happen only here, in the process that was asked to score: the plan reads what each
run lacks (:func:`~persobench.scoring.work_plan.plan_run`), the write merges new values under the
run's lock (:func:`~persobench.scoring.writing.write_run`). So whichever executor computed, the
stored values, the report and the judge's counts are the same, and a killed pass resumes with only
the values it had not written.
"""

from __future__ import annotations

import collections
import os
import threading
from typing import Any, Callable, Iterable, Iterator, Sequence

from persobench.errors import ConfigurationError, PersoBenchError
from persobench.gc_pace import fewer_collections
from persobench.llm.spend import SpendLedger
from persobench.scoring.executors import LocalExecutor, ScoreExecutor
from persobench.scoring.outcome import RunScore, ScoreReport, judge_sum
from persobench.scoring.overlap import Stop, ahead
from persobench.scoring.pass_steps import Computed, ScoreProgress, WorkGroup, label_group
from persobench.scoring.work_plan import by_dataset, embeds_texts, plan_run, run_samples
from persobench.scoring.writing import write_run
from persobench.metrics.backends import Profile
from persobench.metrics.judge_session import judge_session
from persobench.records import Sample
from persobench.scoring.score_config import ScoreConfig
from persobench.store import Run, RunStore
from persobench.run_lookup import open_store, resolve_run, resolve_runs
from persobench.metrics import lexical
from persobench.metrics.metric_registry import validate_metric_names
from persobench.metrics.encoder import store_cache_root
from persobench.scoring.ray_executor import RayExecutor
from persobench.scoring.ray_executor import import_ray



def _valid_replies(run: "Run") -> int:
    """The run's valid replies as its manifest counts them (0 when it does not say)."""
    counts = run.manifest.extra.get("counts") or {}
    try:
        return int(counts.get("ok", 0))
    except (TypeError, ValueError):
        return 0


def make_executor(config: "ScoreConfig", profile: "Profile", store: "RunStore", runs: Sequence["Run"],
                  wanted: Sequence[str] | None, ledger: "SpendLedger | None" = None) -> ScoreExecutor:
    """The executor ``config`` asks for, sized for ``runs``; ``ledger``: the judge's spend ledger the
    Ray actors share (one cap over all of them)."""
    if config.executor == "ray":

        return RayExecutor(profile, validate_metric_names(list(wanted) if wanted is not None else None),
                           address=config.ray_address, cache_root=store_cache_root(store.home), runs=len(runs),
                           ledger=ledger)

    lexical_wanted = wanted is None or any(m in wanted for m in (*lexical.REFERENCE_LEXICAL, *lexical.REPLY_LEXICAL))
    return LocalExecutor(profile, store, sum(_valid_replies(r) for r in runs) if lexical_wanted else 0,
                         embeds=embeds_texts(wanted))


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
    """Score ``runs`` as ``config`` says (``profile``: already resolved from it, else resolved here):
    plan each run here, compute on the executor, write here as each run's values come back.

    Only values a run lacks are computed: a (sample, metric, profile) already stored from the same
    reply and inputs is kept. ``on_run`` is called after each run is written (or found unscorable)."""
    if config.executor == "ray":

        import_ray()  # before any work: without Ray, one line saying what to install
    wanted = config.checked_metrics()
    prof = profile if profile is not None else config.resolve_profile()
    chosen = list({run.run_id: run for run in runs}.values())  # a run named twice is scored once
    results: list[RunScore] = []
    unavailable: dict[str, str] = {}
    degraded: dict[str, str] = {}
    tallies: list[Any] = []

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

    by_id = {run.run_id: run for run in chosen}
    device = "ray" if config.executor == "ray" else prof.device
    # On Ray the judge's cost cap is one ledger file every actor reserves from before sending.
    ledger = (SpendLedger.for_invocation(store.home, prof.judge.max_cost)
              if config.executor == "ray" and prof.judge is not None and prof.judge.max_cost is not None else None)
    # Runs the planner refused (their one-line reason), finished by this thread as it writes.
    refused: collections.deque[RunScore] = collections.deque()

    def finish_refused() -> None:
        while refused:
            finish(refused.popleft())

    try:
        if chosen:  # nothing to score: no models to load, no cluster to start
            with make_executor(config, prof, store, chosen, wanted, ledger) as executor:
                device = executor.device
                if config.executor == "ray":  # the actors compute every run at once: nothing to overlap
                    groups = _planned(chosen, prof, wanted, refused.append)
                    for done in executor.compute(groups, progress):
                        finish_refused()
                        if done.judge is not None:
                            tallies.append(done.judge)
                        finish(_written(by_id[done.work.run_id], done))
                else:
                    with judge_session(prof.judge) as judge, fewer_collections():
                        planned: Iterable[WorkGroup] = _planned(chosen, prof, wanted, refused.append)
                        if judge is not None:  # every run planned, then its pairs labelled, then computed
                            planned = [label_group(group, judge, lambda run_id: by_id[run_id].path, progress,
                                                   refused.append) for group in planned]
                            tallies.append(judge.stats)
                        _overlapped(executor, planned, progress, by_id, refused, finish, tallies)
            finish_refused()
    finally:
        if ledger is not None:
            ledger.remove()
    order = {run.run_id: k for k, run in enumerate(r for group in by_dataset(chosen) for r in group)}
    results.sort(key=lambda result: order[result.run_id])
    judge = judge_sum(tallies) if prof.judge is not None else None
    return ScoreReport(prof.key, device, tuple(results), unavailable, degraded, judge)


def _overlapped(executor: ScoreExecutor, groups: Iterable[WorkGroup], progress: ScoreProgress | None,
                by_id: dict[str, "Run"], refused: "collections.deque[RunScore]",
                finish: Callable[[RunScore], None], tallies: list[Any]) -> None:
    """The local pass as a bounded pipeline (:mod:`persobench.scoring.overlap`): run N+1 planned and
    run N-1 written while run N is computed. This thread writes each run, in the order computed,
    under its lock; ``progress`` and ``on_run`` are called under one lock, never at once."""
    said = threading.Lock()
    told = None
    if progress is not None:
        def told(stage: str, done: int, total: int) -> None:
            with said:
                progress(stage, done, total)

    stop = Stop()
    try:
        planned = ahead(iter(groups), stop, name="persobench-plan")
        for done in ahead(executor.compute(planned, told), stop, name="persobench-compute"):
            written = _written(by_id[done.work.run_id], done)
            with said:
                while refused:
                    finish(refused.popleft())
                if done.judge is not None:
                    tallies.append(done.judge)
                finish(written)
    finally:
        stop.set()  # the threads end at their next item; the executor's exit cancels queued chunks


def _planned(runs: Sequence["Run"], profile: "Profile", wanted: Sequence[str] | None,
             refuse: Callable[[RunScore], None]) -> Iterator[WorkGroup]:
    """Each dataset's runs planned (lazily: a dataset is planned when the executor asks for it); a
    run that cannot be planned is handed to ``refuse`` with its one-line reason.

    When nothing requested is embedded (lexical metrics), each run is its own group: the executor
    starts computing a run as soon as it is planned instead of waiting for its whole dataset."""
    datasets: dict[str, dict[str, Sample]] = {}
    per_run = not embeds_texts(wanted)
    for group in by_dataset(runs):
        works = []
        label = f"{group[0].manifest.dataset} ({len(group)} run{'s' if len(group) != 1 else ''})"
        for run in group:
            if not run.has_table("generations"):
                refuse(RunScore(run.run_id, error="no generations table"))
                continue
            try:
                work = plan_run(run, run_samples(run, datasets=datasets), profile=profile, metrics=wanted)
            except PersoBenchError as exc:
                refuse(RunScore(run.run_id, error=str(exc)))
                continue
            if per_run:
                yield WorkGroup(label, (work,))
            else:
                works.append(work)
        if not per_run:
            yield WorkGroup(label, tuple(works))


def _written(run: "Run", done: Computed) -> RunScore:
    """Write what came back (kept even beside an error); the run's outcome."""
    if done.error and done.result is None:
        return RunScore(run.run_id, error=done.error)
    try:
        summary = write_run(run, done.work, done.result)
    except PersoBenchError as exc:
        return RunScore(run.run_id, error=str(exc))
    return RunScore(run.run_id, error=done.error) if done.error else RunScore(run.run_id, summary)
