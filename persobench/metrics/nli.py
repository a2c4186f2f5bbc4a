"""NLI metrics: ``ue_score``, ``c_score``, ``p_consistency`` and per-persona-sentence labels.

One sequence-classification model (the ``nli`` slot; ``cross-encoder/nli-deberta-v3-base`` in the
standard profile) classifies (premise, hypothesis) pairs in batches. Which output index means what
is read from the model's ``config.id2label`` (any order; names such as ``ENTAILMENT`` or
``contradiction`` are normalised), never assumed.

Pairs, with *persona text* = all persona sentences of the sample joined by a space:

- ``c_score``: (persona text, reply) -> entailment 1, neutral 0, contradiction -1.
- ``p_consistency``: same pair -> 0 for contradiction, else 1.
- ``ue_score``: (persona text, reply) and (reference, reply) -> 2 if both are entailment, 1 if only
  the persona pair is, else 0.
- per persona sentence: (sentence, reply) -> its label: the family's ``sentence_labels`` output
  (:class:`SentenceLabels`), which the ``persona_coverage`` family requires; it stores them in
  ``persona_details.nli_label`` and counts the share of sentences labelled entailment.

The paper used two BERT models it fine-tuned on SNLI and DNLI (not published); the standard
profile's cross-encoder is the documented stand-in, so absolute numbers differ from the paper's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from persobench.metrics.backends import (
    BackendUnavailable, SlotModel, cached, model_identity, package_version, resolve_transformers_path,
)
from persobench.metrics.family import FamilyBatch, FamilyResult, Item, MetricFamily
from persobench.metrics.nli_inputs import AUTO, PAIRS, NLIInput, build_nli_inputs
from persobench.metrics.nli_labels import LABELS, NLIPrediction, normalise_label
import logging
from persobench.metrics.judge.labeller import judge_provenance


class NLIModel:
    """A loaded NLI classifier that labels (premise, hypothesis) pairs in batches."""

    def __init__(self, model: Any, tokenizer: Any, device: str, name: str, max_length: int = 512) -> None:
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.device = device
        self.name = name
        id2label = getattr(model.config, "id2label", None) or {}
        mapping = {int(i): normalise_label(lbl) for i, lbl in id2label.items()}
        if sorted(v for v in mapping.values() if v) != sorted(LABELS) or len(mapping) != 3:
            raise BackendUnavailable(
                f"{name}: config.id2label {dict(id2label)} is not a 3-way NLI label set "
                "(entailment, neutral, contradiction)"
            )
        self.index_label = {i: label for i, label in mapping.items() if label}  # all three, checked above
        limits = [max_length, getattr(tokenizer, "model_max_length", max_length) or max_length,
                  getattr(model.config, "max_position_embeddings", max_length) or max_length]
        self.max_length = int(min(limits))

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32,
                progress: Any = None) -> list[NLIPrediction]:
        """Label each (premise, hypothesis) pair, or each :class:`NLIInput`'s ``text`` as one sequence
        when it has one. Inputs are batched by length (less padding); results come back in input
        order and equal per-input calls up to float rounding."""
        import numpy as np
        import torch

        results: list[NLIPrediction | None] = [None] * len(pairs)
        # An input with ``text`` (the notebook layout) is one sequence; single and paired inputs
        # never share a batch (the tokenizer takes one kind per call).
        single = [getattr(pair, "text", None) for pair in pairs]
        order = sorted(range(len(pairs)), key=lambda i: (single[i] is not None,
                                                         len(single[i] or "") + len(pairs[i][0]) + len(pairs[i][1])))
        chunks = [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
        chunks = [part for chunk in chunks for part in (
            [i for i in chunk if single[i] is None], [i for i in chunk if single[i] is not None]) if part]
        for chunk in chunks:
            texts = ([single[i] for i in chunk],) if single[chunk[0]] is not None else (
                [pairs[i][0] for i in chunk], [pairs[i][1] for i in chunk])
            encoded = self.tokenizer(
                *texts, truncation=True, padding=True, max_length=self.max_length, return_tensors="pt",
            )
            encoded = {k: v.to(self.device) for k, v in encoded.items()}
            with torch.inference_mode():
                logits = self.model(**encoded).logits.float()
            probs = torch.softmax(logits, dim=-1).cpu().numpy()
            for row, i in zip(probs, chunk):
                by_label = {self.index_label[j]: float(row[j]) for j in range(len(row))}
                results[i] = NLIPrediction(self.index_label[int(np.argmax(row))], by_label)
            if progress is not None:
                progress(len(chunk))
        return results  # type: ignore[return-value]


def load_nli(spec: SlotModel, device: str) -> NLIModel:
    """The ``nli`` slot's model, loaded once per process (raises :class:`BackendUnavailable`)."""
    path = resolve_transformers_path(spec)

    def factory() -> NLIModel:

        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        logging.getLogger("transformers").setLevel(logging.ERROR)
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForSequenceClassification.from_pretrained(path)
        return NLIModel(model, tokenizer, device, spec.model_id or path)

    return cached(("nli", path, device), factory)


def c_score_of(label: str) -> float:
    return {"entailment": 1.0, "neutral": 0.0, "contradiction": -1.0}[label]


def p_consistency_of(label: str) -> float:
    return 0.0 if label == "contradiction" else 1.0


def ue_score_of(persona_label: str, reference_label: str) -> float:
    if persona_label == "entailment":
        return 2.0 if reference_label == "entailment" else 1.0
    return 0.0


def nli_version(metric: str, judge_prompt: str | None = None) -> str:
    what = {
        "c_score": "(persona text -> reply): entailment 1, neutral 0, contradiction -1",
        "p_consistency": "(persona text -> reply): 0 if contradiction else 1",
        "ue_score": "(persona text -> reply, reference -> reply): 2 both entail, 1 persona only, else 0",
        "persona_coverage": "share of persona sentences whose (sentence -> reply) label is entailment",
    }[metric]
    if judge_prompt is not None:
        return f"{metric}/1 LLM judge prompt {judge_prompt} NLI {what}"
    return f"{metric}/1 transformers=={package_version('transformers')} NLI {what}"


def unlabelled_note(samples: int) -> str:
    """The provenance reason of a metric some of whose samples got no value for want of a label."""
    if not samples:
        return ""
    return (f"{samples} sample(s) without a value: a pair they need got no label (an unparseable judge "
            "answer or a failed request; counted, never guessed)")


def nli_pairs(items: Sequence[Item], metrics: Sequence[str], need_labels: bool,
              layout: str = PAIRS) -> tuple[list[NLIInput], list[tuple[str, Item, int]]]:
    """The classifier inputs the NLI metrics of ``items`` need in ``layout`` and what each is for
    (:func:`persobench.metrics.nli_inputs.build_nli_inputs`, the one place that builds them)."""
    return build_nli_inputs(items, metrics, need_labels, layout)


def nli_identity(spec: SlotModel, model: NLIModel) -> tuple[str, str]:
    return model_identity(spec, model.model)


SENTENCE_LABELS = "sentence_labels"


@dataclass(frozen=True)
class SentenceLabels:
    """The NLI family's per-persona-sentence labels, handed to the families that require them."""

    labels: Mapping[str, list[str]] | None
    """Sample id -> the label of each persona sentence (sentence -> reply), in persona order; ``None``
    when no NLI model could be loaded."""
    model_id: str = ""
    """Identity of the NLI model that produced the labels."""
    revision: str = ""
    """Its hub revision or file hash."""
    backend: str = ""
    """How it ran (library and device)."""
    reason: str = ""
    """Why ``labels`` is ``None``."""
    judge_prompt: str | None = None
    """The judge's prompt version when an LLM judge labelled (labels may then be ``unparseable`` or
    ``unanswered``: no value is computed from those); ``None`` for an NLI model."""


class NLIMetrics(MetricFamily):
    """``ue_score``, ``c_score`` and ``p_consistency``, and per-persona-sentence labels for later
    families, all classified in one batched pass of the ``nli`` slot's model."""

    name = "nli"
    provides = (SENTENCE_LABELS,)

    def score(self, batch: FamilyBatch) -> FamilyResult:
        metrics = batch.metrics
        need_labels = SENTENCE_LABELS in batch.outputs_wanted
        result = FamilyResult()
        judge = batch.profile.judge
        # The judge's answers take the NLI model's place: same predict(), same metric code below. They
        # were asked before this batch was computed (JudgeSession.label); the family never sends.
        if judge is None:
            model, reason = batch.load_model("nli", load_nli, result)
        else:
            model, reason = batch.nli_answers, ""
            if model is None:
                reason = "the judge's answers to this batch's NLI pairs were not given (label them first)"
                result.unavailable(metrics, reason, judge.model_id)
        if model is None:
            if need_labels:
                result.outputs[SENTENCE_LABELS] = SentenceLabels(None, reason=reason)
            return result
        layout = batch.profile.input_layout if batch.profile.input_layout != AUTO else PAIRS
        pairs, slots = nli_pairs(batch.items, metrics, need_labels, layout)
        advance = batch.progress.stage("nli", len(pairs))
        predictions = model.predict(pairs, progress=advance)
        persona_items = [it for it in batch.items if it.persona_sentences]
        found: dict[str, dict[str, str]] = {"persona": {}, "ue_persona": {}, "reference": {}}
        labels: dict[str, list[str]] = {it.sid: [""] * len(it.persona_sentences) for it in persona_items}
        for (kind, it, index), pred in zip(slots, predictions):
            if kind == "sentence":
                labels[it.sid][index] = pred.label
            else:
                found[kind][it.sid] = pred.label
        reference_label = found["reference"]
        # ue_score's persona label: its own input in the notebook layout, the shared pair otherwise
        ue_persona_label = found["ue_persona"] if found["ue_persona"] else found["persona"]
        if judge is None:
            model_id, revision = nli_identity(batch.profile.spec("nli"), model)
            backend = f"transformers sequence classification on {batch.profile.device}"
        else:
            model_id, revision, backend = judge_provenance(judge)
        counts = dict.fromkeys(metrics, 0)
        missing = dict.fromkeys(metrics, 0)  # samples left without a value: a pair had no label
        for it in persona_items:
            label = found["persona"].get(it.sid)
            for m in ("c_score", "p_consistency"):
                if m not in metrics:
                    continue
                if label not in LABELS:  # unparseable or unanswered (judge): counted, never guessed
                    missing[m] += 1
                    continue
                result.add(it.sid, m, c_score_of(label) if m == "c_score" else p_consistency_of(label))
                counts[m] += 1
            if "ue_score" in metrics and it.sid in reference_label:
                ue_label = ue_persona_label.get(it.sid)
                if ue_label in LABELS and reference_label[it.sid] in LABELS:
                    result.add(it.sid, "ue_score", ue_score_of(ue_label, reference_label[it.sid]))
                    counts["ue_score"] += 1
                else:
                    missing["ue_score"] += 1
        prompt = judge.prompt if judge is not None else None
        for m in metrics:
            result.record(m, "ok", model_id=model_id, revision=revision, version=nli_version(m, prompt),
                          backend=backend, n=counts[m], reason=unlabelled_note(missing[m]))
            result.provenance[m]["input_layout"] = layout
            if missing[m]:
                result.provenance[m]["unlabelled"] = missing[m]
        if need_labels:
            result.outputs[SENTENCE_LABELS] = SentenceLabels(labels, model_id, revision, backend, judge_prompt=prompt)
        return result
