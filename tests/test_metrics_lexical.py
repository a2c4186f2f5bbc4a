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
    assert "rouge==1.0.1" in lexical.rouge_version()


def test_rouge_matches_direct_rouge_package_call():
    from rouge import Rouge

    scorer = Rouge()
    rng = random.Random(5)
    words = "I love my two cats . They play in the garden every day , and we walk".split()
    for _ in range(30):
        ref = " ".join(rng.choices(words, k=rng.randint(3, 16)))
        hyp = " ".join(rng.choices(words, k=rng.randint(2, 16)))
        if not lexical.RougeText(hyp).has_words or not lexical.RougeText(ref).has_words:
            continue
        direct = scorer.get_scores(hyp, ref, avg=True)
        got = lexical.rouge(ref, hyp)
        assert got == pytest.approx((direct["rouge-1"]["f"], direct["rouge-2"]["f"], direct["rouge-l"]["f"]),
                                    abs=1e-12)


# --- Own BLEU/ROUGE kernels against the libraries, to the last bit ----------------------------

def _nltk_bleu(reference: str, reply: str) -> float:
    import warnings

    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(sentence_bleu([reference.replace("\n", " ").split()], reply.replace("\n", " ").split(),
                                   smoothing_function=SmoothingFunction().method1))


def _package_rouge(reference: str, reply: str) -> tuple[float, float, float]:
    """rouge==1.0.1 as the notebooks called it; (0, 0, 0) where it raises on a text with no word."""
    import sys

    from rouge import Rouge

    hyp, ref = reply.replace("\n", " "), reference.replace("\n", " ")
    if not any(" ".join(p.split()) for p in hyp.split(".")) or not any(" ".join(p.split()) for p in ref.split(".")):
        return 0.0, 0.0, 0.0
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20 * (len(hyp.split()) + len(ref.split())) + 1000))  # its LCS recursion
    try:
        s = Rouge(metrics=["rouge-1", "rouge-2", "rouge-l"], stats=["f"]).get_scores(hyp, ref)[0]
    finally:
        sys.setrecursionlimit(limit)
    return s["rouge-1"]["f"], s["rouge-2"]["f"], s["rouge-l"]["f"]


def _assert_same_as_libraries(reference: str, reply: str) -> None:
    assert lexical.bleu(reference, reply) == _nltk_bleu(reference, reply), (reference, reply)
    assert lexical.rouge(reference, reply) == _package_rouge(reference, reply), (reference, reply)


_WORDS = ["I", "i", "love", "my", "dog", "dogs", "the", "a", "cat", "Cat", "run", "in", "park", ".", "...",
          ",", "!", "?", "'s", "yes.", "no.", "e.g.", "\u00e9t\u00e9"]
_SEPARATORS = [" ", " ", " ", "  ", "\n", ". ", ".", "\t", "\u00a0", " . "]


def _texts():
    from hypothesis import strategies as st

    token = st.tuples(st.sampled_from(_WORDS), st.sampled_from(_SEPARATORS)).map("".join)
    return st.lists(token, min_size=0, max_size=40).map("".join)


def test_kernels_equal_nltk_and_rouge_on_generated_texts():
    from hypothesis import HealthCheck, given, settings

    @settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(reference=_texts(), reply=_texts())
    def check(reference: str, reply: str) -> None:
        _assert_same_as_libraries(reference, reply)

    check()


def test_kernels_equal_the_libraries_on_published_replies(reference_dir):
    import pandas as pd

    checked = 0
    for path in sorted((reference_dir / "Responses").glob("*/*.csv")):
        prompts = pd.read_csv(reference_dir / "Prompts" / f"{path.parent.name}.csv", keep_default_na=False)
        replies = pd.read_csv(path, keep_default_na=False)
        pairs = [(a, g) for g, a in zip(replies["gen_response"], prompts["act_response"]) if g.strip()]
        for reference, reply in pairs[::97]:  # a spread sample: every file, about 550 replies in all
            _assert_same_as_libraries(reference, reply)
            checked += 1
    assert checked > 500


def test_lcs_words_equal_the_packages_recon_lcs():
    """The LCS kernel's shortcuts (rows of words the other sentence lacks skipped, left steps taken
    at once, all shared words when each occurs once) pick the package's path, tie-breaks included."""
    from rouge.rouge_score import _recon_lcs

    from persobench.core.ngram_kernels import _lcs_words, _position_masks

    rng = random.Random(7)
    shortcut = backtracked = 0
    for _ in range(3000):
        vocabulary = "abcdefghij"[:rng.randint(2, 10)]
        x = rng.choices(vocabulary, k=rng.randint(1, 14))
        y = rng.choices("abcdefghijklmn"[:rng.randint(2, 14)], k=rng.randint(1, 14))
        shared = set(x) & set(y)
        if len(shared) < 2:
            continue
        got = _lcs_words(x, y, _position_masks(y, shared), frozenset(shared))
        assert got == set(_recon_lcs(x, y)._ngrams), (x, y)
        if got == shared and all(y.count(w) == 1 for w in shared):
            shortcut += 1
        else:
            backtracked += 1
    assert shortcut > 100 and backtracked > 1000  # both paths were exercised


def test_batch_values_equal_single_calls_in_process_and_in_workers(monkeypatch):
    rng = random.Random(11)
    words = "we walk the dog . I love cats and the park every day".split()
    references = [" ".join(rng.choices(words, k=rng.randint(0, 12))) for _ in range(60)]
    replies = [" ".join(rng.choices(words, k=rng.randint(1, 12))) for _ in range(60)]
    metrics = ["bleu", "rouge1", "rouge2", "rougeL", "dist1", "dist2"]
    expected = {m: [] for m in metrics}
    for reference, reply in zip(references, replies):
        has_reference = bool(reference.strip())
        r1, r2, rl = lexical.rouge(reference, reply)
        for m, v in (("bleu", lexical.bleu(reference, reply)), ("rouge1", r1), ("rouge2", r2), ("rougeL", rl)):
            expected[m].append(v if has_reference else None)
        expected["dist1"].append(lexical.distinct(reply, 1))
        expected["dist2"].append(lexical.distinct(reply, 2))
    assert None in expected["bleu"]  # some blank references are in the batch
    assert lexical.lexical_values(references, replies, metrics, workers=1) == expected
    monkeypatch.setattr(lexical, "PARALLEL_MIN_REPLIES", 10)
    assert lexical.lexical_values(references, replies, metrics, workers=2) == expected


def test_values_sent_ahead_equal_values_computed_when_asked(monkeypatch):
    """A batch sent to the workers when its run is planned (send_ahead) is taken from there when
    asked for, whole or in part, in any order, and only for the metrics sent: same values."""
    rng = random.Random(3)
    words = "we walk the dog . I love cats and the park every day".split()
    references = [" ".join(rng.choices(words, k=rng.randint(0, 12))) for _ in range(40)]
    replies = [" ".join(rng.choices(words, k=rng.randint(1, 12))) + f" {i}" for i in range(40)]
    metrics = ("bleu", "rouge1", "rouge2", "rougeL", "dist1", "dist2")
    expected = lexical.lexical_values(references, replies, metrics, workers=1)
    monkeypatch.setattr(lexical, "PARALLEL_MIN_REPLIES", 10)
    monkeypatch.setattr(lexical, "PARALLEL_MIN_BATCH", 2)
    with lexical.worker_pool(100, workers=2) as started:
        assert started
        pool = lexical._ACTIVE_POOL.get()
        lexical.send_ahead(references, replies, metrics)
        assert len(pool.ahead) == 40
        assert lexical.lexical_values(references, replies, metrics) == expected
        assert not pool.ahead  # every pair was taken from what was sent

        lexical.send_ahead(references[:20], replies[:20], metrics)
        order = list(range(40))
        rng.shuffle(order)  # half sent ahead, half not, in another order
        got = lexical.lexical_values([references[i] for i in order], [replies[i] for i in order], metrics)
        assert got == {m: [expected[m][i] for i in order] for m in metrics}
        assert not pool.ahead

        lexical.send_ahead(references, replies, ("dist1",))  # fewer metrics than asked for below
        assert lexical.lexical_values(references, replies, ("bleu", "dist1")) == {
            m: expected[m] for m in ("bleu", "dist1")}
    lexical.send_ahead(references, replies, metrics)  # no pool: nothing to do, nothing kept


def test_leaving_the_pool_leaves_no_worker_behind(monkeypatch):
    """The pool's exit does not wait for its workers' interpreters to shut down, but they do exit:
    none is left once the executor has finished with them, and a new pool starts fresh ones."""
    import time

    monkeypatch.setattr(lexical, "PARALLEL_MIN_REPLIES", 10)
    monkeypatch.setattr(lexical, "PARALLEL_MIN_BATCH", 2)
    references, replies = ["the dog walks"] * 30, [f"a dog walks {i}" for i in range(30)]
    with lexical.worker_pool(100, workers=2) as started:
        assert started
        executor = lexical._ACTIVE_POOL.get().executor
        lexical.lexical_values(references, replies, ("bleu",))
        processes = list(executor._processes.values())
    assert lexical._ACTIVE_POOL.get() is None and processes
    deadline = time.monotonic() + 30
    while any(p.is_alive() for p in processes) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(p.is_alive() for p in processes)
    with lexical.worker_pool(100, workers=2):
        assert lexical.lexical_values(references, replies, ("dist1",))["dist1"] == [1.0] * 30


def test_rouge_long_texts_need_no_recursion():
    reply = " ".join(f"w{i % 700}" for i in range(6000))
    r1, r2, rl = lexical.rouge(reply, reply)
    assert r1 == pytest.approx(1.0, abs=1e-7) and rl == pytest.approx(1.0, abs=1e-7)


def test_rouge_of_a_reference_made_without_sentence_types_equals_one_made_with_them():
    """RougeText(..., sentence_types=False) is how replies are made; a reference made that way
    used to raise TypeError (zip over None) instead of scoring."""
    from persobench.core.ngram_kernels import RougeText, rouge_of

    reference, reply = "the cat sat. on a mat", "the cat. a mat"
    assert rouge_of(RougeText(reference, sentence_types=False), RougeText(reply)) == \
        rouge_of(RougeText(reference), RougeText(reply)) == lexical.rouge(reference, reply)


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


def test_batch_metric_lists_come_from_metric_info():
    from persobench.metrics import metric_info, metric_names

    assert lexical.REFERENCE_LEXICAL == ("bleu", "rouge1", "rouge2", "rougeL")
    assert lexical.REPLY_LEXICAL == ("dist1", "dist2")
    family = set(metric_names(family="lexical"))
    assert family == {*lexical.REFERENCE_LEXICAL, *lexical.REPLY_LEXICAL, "idf_overlap"}
    assert all(metric_info(m).needs_reference for m in lexical.REFERENCE_LEXICAL)
    # the batch kernel fills every metric the lists name, one value per reply
    values = lexical.lexical_values(["the cat sat", ""], ["a cat sat down", "hi"],
                                    (*lexical.REFERENCE_LEXICAL, *lexical.REPLY_LEXICAL))
    assert set(values) == {*lexical.REFERENCE_LEXICAL, *lexical.REPLY_LEXICAL}
    assert all(len(v) == 2 for v in values.values()) and values["bleu"][1] is None


# --- IDF overlap: the notebook's tokenization ------------------------------------------------------

def _notebook_preprocess(text: str) -> str:
    """``evaluation.ipynb``'s ``preprocess_text``, with nltk's ``word_tokenize`` as it is (its punkt
    sentence split is skipped: ``preserve_line=True``; the text has no ``.``/``?``/``!`` left)."""
    import string

    from nltk.tokenize import word_tokenize

    text = text.lower().translate(str.maketrans("", "", string.punctuation))
    stops = lexical.stop_words()
    return " ".join(word for word in word_tokenize(text, preserve_line=True) if word not in stops)


def _notebook_idf_overlap(persona: str, reply: str) -> float:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.metrics.pairwise import cosine_similarity

    matrix = TfidfVectorizer().fit_transform([_notebook_preprocess(persona), _notebook_preprocess(reply)])
    return float(cosine_similarity(matrix[0:1], matrix[1:2])[0][0])


def test_idf_overlap_tokenizes_as_the_notebook_does():
    """word_tokenize splits "cannot" into the stop words "can" + "not" and cuts at non-ASCII
    punctuation: "I cannot swim." keeps only "swim", where a whitespace split kept "cannot"."""
    assert lexical.preprocess("I cannot swim.") == "swim" == _notebook_preprocess("I cannot swim.")
    assert lexical.preprocess("I don’t swim, I’m gonna sail") == _notebook_preprocess("I don’t swim, I’m gonna sail")
    persona = "I cannot swim.I love sailing."
    for reply in ("I cannot swim.", "We're gonna sail, I can’t wait!", "Sailing: I love it"):
        assert lexical.idf_overlap(persona, reply) == pytest.approx(_notebook_idf_overlap(persona, reply), abs=1e-12)
    assert "idf_overlap/2" in lexical.idf_overlap_version()  # scores made with the old tokens are recomputed


@pytest.mark.reference
def test_idf_overlap_equals_the_notebook_on_every_published_focus_reply(reference_dir):
    """All 12,895 valid FoCus replies: the tokens equal the notebook's, and on the 252 pairs where a
    whitespace split gave other tokens (up to 0.031 apart), the score equals the notebook's."""
    import pandas as pd

    personas = list(pd.read_csv(reference_dir / "Prompts" / "FoCus.csv", keep_default_na=False)["personas"])
    persona_tokens = [_notebook_preprocess(p) for p in personas]
    assert [lexical.preprocess(p) for p in personas] == persona_tokens
    stops = lexical.stop_words()

    def whitespace(text: str) -> str:  # the former tokenization
        return " ".join(w for w in text.lower().translate(lexical._PUNCT_TABLE).split() if w not in stops)

    valid = changed = 0
    for path in sorted((reference_dir / "Responses" / "FoCus").glob("*.csv")):
        replies = pd.read_csv(path, keep_default_na=False)["gen_response"]
        for row, reply in enumerate(replies):
            if not reply:
                continue
            valid += 1
            ours = lexical.preprocess(reply)
            assert ours == _notebook_preprocess(reply), (path.name, row)
            persona = personas[row]  # the notebook's own row alignment
            old = lexical.tfidf_cosine(whitespace(persona), whitespace(reply))
            new = lexical.tfidf_cosine(persona_tokens[row], ours)
            if abs(old - new) > 1e-12:
                changed += 1
                assert new == pytest.approx(_notebook_idf_overlap(persona, reply), abs=1e-12), (path.name, row)
    assert (valid, changed) == (12895, 252)


# --- The `score` path of the lexical metrics: no repeated work per run ------------------------------

def test_lexical_score_plans_each_run_once_and_hashes_each_sample_once(tmp_path, monkeypatch):
    """Issue 29: a lexical-only ``score`` planned every run twice (once to collect texts to embed,
    of which there are none) and hashed each sample's inputs (JSON + SHA-256) once per plan."""
    import pandas as pd

    from persobench import pipeline, records
    from persobench.datasets import load_dataset
    from persobench.scoring import compute, pass_steps, work_plan
    from persobench.store.run_store import RunManifest, RunStore

    samples = load_dataset("sample", limit=4)
    store = RunStore(tmp_path)
    for k in range(2):
        run = store.create(RunManifest(run_id=f"sample__lex{k}__vanilla__0", dataset="sample",
                                       sample_ids=tuple(s.id for s in samples), model={"label": f"m{k}"},
                                       mode="vanilla", template="t", template_hash="h"))
        run.record_samples(samples)
        rows = [(s.id, "ok", f"{s.reference} and more {k}", 0.5) for s in samples]
        run.write_table("generations", pd.DataFrame(rows, columns=["sample_id", "status", "response", "latency"]))
    planned: list[str] = []
    real_plan = work_plan.plan_run
    counted = lambda run, *a, **k: planned.append(run.run_id) or real_plan(run, *a, **k)  # noqa: E731
    for module in (work_plan, pass_steps, compute):  # every caller of the plan step, wherever it imported it
        monkeypatch.setattr(module, "plan_run", counted)
    dumps: list[int] = []  # records.py serialises only the input hash
    real_json = records.json
    counting = type("CountingJson", (), {"dumps": staticmethod(lambda *a, **k: dumps.append(1) or real_json.dumps(*a, **k))})
    monkeypatch.setattr(records, "json", counting)

    report = pipeline.score(metrics=["bleu", "rouge1", "dist1"], store=store)

    assert sorted(planned) == ["sample__lex0__vanilla__0", "sample__lex1__vanilla__0"]
    assert len(dumps) <= 2 * len(samples)  # one input hash per sample object (each run reads its own)
    for run in store.runs():
        scores = run.read_table("scores")
        assert len(scores) == 3 * len(samples) and scores["basis"].str.len().eq(32).all()
    assert all(r.summary is not None and r.summary.computed["bleu"] == len(samples) for r in report.runs)


def _notebook_row(reference: str, reply: str) -> dict[str, float | None]:
    """One reply as the notebooks scored it: the libraries called on this pair alone."""
    tokens = reply.replace("\n", " ").split()
    row: dict[str, float | None] = {}
    for n in (1, 2):
        grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
        row[f"dist{n}"] = len(set(grams)) / len(grams) if grams else 0.0
    if reference.strip():
        row["bleu"] = _nltk_bleu(reference, reply)
        row["rouge1"], row["rouge2"], row["rougeL"] = _package_rouge(reference, reply)
    else:
        row["bleu"] = row["rouge1"] = row["rouge2"] = row["rougeL"] = None
    return row


def _edge_texts():
    """Texts the fast path must not treat differently: empty, blank, unicode words and whitespace,
    punctuation only, dots everywhere, repeated n-grams (self-overlapping), long repetitions."""
    from hypothesis import strategies as st

    unicode_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60)
    repeated = st.tuples(st.sampled_from(["a", "a a", "a b a", "the cat .", "ça."]),
                         st.integers(1, 30)).map(lambda t: " ".join([t[0]] * t[1]))
    punctuation = st.text(alphabet=".,!?;:'\"()-… \n\t", max_size=30)
    return st.one_of(st.just(""), st.just(" \n "), _texts(), unicode_text, repeated, punctuation)


def test_batch_fast_path_equals_the_notebooks_row_by_row_libraries():
    """The batch kernels (shared reference analyses, n-grams counted once per text, orders counted
    only when needed, ROUGE-L shortcuts) give exactly the libraries' values, reply by reply."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    metrics = ("bleu", "rouge1", "rouge2", "rougeL", "dist1", "dist2")

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(references=st.lists(_edge_texts(), min_size=1, max_size=4),
           rows=st.lists(st.tuples(st.integers(0, 3), _edge_texts()), min_size=1, max_size=12))
    def check(references: list[str], rows: list[tuple[int, str]]) -> None:
        # Several replies per reference, as every model of a dataset answers the same samples.
        pairs = [(references[k % len(references)], reply) for k, reply in rows]
        values = lexical.lexical_values([r for r, _ in pairs], [h for _, h in pairs], metrics, workers=1)
        for i, (reference, reply) in enumerate(pairs):
            expected = _notebook_row(reference, reply)
            assert {m: values[m][i] for m in metrics} == expected, (reference, reply)

    check()
