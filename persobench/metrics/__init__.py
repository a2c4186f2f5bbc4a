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

from persobench.metrics.backends import BackendUnavailable, Profile, get_profile
from persobench.metrics.judge import (JUDGE_FLAGS, JUDGE_TIMEOUT_FLAG, Judge, JudgeConfig, JudgeError, JudgeLabeller,
                                      JudgeSession, judge_session, make_judge, pending_note as judge_batch_note,
                                      resolve_judge)
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
from persobench.metrics.persona import COVERAGE_SIMILARITY_THRESHOLD
from persobench.metrics.sample_scores import ScoreResult, score_samples
from persobench.metrics.unieval import UNIEVAL_SCORERS

__all__ = [
    "COVERAGE_SIMILARITY_THRESHOLD", "DIMENSIONS", "JUDGE_FLAGS", "JUDGE_TIMEOUT_FLAG", "METRICS", "NEEDS",
    "UNIEVAL_SCORERS", "BackendUnavailable", "Judge", "JudgeConfig", "JudgeError", "JudgeLabeller", "JudgeSession",
    "MetricInfo", "MetricRegistryError", "Profile", "ScoreResult", "UnknownMetricError",
    "family_names", "get_family", "get_profile", "judge_batch_note", "judge_session", "make_judge",
    "metric_info", "metric_names", "register_family", "resolve_judge", "score_samples", "unregister_family", "validate_metric_names",
]
