"""The lexical kernels: BLEU as nltk's ``sentence_bleu`` (smoothing method 1) and ROUGE-1/2/L as
``rouge==1.0.1``, value for value, and the loop that scores a chunk of replies with them
(:func:`lexical_chunk`). :mod:`persobench.metrics.lexical` is the metric family around them.

They live outside :mod:`persobench.metrics` and import nothing of persobench, so the worker processes
of the lexical pool (:func:`persobench.metrics.lexical.worker_pool`) start by importing this module
alone: a spawned worker that imported the metrics package (its scoring code, numpy) spent more CPU
starting than scoring a run.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import lru_cache
from typing import Sequence

# --- BLEU, ROUGE, Distinct-n: one pass over each text ----------------------------------------
#
# The notebooks called nltk's ``sentence_bleu`` and the ``rouge`` package once per reply; both
# rebuild every n-gram table on each call and the package's ROUGE-L fills an O(n*m) dict and
# walks it recursively for every sentence pair. The kernels below compute the same numbers with
# the same floating-point operations in the same order (so values are identical, not merely
# close: ``benchmarks/scoring.py`` checks every published reply against both libraries), but
# count each text's n-grams once, reuse a reference's analysis across the replies that share it
# (all models of a dataset answer the same samples), and skip ROUGE-L sentence pairs that cannot
# change the result.

_BLEU_ORDERS = 4
_BLEU_WEIGHT = 0.25
_BLEU_EPSILON = 0.1  # SmoothingFunction().epsilon, used by method1


class ReplyGrams:
    """What BLEU and Distinct-n need from one text: its whitespace tokens' n-gram counts.

    Unigram and bigram counts are made at once (Distinct-1/2 read them); trigram and 4-gram counts
    only when BLEU asks (:meth:`grams`): it does not when no bigram is shared, since a shared n-gram
    implies its shared prefix, and most replies share no bigram with their reference.
    """

    __slots__ = ("length", "counts", "tokens")

    def __init__(self, text: str) -> None:
        tokens = str(text).split()  # == whitespace_tokens(text): "\n" is whitespace to split()
        self.tokens = tokens
        self.length = len(tokens)
        self.counts: list[Counter | None] = [Counter(tokens), Counter(zip(tokens, tokens[1:])), None, None]

    def grams(self, n: int) -> Counter:
        """Counts of the text's ``n + 1``-grams (``n`` from 0, as BLEU's orders are indexed)."""
        counts = self.counts[n]
        if counts is None:
            tokens = self.tokens
            counts = self.counts[n] = Counter(zip(*(tokens[k:] for k in range(n + 1))))
        return counts

    def distinct(self, n: int) -> float:
        total = self.length - n + 1
        return len(self.grams(n - 1)) / total if total > 0 else 0.0


class RougeText:
    """What ROUGE-1/2/L need from one text, split as the ``rouge`` package splits it.

    The package splits at ``.``, keeps every non-empty piece (a whitespace-only piece becomes one
    empty word), normalises whitespace and flattens the words of all sentences.
    """

    __slots__ = ("sentences", "sentence_types", "unigrams", "bigrams")

    def __init__(self, text: str) -> None:
        sentences = [part.split() or [""] for part in str(text).split(".") if part]
        words = [w for sentence in sentences for w in sentence]
        self.sentences = sentences
        self.sentence_types = [frozenset(sentence) for sentence in sentences]
        self.unigrams = frozenset(words)
        self.bigrams = frozenset(zip(words, words[1:]))

    @property
    def has_words(self) -> bool:
        return any(sentence != [""] for sentence in self.sentences)


@lru_cache(maxsize=8192)
def reference_grams(text: str) -> ReplyGrams:
    """A reference's BLEU analysis, cached: every model of a dataset is scored on the same references."""
    return ReplyGrams(text)


@lru_cache(maxsize=8192)
def reference_rouge_text(text: str) -> RougeText:
    return RougeText(text)


def bleu_of(reference: ReplyGrams, reply: ReplyGrams) -> float:
    """nltk ``sentence_bleu([reference], reply, smoothing_function=SmoothingFunction().method1)``."""
    precisions = []
    numerator = 1
    for n in range(_BLEU_ORDERS):
        if numerator:  # else no n-gram of this order can be shared either: its prefix would be
            hyp_counts = reply.counts[n]
            if hyp_counts is None:
                hyp_counts = reply.grams(n)
            ref_counts = reference.counts[n]
            if ref_counts is None:
                ref_counts = reference.grams(n)
            numerator = 0
            for gram in hyp_counts.keys() & ref_counts.keys():
                count, ref_count = hyp_counts[gram], ref_counts[gram]
                numerator += count if count < ref_count else ref_count
            if n == 0 and numerator == 0:
                return 0.0
        denominator = max(1, reply.length - n)
        precisions.append(numerator / denominator if numerator else (numerator + _BLEU_EPSILON) / denominator)
    hyp_len, ref_len = reply.length, reference.length
    brevity = 1 if hyp_len > ref_len else math.exp(1 - ref_len / hyp_len)
    return float(brevity * math.exp(math.fsum(_BLEU_WEIGHT * math.log(p) for p in precisions)))


def _f_score(overlap: int, evaluated: int, reference: int) -> float:
    # rouge_score.f_r_p_rouge_n / rouge_l_summary_level, operation for operation.
    precision = overlap / evaluated if evaluated else 0.0
    recall = overlap / reference if reference else 0.0
    return 2.0 * ((precision * recall) / (precision + recall + 1e-8))


def _position_masks(words: list[str]) -> dict[str, int]:
    """word -> bit mask of the positions where it occurs in ``words`` (bit j = position j)."""
    masks: dict[str, int] = {}
    for j, word in enumerate(words):
        masks[word] = masks.get(word, 0) | (1 << j)
    return masks


def _lcs_words(x: list[str], y: list[str], y_masks: dict[str, int]) -> set[str]:
    """The words of the package's ``_recon_lcs(x, y)``: its table and its tie-breaking, no recursion.

    Rows of the LCS table are kept as bit vectors (Crochemore et al. 2001): a zero at bit j of
    row i means ``table[i][j + 1] = table[i][j] + 1``, so ``table[i][j]`` is ``j`` minus the ones
    below bit j. One row costs a few integer operations instead of a loop over ``y``.
    """
    full = (1 << len(y)) - 1
    rows = [full]
    row = full
    for word in x:
        matches = row & y_masks.get(word, 0)
        row = ((row + matches) | (row - matches)) & full
        rows.append(row)

    words: set[str] = set()
    i, j = len(x), len(y)
    length = len(y) - rows[i].bit_count()  # table[len(x)][len(y)]: the matches still to find
    while length:
        if x[i - 1] == y[j - 1]:
            words.add(x[i - 1])
            i -= 1
            j -= 1
            length -= 1
        elif (rows[i] >> (j - 1)) & 1:
            # table[i][j - 1] == table[i][j] >= table[i - 1][j]: the package goes left.
            j -= 1
        else:
            # table[i][j - 1] < table[i][j] == max(table[i - 1][j], table[i][j - 1]): up.
            i -= 1
    return words


def rouge_of(reference: RougeText, reply: RougeText) -> tuple[float, float, float]:
    """(ROUGE-1, ROUGE-2, ROUGE-L) F-scores as ``rouge==1.0.1``'s ``Rouge().get_scores(reply, reference)``
    (n-grams as sets; summary-level ROUGE-L: the union of the LCS words of every sentence pair)."""
    if not reply.has_words or not reference.has_words:
        return 0.0, 0.0, 0.0
    common = reply.unigrams & reference.unigrams
    r1 = _f_score(len(common), len(reply.unigrams), len(reference.unigrams))
    r2 = _f_score(len(reply.bigrams & reference.bigrams), len(reply.bigrams), len(reference.bigrams))
    # An LCS only holds shared words, so the union is a subset of ``common``: sentences sharing
    # none are skipped, and once the union is ``common`` no pair can add to it.
    union: set[str] = set()
    hyp = [(k, sentence, types) for k, (sentence, types) in enumerate(zip(reply.sentences, reply.sentence_types))
           if not types.isdisjoint(common)]
    masks: dict[int, dict[str, int]] = {}
    for ref_sentence, ref_types in zip(reference.sentences, reference.sentence_types):
        if len(union) == len(common):
            break
        for k, hyp_sentence, hyp_types in hyp:
            shared = ref_types & hyp_types
            # When all are already counted the pair adds nothing; when one word is shared the LCS
            # is made of it.
            if len(shared) == 1:
                union |= shared
            elif shared and not shared <= union:
                if k not in masks:
                    masks[k] = _position_masks(hyp_sentence)
                union |= _lcs_words(ref_sentence, hyp_sentence, masks[k])
    llcs = len(union)
    r_lcs = llcs / len(reference.unigrams)
    p_lcs = llcs / len(reply.unigrams)
    rl = 2.0 * ((p_lcs * r_lcs) / (p_lcs + r_lcs + 1e-8))
    return r1, r2, rl


def lexical_chunk(references: Sequence[str], replies: Sequence[str],
                   metrics: tuple[str, ...]) -> dict[str, list[float | None]]:
    want_bleu = "bleu" in metrics
    want_rouge = any(m in metrics for m in ("rouge1", "rouge2", "rougeL"))
    values: dict[str, list[float | None]] = {m: [] for m in metrics}
    want_grams = want_bleu or "dist1" in metrics or "dist2" in metrics
    bleu_column, dist1, dist2 = values.get("bleu"), values.get("dist1"), values.get("dist2")
    rouge_columns = [(k, values[name]) for k, name in enumerate(("rouge1", "rouge2", "rougeL")) if name in values]
    no_rouge = (None, None, None)
    grams = None
    for reference, reply in zip(references, replies):
        if want_grams:
            grams = ReplyGrams(reply)
        has_reference = bool(reference.strip())
        if bleu_column is not None:
            bleu_column.append(bleu_of(reference_grams(reference), grams) if has_reference else None)
        if want_rouge:
            scores = rouge_of(reference_rouge_text(reference), RougeText(reply)) if has_reference else no_rouge
            for k, column in rouge_columns:
                column.append(scores[k])
        if dist1 is not None:
            dist1.append(grams.distinct(1))  # type: ignore[union-attr]
        if dist2 is not None:
            dist2.append(grams.distinct(2))  # type: ignore[union-attr]
    return values


def ready() -> bool:
    """Nothing: submitted once per worker so that the pool starts its processes at once."""
    return True
