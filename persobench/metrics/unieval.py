"""UniEval dialogue dimensions (``unieval_*``), computed as UniEval's ``DialogEvaluator`` does.

A T5 model (the ``unieval`` slot; ``MingZhong/unieval-dialog``) answers a boolean question per
dimension; the score is ``P(Yes) / (P(Yes) + P(No))`` read from the first decoder step, with the
``Yes``/``No`` token ids taken from the model's own tokenizer. Inputs, as the paper fed them:

- dialogue history (``src``): the context turns as ``"<speaker>: <text>"`` lines joined by newlines,
  or, in the notebook input layout (the paper protocol's default), the table's ``context`` cell as
  it is (:func:`persobench.metrics.nli_inputs.unieval_histories`);
- fact (``context``): the persona text (all persona sentences joined by a space; the paper's
  ``personas`` cell under its protocol);
- response: the reply.

Scorer (``Profile.unieval_scorer``, ``score --unieval-scorer``): ``upstream`` (the default) scores
each input once, as UniEval's own ``UniEvaluator.score`` does. ``paper`` reproduces the copy the paper
pinned (``UniEval/metric/scorer.py``), whose loop steps by 1 instead of the batch size: it scores the
overlapping windows ``inputs[i:i+8]`` and concatenates them, so the k-th score the evaluator reads
belongs to input ``k // 8 + k % 8`` (:func:`paper_window_sources`). The notebook called the
evaluator once per 200 rows of the table on that batch's valid replies, so the windows restart every
200 rows (:func:`paper_row_groups`); it then appended the invalid replies' worst scores at the end of
each batch, which shifts values onto other rows without changing a mean: PersoBench gives each
valid reply its slipped value and leaves invalid replies unscored, so means match the published
ones and the per-row pairing of the published per-sample files does not.

Questions (UniEval's formats): naturalness and understandability see only the response,
coherence the response and history, groundedness the response and fact, engagingness all three.
Engagingness is scored per reply sentence and **summed** (so it grows with the number of
sentences); ``unieval_overall`` is the mean of the five dimensions. UniEval splits sentences with
nltk's punkt, which cannot be installed offline; a regular-expression splitter (after ``.``, ``!``
or ``?`` followed by white space) stands in.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from persobench.metrics.backends import (
    SlotModel, cached, model_identity, package_version, resolve_transformers_path,
)
from persobench.metrics.family import FamilyBatch, FamilyResult, MetricFamily
from persobench.errors import ConfigurationError
from persobench.metrics.nli_inputs import AUTO, PAIRS, unieval_histories
import logging

DIMENSIONS = ("naturalness", "coherence", "engagingness", "groundedness", "understandability")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
#: ``score --unieval-scorer`` choices: each input scored once (UniEval's own scorer), or the paper's slip.
UPSTREAM, PAPER_SCORER = "upstream", "paper"
UNIEVAL_SCORERS = (UPSTREAM, PAPER_SCORER)
#: The pinned scorer's batch size (its windows' length) and the notebook's rows per evaluator call.
PAPER_WINDOW, PAPER_BATCH_ROWS = 8, 200


def check_scorer(scorer: str) -> str:
    """``scorer`` when it is one of :data:`UNIEVAL_SCORERS` (a one-line :class:`ConfigurationError` otherwise)."""
    if scorer not in UNIEVAL_SCORERS:
        raise ConfigurationError(f"unknown UniEval scorer {scorer!r}; known: {', '.join(UNIEVAL_SCORERS)}")
    return scorer


def paper_window_sources(n: int, window: int = PAPER_WINDOW) -> list[int]:
    """For each of the first ``n`` scores the pinned scorer returns for ``n`` inputs, the input it
    belongs to: its loop ``for i in range(0, len(inputs))`` scores ``inputs[i:i+window]`` and
    concatenates, so score k is input ``k // window + k % window`` (the last windows are shorter)."""
    sources: list[int] = []
    for start in range(n):
        sources.extend(range(start, min(start + window, n)))
        if len(sources) >= n:
            break
    return sources[:n]


def paper_row_groups(ids: Sequence[str], row_order: Sequence[str], rows: int = PAPER_BATCH_ROWS) -> list[list[int]]:
    """Positions in ``ids`` (valid replies, in the run's order) grouped by the notebook's batches of
    ``rows`` rows of ``row_order`` (every sample of the run, valid or not); ids missing from
    ``row_order`` form a last group."""
    position = {sid: i for i, sid in enumerate(row_order)}
    groups: dict[int, list[int]] = {}
    for i, sid in enumerate(ids):
        groups.setdefault(position[sid] // rows if sid in position else -1, []).append(i)
    return [groups[key] for key in sorted(groups, key=lambda k: (k < 0, k))]


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` (punkt-free): split after ``.``, ``!`` or ``?`` followed by white space."""
    parts = [p.strip() for p in _SENTENCE_END.split(str(text).strip())]
    parts = [p for p in parts if p]
    return parts or [str(text).strip()]


def question(dimension: str, response: str, history: str = "", fact: str = "") -> str:
    """UniEval's boolean-question input for one dialogue dimension."""
    if dimension == "naturalness":
        return "question: Is this a natural response in the dialogue? </s> response: " + response
    if dimension == "coherence":
        return ("question: Is this a coherent response given the dialogue history? </s> response: "
                + response + " </s> dialogue history: " + history)
    if dimension == "engagingness":
        return ("question: Is this an engaging and informative response according to the dialogue history "
                "and fact? </s> response: " + response + " </s> dialogue history: " + history
                + " </s> fact: " + fact)
    if dimension == "groundedness":
        return ("question: Is this response consistent with knowledge in the fact? </s> response: "
                + response + " </s> fact: " + fact)
    if dimension == "understandability":
        return "question: Is this an understandable response in the dialogue? </s> response: " + response
    raise ValueError(f"unknown UniEval dialogue dimension {dimension!r}; known: {', '.join(DIMENSIONS)}")


class UniEvalModel:
    """A loaded UniEval (T5) scorer."""

    def __init__(self, model: Any, tokenizer: Any, device: str, name: str, max_length: int = 1024) -> None:
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.device = device
        self.name = name
        self.max_length = max_length
        self.pos_id = tokenizer("Yes")["input_ids"][0]
        self.neg_id = tokenizer("No")["input_ids"][0]
        start = getattr(model.config, "decoder_start_token_id", None)
        self.decoder_start = start if start is not None else model.config.pad_token_id

    def score(self, inputs: Sequence[str], batch_size: int = 8, progress: Any = None) -> list[float]:
        """``P(Yes) / (P(Yes) + P(No))`` for each question input, batched by length."""
        import torch

        scores: list[float] = [0.0] * len(inputs)
        order = sorted(range(len(inputs)), key=lambda i: len(inputs[i]))
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
            encoded = self.tokenizer([inputs[i] for i in chunk], max_length=self.max_length, truncation=True,
                                     padding=True, return_tensors="pt")
            input_ids = encoded["input_ids"].to(self.device)
            mask = encoded["attention_mask"].to(self.device)
            decoder = torch.full((len(chunk), 1), self.decoder_start, dtype=torch.long, device=self.device)
            with torch.inference_mode():
                logits = self.model(input_ids=input_ids, attention_mask=mask, decoder_input_ids=decoder).logits
            probs = torch.softmax(logits[:, 0, :].float(), dim=-1)
            pos = probs[:, self.pos_id].cpu().numpy()
            neg = probs[:, self.neg_id].cpu().numpy()
            for i, p, n in zip(chunk, pos, neg):
                scores[i] = float(p / (p + n)) if (p + n) > 0 else 0.0
            if progress is not None:
                progress(len(chunk))
        return scores


def load_unieval(spec: SlotModel, device: str) -> UniEvalModel:
    path = resolve_transformers_path(spec)

    def factory() -> UniEvalModel:

        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        logging.getLogger("transformers").setLevel(logging.ERROR)
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForSeq2SeqLM.from_pretrained(path)
        return UniEvalModel(model, tokenizer, device, spec.model_id or path)

    return cached(("unieval", path, device), factory)


def dialog_inputs(dimension: str, replies: Sequence[str], histories: Sequence[str],
                  facts: Sequence[str]) -> tuple[list[str], list[int]]:
    """Question inputs for one dimension and, per reply, how many inputs belong to it."""
    inputs: list[str] = []
    counts: list[int] = []
    for reply, history, fact in zip(replies, histories, facts):
        if dimension == "engagingness":
            sentences = split_sentences(reply)
            inputs.extend(question(dimension, s, history, fact) for s in sentences)
            counts.append(len(sentences))
        else:
            inputs.append(question(dimension, reply, history, fact))
            counts.append(1)
    return inputs, counts


def _slipped(scores: list[float], counts: Sequence[int], groups: Sequence[Sequence[int]]) -> list[float]:
    """One dimension's per-input ``scores`` (``counts[r]`` inputs for reply r, in order) as the pinned
    scorer returns them when called once per group of replies (consecutive reply positions)."""
    starts = [0]
    for count in counts:
        starts.append(starts[-1] + count)
    out = list(scores)
    for group in groups:
        begin, end = starts[group[0]], starts[group[-1] + 1]
        own = scores[begin:end]
        out[begin:end] = [own[k] for k in paper_window_sources(len(own))]
    return out


def score_dialog(model: UniEvalModel, replies: Sequence[str], histories: Sequence[str], facts: Sequence[str],
                 dimensions: Sequence[str] = DIMENSIONS, batch_size: int = 8,
                 progress: Any = None, paper_groups: Sequence[Sequence[int]] | None = None) -> dict[str, list[float]]:
    """Per-dimension scores for each reply (and ``overall`` when all five dimensions are asked).
    ``paper_groups``: reply positions grouped as the notebook called the pinned scorer (consecutive,
    :func:`paper_row_groups`): the scores are then the paper's slipped ones; None: each input's own."""
    plan: dict[str, tuple[list[str], list[int]]] = {
        dim: dialog_inputs(dim, replies, histories, facts) for dim in dimensions
    }
    flat = [text for inputs, _ in plan.values() for text in inputs]
    flat_scores = model.score(flat, batch_size=batch_size, progress=progress)
    out: dict[str, list[float]] = {}
    cursor = 0
    for dim, (inputs, counts) in plan.items():
        dim_scores = flat_scores[cursor:cursor + len(inputs)]
        cursor += len(inputs)
        if paper_groups is not None:
            dim_scores = _slipped(dim_scores, counts, paper_groups)
        values: list[float] = []
        at = 0
        for count in counts:
            values.append(float(sum(dim_scores[at:at + count])))  # one input per reply except engagingness (summed)
            at += count
        out[dim] = values
    if set(DIMENSIONS) <= set(out):
        out["overall"] = [sum(out[d][i] for d in DIMENSIONS) / len(DIMENSIONS) for i in range(len(replies))]
    return out


def count_inputs(dimensions: Sequence[str], replies: Sequence[str]) -> int:
    total = 0
    for dim in dimensions:
        total += sum(len(split_sentences(r)) for r in replies) if dim == "engagingness" else len(replies)
    return total


def unieval_version(metric: str, scorer: str = UPSTREAM) -> str:
    dim = metric.removeprefix("unieval_")
    how = "mean of the five dimensions" if dim == "overall" else (
        "sum over reply sentences" if dim == "engagingness" else "one question per reply")
    slip = (", the paper's pinned scorer (windows inputs[i:i+8]: score k of input k//8+k%8, per 200 rows)"
            if scorer == PAPER_SCORER else "")
    return (f"{metric}/1 transformers=={package_version('transformers')} UniEval dialogue boolean QA, "
            f"P(Yes)/(P(Yes)+P(No)) at the first decoder step, {how}{slip}")


class UniEvalMetrics(MetricFamily):
    """The ``unieval_*`` dimensions: every question of every requested dimension in one batched pass."""

    name = "unieval"

    def score(self, batch: FamilyBatch) -> FamilyResult:
        metrics = batch.metrics
        result = FamilyResult()
        model, _ = batch.load_model("unieval", load_unieval, result)
        if model is None:
            return result
        dims = [d for d in DIMENSIONS if f"unieval_{d}" in metrics or "unieval_overall" in metrics]
        replies = [it.reply for it in batch.items]
        layout = batch.profile.input_layout if batch.profile.input_layout != AUTO else PAIRS
        histories = unieval_histories(batch.items, layout)
        facts = [it.persona_text for it in batch.items]  # the paper's personas cell under its protocol
        advance = batch.progress.stage("unieval", count_inputs(dims, replies))
        scorer = batch.profile.unieval_scorer
        groups = None
        if scorer == PAPER_SCORER:  # the run's rows, valid or not, batched by 200 as the notebook did
            ids = [it.sid for it in batch.items]
            groups = paper_row_groups(ids, batch.row_order or ids)
        results = score_dialog(model, replies, histories, facts, dims, progress=advance, paper_groups=groups)
        model_id, revision = model_identity(batch.profile.spec("unieval"), model.model)
        for m in metrics:
            values = results.get(m.removeprefix("unieval_"), [])
            applicable = {it.sid for it in batch.applicable(m)}
            n = 0
            for it, v in zip(batch.items, values):
                if it.sid in applicable:
                    result.add(it.sid, m, v)
                    n += 1
            result.record(m, "ok", model_id=model_id, revision=revision, version=unieval_version(m, scorer),
                          backend=f"transformers seq2seq on {batch.profile.device}", n=n)
            result.provenance[m]["input_layout"] = layout
        return result
