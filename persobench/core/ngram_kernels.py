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
from itertools import chain
# Counter's counting loop (in C), filling a plain dict: collections re-exports it, with a pure
# Python fallback where the C module is missing.
from collections import _count_elements  # type: ignore[attr-defined]
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
    implies its shared prefix, and most replies share no bigram with their reference. The counts
    are plain dicts filled by the C loop behind ``Counter`` (a ``Counter`` itself costs a few
    Python calls more per text, a tenth of the kernel on 56,075 replies).
    """

    __slots__ = ("length", "counts", "tokens")

    def __init__(self, text: str) -> None:
        tokens = str(text).split()  # == whitespace_tokens(text): "\n" is whitespace to split()
        self.tokens = tokens
        self.length = len(tokens)
        unigrams: dict = {}
        _count_elements(unigrams, tokens)
        bigrams: dict = {}
        _count_elements(bigrams, zip(tokens, tokens[1:]))
        self.counts: list[dict | None] = [unigrams, bigrams, None, None]

    def grams(self, n: int) -> dict:
        """Counts of the text's ``n + 1``-grams (``n`` from 0, as BLEU's orders are indexed)."""
        counts = self.counts[n]
        if counts is None:
            tokens = self.tokens
            counts = self.counts[n] = {}
            _count_elements(counts, zip(*(tokens[k:] for k in range(n + 1))))
        return counts

    def distinct(self, n: int) -> float:
        total = self.length - n + 1
        return len(self.grams(n - 1)) / total if total > 0 else 0.0


class RougeText:
    """What ROUGE-1/2/L need from one text, split as the ``rouge`` package splits it.

    The package splits at ``.``, keeps every non-empty piece (a whitespace-only piece becomes one
    empty word), normalises whitespace and flattens the words of all sentences.
    """

    __slots__ = ("sentences", "sentence_types", "unigrams", "bigrams", "has_words")

    def __init__(self, text: str, *, sentence_types: bool = True) -> None:
        sentences = [part.split() or [""] for part in str(text).split(".") if part]
        words = sentences[0] if len(sentences) == 1 else list(chain.from_iterable(sentences))
        self.sentences = sentences
        # Each sentence's words as a set: a reference's are read for every reply to it; a reply's
        # only for its sentences sharing a word with the reference (:func:`rouge_of` makes those).
        self.sentence_types = [frozenset(sentence) for sentence in sentences] if sentence_types else None
        self.unigrams = unigrams = frozenset(words)
        self.bigrams = frozenset(zip(words, words[1:]))
        # A word other than the empty one of a whitespace-only piece (split() never gives "").
        self.has_words = len(unigrams) > ("" in unigrams)


@lru_cache(maxsize=8192)
def reference_grams(text: str) -> ReplyGrams:
    """A reference's BLEU analysis, cached: every model of a dataset is scored on the same references."""
    return ReplyGrams(text)


@lru_cache(maxsize=8192)
def reference_rouge_text(text: str) -> RougeText:
    return RougeText(text)


def bleu_of(reference: ReplyGrams, reply: ReplyGrams) -> float:
    """nltk ``sentence_bleu([reference], reply, smoothing_function=SmoothingFunction().method1)``."""
    return _bleu(reference, reply.counts, reply.tokens)


def _bleu(reference: ReplyGrams, counts: list, tokens: list[str]) -> float:
    """:func:`bleu_of` of a reply given as its tokens and :attr:`ReplyGrams.counts` (trigram and
    4-gram counts are added to ``counts`` when needed): :func:`lexical_chunk` makes no object per reply."""
    precisions = []
    numerator = 1
    length = len(tokens)
    for n in range(_BLEU_ORDERS):
        if numerator:  # else no n-gram of this order can be shared either: its prefix would be
            hyp_counts = counts[n]
            if hyp_counts is None:
                hyp_counts = counts[n] = {}
                _count_elements(hyp_counts, zip(*(tokens[k:] for k in range(n + 1))))
            ref_counts = reference.counts[n]
            if ref_counts is None:
                ref_counts = reference.grams(n)
            shared = hyp_counts.keys() & ref_counts.keys()
            # Clipped counts, summed in C (integers: the order of the sum does not matter).
            numerator = sum(map(min, map(hyp_counts.__getitem__, shared), map(ref_counts.__getitem__, shared)))
            if n == 0 and numerator == 0:
                return 0.0
        denominator = max(1, length - n)
        precisions.append(numerator / denominator if numerator else (numerator + _BLEU_EPSILON) / denominator)
    ref_len = reference.length
    brevity = 1 if length > ref_len else math.exp(1 - ref_len / length)
    return float(brevity * math.exp(math.fsum([_BLEU_WEIGHT * math.log(p) for p in precisions])))


def _f_score(overlap: int, evaluated: int, reference: int) -> float:
    # rouge_score.f_r_p_rouge_n / rouge_l_summary_level, operation for operation.
    precision = overlap / evaluated if evaluated else 0.0
    recall = overlap / reference if reference else 0.0
    return 2.0 * ((precision * recall) / (precision + recall + 1e-8))


def _position_masks(words: list[str], keep: "set[str] | frozenset[str]") -> dict[str, int]:
    """word -> bit mask of the positions where it occurs in ``words`` (bit j = position j), for the
    words in ``keep`` only (no other word can match)."""
    masks: dict[str, int] = {}
    for j, word in enumerate(words):
        if word in keep:
            masks[word] = masks.get(word, 0) | (1 << j)
    return masks


def _lcs_words(x: list[str], y: list[str], y_masks: dict[str, int], shared: "set[str] | frozenset[str]") -> set[str]:
    """The words of the package's ``_recon_lcs(x, y)``: its table and its tie-breaking, no recursion.
    ``y_masks``: :func:`_position_masks` of ``y`` (at least the words of ``shared``); ``shared``:
    the words ``x`` and ``y`` have in common (the LCS is made of them).

    Rows of the LCS table are kept as bit vectors (Crochemore et al. 2001): a zero at bit j of
    row i means ``table[i][j + 1] = table[i][j] + 1``, so ``table[i][j]`` is ``j`` minus the ones
    below bit j. One row costs a few integer operations instead of a loop over ``y``, and a word of
    ``x`` that ``y`` lacks repeats the row below it, so only the rows of shared words are kept.
    """
    full = (1 << len(y)) - 1
    kept = [word for word in x if word in shared]
    rows = [full]
    row = full
    for word in kept:
        matches = row & y_masks[word]
        row = ((row + matches) | (row - matches)) & full
        rows.append(row)
    length = len(y) - row.bit_count()  # table[len(x)][len(y)]: the matches still to find
    # An LCS as long as the shared words, in a ``y`` where each of them occurs once, matches each
    # of them once: its words are all of them, whichever path the package takes.
    if length == len(shared) and sum(y_masks[w].bit_count() for w in shared) == length:
        return set(shared)

    # gap[k]: a word of x that y lacks comes right after kept[k - 1] (k = 0: none can matter); only
    # the walk back reads it (two pairs in five end above).
    gap = [False] * (len(kept) + 1)
    k = 0
    for word in x:
        if word in shared:
            k += 1
        else:
            gap[k] = True
    words: set[str] = set()
    i, j = len(kept), len(y)
    # In a row of a word y lacks, the package goes left to the highest column below j whose row
    # bit is clear (table[i][j - 1] < table[i][j]), then up; repeated rows do it once.
    if gap[i]:
        j = ((~rows[i]) & ((1 << j) - 1)).bit_length()
    while length:
        word = kept[i - 1]
        here = y_masks[word]
        # From (i, j) the package goes left while y[j - 1] is not x[i - 1] and table[i][j - 1] ==
        # table[i][j] (bit j - 1 of the row set): all such steps at once, to the highest column
        # below j where y matches x[i - 1] (then it goes diagonally) or the row bit is clear (up).
        # One exists while matches remain: table[i][0] is 0.
        stop = ((here | ~rows[i]) & ((1 << j) - 1)).bit_length() - 1
        i -= 1
        if (here >> stop) & 1:
            words.add(word)
            j = stop
            length -= 1
        else:
            j = stop + 1
        if gap[i] and length:
            j = ((~rows[i]) & ((1 << j) - 1)).bit_length()
    return words


def rouge_of(reference: RougeText, reply: RougeText) -> tuple[float, float, float]:
    """(ROUGE-1, ROUGE-2, ROUGE-L) F-scores as ``rouge==1.0.1``'s ``Rouge().get_scores(reply, reference)``
    (n-grams as sets; summary-level ROUGE-L: the union of the LCS words of every sentence pair)."""
    if not reply.has_words or not reference.has_words:
        return 0.0, 0.0, 0.0
    sentences = reply.sentences
    return _rouge(reference, sentences, reply.unigrams,
                  sentences[0] if len(sentences) == 1 else list(chain.from_iterable(sentences)))


def _rouge(reference: RougeText, sentences: list[list[str]], unigrams: "frozenset[str]",
           words: list[str]) -> tuple[float, float, float]:
    """:func:`rouge_of` of a reply with words (:attr:`RougeText.has_words`) given as its
    :class:`RougeText` fields and its words, all sentences' in a row: :func:`lexical_chunk` makes
    no object per reply."""
    common = unigrams & reference.unigrams
    r1 = _f_score(len(common), len(unigrams), len(reference.unigrams))
    # The F-score of no shared bigram is 0.0 whatever the counts: the reply's bigram set is made
    # only when one is shared (in three replies out of ten).
    shared_bigrams = len(reference.bigrams.intersection(zip(words, words[1:])))
    r2 = (_f_score(shared_bigrams, len(frozenset(zip(words, words[1:]))), len(reference.bigrams))
          if shared_bigrams else 0.0)
    # An LCS only holds shared words, so the union is a subset of ``common``: sentences sharing
    # none are skipped, and once the union is ``common`` no pair can add to it.
    union: set[str] = set()
    hyp = [(k, sentence, frozenset(sentence)) for k, sentence in enumerate(sentences)
           if not common.isdisjoint(sentence)]
    masks: dict[int, dict[str, int]] = {}
    ref_sentence_types = reference.sentence_types
    if ref_sentence_types is None:  # a reference made without them works, only slower
        ref_sentence_types = [frozenset(sentence) for sentence in reference.sentences]
    for ref_sentence, ref_types in zip(reference.sentences, ref_sentence_types):
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
                    masks[k] = _position_masks(hyp_sentence, common)
                union |= _lcs_words(ref_sentence, hyp_sentence, masks[k], shared)
    llcs = len(union)
    r_lcs = llcs / len(reference.unigrams)
    p_lcs = llcs / len(unigrams)
    rl = 2.0 * ((p_lcs * r_lcs) / (p_lcs + r_lcs + 1e-8))
    return r1, r2, rl


_ALL = ("bleu", "rouge1", "rouge2", "rougeL", "dist1", "dist2")


def lexical_chunk(references: Sequence[str], replies: Sequence[str],
                  metrics: tuple[str, ...]) -> dict[str, list[float | None]]:
    """metric -> one value per reply (None for a reference-based metric when the reference is blank);
    ``metrics``: some of :data:`_ALL` (the callers pass only those).

    A reply is analysed in local variables (what :class:`ReplyGrams` and :class:`RougeText` hold),
    once for every metric: two objects per reply cost a tenth of the loop. A reference's analysis is
    looked up once per reply, whoever asks (blank: it has no token, as ``str.split`` and
    ``str.strip`` agree on what whitespace is)."""
    want_bleu = "bleu" in metrics
    want_rouge = any(m in metrics for m in ("rouge1", "rouge2", "rougeL"))
    no_rouge: tuple[float | None, float | None, float | None] = (None, None, None)
    zero_rouge = (0.0, 0.0, 0.0)
    analysed: dict[str, tuple[ReplyGrams, RougeText | None]] = {}
    rows = []  # one tuple per reply, in _ALL's order: columns are made at the end, in C
    for reference, reply in zip(references, map(str, replies)):
        tokens = reply.split()  # == whitespace_tokens(reply): "\n" is whitespace to split()
        length = len(tokens)
        unigrams: dict = {}
        _count_elements(unigrams, tokens)
        bigrams: dict = {}
        _count_elements(bigrams, zip(tokens, tokens[1:]))
        ref = analysed.get(reference)
        if ref is None:
            ref = analysed[reference] = (reference_grams(reference),
                                         reference_rouge_text(reference) if want_rouge else None)
        ref_grams, ref_rouge = ref
        if ref_grams.length:
            bleu = _bleu(ref_grams, [unigrams, bigrams, None, None], tokens) if want_bleu else None
            if ref_rouge is None:
                rouge = no_rouge
            else:
                # RougeText(reply, sentence_types=False), inline.
                sentences = [part.split() or [""] for part in reply.split(".") if part]
                words = sentences[0] if len(sentences) == 1 else list(chain.from_iterable(sentences))
                reply_unigrams = frozenset(words)
                if len(reply_unigrams) > ("" in reply_unigrams) and ref_rouge.has_words:
                    rouge = _rouge(ref_rouge, sentences, reply_unigrams, words)
                else:
                    rouge = zero_rouge
        else:
            bleu, rouge = None, no_rouge
        # Distinct-n (ReplyGrams.distinct), inline: unique n-grams over n-grams, 0 without any.
        rows.append((bleu, *rouge, len(unigrams) / length if length > 0 else 0.0,
                     len(bigrams) / (length - 1) if length > 1 else 0.0))
    columns = dict(zip(_ALL, map(list, zip(*rows)))) if rows else {m: [] for m in _ALL}
    return {m: columns[m] for m in metrics}


def ready() -> bool:
    """Nothing: submitted once per worker so that the pool starts its processes at once."""
    return True
