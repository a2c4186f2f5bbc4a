"""The metric registry: what each PersoBench metric means, and entry points that score replies.

Importing this package is cheap (no torch, nltk or pandas): the registry below is plain data, and
:func:`score_samples`, :func:`score_run` and :func:`get_profile` import the heavy scoring code on
first call. Metric implementations live in sibling modules:

- :mod:`persobench.metrics.lexical`: ``bleu``, ``rouge1``, ``rouge2``, ``rougeL``, ``dist1``, ``dist2``
- :mod:`persobench.metrics.meteor`: ``meteor``
- :mod:`persobench.metrics.embeddings`: ``bertscore_*``, ``persona_distance``, ``idf_overlap``,
  per-persona-sentence embedding similarity
- :mod:`persobench.metrics.nli`: ``ue_score``, ``c_score``, ``p_consistency``, per-persona-sentence
  NLI labels, ``persona_coverage``
- :mod:`persobench.metrics.unieval`: the ``unieval_*`` dialogue dimensions
- :mod:`persobench.metrics.backends`: profiles (``offline``, ``standard``), model loading and caching

Persona sentences scored against: **all** persona sentences of the sample
(:meth:`persobench.records.Sample.persona_sentences` with no speaker), in source order; joined with
a single space where a metric needs one persona text (as the paper did with its flattened
``personas`` column).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

from persobench.errors import MetricError

if TYPE_CHECKING:  # pragma: no cover
    from persobench.metrics.backends import Profile
    from persobench.metrics.scoring import ScoreResult
    from persobench.records import Sample
    from persobench.store import Run

DIMENSIONS = ("fluency", "diversity", "coherence", "personalization", "efficiency")


@dataclass(frozen=True)
class MetricInfo:
    """What a metric measures and how to read its number."""

    name: str
    """Public name, the ``metric`` value in score tables."""
    dimension: str
    """One of :data:`DIMENSIONS` (``efficiency`` only for run-level response time / failures)."""
    description: str
    """One sentence for people: what the number says."""
    range: tuple[float, float | None]
    """(lowest, highest) possible value; ``None`` as highest means unbounded."""
    higher_is_better: bool
    """Direction of "better"."""
    worst_value: float | None
    """Value the paper gives an invalid reply (0, or -1 for ``c_score``); ``None`` for run-level."""
    needs: str
    """Model kind needed: ``none``, ``wordnet``, ``bertscore``, ``word_vectors``, ``embedding``,
    ``nli`` or ``unieval`` (the backend slot, see :mod:`persobench.metrics.backends`)."""
    level: str = "sample"
    """``sample`` (stored per reply by the scoring stage) or ``run`` (computed by aggregation)."""
    paper: bool = True
    """True when the paper reports this metric; False for PersoBench additions."""


def _m(name: str, dimension: str, description: str, lo: float, hi: float | None, needs: str, *,
       higher: bool = True, worst: float | None = 0.0, level: str = "sample", paper: bool = True) -> MetricInfo:
    return MetricInfo(name, dimension, description, (lo, hi), higher, worst, needs, level, paper)


_INFOS: tuple[MetricInfo, ...] = (
    # Fluency, against the reference reply.
    _m("bleu", "fluency", "Sentence BLEU-4 against the reference (whitespace tokens, smoothing method 1).",
       0.0, 1.0, "none"),
    _m("rouge1", "fluency", "ROUGE-1 F-score against the reference (unigram overlap).", 0.0, 1.0, "none"),
    _m("rouge2", "fluency", "ROUGE-2 F-score against the reference (bigram overlap).", 0.0, 1.0, "none"),
    _m("rougeL", "fluency", "ROUGE-L F-score against the reference (longest common subsequence).",
       0.0, 1.0, "none"),
    _m("meteor", "fluency", "METEOR against the reference (exact, stem and WordNet synonym matches).",
       0.0, 1.0, "wordnet"),
    _m("bertscore_p", "fluency", "BERTScore precision: reply tokens matched in the reference by embeddings.",
       -1.0, 1.0, "bertscore"),
    _m("bertscore_r", "fluency", "BERTScore recall: reference tokens matched in the reply by embeddings.",
       -1.0, 1.0, "bertscore"),
    _m("bertscore_f1", "fluency", "BERTScore F1: harmonic mean of BERTScore precision and recall.",
       -1.0, 1.0, "bertscore"),
    # Diversity.
    _m("dist1", "diversity", "Distinct-1: unique unigrams / unigrams of the reply (whitespace tokens).",
       0.0, 1.0, "none"),
    _m("dist2", "diversity", "Distinct-2: unique bigrams / bigrams of the reply (whitespace tokens).",
       0.0, 1.0, "none"),
    # Coherence.
    _m("ue_score", "coherence", "2 if the personas and the reference both entail the reply (NLI), "
       "1 if only the personas do, else 0.", 0.0, 2.0, "nli"),
    _m("unieval_coherence", "coherence", "UniEval: is this a coherent response given the dialogue history? "
       "P(yes)/(P(yes)+P(no)).", 0.0, 1.0, "unieval"),
    # Personalization.
    _m("c_score", "personalization", "NLI of the personas against the reply: 1 entailment, 0 neutral, "
       "-1 contradiction.", -1.0, 1.0, "nli", worst=-1.0),
    _m("p_consistency", "personalization", "1 unless the reply contradicts the personas (NLI), else 0.",
       0.0, 1.0, "nli"),
    _m("persona_distance", "personalization", "Cosine between averaged word vectors of the personas and "
       "the reply, stop words removed (higher = closer).", -1.0, 1.0, "word_vectors"),
    _m("idf_overlap", "personalization", "TF-IDF cosine between the personas and the reply "
       "(lower-cased, punctuation and stop words removed).", 0.0, 1.0, "none"),
    _m("unieval_groundedness", "personalization", "UniEval: is this response consistent with knowledge in "
       "the fact (the personas)?", 0.0, 1.0, "unieval"),
    _m("unieval_naturalness", "personalization", "UniEval: is this a natural response in the dialogue?",
       0.0, 1.0, "unieval"),
    _m("unieval_engagingness", "personalization", "UniEval: engaging and informative given history and "
       "personas; summed over the reply's sentences, so unbounded above.", 0.0, None, "unieval"),
    _m("unieval_understandability", "personalization", "UniEval: is this an understandable response in "
       "the dialogue?", 0.0, 1.0, "unieval"),
    _m("unieval_overall", "personalization", "Mean of the five UniEval dialogue dimensions.", 0.0, None,
       "unieval"),
    _m("persona_coverage", "personalization", "Share of persona sentences the reply engages (NLI "
       "entailment, or embedding similarity above a threshold when no NLI model is available).",
       0.0, 1.0, "embedding", paper=False),
    # Run level (computed by aggregation from the generations table, not stored per sample).
    _m("failure_ratio", "efficiency", "Share of samples whose reply was invalid (failed to parse or empty).",
       0.0, 1.0, "none", higher=False, worst=None, level="run"),
    _m("instructability", "efficiency", "(max failure - failure) / max failure across the compared models.",
       0.0, 1.0, "none", worst=None, level="run"),
    _m("response_time", "efficiency", "Seconds to produce a reply (mean over samples).", 0.0, None, "none",
       higher=False, worst=None, level="run"),
)

#: Every metric the registry describes, by name, in display order.
METRICS: Mapping[str, MetricInfo] = {info.name: info for info in _INFOS}

#: The per-sample metrics the scoring stage computes and stores, in display order.
METRIC_NAMES: tuple[str, ...] = tuple(i.name for i in _INFOS if i.level == "sample")

#: Run-level metrics computed by aggregation; described here so the app can explain them.
RUN_METRIC_NAMES: tuple[str, ...] = tuple(i.name for i in _INFOS if i.level == "run")

UNIEVAL_METRICS: tuple[str, ...] = tuple(n for n in METRIC_NAMES if n.startswith("unieval_"))
NLI_METRICS: tuple[str, ...] = ("ue_score", "c_score", "p_consistency")


class UnknownMetricError(MetricError, KeyError):
    """A metric name that is not registered; the message lists the known names."""

    def __str__(self) -> str:
        return str(self.args[0])


def metric_info(name: str) -> MetricInfo:
    """The :class:`MetricInfo` of ``name`` (sample- or run-level)."""
    try:
        return METRICS[name]
    except KeyError:
        raise UnknownMetricError(
            f"unknown metric {name!r}; known metrics: {', '.join(METRICS)}"
        ) from None


def metrics_by_dimension(dimension: str) -> list[str]:
    """Names of the metrics of one dimension, in display order."""
    return [i.name for i in _INFOS if i.dimension == dimension]


def validate_metric_names(names: "list[str] | tuple[str, ...] | None") -> tuple[str, ...]:
    """``names`` checked against :data:`METRIC_NAMES` (``None`` = all), deduplicated, in display order."""
    if names is None:
        return METRIC_NAMES
    unknown = [n for n in names if n not in METRIC_NAMES]
    if unknown:
        run_level = [n for n in unknown if n in RUN_METRIC_NAMES]
        hint = f" ({', '.join(run_level)} are run-level: computed by aggregation)" if run_level else ""
        raise UnknownMetricError(
            f"unknown per-sample metric(s) {', '.join(map(repr, unknown))}{hint}; "
            f"known: {', '.join(METRIC_NAMES)}"
        )
    wanted = set(names)
    return tuple(n for n in METRIC_NAMES if n in wanted)


# --- Lazy entry points -------------------------------------------------------------------------

def get_profile(name: str = "offline", overrides: Mapping[str, str] | None = None) -> "Profile":
    """The named backend profile (``offline`` or ``standard``) with per-slot model overrides."""
    from persobench.metrics.backends import get_profile as _get_profile

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
) -> "ScoreResult":
    """Score ``replies`` (sample id -> reply text) for ``samples``; see :mod:`persobench.metrics.scoring`."""
    from persobench.metrics.scoring import score_samples as _score_samples

    return _score_samples(samples, replies, profile=profile, metrics=metrics, overrides=overrides,
                          progress=progress, references=references)


def score_run(
    run: "Run",
    samples_by_id: Mapping[str, "Sample"],
    *,
    profile: "str | Profile" = "offline",
    metrics: "list[str] | tuple[str, ...] | None" = None,
    overrides: Mapping[str, str] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    references: Mapping[str, str] | None = None,
) -> Any:
    """Score the ok rows of a run's generations table, caching results in the run folder."""
    from persobench.metrics.scoring import score_run as _score_run

    return _score_run(run, samples_by_id, profile=profile, metrics=metrics, overrides=overrides,
                      progress=progress, references=references)


__all__ = [
    "DIMENSIONS", "METRICS", "METRIC_NAMES", "MetricInfo", "NLI_METRICS", "RUN_METRIC_NAMES",
    "UNIEVAL_METRICS", "UnknownMetricError", "get_profile", "metric_info", "metrics_by_dimension",
    "score_run", "score_samples", "validate_metric_names",
]
