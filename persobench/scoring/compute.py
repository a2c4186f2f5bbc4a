"""The compute step of scoring a stored run: its planned work in, the values it lacks out. Pure: it
reads no store, writes nothing and sends nothing (a judge's answers come with the work, asked by the
label step before: :func:`persobench.scoring.pass_steps.label_work`), so it runs in this process or
on a Ray actor alike.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Mapping, Sequence

from persobench.errors import ScoringError
from persobench.metrics.backends import Profile
from persobench.metrics.family import ProgressFn
from persobench.metrics.judge.judge_session import JudgeSession, judge_session
import persobench.metrics.sample_scores as family_scoring  # by module: a test spies on score_samples
from persobench.metrics.sample_scores import ScoreResult
from persobench.scoring.pass_steps import label_work
from persobench.scoring.work_plan import plan_run
from persobench.scoring.writing import RunScoreSummary, RunWork, write_run
from persobench.metrics.encoders.encoder import TextEncoder
from persobench.records import Sample
from persobench.store.run_store import Run
from persobench.metrics.encoders.encoder import store_cache_root



def compute_run(work: RunWork, *, metrics: Sequence[str] | None = None, progress: ProgressFn | None = None,
                encoder: "TextEncoder | None" = None) -> "ScoreResult | None":
    """The compute step of :func:`score_run`: the values ``work`` lacks, of ``metrics`` only when given
    (a shard of the work), or None when it lacks none. Pure: reads no store, writes nothing, sends
    nothing: with a judge in the profile, the NLI family reads the answers the label step attached
    to ``work`` (:func:`~persobench.scoring.pass_steps.label_work`), and a work without them is refused.

    Whatever the subset, each family sees the replies the whole run would give it, so a value is
    the same whether the run is scored at once or family by family (:mod:`persobench.scoring.ray_executor`)."""
    todo = [m for m in work.todo if metrics is None or m in metrics]
    if not todo:
        return None
    if work.profile.judge is not None and work.nli_answers is None:
        raise ScoringError(f"run {work.run_id}: the judge's answers are not in its work (label it first: "
                           "persobench.scoring.pass_steps.label_work)")
    ids = work.sample_ids
    return family_scoring.score_samples(work.samples, {sid: work.replies[sid] for sid in ids}, profile=work.profile,
                                        metrics=todo, progress=progress, references=work.references,
                                        persona_texts=work.persona_texts, encoder=encoder,
                                        reference_note=work.reference_note, row_order=work.row_order or None,
                                        nli_answers=work.nli_answers)


def combine_results(results: Sequence["ScoreResult"]) -> "ScoreResult | None":
    """Shards of one run's compute step (disjoint metrics) as one result; None for no shard."""
    import pandas as pd

    if not results:
        return None
    if len(results) == 1:
        return results[0]
    provenance: dict[str, dict[str, Any]] = {}
    for result in results:
        provenance.update(result.provenance)
    return ScoreResult(pd.concat([r.scores for r in results], ignore_index=True),
                       pd.concat([r.persona_details for r in results], ignore_index=True),
                       provenance, results[0].profile)


def score_run(
    run: "Run",
    samples_by_id: Mapping[str, "Sample"],
    *,
    profile: "str | Profile" = "offline",
    metrics: Sequence[str] | None = None,
    overrides: Mapping[str, str] | None = None,
    progress: ProgressFn | None = None,
    references: Mapping[str, str] | None = None,
    encoder: "TextEncoder | None" = None,
    judge: "JudgeSession | None" = None,
) -> RunScoreSummary:
    """Score the ``ok`` rows of ``run``'s generations table that lack the requested scores:
    :func:`plan_run`, the judge's label step when the profile has one (through ``judge``, else a
    session of this call's own), :func:`compute_run` in this process, then :func:`write_run`.

    Under the paper's protocol (template family ``paper``, imported published runs included) the
    persona metrics read the paper's ``personas`` cell, as its evaluation did
    (:func:`persobench.datasets.paper_cells.paper_persona_text`); other runs read the sentences.

    Writes ``scores`` (``sample_id, metric, value, profile``) and ``persona_details`` (the detail
    columns plus ``profile``) and records provenance in the manifest under
    ``extra["scores"][<profile key>]``. A (sample, metric, profile) already stored is never
    recomputed. Embeddings are cached in the store (``<home>/embeddings``) unless ``encoder`` is
    given (the ``score`` command passes one encoder for all its runs).
    """
    work = plan_run(run, samples_by_id, profile=profile, metrics=metrics, overrides=overrides,
                    references=references)
    result = None
    if work.todo:
        run_encoder = None
        if encoder is None:  # the store's embedding cache; the memory is given back after this run

            encoder = run_encoder = TextEncoder(work.profile, store_cache_root(run.path.parent.parent))
        with judge_session(work.profile.judge) if judge is None else nullcontext(judge) as session:
            # a judge sends nothing more for this run once it is deleted
            work = label_work(work, session, run_path=run.path, progress=progress)
        result = compute_run(work, progress=progress, encoder=encoder)
        if run_encoder is not None:
            run_encoder.release()
    return write_run(run, work, result)
