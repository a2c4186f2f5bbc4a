"""NLI and UniEval code paths on tiny models built in code, saved to disk and loaded through the real
loading path (profile override -> from_pretrained), as the hub models would be."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from persobench.metrics import backends, score_samples  # noqa: E402
from persobench.metrics.nli import c_score_of, load_nli, normalise_label, p_consistency_of, ue_score_of  # noqa: E402
from persobench.metrics.unieval import (  # noqa: E402
    DIMENSIONS, load_unieval, question, score_dialog, split_sentences,
)
from tests.fakes.tiny_models import build_tiny_nli, build_tiny_t5  # noqa: E402
from persobench.records import PersonaSet, Sample, Turn  # noqa: E402

pytestmark = pytest.mark.hub_loading


def _nli_model(path, id2label, favoured=None):
    return build_tiny_nli(path, id2label, favoured=favoured)


def _t5_model(path):
    return build_tiny_t5(path)


@pytest.fixture(scope="module")
def nli_dir(tmp_path_factory):
    return _nli_model(tmp_path_factory.mktemp("nli"), {0: "CONTRADICTION", 1: "ENTAILMENT", 2: "NEUTRAL"})


@pytest.fixture(scope="module")
def t5_dir(tmp_path_factory):
    return _t5_model(tmp_path_factory.mktemp("t5"))


def _samples():
    return [
        Sample("t:0", "t", (PersonaSet("User2", ("i love cats.", "i have two dogs.")),),
               (Turn("User1", "do you like pets?"),), "User2", "i love my cats"),
        Sample("t:1", "t", (PersonaSet("User1", ("i am a teacher.",)), PersonaSet("User2", ("i work at school.",))),
               (Turn("User1", "hello"), Turn("User2", "hello what do you do")), "User2", "i am a teacher"),
        Sample("t:2", "t", (), (Turn("User1", "hello"),), "User2", "hello"),
    ]


REPLIES = {"t:0": "i love cats . i have two dogs !", "t:1": "i am a teacher at school", "t:2": "hello you"}


def test_label_names_are_normalised():
    assert normalise_label("ENTAILMENT") == "entailment"
    assert normalise_label("contradiction") == "contradiction"
    assert normalise_label("Neutral") == "neutral"
    assert normalise_label("LABEL_0") is None
    assert [c_score_of(x) for x in ("entailment", "neutral", "contradiction")] == [1, 0, -1]
    assert [p_consistency_of(x) for x in ("entailment", "neutral", "contradiction")] == [1, 1, 0]
    assert ue_score_of("entailment", "entailment") == 2
    assert ue_score_of("entailment", "neutral") == 1
    assert ue_score_of("neutral", "entailment") == 0


@pytest.mark.parametrize("order", [
    {0: "contradiction", 1: "entailment", 2: "neutral"},
    {0: "entailment", 1: "neutral", 2: "contradiction"},
])
@pytest.mark.parametrize("favoured_label", ["entailment", "contradiction"])
def test_labels_are_read_from_config_id2label(tmp_path, order, favoured_label):
    favoured = next(i for i, name in order.items() if name == favoured_label)
    path = _nli_model(tmp_path / "m", order, favoured=favoured)
    result = score_samples(_samples(), REPLIES, metrics=["c_score", "p_consistency", "ue_score"],
                           overrides={"nli": str(path)})
    wide = result.wide()
    expected_c = 1.0 if favoured_label == "entailment" else -1.0
    assert set(wide.index) == {"t:0", "t:1"}  # t:2 has no persona: no persona metric
    assert (wide["c_score"] == expected_c).all()
    assert (wide["p_consistency"] == (1.0 if favoured_label == "entailment" else 0.0)).all()
    assert (wide["ue_score"] == (2.0 if favoured_label == "entailment" else 0.0)).all()
    prov = result.provenance["c_score"]
    assert prov["status"] == "ok" and prov["model_id"] == str(path.resolve())
    assert prov["revision_or_hash"].startswith("sha256:")


def test_non_nli_label_set_is_unavailable_not_guessed(tmp_path):
    path = _nli_model(tmp_path / "bad", {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"})
    result = score_samples(_samples(), REPLIES, metrics=["c_score"], overrides={"nli": str(path)})
    assert result.scores.empty
    assert result.provenance["c_score"]["status"] == "unavailable"
    assert "not a 3-way NLI label set" in result.provenance["c_score"]["reason"]


def test_nli_batched_equals_per_row(nli_dir):
    profile = backends.get_profile("offline", {"nli": str(nli_dir)})
    model = load_nli(profile.spec("nli"), "cpu")
    assert load_nli(profile.spec("nli"), "cpu") is model  # loaded once per process
    pairs = [("i love cats .", "i love my cats"), ("i am a teacher", "hello"),
             ("i have two dogs and i love cats at school", "what do you like"), ("a", "b c d e f g h")] * 3
    batched = model.predict(pairs, batch_size=5)
    for pair, got in zip(pairs, batched):
        single = model.predict([pair], batch_size=1)[0]
        assert got.label == single.label
        for label in ("entailment", "neutral", "contradiction"):
            assert got.probabilities[label] == pytest.approx(single.probabilities[label], abs=1e-5)
        assert sum(got.probabilities.values()) == pytest.approx(1.0, abs=1e-6)


def test_persona_coverage_uses_nli_when_available(nli_dir):
    result = score_samples(_samples(), REPLIES, metrics=["persona_coverage"], overrides={"nli": str(nli_dir)})
    details = result.persona_details
    assert list(details.columns) == ["sample_id", "persona_index", "speaker", "sentence", "nli_label", "similarity"]
    assert len(details) == 4  # 2 + 2 persona sentences (both speakers of t:1)
    assert set(details["nli_label"]) <= {"entailment", "neutral", "contradiction"}
    assert details["similarity"].notna().all()
    for sid, group in details.groupby("sample_id"):  # noqa: B007 - sid is read by query("@sid")
        expected = (group["nli_label"] == "entailment").mean()
        got = result.scores.query("sample_id == @sid and metric == 'persona_coverage'")["value"].iloc[0]
        assert got == pytest.approx(expected)
    assert result.provenance["persona_coverage"]["backend"].startswith("nli-entailment")


def test_persona_coverage_falls_back_to_embedding_similarity_and_says_so():
    result = score_samples(_samples(), REPLIES, metrics=["persona_coverage"])
    prov = result.provenance["persona_coverage"]
    assert prov["status"] == "ok"
    assert prov["backend"].startswith("embedding-similarity>=")
    assert "no NLI model" in prov["reason"]
    assert result.persona_details["nli_label"].isna().all()
    from persobench.metrics.persona import COVERAGE_SIMILARITY_THRESHOLD

    for sid, group in result.persona_details.groupby("sample_id"):  # noqa: B007 - read by query("@sid")
        expected = (group["similarity"] >= COVERAGE_SIMILARITY_THRESHOLD).mean()
        got = result.scores.query("sample_id == @sid and metric == 'persona_coverage'")["value"].iloc[0]
        assert got == pytest.approx(expected)


# --- UniEval -----------------------------------------------------------------------------------------

def test_unieval_question_formats_and_sentence_split():
    assert question("naturalness", "hi") == "question: Is this a natural response in the dialogue? </s> response: hi"
    assert question("groundedness", "r", fact="f").endswith("</s> response: r </s> fact: f")
    assert question("coherence", "r", history="h").endswith("</s> response: r </s> dialogue history: h")
    assert "</s> dialogue history: h </s> fact: f" in question("engagingness", "r", "h", "f")
    assert split_sentences("Hi there. How are you? Great!") == ["Hi there.", "How are you?", "Great!"]
    assert split_sentences("no end") == ["no end"]
    with pytest.raises(ValueError):
        question("fluency", "x")


def test_unieval_score_is_yes_over_yes_plus_no_at_first_decoder_step(t5_dir):
    profile = backends.get_profile("offline", {"unieval": str(t5_dir)})
    model = load_unieval(profile.spec("unieval"), "cpu")
    text = question("naturalness", "i love cats")
    got = model.score([text])[0]
    # By hand: one decoder step from the decoder start token, softmax, P(Yes) / (P(Yes) + P(No)).
    enc = model.tokenizer([text], return_tensors="pt")
    with torch.no_grad():
        logits = model.model(**enc, decoder_input_ids=torch.tensor([[model.model.config.decoder_start_token_id]])).logits
    probs = torch.softmax(logits[0, 0], dim=-1)
    yes, no = probs[model.tokenizer("Yes")["input_ids"][0]], probs[model.tokenizer("No")["input_ids"][0]]
    assert model.tokenizer.convert_ids_to_tokens([model.pos_id, model.neg_id]) == ["Yes", "No"]
    assert got == pytest.approx(float(yes / (yes + no)), abs=1e-6)
    assert 0.0 < got < 1.0


def test_unieval_batched_equals_per_row_and_engagingness_sums_sentences(t5_dir):
    profile = backends.get_profile("offline", {"unieval": str(t5_dir)})
    model = load_unieval(profile.spec("unieval"), "cpu")
    replies = ["i love cats. i have two dogs!", "hello", "i am a teacher at school. yes. no"]
    histories = ["User1: do you like pets?", "User1: hello", "User1: what do you do"]
    facts = ["i love cats.", "", "i am a teacher."]
    batched = score_dialog(model, replies, histories, facts, DIMENSIONS, batch_size=4)
    for i in range(len(replies)):
        single = score_dialog(model, replies[i:i + 1], histories[i:i + 1], facts[i:i + 1], DIMENSIONS, batch_size=1)
        for dim in (*DIMENSIONS, "overall"):
            assert batched[dim][i] == pytest.approx(single[dim][0], abs=1e-5)
    sentences = split_sentences(replies[2])
    per_sentence = model.score([question("engagingness", s, histories[2], facts[2]) for s in sentences])
    assert len(sentences) == 3
    assert batched["engagingness"][2] == pytest.approx(sum(per_sentence), abs=1e-6)
    assert batched["overall"][0] == pytest.approx(sum(batched[d][0] for d in DIMENSIONS) / 5, abs=1e-9)


def test_unieval_metrics_through_score_samples(t5_dir):
    names = ["unieval_coherence", "unieval_groundedness", "unieval_naturalness", "unieval_engagingness",
             "unieval_understandability", "unieval_overall"]
    result = score_samples(_samples(), REPLIES, metrics=names, overrides={"unieval": str(t5_dir)})
    wide = result.wide()
    assert set(wide.columns) == set(names)
    assert math.isnan(wide.loc["t:2", "unieval_groundedness"])  # no persona: no fact to be grounded in
    assert not math.isnan(wide.loc["t:2", "unieval_naturalness"])
    for m in names:
        assert result.provenance[m]["status"] == "ok"
        assert "P(Yes)/(P(Yes)+P(No))" in result.provenance[m]["metric_version"]


def test_offline_profile_reports_nli_and_unieval_unavailable_with_no_number():
    result = score_samples(_samples(), REPLIES, metrics=["c_score", "ue_score", "unieval_overall"])
    assert result.scores.empty
    for metric in ("c_score", "ue_score"):
        assert result.provenance[metric]["status"] == "unavailable"
        assert "needs cross-encoder/nli-deberta-v3-base from the hub" in result.provenance[metric]["reason"]
    assert "needs MingZhong/unieval-dialog from the hub" in result.unavailable()["unieval_overall"]
