"""Persona coverage: which persona sentences a reply engages, and the share it engages.

Per persona sentence of a sample (all speakers, source order) the family stores one
``persona_details`` row: its NLI label (sentence -> reply) when an NLI model is available, and its
sentence-embedding cosine to the reply (the ``embedding`` slot, all-MiniLM-L6-v2) when an embedding
model is. ``persona_coverage`` is the share of sentences labelled entailment; without an NLI model,
the share with cosine at or above :data:`COVERAGE_SIMILARITY_THRESHOLD`.

The labels come from the ``nli`` family (its ``sentence_labels`` output, declared in
:attr:`PersonaCoverageMetrics.requires`), so the NLI model classifies the sentence pairs in the
same batched pass as its own metrics, and the scorer runs it first.
"""

from __future__ import annotations

from typing import Any

from persobench.metrics.backends import BackendUnavailable, model_identity, package_version, precision_note
from persobench.metrics.family import FamilyBatch, FamilyResult, MetricFamily, Requirement
from persobench.metrics.nli import LABELS, SENTENCE_LABELS, SentenceLabels, nli_version, unlabelled_note
from persobench.metrics.encoders.encoder import EmbeddingRequest
from persobench.metrics.encoders import embedding_models

#: Cosine similarity (all-MiniLM-L6-v2 sentence embeddings, persona sentence vs reply) at or above
#: which a persona sentence counts as engaged when no NLI model is available. Calibrated on 965
#: persona sentences of IT-ConvAI2 and Blended Skill Talk with published replies: paired with an
#: unrelated reply, under 1% of sentences reach 0.45; pairs near 0.45 restate or build on the fact
#: ("two dogs live with me." / "I have two adorable dogs at home.").
COVERAGE_SIMILARITY_THRESHOLD = 0.45


class PersonaCoverageMetrics(MetricFamily):
    """``persona_coverage`` and the per-persona-sentence ``persona_details`` rows."""

    name = "persona_coverage"
    requires = (Requirement("nli", SENTENCE_LABELS),)

    def embedding_request(self, batch: FamilyBatch) -> Any:

        if not batch.profile.spec("embedding").available:
            return None
        items = [it for it in batch.items if it.persona_sentences]
        texts = [s for it in items for _, s in it.persona_sentences] + [it.reply for it in items]
        return EmbeddingRequest(sentences=tuple(dict.fromkeys(texts)))

    def score(self, batch: FamilyBatch) -> FamilyResult:

        result = FamilyResult()
        items = [it for it in batch.items if it.persona_sentences]
        spec = batch.profile.spec("embedding")
        similarities: dict[str, list[float]] = {}
        embed_reason = ""
        try:
            model = embedding_models.load_embedding(spec, batch.profile.device)
        except BackendUnavailable as exc:
            model, embed_reason = None, str(exc)
        if model is not None:
            left = [s for it in items for _, s in it.persona_sentences]
            right = [it.reply for it in items for _ in it.persona_sentences]
            advance = batch.progress.stage("persona similarity", len(left))
            flat = batch.text_encoder().sentence_similarities(left, right)
            advance(len(left))
            cursor = 0
            for it in items:
                similarities[it.sid] = flat[cursor:cursor + len(it.persona_sentences)]
                cursor += len(it.persona_sentences)
        nli: SentenceLabels = batch.inputs[SENTENCE_LABELS]
        labels = nli.labels
        for it in items:
            for index, (speaker, sentence) in enumerate(it.persona_sentences):
                label = labels[it.sid][index] if labels is not None else None
                sim = similarities[it.sid][index] if it.sid in similarities else float("nan")
                result.details.append((it.sid, index, speaker, sentence, label or None, sim))
        if labels is not None:
            missing = 0
            for it in items:
                got = labels[it.sid]
                if any(g not in LABELS for g in got):  # a judge's unparseable or missing label: no value
                    missing += 1
                    continue
                result.add(it.sid, "persona_coverage", sum(1 for g in got if g == "entailment") / len(got))
            result.record("persona_coverage", "ok", model_id=nli.model_id, revision=nli.revision,
                          version=nli_version("persona_coverage", nli.judge_prompt),
                          backend=f"nli-entailment; {nli.backend}", n=len(items) - missing,
                          reason=unlabelled_note(missing))
            if missing:
                result.provenance["persona_coverage"]["unlabelled"] = missing
        elif model is not None:
            for it in items:
                sims = similarities[it.sid]
                result.add(it.sid, "persona_coverage",
                           sum(1 for s in sims if s >= COVERAGE_SIMILARITY_THRESHOLD) / len(sims))
            model_id, revision = model_identity(spec)
            result.record(
                "persona_coverage", "ok", model_id=model_id, revision=revision,
                reason=f"no NLI model ({nli.reason}); embedding similarity used",
                version=(f"persona_coverage/1-embedding share of persona sentences with cosine >= "
                         f"{COVERAGE_SIMILARITY_THRESHOLD} to the reply (sentence-transformers=="
                         f"{package_version('sentence-transformers')})"),
                backend=f"embedding-similarity>={COVERAGE_SIMILARITY_THRESHOLD}" + precision_note(batch.profile),
                n=len(items))
        else:
            result.unavailable(["persona_coverage"], f"needs an NLI or an embedding model ({embed_reason})")
        return result
