"""The metric registry itself: one :class:`MetricInfo` per metric and the registered families.

:mod:`persobench.metrics` is its public front (with the lazy scoring entry points); the modules of
the metrics stage import from here, never from the package, so no import cycle runs through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping, Protocol, Sequence

from persobench.errors import MetricError
from persobench.core.registry import Registry


class RegisteredFamily(Protocol):
    """What the registry needs of a metric family (:class:`persobench.metrics.family.MetricFamily`
    implements it); named here so the registry, which every family imports, imports no family."""

    name: str

    def score(self, batch: Any) -> Any: ...

DIMENSIONS = ("fluency", "diversity", "coherence", "personalization", "efficiency")
#: The backend slots: one kind of model a metric may need (a profile of
#: :mod:`persobench.metrics.backends` maps each to a model).
SLOTS = ("bertscore", "nli", "word_vectors", "unieval", "wordnet", "embedding")
#: Values of :attr:`MetricInfo.needs`: ``none`` (pure code) or one of :data:`SLOTS`.
NEEDS = ("none", *SLOTS)


@dataclass(frozen=True)
class MetricInfo:
    """What a metric measures, how to read its number, and what computing it needs.

    The one source of metric facts: which metrics need a reference, a persona or a model, and which
    family computes them, are all derived from these records."""

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
    needs_reference: bool = False
    """Defined only for samples with a non-empty reference reply."""
    needs_persona: bool = False
    """Defined only for samples with at least one persona sentence."""
    family: str = ""
    """The metric family that computes it (see :func:`register_family`); "" for run-level metrics."""

    @property
    def slot(self) -> str | None:
        """The backend slot whose model computes the metric (``None``: pure code, no model)."""
        return None if self.needs == "none" else self.needs

    def defined_for(self, reference: str, has_persona: bool) -> bool:
        """Whether the metric has a value for a sample with this reference and persona presence."""
        if self.needs_reference and not reference.strip():
            return False
        return not (self.needs_persona and not has_persona)


def _m(name: str, dimension: str, description: str, lo: float, hi: float | None, needs: str, family: str, *,
       ref: bool = False, persona: bool = False, higher: bool = True, worst: float | None = 0.0,
       level: str = "sample", paper: bool = True) -> MetricInfo:
    return MetricInfo(name, dimension, description, (lo, hi), higher, worst, needs, level, paper,
                      needs_reference=ref, needs_persona=persona, family=family)


_BUILTIN_INFOS: tuple[MetricInfo, ...] = (
    # Fluency, against the reference reply.
    _m("bleu", "fluency", "Sentence BLEU-4 against the reference (whitespace tokens, smoothing method 1).",
       0.0, 1.0, "none", "lexical", ref=True),
    _m("rouge1", "fluency", "ROUGE-1 F-score against the reference (unigram overlap).", 0.0, 1.0, "none",
       "lexical", ref=True),
    _m("rouge2", "fluency", "ROUGE-2 F-score against the reference (bigram overlap).", 0.0, 1.0, "none",
       "lexical", ref=True),
    _m("rougeL", "fluency", "ROUGE-L F-score against the reference (longest common subsequence).",
       0.0, 1.0, "none", "lexical", ref=True),
    _m("meteor", "fluency", "METEOR against the reference (exact, stem and WordNet synonym matches).",
       0.0, 1.0, "wordnet", "meteor", ref=True),
    _m("bertscore_p", "fluency", "BERTScore precision: reply tokens matched in the reference by embeddings.",
       -1.0, 1.0, "bertscore", "bertscore", ref=True),
    _m("bertscore_r", "fluency", "BERTScore recall: reference tokens matched in the reply by embeddings.",
       -1.0, 1.0, "bertscore", "bertscore", ref=True),
    _m("bertscore_f1", "fluency", "BERTScore F1: harmonic mean of BERTScore precision and recall.",
       -1.0, 1.0, "bertscore", "bertscore", ref=True),
    # Diversity.
    _m("dist1", "diversity", "Distinct-1: unique unigrams / unigrams of the reply (whitespace tokens).",
       0.0, 1.0, "none", "lexical"),
    _m("dist2", "diversity", "Distinct-2: unique bigrams / bigrams of the reply (whitespace tokens).",
       0.0, 1.0, "none", "lexical"),
    # Coherence.
    _m("ue_score", "coherence", "2 if the personas and the reference both entail the reply (NLI), "
       "1 if only the personas do, else 0.", 0.0, 2.0, "nli", "nli", ref=True, persona=True),
    _m("unieval_coherence", "coherence", "UniEval: is this a coherent response given the dialogue history? "
       "P(yes)/(P(yes)+P(no)).", 0.0, 1.0, "unieval", "unieval"),
    # Personalization.
    _m("c_score", "personalization", "NLI of the personas against the reply: 1 entailment, 0 neutral, "
       "-1 contradiction.", -1.0, 1.0, "nli", "nli", persona=True, worst=-1.0),
    _m("p_consistency", "personalization", "1 unless the reply contradicts the personas (NLI), else 0.",
       0.0, 1.0, "nli", "nli", persona=True),
    _m("persona_distance", "personalization", "Cosine between averaged word vectors of the personas and "
       "the reply, stop words removed (higher = closer).", -1.0, 1.0, "word_vectors", "persona_distance",
       persona=True),
    _m("idf_overlap", "personalization", "TF-IDF cosine between the personas and the reply "
       "(lower-cased, punctuation and stop words removed).", 0.0, 1.0, "none", "lexical", persona=True),
    _m("unieval_groundedness", "personalization", "UniEval: is this response consistent with knowledge in "
       "the fact (the personas)?", 0.0, 1.0, "unieval", "unieval", persona=True),
    _m("unieval_naturalness", "personalization", "UniEval: is this a natural response in the dialogue?",
       0.0, 1.0, "unieval", "unieval"),
    _m("unieval_engagingness", "personalization", "UniEval: engaging and informative given history and "
       "personas; summed over the reply's sentences, so unbounded above.", 0.0, None, "unieval", "unieval"),
    _m("unieval_understandability", "personalization", "UniEval: is this an understandable response in "
       "the dialogue?", 0.0, 1.0, "unieval", "unieval"),
    _m("unieval_overall", "personalization", "Mean of the five UniEval dialogue dimensions.", 0.0, None,
       "unieval", "unieval", persona=True),
    _m("persona_coverage", "personalization", "Share of persona sentences the reply engages (NLI "
       "entailment, or embedding similarity above a threshold when no NLI model is available).",
       0.0, 1.0, "embedding", "persona_coverage", persona=True, paper=False),
    # Run level (computed by aggregation from the generations table, not stored per sample).
    _m("failure_ratio", "efficiency", "Share of samples whose reply was invalid (failed to parse or empty).",
       0.0, 1.0, "none", "", higher=False, worst=None, level="run"),
    _m("instructability", "efficiency", "(max failure - failure) / max failure across the compared models.",
       0.0, 1.0, "none", "", worst=None, level="run"),
    _m("response_time", "efficiency", "Seconds to produce a reply (mean over samples).", 0.0, None, "none", "",
       higher=False, worst=None, level="run"),
)

#: The built-in families, in the order they run when nothing else constrains it: name -> where the
#: family class lives (imported and instantiated on first use, so this registry stays plain data).
_BUILTIN_FAMILIES: dict[str, str] = {
    "lexical": "persobench.metrics.lexical:LexicalMetrics",
    "meteor": "persobench.metrics.meteor:MeteorMetrics",
    "bertscore": "persobench.metrics.embeddings:BertScoreMetrics",
    "persona_distance": "persobench.metrics.embeddings:PersonaDistanceMetrics",
    "nli": "persobench.metrics.nli:NLIMetrics",
    "persona_coverage": "persobench.metrics.persona:PersonaCoverageMetrics",
    "unieval": "persobench.metrics.unieval:UniEvalMetrics",
}

_INFOS: dict[str, MetricInfo] = {info.name: info for info in _BUILTIN_INFOS}
#: The metric families on the package's one registry mechanism (:class:`persobench.core.registry.Registry`).
FAMILIES: "Registry[RegisteredFamily]" = Registry("metric family", build=lambda family_class: family_class())
for _name, _where in _BUILTIN_FAMILIES.items():
    FAMILIES.register(_name, _where)

#: Every metric the registry describes, by name, in display order (a live read-only view).
METRICS: Mapping[str, MetricInfo] = MappingProxyType(_INFOS)


def metric_names(*, family: str | None = None, needs: str | None = None, level: str = "sample") -> tuple[str, ...]:
    """Names of the registered metrics of ``level``, in display order, optionally only those of one
    ``family`` or needing one model kind (``needs="none"``: the metrics that need no model)."""
    return tuple(i.name for i in _INFOS.values() if i.level == level
                 and (family is None or i.family == family) and (needs is None or i.needs == needs))


class MetricRegistryError(MetricError, ValueError):
    """A metric family or metric that cannot be registered, or families whose dependencies cannot
    be satisfied (unknown family, output not provided, cycle)."""


def register_family(family: RegisteredFamily, metrics: Sequence[MetricInfo]) -> None:
    """Register a metric family and the metrics it computes: the one step that adds metrics.

    ``metrics`` are appended to the display order; each must name ``family.name`` as its family and
    be new. After this, :func:`score_samples`, :func:`score_run`, the CLI's ``--metrics`` and
    :func:`metric_info` know them, and the scorer runs the family after the families it requires.
    """
    # Duck-typed, so the registry imports no family module (families import the registry).
    if not getattr(family, "name", "") or not callable(getattr(family, "score", None)):
        raise MetricRegistryError(f"{family!r}: a metric family is a named persobench.metrics.family.MetricFamily")
    if family.name in FAMILIES:
        raise MetricRegistryError(f"metric family {family.name!r} is already registered")
    if not metrics:
        raise MetricRegistryError(f"metric family {family.name!r} registers no metric")
    for info in metrics:
        problem = _registration_problem(info, family.name)
        if problem:
            raise MetricRegistryError(f"metric {info.name!r}: {problem}")
    if len({info.name for info in metrics}) != len(metrics):
        raise MetricRegistryError(f"metric family {family.name!r} lists a metric twice")
    FAMILIES.register(family.name, family)
    _INFOS.update((info.name, info) for info in metrics)


def _registration_problem(info: MetricInfo, family: str) -> str:
    if info.name in _INFOS:
        return "already registered"
    if info.family != family:
        return f"its family is {info.family!r}, not {family!r}"
    if info.dimension not in DIMENSIONS:
        return f"dimension {info.dimension!r} is not one of {', '.join(DIMENSIONS)}"
    if info.needs not in NEEDS:
        return f"needs {info.needs!r} is not one of {', '.join(NEEDS)}"
    if info.level != "sample":
        return "a family computes per-sample metrics (level 'sample')"
    return ""


def unregister_family(name: str) -> None:
    """Remove a family registered with :func:`register_family` and its metrics (built-ins stay)."""
    if name in _BUILTIN_FAMILIES:
        raise MetricRegistryError(f"{name!r} is a built-in metric family")
    if name not in FAMILIES:
        raise MetricRegistryError(f"no metric family {name!r} is registered")
    FAMILIES.unregister(name)
    for metric in [n for n, info in _INFOS.items() if info.family == name]:
        del _INFOS[metric]


def family_names() -> tuple[str, ...]:
    """Registered family names, in registration order (the run order when no dependency decides)."""
    return FAMILIES.in_order()


def get_family(name: str) -> RegisteredFamily:
    """The registered family ``name`` (a built-in family's module is imported on first use)."""
    if name not in FAMILIES:
        raise MetricRegistryError(f"unknown metric family {name!r}; known: {', '.join(FAMILIES.in_order())}")
    return FAMILIES.get(name)


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


def validate_metric_names(names: "list[str] | tuple[str, ...] | None") -> tuple[str, ...]:
    """``names`` checked against :func:`metric_names` (``None`` = all), deduplicated, in display order."""
    known = metric_names()
    if names is None:
        return known
    unknown = [n for n in names if n not in known]
    if unknown:
        run_level = [n for n in unknown if n in metric_names(level="run")]
        hint = f" ({', '.join(run_level)} are run-level: computed by aggregation)" if run_level else ""
        raise UnknownMetricError(
            f"unknown per-sample metric(s) {', '.join(map(repr, unknown))}{hint}; "
            f"known: {', '.join(known)}"
        )
    wanted = set(names)
    return tuple(n for n in known if n in wanted)
