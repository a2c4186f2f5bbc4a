"""Lexical metrics, computed exactly as the paper's notebooks did.

- ``bleu``: nltk ``sentence_bleu`` of whitespace tokens (newlines become spaces) with
  ``SmoothingFunction().method1``; the reference is a single reference.
- ``rouge1``/``rouge2``/``rougeL``: F-scores of the ``rouge`` package (pltrdy, ``rouge==1.0.1``),
  the implementation the notebooks imported (``from rouge import Rouge``): case-sensitive,
  sentences split at ``.``, ROUGE-L at summary level. Google's ``rouge_score`` gives different
  numbers (it lower-cases and strips punctuation) and does not reproduce the published tables.

BLEU and ROUGE are PersoBench's own implementations of those two libraries (see the kernels below),
equal to them to the last bit and several times faster; the libraries stay installed to test that.
- ``dist1``/``dist2``: distinct n-grams / n-grams over the reply's whitespace tokens (0 when the
  reply has no n-gram).
- ``idf_overlap``: TF-IDF cosine between persona text and reply after the notebooks' preprocessing
  (lower-case, drop ASCII punctuation, drop stop words), TF-IDF fitted on that pair alone with
  scikit-learn's defaults (token pattern ``\\b\\w\\w+\\b``, smooth idf, l2 norm). Computed in pure
  Python here; ``tests/test_metrics_lexical.py`` checks it against ``TfidfVectorizer``. The
  notebook (``evaluation.ipynb``, ``preprocess_text``) tokenized with nltk's ``word_tokenize``
  *before* removing stop words, and that is not a whitespace split: it splits "cannot" into the
  stop words "can" + "not", "gonna" into "gon" + "na", and cuts at non-ASCII punctuation
  ("don’t" gives the stop word "don"), so the stop-word filter sees other tokens. :func:`preprocess`
  uses nltk's Treebank word tokenizer, the one ``word_tokenize`` applies to each sentence (its
  punkt sentence split cannot cut a text without ``.``, ``?`` or ``!``, which are gone by then, and
  its data cannot be installed offline); a whitespace split is used only for the texts on which the
  two provably agree (ASCII without those contractions), for speed.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
import re
import string
from collections import Counter
from functools import lru_cache
from typing import Any, Iterable, Iterator, Sequence

from persobench.metrics.family import FamilyBatch, FamilyResult, MetricFamily
from persobench.metrics.stopwords import ENGLISH
from persobench.metrics.metric_registry import metric_info, metric_names
import concurrent.futures
import multiprocessing

_PUNCT_TABLE = str.maketrans("", "", string.punctuation)
_TFIDF_TOKEN = re.compile(r"(?u)\b\w\w+\b")


def whitespace_tokens(text: str) -> list[str]:
    """Tokens as the paper made them: ``str(text).replace('\\n', ' ').split()``."""
    return str(text).replace("\n", " ").split()


def stop_words() -> frozenset[str]:
    """nltk's English stop-word list (shipped in the package, :mod:`persobench.metrics.stopwords`)."""

    return ENGLISH


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


def bleu(reference: str, reply: str) -> float:
    """Sentence BLEU-4 of ``reply`` against ``reference`` (see :func:`bleu_of`)."""
    return bleu_of(reference_grams(str(reference)), ReplyGrams(reply))


def bleu_version() -> str:
    return ("bleu/1 sentence_bleu(whitespace tokens, SmoothingFunction().method1) as nltk, "
            "reimplemented; equal to nltk on every published reply")


def rouge(reference: str, reply: str) -> tuple[float, float, float]:
    """(ROUGE-1, ROUGE-2, ROUGE-L) F-scores of ``reply`` against ``reference``.

    A reply or reference with no word left after the package's sentence split (e.g. ``"..."``)
    scores 0, where the package would raise.
    """
    return rouge_of(reference_rouge_text(str(reference)), RougeText(reply))


def rouge_version() -> str:
    return "rouge/1 F-score as rouge==1.0.1 (pltrdy, the paper's package), reimplemented"


def distinct(reply: str, n: int) -> float:
    """Distinct-n of one reply: unique n-grams / n-grams over whitespace tokens (0 if none)."""
    tokens = whitespace_tokens(reply)
    grams = list(zip(*[tokens[i:] for i in range(n)]))
    return len(set(grams)) / len(grams) if grams else 0.0


def distinct_version(n: int) -> str:
    return f"dist{n}/1 distinct {n}-grams / {n}-grams over whitespace tokens of the reply"


# --- IDF overlap -------------------------------------------------------------------------------

#: Words nltk's Treebank tokenizer splits in two (its CONTRACTIONS2/3 patterns once the ASCII
#: punctuation is gone): an ASCII text without them tokenizes as its whitespace split.
_TREEBANK_SPLIT_WORDS = re.compile(r"(?i)cannot|gimme|gonna|gotta|lemme|wanna")


@lru_cache(maxsize=1)
def _treebank() -> Any:
    from nltk.tokenize import NLTKWordTokenizer  # what nltk.word_tokenize runs on each sentence

    return NLTKWordTokenizer()


def word_tokens(text: str) -> list[str]:
    """``nltk.word_tokenize`` of a text without ``.``/``?``/``!`` (the notebook's tokenization after
    punctuation removal): a whitespace split where the two agree, else the Treebank tokenizer."""
    if text.isascii() and not _TREEBANK_SPLIT_WORDS.search(text):
        return text.split()
    return _treebank().tokenize(text)


def preprocess(text: str, remove_stop_words: bool = True) -> str:
    """``evaluation.ipynb``'s ``preprocess_text``: lower-case, drop ASCII punctuation, tokenize with
    ``word_tokenize`` (:func:`word_tokens`), drop nltk's English stop words, join with spaces."""
    tokens = word_tokens(str(text).lower().translate(_PUNCT_TABLE))
    if remove_stop_words:
        stops = stop_words()
        tokens = [t for t in tokens if t not in stops]
    return " ".join(tokens)


def tfidf_cosine(doc_a: str, doc_b: str) -> float:
    """Cosine of the TF-IDF vectors of two documents with the IDF fitted on the pair, matching
    ``sklearn.feature_extraction.text.TfidfVectorizer()`` defaults (0 when either is empty)."""
    counts_a = Counter(_TFIDF_TOKEN.findall(doc_a.lower()))
    counts_b = Counter(_TFIDF_TOKEN.findall(doc_b.lower()))
    if not counts_a or not counts_b:
        return 0.0
    shared_idf = 1.0  # ln((1 + 2) / (1 + 2)) + 1
    single_idf = math.log(3 / 2) + 1.0

    def weights(counts: Counter, other: Counter) -> dict[str, float]:
        return {t: c * (shared_idf if t in other else single_idf) for t, c in counts.items()}

    wa, wb = weights(counts_a, counts_b), weights(counts_b, counts_a)
    dot = sum(v * wb[t] for t, v in wa.items() if t in wb)
    norm = math.sqrt(sum(v * v for v in wa.values())) * math.sqrt(sum(v * v for v in wb.values()))
    return dot / norm if norm else 0.0


def idf_overlap(persona_text: str, reply: str) -> float:
    return tfidf_cosine(preprocess(persona_text), preprocess(reply))


def idf_overlap_version() -> str:
    return ("idf_overlap/2 TF-IDF cosine fitted on (persona, reply), lower-cased, punctuation removed, "
            "nltk word_tokenize tokens, nltk English stop words removed")


# --- Batches -----------------------------------------------------------------------------------

def _batch_metrics(*, reference: bool) -> tuple[str, ...]:
    """The lexical family's metrics that need no persona and do (or do not) need a reference, read
    from their :class:`~persobench.metrics.MetricInfo` records."""

    return tuple(m for m in metric_names(family="lexical", needs="none")
                 if metric_info(m).needs_reference == reference and not metric_info(m).needs_persona)


#: The reference-based metrics :func:`lexical_values` computes, and the reply-only ones.
REFERENCE_LEXICAL = _batch_metrics(reference=True)
REPLY_LEXICAL = _batch_metrics(reference=False)

#: A job (one batch, or all the runs of one ``score`` command) of fewer replies is scored in this
#: process: starting worker processes costs more than it saves (one scores ~10,000 replies a second).
PARALLEL_MIN_REPLIES = 20_000
#: Inside a large job, a batch smaller than this is still scored in this process.
PARALLEL_MIN_BATCH = 200

_ACTIVE_POOL: contextvars.ContextVar[Any] = contextvars.ContextVar("persobench_lexical_pool", default=None)


def _lexical_chunk(references: Sequence[str], replies: Sequence[str],
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


def _ready() -> bool:
    return True


@contextlib.contextmanager
def worker_pool(expected_replies: int, *, workers: int | None = None, share: bool = True) -> Iterator[bool]:
    """Score the lexical batches of a large job (``expected_replies`` in all, e.g. every run of a
    ``score`` command) on ``workers`` processes (default: every CPU).

    ``share``: this process is one of them: it starts ``workers - 1`` worker processes once for the
    whole job and scores its share of each batch instead of waiting. Without (a scoring pass that
    plans and writes other runs in this process meanwhile: :mod:`persobench.scoring.overlap`), it
    starts ``workers`` worker processes and only waits for them, leaving its interpreter to that
    work. Yields whether a pool was started: none below :data:`PARALLEL_MIN_REPLIES` or on one CPU."""
    workers = workers or os.cpu_count() or 1
    if workers < 2 or expected_replies < PARALLEL_MIN_REPLIES or _ACTIVE_POOL.get() is not None:
        yield False
        return

    started = workers - 1 if share else workers
    # spawn, not fork: the app and the job runner have threads, which fork does not copy safely.
    pool = concurrent.futures.ProcessPoolExecutor(started, mp_context=multiprocessing.get_context("spawn"))
    # Start the workers now, while this process plans the first run (a spawned interpreter takes
    # about half a second to start; the pool would otherwise start it at the first batch).
    for _ in range(started):
        pool.submit(_ready)
    token = _ACTIVE_POOL.set((pool, workers, share))
    try:
        yield True
    finally:
        _ACTIVE_POOL.reset(token)
        pool.shutdown(wait=True, cancel_futures=True)


def lexical_values(references: Sequence[str], replies: Sequence[str], metrics: Iterable[str],
                   *, workers: int | None = None) -> dict[str, list[float | None]]:
    """BLEU, ROUGE-1/2/L and Distinct-1/2 of each ``replies[i]`` against ``references[i]``.

    Returns metric -> one value per reply (``None`` for a reference-based metric when the
    reference is blank). Inside :func:`worker_pool` a batch is split over its processes and this
    one; outside, a batch of at least :data:`PARALLEL_MIN_REPLIES` replies starts its own pool.
    Each process is sent whole texts, so it counts n-grams once.
    """
    wanted = tuple(m for m in (*REFERENCE_LEXICAL, *REPLY_LEXICAL) if m in set(metrics))
    references = [str(r) for r in references]
    replies = [str(r) for r in replies]
    if len(references) != len(replies):
        raise ValueError(f"{len(references)} references for {len(replies)} replies")
    active = _ACTIVE_POOL.get()
    if active is not None and len(replies) >= PARALLEL_MIN_BATCH:
        return _in_workers(*active, references, replies, wanted)
    if active is None and len(replies) >= PARALLEL_MIN_REPLIES:
        with worker_pool(len(replies), workers=workers) as started:
            if started:
                return _in_workers(*_ACTIVE_POOL.get(), references, replies, wanted)
    return _lexical_chunk(references, replies, wanted)


#: A batch is cut into this many chunks per process, so whichever process is free (a busy machine
#: slows one more than another) takes the next one.
CHUNKS_PER_PROCESS = 4


def _in_workers(pool: Any, workers: int, share: bool, references: list[str], replies: list[str],
                wanted: tuple[str, ...]) -> dict[str, list[float | None]]:
    # Chunks cut from the replies sorted by reference keep a reference's analysis in one process's cache.
    order = sorted(range(len(replies)), key=references.__getitem__)
    size = -(-len(order) // (workers * CHUNKS_PER_PROCESS))
    chunks = [order[k:k + size] for k in range(0, len(order), size)]
    futures = [pool.submit(_lexical_chunk, [references[i] for i in chunk], [replies[i] for i in chunk], wanted)
               for chunk in chunks]
    parts: list[Any] = [None] * len(chunks)
    # This process scores chunks from the end while the workers take them from the start: a chunk
    # whose future can still be cancelled has not been sent to a worker.
    for k in range(len(chunks) - 1 if share else -1, -1, -1):
        if not futures[k].cancel():
            break
        chunk = chunks[k]
        parts[k] = _lexical_chunk([references[i] for i in chunk], [replies[i] for i in chunk], wanted)
    values: dict[str, list[float | None]] = {m: [None] * len(replies) for m in wanted}
    for k, chunk in enumerate(chunks):
        part = parts[k] if parts[k] is not None else futures[k].result()
        for m in wanted:
            column = values[m]
            for i, value in zip(chunk, part[m]):
                column[i] = value
    return values


# --- The family --------------------------------------------------------------------------------

class LexicalMetrics(MetricFamily):
    """BLEU, ROUGE, Distinct-n and IDF overlap: pure code, one pass over the replies."""

    name = "lexical"

    def score(self, batch: FamilyBatch) -> FamilyResult:
        metrics = batch.metrics
        result = FamilyResult()
        items = list(batch.items)
        advance = batch.progress.stage("lexical", len(items))
        counts = dict.fromkeys(metrics, 0)
        values = lexical_values([it.reference for it in items], [it.reply for it in items], metrics)
        sids = [it.sample.id for it in items]
        for metric, column in values.items():
            # Whole columns at once (the kernels return floats): one add() per value cost a third
            # as much as computing the values.
            rows = [(sid, metric, value) for sid, value in zip(sids, column) if value is not None]
            result.rows.extend(rows)
            counts[metric] += len(rows)
        if "idf_overlap" in metrics:
            for it in items:
                if it.persona_sentences:
                    result.add(it.sid, "idf_overlap", idf_overlap(it.persona_text, it.reply))
                    counts["idf_overlap"] += 1
        advance(len(items))
        for m in metrics:
            if m == "bleu":
                result.record(m, "ok", version=bleu_version(), backend="python", n=counts[m])
            elif m.startswith("rouge"):
                result.record(m, "ok", version=rouge_version(), backend="python", n=counts[m])
            elif m.startswith("dist"):
                result.record(m, "ok", version=distinct_version(int(m[-1])), backend="python", n=counts[m])
            else:
                result.record(m, "ok", version=idf_overlap_version(), backend="python", n=counts[m])
        return result
