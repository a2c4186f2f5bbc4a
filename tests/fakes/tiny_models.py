"""Test doubles: tiny NLI and UniEval-style models built in code (random weights, word-level tokenizers).

Test-only (tests/ and benchmarks/scoring.py use them, the library never does). They exercise the
real loading path (``save_pretrained`` to a folder, then a profile override pointing at it) where
the hub models cannot be downloaded. Their numbers mean nothing; only the code paths (label
mapping, batching, question format) are under test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

WORDS = ("i love cats dogs have two a teacher am school my the at work yes no hello what do you like pets "
         "question is this natural response in dialogue").split()


def _tokenizer(special: Mapping[str, str], *, pair_template: bool, words: tuple[str, ...] | list[str] = WORDS):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab: dict[str, int] = {}
    for token in list(special.values()) + ["Yes", "No"] + list(words):
        vocab.setdefault(token, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=special["unk_token"]))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    if pair_template:
        cls, sep = special["cls_token"], special["sep_token"]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} $B:1 {sep}:1",
            special_tokens=[(cls, vocab[cls]), (sep, vocab[sep])])
    else:
        eos = special["eos_token"]
        tok.post_processor = processors.TemplateProcessing(single=f"$A {eos}", special_tokens=[(eos, vocab[eos])])
    return PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=512, **special), len(vocab)


def build_tiny_nli(path: str | Path, id2label: Mapping[int, str] | None = None, *, favoured: int | None = None,
                   seed: int = 0, words: tuple[str, ...] | list[str] = WORDS) -> Path:
    """Save a 1-layer ``BertForSequenceClassification`` with a 3-way NLI ``id2label`` to ``path``.

    ``favoured``: make that output index win for every input (to test the label mapping)."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    id2label = dict(id2label or {0: "contradiction", 1: "entailment", 2: "neutral"})
    tokenizer, size = _tokenizer({"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]",
                                  "sep_token": "[SEP]"}, pair_template=True, words=words)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=512, num_labels=3,
                        id2label=id2label, label2id={v: k for k, v in id2label.items()})
    model = BertForSequenceClassification(config).eval()
    if favoured is not None:
        with torch.no_grad():
            model.classifier.weight.zero_()
            model.classifier.bias.copy_(torch.tensor([5.0 if i == favoured else 0.0 for i in range(3)]))
    path = Path(path)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def build_tiny_t5(path: str | Path, *, seed: int = 1, words: tuple[str, ...] | list[str] = WORDS) -> Path:
    """Save a 1-layer ``T5ForConditionalGeneration`` whose tokenizer knows ``Yes`` and ``No``."""
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    tokenizer, size = _tokenizer({"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"},
                                 pair_template=False, words=words)
    torch.manual_seed(seed)
    config = T5Config(vocab_size=size, d_model=16, d_ff=32, d_kv=8, num_layers=1, num_decoder_layers=1,
                      num_heads=2, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    path = Path(path)
    T5ForConditionalGeneration(config).eval().save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
