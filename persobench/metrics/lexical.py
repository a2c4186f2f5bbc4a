"""Lexical metrics, computed exactly as the paper's notebooks did.

- ``bleu``: nltk ``sentence_bleu`` of whitespace tokens (newlines become spaces) with
  ``SmoothingFunction().method1``; the reference is a single reference.
- ``rouge1``/``rouge2``/``rougeL``: F-scores of the ``rouge`` package (pltrdy, ``rouge==1.0.1``),
  the implementation the notebooks imported (``from rouge import Rouge``): case-sensitive,
  sentences split at ``.``, ROUGE-L at summary level. Google's ``rouge_score`` gives different
  numbers (it lower-cases and strips punctuation) and does not reproduce the published tables; it
  is used only when ``rouge`` is not installed, and then labelled ``degraded``.
- ``dist1``/``dist2``: distinct n-grams / n-grams over the reply's whitespace tokens (0 when the
  reply has no n-gram).
- ``idf_overlap``: TF-IDF cosine between persona text and reply after the notebooks' preprocessing
  (lower-case, drop ASCII punctuation, drop stop words), TF-IDF fitted on that pair alone with
  scikit-learn's defaults (token pattern ``\\b\\w\\w+\\b``, smooth idf, l2 norm). Computed in pure
  Python here; ``tests/test_metrics_lexical.py`` checks it against ``TfidfVectorizer``. The
  notebooks used nltk's punkt ``word_tokenize``, which cannot be installed offline; after
  punctuation removal a whitespace split gives the same tokens to the TF-IDF token pattern.
"""

from __future__ import annotations

import math
import re
import string
import sys
from collections import Counter
from functools import lru_cache

from persobench.metrics.backends import package_version

_PUNCT_TABLE = str.maketrans("", "", string.punctuation)
_TFIDF_TOKEN = re.compile(r"(?u)\b\w\w+\b")


def whitespace_tokens(text: str) -> list[str]:
    """Tokens as the paper made them: ``str(text).replace('\\n', ' ').split()``."""
    return str(text).replace("\n", " ").split()


def stop_words() -> frozenset[str]:
    """nltk's English stop-word list (shipped in the package, :mod:`persobench.metrics.stopwords`)."""
    from persobench.metrics.stopwords import ENGLISH

    return ENGLISH


# --- BLEU --------------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def _bleu_parts():
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    return sentence_bleu, SmoothingFunction().method1


def bleu(reference: str, reply: str) -> float:
    sentence_bleu, smoothing = _bleu_parts()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nltk warns on 0 n-gram overlaps
        return float(sentence_bleu([whitespace_tokens(reference)], whitespace_tokens(reply),
                                   smoothing_function=smoothing))


def bleu_version() -> str:
    return f"bleu/1 nltk=={package_version('nltk')} sentence_bleu(whitespace tokens, SmoothingFunction().method1)"


# --- ROUGE -------------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def _rouge_backend():
    """``("rouge", Rouge())`` (the paper's package) or ``("rouge_score", scorer)`` as the fallback."""
    try:
        from rouge import Rouge

        return "rouge", Rouge(metrics=["rouge-1", "rouge-2", "rouge-l"], stats=["f"])
    except ImportError:
        from rouge_score import rouge_scorer

        return "rouge_score", rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"])


def rouge(reference: str, reply: str) -> tuple[float, float, float]:
    """(ROUGE-1, ROUGE-2, ROUGE-L) F-scores of ``reply`` against ``reference``.

    A reply or reference with no word left after the package's sentence split (e.g. ``"..."``)
    scores 0, where the package would raise.
    """
    kind, scorer = _rouge_backend()
    hyp = str(reply).replace("\n", " ")
    ref = str(reference).replace("\n", " ")
    if kind == "rouge_score":
        s = scorer.score(ref, hyp)
        return s["rouge1"].fmeasure, s["rouge2"].fmeasure, s["rougeL"].fmeasure
    if not _has_rouge_words(hyp) or not _has_rouge_words(ref):
        return 0.0, 0.0, 0.0
    try:
        s = scorer.get_scores(hyp, ref)[0]
    except RecursionError:  # ROUGE-L's LCS reconstruction recurses once per token
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 20 * (len(hyp.split()) + len(ref.split())) + 1000))
        try:
            s = scorer.get_scores(hyp, ref)[0]
        finally:
            sys.setrecursionlimit(limit)
    except ValueError:  # "Hypothesis is empty." / "Reference is empty."
        return 0.0, 0.0, 0.0
    return float(s["rouge-1"]["f"]), float(s["rouge-2"]["f"]), float(s["rouge-l"]["f"])


def _has_rouge_words(text: str) -> bool:
    return any(" ".join(part.split()) for part in text.split("."))


def rouge_status() -> tuple[str, str]:
    """``(status, reason)``: ``ok`` with the paper's package, ``degraded`` with rouge_score."""
    kind, _ = _rouge_backend()
    if kind == "rouge":
        return "ok", ""
    return "degraded", "the rouge package (pip install rouge==1.0.1) is missing: rouge_score used instead, " \
                       "which does not reproduce the paper's numbers"


def rouge_version() -> str:
    kind, _ = _rouge_backend()
    if kind == "rouge":
        return f"rouge/1 rouge=={package_version('rouge')} (pltrdy) F-score, as the paper"
    return f"rouge/1 rouge-score=={package_version('rouge-score')} F-score (fallback)"


# --- Distinct-n --------------------------------------------------------------------------------

def distinct(reply: str, n: int) -> float:
    """Distinct-n of one reply: unique n-grams / n-grams over whitespace tokens (0 if none)."""
    tokens = whitespace_tokens(reply)
    grams = list(zip(*[tokens[i:] for i in range(n)]))
    return len(set(grams)) / len(grams) if grams else 0.0


def distinct_version(n: int) -> str:
    return f"dist{n}/1 distinct {n}-grams / {n}-grams over whitespace tokens of the reply"


# --- IDF overlap -------------------------------------------------------------------------------

def preprocess(text: str, remove_stop_words: bool = True) -> str:
    """The notebooks' ``preprocess_text``: lower-case, drop punctuation, drop stop words."""
    tokens = str(text).lower().translate(_PUNCT_TABLE).split()
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
    return ("idf_overlap/1 TF-IDF cosine fitted on (persona, reply), lower-cased, punctuation and nltk "
            "English stop words removed")
