"""The three NLI labels and one prediction, shared by the NLI model (:mod:`persobench.metrics.nli`)
and the LLM judge (:mod:`persobench.metrics.judge.labeller`), so neither imports the other's module for them."""

from __future__ import annotations

from dataclasses import dataclass

LABELS = ("entailment", "neutral", "contradiction")


def normalise_label(raw: str) -> str | None:
    """Map a model's label name to ``entailment``/``neutral``/``contradiction`` (None if unknown)."""
    text = str(raw).strip().lower()
    if text.startswith("entail"):
        return "entailment"
    if text.startswith("contra"):
        return "contradiction"
    if text.startswith("neutral"):
        return "neutral"
    return None


@dataclass
class NLIPrediction:
    label: str
    probabilities: dict[str, float]
