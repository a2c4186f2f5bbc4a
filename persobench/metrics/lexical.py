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
import threading
from collections import Counter
from functools import lru_cache
from typing import Any, Iterable, Iterator, Sequence, cast

from persobench.metrics.family import FamilyBatch, FamilyResult, MetricFamily
from persobench.core.ngram_kernels import (ReplyGrams, RougeText, bleu_of, lexical_chunk, ready, reference_grams,
                                      reference_rouge_text, rouge_of)
from persobench.metrics.stopwords import ENGLISH
from persobench.core.gc_pace import pace_this_process
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

_ACTIVE_POOL: contextvars.ContextVar["_Pool | None"] = contextvars.ContextVar("persobench_lexical_pool", default=None)

#: A batch is cut into this many chunks per worker process, so whichever process is free (a busy
#: machine slows one more than another) takes the next one, and this process can take a chunk no
#: worker has started when it would otherwise wait. Where the two meet in a run, this process waits
#: for the chunk a worker is computing (every thread of a ``score`` pass then idle): eighths of a
#: run (about 6 ms of kernels each) instead of quarters halved that wait at a few more sends.
CHUNKS_PER_PROCESS = 8


class _Chunk:
    """Some replies of a batch, sent to a worker (or taken back and scored here)."""

    __slots__ = ("references", "replies", "wanted", "covers", "future", "values")

    def __init__(self, references: list[str], replies: list[str], wanted: tuple[str, ...], future: Any) -> None:
        self.references, self.replies, self.wanted, self.future = references, replies, wanted, future
        self.covers = frozenset(wanted)
        self.values: dict[str, list[float | None]] | None = None

    def take_back(self) -> bool:
        """Score the chunk in this process if no worker has started it; whether it did."""
        if self.values is None and self.future.cancel():
            self.values = lexical_chunk(self.references, self.replies, self.wanted)
        return self.values is not None

    def result(self) -> dict[str, list[float | None]]:
        return self.values if self.values is not None else self.future.result()


class _Pool:
    """The worker processes of one job, and the replies sent to them ahead of their batch
    (:func:`send_ahead`): (reference, reply) -> the chunk computing its values and its place there."""

    def __init__(self, executor: Any, workers: int) -> None:
        self.executor = executor
        self.workers = workers
        self.lock = threading.Lock()
        self.ahead: dict[tuple[str, str], tuple[_Chunk, int]] = {}

    def send(self, references: list[str], replies: list[str], indices: list[int],
             wanted: tuple[str, ...]) -> list[tuple[list[int], _Chunk]]:
        """Chunks of ``indices`` (positions in ``references``/``replies``), each sent to the workers."""
        processes = self.workers - 1
        # Chunks cut from the replies sorted by reference keep a reference's analysis in one
        # process's cache.
        order = sorted(indices, key=references.__getitem__) if processes > 1 else indices
        size = -(-len(order) // (processes * CHUNKS_PER_PROCESS))
        sent = []
        for k in range(0, len(order), size):
            chunk = order[k:k + size]
            refs, reps = [references[i] for i in chunk], [replies[i] for i in chunk]
            sent.append((chunk, _Chunk(refs, reps, wanted, self.executor.submit(lexical_chunk, refs, reps, wanted))))
        return sent


def send_ahead(references: Sequence[str], replies: Sequence[str], metrics: Iterable[str]) -> None:
    """Start computing a batch that :func:`lexical_values` will be asked for later (a run just
    planned, while the run before it is computed), when a worker pool is active; else nothing.

    The workers then never wait for the step between two runs. Values are a function of (reference,
    reply) alone, so a batch asked for later takes whichever of its pairs were sent ahead and
    computes the rest as usual: nothing sent ahead can change a value."""
    pool = _ACTIVE_POOL.get()
    wanted = tuple(m for m in (*REFERENCE_LEXICAL, *REPLY_LEXICAL) if m in set(metrics))
    if pool is None or not wanted or len(replies) < PARALLEL_MIN_BATCH:
        return
    references, replies = [str(r) for r in references], [str(r) for r in replies]
    sent = pool.send(references, replies, list(range(len(replies))), wanted)
    with pool.lock:
        for chunk, job in sent:
            for place, i in enumerate(chunk):
                pool.ahead[references[i], replies[i]] = (job, place)


@contextlib.contextmanager
def worker_pool(expected_replies: int, *, workers: int | None = None) -> Iterator[bool]:
    """Score the lexical batches of a large job (``expected_replies`` in all, e.g. every run of a
    ``score`` command) on ``workers`` processes (default: every CPU), this one included: it starts
    ``workers - 1`` worker processes once for the whole job. Yields whether a pool was started:
    none below :data:`PARALLEL_MIN_REPLIES` or on one CPU.

    The workers take the chunks of each batch; this process scores a chunk itself only when it
    would otherwise wait for it (no worker has started it). In a ``score`` pass this process plans
    and writes the other runs meanwhile (:mod:`persobench.scoring.overlap`), and each run is sent
    to the workers as soon as it is planned (:func:`send_ahead`), so they go from one run to the
    next without waiting for this process, and this process takes a chunk back only when they are
    behind."""
    workers = workers or os.cpu_count() or 1
    if workers < 2 or expected_replies < PARALLEL_MIN_REPLIES or _ACTIVE_POOL.get() is not None:
        yield False
        return

    # spawn, not fork: the app and the job runner have threads, which fork does not copy safely.
    executor = concurrent.futures.ProcessPoolExecutor(workers - 1, mp_context=multiprocessing.get_context("spawn"),
                                                      initializer=pace_this_process)
    # Start the workers now, while this process plans the first run (a spawned interpreter takes
    # about half a second to start; the pool would otherwise start it at the first batch).
    for _ in range(workers - 1):
        executor.submit(ready)
    token = _ACTIVE_POOL.set(_Pool(executor, workers))
    try:
        yield True
    finally:
        _ACTIVE_POOL.reset(token)
        # Every result was taken (or the block failed: what is queued is cancelled); the workers
        # exit on their own, while this process goes on (a score command prepares the app's views
        # meanwhile): waiting for their interpreters to shut down cost 0.2 s of a lexical pass.
        executor.shutdown(wait=False, cancel_futures=True)


def lexical_values(references: Sequence[str], replies: Sequence[str], metrics: Iterable[str],
                   *, workers: int | None = None) -> dict[str, list[float | None]]:
    """BLEU, ROUGE-1/2/L and Distinct-1/2 of each ``replies[i]`` against ``references[i]``.

    Returns metric -> one value per reply (``None`` for a reference-based metric when the
    reference is blank). Inside :func:`worker_pool` a batch is split over its processes (what was
    sent ahead, :func:`send_ahead`, is taken from there); outside, a batch of at least
    :data:`PARALLEL_MIN_REPLIES` replies starts its own pool. Each process is sent whole texts,
    so it counts n-grams once.
    """
    wanted = tuple(m for m in (*REFERENCE_LEXICAL, *REPLY_LEXICAL) if m in set(metrics))
    references = [str(r) for r in references]
    replies = [str(r) for r in replies]
    if len(references) != len(replies):
        raise ValueError(f"{len(references)} references for {len(replies)} replies")
    if not wanted:
        return {}
    pool = _ACTIVE_POOL.get()
    if pool is not None and len(replies) >= PARALLEL_MIN_BATCH:
        return _in_workers(pool, references, replies, wanted)
    if pool is None and len(replies) >= PARALLEL_MIN_REPLIES:
        with worker_pool(len(replies), workers=workers) as started:
            if started:
                return _in_workers(_ACTIVE_POOL.get(), references, replies, wanted)  # type: ignore[arg-type]
    return lexical_chunk(references, replies, wanted)


def _in_workers(pool: _Pool, references: list[str], replies: list[str],
                wanted: tuple[str, ...]) -> dict[str, list[float | None]]:
    # The replies sent ahead (a value is a function of its pair: any chunk computing the pair
    # serves), then the rest, sent now.
    found: list[tuple[int, _Chunk, int]] = []
    rest: list[int] = []
    wanted_set = set(wanted)
    with pool.lock:
        for i, pair in enumerate(zip(references, replies)):
            hit = pool.ahead.pop(pair, None)
            if hit is not None and wanted_set <= hit[0].covers:
                found.append((i, *hit))
            else:
                rest.append(i)
    sent = pool.send(references, replies, rest, wanted) if rest else []
    # This process scores the chunks no worker has started rather than wait (the workers take them
    # from the start, this process from the end): the batch's chunks sent now, then those sent
    # ahead. In a pass that happens only when the workers are behind (this process has planned and
    # written the runs before): the work balances itself between the cores.
    for _, job in reversed(sent):
        if not job.take_back():
            break
    for job in reversed(list({id(job): job for _, job, _ in found}.values())):
        if not job.take_back():
            break
    values: dict[str, list[float | None]] = {m: [None] * len(replies) for m in wanted}
    for chunk, job in sent:
        part = job.result()
        for m in wanted:
            _scatter(values[m], chunk, part[m])
    taken: dict[int, tuple[_Chunk, list[int], list[int]]] = {}
    for i, job, place in found:
        entry = taken.setdefault(id(job), (job, [], []))
        entry[1].append(i)
        entry[2].append(place)
    for job, positions, places in taken.values():
        part = job.result()
        whole = places == list(range(len(part[wanted[0]])))  # the batch holds the chunk, in order
        for m in wanted:
            _scatter(values[m], positions, part[m] if whole else [part[m][k] for k in places])
    return values


def _scatter(column: list, positions: list[int], values: list) -> None:
    """``column[positions[k]] = values[k]``; one slice assignment when the positions run in order."""
    if positions and positions == list(range(positions[0], positions[0] + len(positions))):
        column[positions[0]:positions[0] + len(positions)] = values
        return
    for i, value in zip(positions, values):
        column[i] = value


# --- The family --------------------------------------------------------------------------------

class LexicalMetrics(MetricFamily):
    """BLEU, ROUGE, Distinct-n and IDF overlap: pure code, one pass over the replies."""

    name = "lexical"

    def reads_personas(self, metrics: Sequence[str]) -> bool:
        return any(metric_info(m).needs_persona for m in metrics)

    def score(self, batch: FamilyBatch) -> FamilyResult:
        metrics = batch.metrics
        result = FamilyResult()
        items = list(batch.items)
        advance = batch.progress.stage("lexical", len(items))
        counts = dict.fromkeys(metrics, 0)
        values = lexical_values([it.reference for it in items], [it.reply for it in items], metrics)
        sids = [it.sample.id for it in items]
        for metric, column in values.items():
            # Whole columns (the kernels return floats): one add() per value cost a third as much
            # as computing the values. A blank reference leaves a reference metric's value missing.
            present: list[float]
            if None in column:
                kept = [(sid, value) for sid, value in zip(sids, column) if value is not None]
                ids, present = [sid for sid, _ in kept], [value for _, value in kept]
            else:
                ids, present = sids, cast("list[float]", column)  # no None in it
            result.add_column(ids, metric, present)
            counts[metric] += len(ids)
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
