"""Lexical metrics and METEOR: hand-computed values and agreement with the libraries the paper called."""

from __future__ import annotations

import math
import random

import pytest

from persobench.metrics import lexical
from persobench.metrics.backends import get_profile, prepare_wordnet
from persobench.metrics.meteor import DEGRADED, meteor, resolve_wordnet


# --- BLEU ----------------------------------------------------------------------------------------

def test_bleu_hand_computed_brevity_penalty_only():
    # Every n-gram of the reply is in the reference: precisions are 1, only BP = exp(1 - 5/4) applies.
    assert lexical.bleu("a b c d e", "a b c d") == pytest.approx(math.exp(-0.25), abs=1e-12)


def test_bleu_hand_computed_with_smoothing_method1():
    # p1 = p2 = 1; no 3- or 4-grams: method1 gives 0.1 each; BP = exp(1 - 6/2).
    expected = math.exp(-2) * math.exp(0.25 * (2 * math.log(0.1)))
    assert lexical.bleu("the cat sat on the mat", "the cat") == pytest.approx(expected, abs=1e-12)
    assert lexical.bleu("the cat sat on the mat", "the cat sat on the mat") == pytest.approx(1.0)
    assert lexical.bleu("the cat", "") == 0.0


def test_bleu_matches_direct_nltk_call_with_whitespace_tokens():
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    rng = random.Random(3)
    words = "i love my two cats and dogs they play in the garden every day".split()
    for _ in range(30):
        ref = " ".join(rng.choices(words, k=rng.randint(3, 14)))
        hyp = " ".join(rng.choices(words, k=rng.randint(1, 14))) + "\nok"
        direct = sentence_bleu([ref.replace("\n", " ").split()], hyp.replace("\n", " ").split(),
                               smoothing_function=SmoothingFunction().method1)
        assert lexical.bleu(ref, hyp) == pytest.approx(direct, abs=1e-12)


# --- ROUGE ---------------------------------------------------------------------------------------

def test_rouge_hand_computed():
    r1, r2, rl = lexical.rouge("the cat sat", "the cat ran")
    assert r1 == pytest.approx(2 / 3, abs=1e-6)  # 2 of 3 unigrams shared both ways
    assert r2 == pytest.approx(1 / 2, abs=1e-6)  # "the cat" of 2 bigrams
    assert rl == pytest.approx(2 / 3, abs=1e-6)  # LCS "the cat"


def test_rouge_is_the_papers_package_case_sensitive_and_safe_on_empty():
    # The paper's `rouge` package does not lower-case (rouge_score would give 1.0 here).
    assert lexical.rouge("The Cat", "the cat") == (0.0, 0.0, 0.0)
    assert lexical.rouge("the cat", "...") == (0.0, 0.0, 0.0)  # the package would raise
    assert lexical.rouge_status() == ("ok", "")
    assert "rouge==1.0.1" in lexical.rouge_version()


def test_rouge_matches_direct_rouge_package_call():
    from rouge import Rouge

    scorer = Rouge()
    rng = random.Random(5)
    words = "I love my two cats . They play in the garden every day , and we walk".split()
    for _ in range(30):
        ref = " ".join(rng.choices(words, k=rng.randint(3, 16)))
        hyp = " ".join(rng.choices(words, k=rng.randint(2, 16)))
        if not lexical._has_rouge_words(hyp) or not lexical._has_rouge_words(ref):
            continue
        direct = scorer.get_scores(hyp, ref, avg=True)
        got = lexical.rouge(ref, hyp)
        assert got == pytest.approx((direct["rouge-1"]["f"], direct["rouge-2"]["f"], direct["rouge-l"]["f"]),
                                    abs=1e-12)


# --- Distinct-n ----------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("reply", "dist1", "dist2"),
    [
        ("a a b", 2 / 3, 1.0),             # bigrams (a a), (a b)
        ("a b a b", 0.5, 2 / 3),           # bigrams ab, ba, ab
        ("hello", 1.0, 0.0),               # no bigram -> 0
        ("", 0.0, 0.0),
        ("Cat cat cat.\ncat", 0.75, 1.0),  # case and punctuation kept; newline is a space
    ],
)
def test_distinct_hand_computed(reply, dist1, dist2):
    assert lexical.distinct(reply, 1) == pytest.approx(dist1)
    assert lexical.distinct(reply, 2) == pytest.approx(dist2)


# --- IDF overlap ---------------------------------------------------------------------------------

def test_stop_words_are_nltk_english_list():
    words = lexical.stop_words()
    assert len(words) == 179
    assert {"i", "me", "the", "wouldn't", "ourselves"} <= words
    assert "cat" not in words


def test_idf_overlap_matches_sklearn_tfidf_cosine():
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.metrics.pairwise import cosine_similarity

    rng = random.Random(11)
    words = "cats dogs garden tea library books tomatoes basil music violin piano travel paris".split()
    for _ in range(40):
        persona = " ".join(rng.choices(words + ["the", "i", "love", "."], k=rng.randint(2, 12)))
        reply = " ".join(rng.choices(words + ["my", "a", "!"], k=rng.randint(2, 12)))
        a, b = lexical.preprocess(persona), lexical.preprocess(reply)
        matrix = TfidfVectorizer().fit_transform([a, b])
        expected = cosine_similarity(matrix[0:1], matrix[1:2])[0][0]
        assert lexical.idf_overlap(persona, reply) == pytest.approx(expected, abs=1e-9)


def test_idf_overlap_edge_cases():
    assert lexical.idf_overlap("I love cats.", "I love cats!") == pytest.approx(1.0)
    assert lexical.idf_overlap("I love cats.", "the and of") == 0.0  # only stop words left
    assert lexical.idf_overlap("", "") == 0.0


# --- METEOR --------------------------------------------------------------------------------------

def test_prepare_wordnet_converts_crlf_once(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    (source / "data.noun").write_bytes(b"line one\r\nline two\r\n")
    (source / "lexnames").write_bytes(b"00\tadj.all\t3\r\n")
    root = prepare_wordnet(source, tmp_path / "nltk")
    target = root / "corpora" / "wordnet"
    assert (target / "data.noun").read_bytes() == b"line one\nline two\n"
    assert b"\r" not in (target / "lexnames").read_bytes()
    stamp = (target / ".persobench-source").stat().st_mtime_ns
    prepare_wordnet(source, tmp_path / "nltk")  # second call: nothing rewritten
    assert (target / ".persobench-source").stat().st_mtime_ns == stamp


def test_meteor_with_wordnet_matches_nltk_and_beats_exact_stem():
    from nltk.translate.meteor_score import meteor_score

    wordnet, reason = resolve_wordnet(get_profile("offline").spec("wordnet"))
    assert wordnet is not None, reason
    assert wordnet.get_version() == "3.0"
    ref, hyp = "i drive a car to work", "i drive an auto to work"
    with_wn = meteor(ref, hyp, wordnet)
    without = meteor(ref, hyp, None)
    assert with_wn == pytest.approx(meteor_score([ref.split()], hyp.split(), wordnet=wordnet), abs=1e-12)
    assert with_wn > without  # "auto" matches "car" only through WordNet synonyms
    # Stems still match without WordNet: "drives" ~ "drive".
    assert meteor("he drives", "he drive", None) > meteor("he drives", "he flies", None)


def test_meteor_without_wordnet_is_labelled_degraded(tmp_path):
    from persobench.metrics import score_samples
    from persobench.records import PersonaSet, Sample, Turn

    sample = Sample("t:0", "t", (PersonaSet("User2", ("i have a car.",)),), (Turn("User1", "hi"),), "User2",
                    "i drive a car to work")
    ok = score_samples([sample], {"t:0": "i drive an auto to work"}, metrics=["meteor"])
    off = score_samples([sample], {"t:0": "i drive an auto to work"}, metrics=["meteor"],
                        overrides={"wordnet": "none"})
    assert ok.provenance["meteor"]["status"] == "ok"
    assert "WordNet 3.0" in ok.provenance["meteor"]["model_id"]
    assert off.provenance["meteor"]["status"] == "degraded"
    assert off.provenance["meteor"]["reason"].startswith(DEGRADED)
    assert off.profile != ok.profile  # an override changes the stored profile key
    assert off.scores["value"].iloc[0] < ok.scores["value"].iloc[0]
