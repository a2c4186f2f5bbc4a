"""Loading the embedding models once per process: BERTScore's scorer and the sentence-embedding model.

Both the encoder (:mod:`persobench.metrics.encoders.encoder`) and the metric families
(:mod:`persobench.metrics.embeddings`) use them; they live here so neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from persobench.metrics.backends import BackendUnavailable, SlotModel, cached, resolve_transformers_path
import logging


@dataclass
class LoadedBERTScorer:
    scorer: Any
    model_type: str
    num_layers: int


def _bertscore_layers(model_type: str, options: dict) -> int:
    if options.get("num_layers") is not None:
        return int(options["num_layers"])
    from bert_score.utils import model2layers

    if model_type in model2layers:
        return int(model2layers[model_type])
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_type)
    layers = getattr(config, "num_hidden_layers", None) or getattr(config, "num_layers", None)
    if not layers:
        raise BackendUnavailable(f"cannot tell the BERTScore layer of {model_type}; set bertscore.num_layers")
    return int(layers)


def load_bertscorer(spec: SlotModel, device: str) -> LoadedBERTScorer:
    model_type = resolve_transformers_path(spec)
    options = dict(spec.options)

    def factory() -> LoadedBERTScorer:

        from bert_score import BERTScorer

        logging.getLogger("transformers").setLevel(logging.ERROR)
        layers = _bertscore_layers(model_type, options)
        scorer = BERTScorer(model_type=model_type, num_layers=layers, device=device, batch_size=64)
        return LoadedBERTScorer(scorer, model_type, layers)

    return cached(("bertscore", model_type, options.get("num_layers"), device), factory)


def load_embedding(spec: SlotModel, device: str) -> Any:
    path = resolve_transformers_path(spec)

    def factory() -> Any:

        logging.getLogger("sentence_transformers").setLevel(logging.ERROR)
        from sentence_transformers import SentenceTransformer

        return SentenceTransformer(path, device=device)

    return cached(("embedding", path, device), factory)
