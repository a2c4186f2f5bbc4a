"""The metric registry: what each PersoBench metric means, and entry points that score replies.

Importing this package loads no torch, nltk or pandas: the registry is plain data, and the models
load on first use. :func:`score_samples` and :func:`get_profile` score replies in memory; scoring a
stored run is :func:`persobench.scoring.score_run`.

Every metric is one :class:`MetricInfo` record (the only list of metric facts: range, direction,
worst value, backend slot, whether it needs a reference or a persona, and its *family*). A family
is the small object that computes a group of metrics in one pass, beside its implementation
(:class:`persobench.metrics.family.MetricFamily`):

- ``lexical`` (:class:`~persobench.metrics.lexical.LexicalMetrics`): ``bleu``, ``rouge1``,
  ``rouge2``, ``rougeL``, ``dist1``, ``dist2``, ``idf_overlap``
- ``meteor`` (:class:`~persobench.metrics.meteor.MeteorMetrics`): ``meteor``
- ``bertscore`` and ``persona_distance`` (:mod:`persobench.metrics.embeddings`): ``bertscore_*``,
  ``persona_distance``
- ``nli`` (:class:`~persobench.metrics.nli.NLIMetrics`): ``ue_score``, ``c_score``,
  ``p_consistency``; provides per-persona-sentence NLI labels to later families
- ``persona_coverage`` (:class:`~persobench.metrics.persona.PersonaCoverageMetrics`):
  ``persona_coverage`` and the ``persona_details`` rows; requires the ``nli`` family's labels
- ``unieval`` (:class:`~persobench.metrics.unieval.UniEvalMetrics`): the ``unieval_*`` dimensions
- :mod:`persobench.metrics.backends`: profiles (``offline``, ``standard``), model loading and caching

A new family is one call: :func:`register_family` with the family object and its metrics.

Persona sentences scored against: **all** persona sentences of the sample
(:meth:`persobench.records.Sample.persona_sentences` with no speaker), in source order; joined with
a single space where a metric needs one persona text (as the paper did with its flattened
``personas`` column).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from persobench.metrics.metric_registry import (
    DIMENSIONS,
    METRICS,
    NEEDS,
    MetricInfo,
    MetricRegistryError,
    UnknownMetricError,
    family_names,
    get_family,
    metric_info,
    metric_names,
    register_family,
    unregister_family,
    validate_metric_names,
)
from persobench.metrics.backends import Profile
from persobench.metrics.judge.judge_session import JudgeSession
from persobench.metrics.sample_scores import ScoreResult
from persobench.records import Sample
from persobench.metrics.backends import get_profile as _get_profile
from persobench.metrics.sample_scores import score_samples as _score_samples



def __getattr__(name: str) -> Any:
    # Derived lists are computed on access, so a family registered later is part of them.
    if name == "METRIC_NAMES":  # the per-sample metrics the scoring stage computes and stores
        return metric_names()
    if name == "RUN_METRIC_NAMES":  # run-level metrics computed by aggregation, described for the app
        return metric_names(level="run")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- Entry points ------------------------------------------------------------------------------

def get_profile(name: str = "offline", overrides: Mapping[str, str] | None = None) -> "Profile":
    """The named backend profile (``offline`` or ``standard``) with per-slot model overrides."""

    return _get_profile(name, overrides)


def score_samples(
    samples: "list[Sample]",
    replies: Mapping[str, str],
    *,
    profile: "str | Profile" = "offline",
    metrics: "list[str] | tuple[str, ...] | None" = None,
    overrides: Mapping[str, str] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    references: Mapping[str, str] | None = None,
    judge: "JudgeSession | None" = None,
) -> "ScoreResult":
    """Score ``replies`` (sample id -> reply text) for ``samples``; see :mod:`persobench.metrics.sample_scores`.
    With a judge in the profile its NLI pairs are labelled through ``judge`` (a
    :class:`~persobench.metrics.judge.judge_session.JudgeSession`, whose ``stats`` say what it did), else
    through a session of this call's own."""

    return _score_samples(samples, replies, profile=profile, metrics=metrics, overrides=overrides,
                          progress=progress, references=references, judge=judge)


__all__ = [
    "DIMENSIONS", "METRICS", "METRIC_NAMES", "MetricInfo", "MetricRegistryError", "NEEDS", "RUN_METRIC_NAMES",
    "UnknownMetricError", "family_names", "get_family", "get_profile", "metric_info", "metric_names",
    "register_family", "score_samples", "unregister_family",
    "validate_metric_names",
]
