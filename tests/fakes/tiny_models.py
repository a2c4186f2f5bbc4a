"""Test doubles: tiny NLI, UniEval-style and causal language models built in code (random weights).

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


#: Text the tiny causal LM's tokenizer learns its merges from (any text can still be written: the
#: tokenizer is byte-level, so every byte is a token of its own too).
_LM_CORPUS = (
    '{"response": "I love cats and dogs, and I have two of them."}',
    '{"reasoning": "The persona says they like pets.", "response": "Yes! I am a teacher at a school."}',
    "Hello, what do you like to do at work? My dog is natural in this dialogue. Persona: question response.",
)

#: A ChatML template (SmolLM2's format) so the chat-template path runs too.
_CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
           "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def build_tiny_causal_lm(path: str | Path, *, seed: int = 0, vocab_size: int = 400) -> Path:
    """Save a 1-layer ``LlamaForCausalLM`` with random weights and a byte-level BPE tokenizer (trained
    here on a few sentences; SmolLM2's special tokens and a ChatML chat template) to ``path``.

    Random weights write gibberish, but any bytes at all: under a grammar constraint that is the
    hardest case (nothing in the model pushes towards closing the JSON object)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(_LM_CORPUS) * 4, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                        pad_token="<|endoftext|>", model_max_length=8192)
    tokenizer.chat_template = _CHATML
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=8192,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    path = Path(path)
    LlamaForCausalLM(config).eval().save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
