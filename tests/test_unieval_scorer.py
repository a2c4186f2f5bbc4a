"""``score --unieval-scorer paper``: the paper's pinned UniEval scorer's slip, reproduced on a tiny
T5 built in code (saved to disk and loaded through the real path, as the hub model would be).

The pinned ``UniEval/metric/scorer.py`` loops ``for i in range(0, len(inputs))`` over windows
``inputs[i:i+8]``, so the k-th score the evaluator reads is input ``k // 8 + k % 8``'s; the notebook
calls it once per 200 rows of the table, on that batch's valid replies. The default (``upstream``)
scores each input once."""

from __future__ import annotations

import csv

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from persobench.cli import main as cli_main  # noqa: E402
from persobench.generation.importer import import_persobench  # noqa: E402
from persobench.metrics import backends, score_samples  # noqa: E402
from persobench.metrics.unieval import (  # noqa: E402
    PAPER_SCORER, paper_row_groups, paper_window_sources,
)
from persobench.records import PersonaSet, Sample, Turn  # noqa: E402
from persobench.scoring.score_config import ScoreConfig  # noqa: E402
from persobench.store.run_store import RunStore  # noqa: E402
from tests.fakes.tiny_models import build_tiny_t5  # noqa: E402

pytestmark = pytest.mark.hub_loading

WORDS = ("i", "love", "cats", "have", "two", "dogs", "am", "a", "teacher", "at", "school", "hello", "you",
         "what", "do", "like", "pets", "yes", "no", "my", "work")


@pytest.fixture(scope="module")
def t5_dir(tmp_path_factory):
    return build_tiny_t5(tmp_path_factory.mktemp("t5"))


def _reply(i: int) -> str:
    """A distinct reply per sample (so every input gets its own score), two sentences every third."""
    words = [WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(3 + i % 5)]
    text = " ".join(words)
    return f"{text}. {WORDS[i % len(WORDS)]} {WORDS[(i + 5) % len(WORDS)]}!" if i % 3 == 0 else text


def _samples(n: int) -> list[Sample]:
    return [Sample(f"t:{i}", "t", (PersonaSet("User2", (f"i love {WORDS[i % len(WORDS)]}.",)),),
                   (Turn("User1", "what do you like?"),), "User2", "i love cats") for i in range(n)]


METRICS = ["unieval_naturalness", "unieval_coherence", "unieval_engagingness", "unieval_groundedness",
           "unieval_understandability", "unieval_overall"]


def test_the_pinned_scorers_windows():
    """Score k comes from input k//8 + k%8 while the windows are full; the last windows are shorter."""
    assert paper_window_sources(20) == [k // 8 + k % 8 for k in range(20)]
    assert paper_window_sources(200)[:32] == list(range(8)) + list(range(1, 9)) + list(range(2, 10)) + list(range(3, 11))
    assert len(set(paper_window_sources(200))) == 32  # a 200-row batch: its first 32 inputs only
    assert paper_window_sources(3) == [0, 1, 2] and paper_window_sources(9) == [0, 1, 2, 3, 4, 5, 6, 7, 1]
    rows = [f"t:{i}" for i in range(450)]
    assert paper_row_groups(["t:3", "t:199", "t:200", "t:430"], rows) == [[0, 1], [2], [3]]


def test_paper_scorer_gives_each_reply_the_slipped_score_and_restarts_every_200_rows(t5_dir):
    """On 24 valid replies spread over two 200-row batches of a 230-row run (rows 0-11 and 200-211;
    the rest invalid), the paper scorer gives the k-th valid reply of a batch what the default gives
    that batch's (k//8 + k%8)-th reply, dimension by dimension (engagingness: its sentences' slipped
    scores summed), and each batch starts its windows again."""
    samples = _samples(230)
    valid = [*range(12), *range(200, 212)]
    replies = {f"t:{i}": _reply(i) for i in valid}
    upstream = score_samples(samples, replies, metrics=METRICS, overrides={"unieval": str(t5_dir)}).wide()
    profile = backends.get_profile("offline", {"unieval": str(t5_dir)})
    from dataclasses import replace

    paper = score_samples(samples, replies, metrics=METRICS, profile=replace(profile, unieval_scorer=PAPER_SCORER))
    assert paper.profile.endswith("+unieval=paper") and upstream.index.size == paper.wide().index.size == 24
    slipped = paper.wide()
    for batch in (valid[:12], valid[12:]):
        ids = [f"t:{i}" for i in batch]
        for k, sid in enumerate(ids):
            source = ids[k // 8 + k % 8]
            for metric in ("unieval_naturalness", "unieval_coherence", "unieval_groundedness"):
                assert slipped.loc[sid, metric] == pytest.approx(upstream.loc[source, metric], abs=1e-6)
    # the slip is real: some replies get another reply's score (row 8 gets row 1's)
    assert slipped.loc["t:8", "unieval_naturalness"] != pytest.approx(upstream.loc["t:8", "unieval_naturalness"], abs=1e-6)
    assert slipped.loc["t:208", "unieval_naturalness"] == pytest.approx(upstream.loc["t:201", "unieval_naturalness"],
                                                                          abs=1e-6)
    # engagingness sums per sentence: sentence-level slip, so a two-sentence reply's value changes too
    assert (slipped["unieval_engagingness"] - upstream["unieval_engagingness"]).abs().max() > 1e-6
    version = paper.provenance["unieval_naturalness"]["metric_version"]
    assert "the paper's pinned scorer" in version
    assert "pinned" not in upstream_version(t5_dir)


def upstream_version(t5_dir) -> str:
    result = score_samples(_samples(1), {"t:0": "hello"}, metrics=["unieval_naturalness"],
                           overrides={"unieval": str(t5_dir)})
    return result.provenance["unieval_naturalness"]["metric_version"]


def _paper_layout(folder, n: int) -> None:
    """A folder in the paper repository's layout: a FoCus-like table of ``n`` rows and one run whose
    every fourth reply is empty (invalid)."""
    (folder / "Prompts").mkdir(parents=True)
    (folder / "Responses" / "FoCus").mkdir(parents=True)
    with open(folder / "Prompts" / "FoCus.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["personas", "context", "act_response"])
        for i in range(n):
            writer.writerow([f"I love {WORDS[i % len(WORDS)]}.I have two dogs.", "User1: what do you like?",
                             "User2: i love cats"])
    with open(folder / "Responses" / "FoCus" / "gpt-4o-mini.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["gen_response", "response_time"])
        for i in range(n):
            writer.writerow(["" if i % 4 == 3 else _reply(i), 1.0])


def test_score_unieval_scorer_paper_through_the_command(t5_dir, tmp_path, capsys):
    """``score --unieval-scorer paper`` stores the slipped values under ``+unieval=paper``, beside the
    default's own; a second ``score`` of either computes nothing again."""
    _paper_layout(tmp_path / "paper", 30)
    home = tmp_path / "home"
    store = RunStore(home)
    import_persobench(store, tmp_path / "paper")
    base = ["--home", str(home), "score", "--model", f"unieval={t5_dir}", "--metrics", "unieval_naturalness",
            "--no-progress"]
    assert cli_main(base) == 0
    assert cli_main([*base, "--unieval-scorer", "paper"]) == 0
    out = capsys.readouterr().out
    assert "+unieval=paper" in out
    run = store.runs()[0]
    scores = run.read_table("scores")
    keys = sorted(set(scores["profile"]))
    assert len(keys) == 2 and keys[1] == keys[0] + "+unieval=paper"
    own = scores[scores["profile"] == keys[0]].set_index("sample_id")["value"]
    slipped = scores[scores["profile"] == keys[1]].set_index("sample_id")["value"]
    valid = [f"focus:{i}" for i in range(30) if i % 4 != 3]
    assert list(slipped.index) == valid
    for k, sid in enumerate(valid):
        assert slipped[sid] == pytest.approx(own[valid[k // 8 + k % 8]], abs=1e-6)
    assert cli_main([*base, "--unieval-scorer", "paper"]) == 0
    assert len(store.get(run.run_id).read_table("scores")) == len(scores)  # nothing scored twice


def test_the_scorer_is_part_of_the_score_config():
    """A job's ``score`` step stores the choice and its child reads it back; an unknown one is refused."""
    from persobench.errors import ConfigurationError

    config = ScoreConfig(unieval_scorer="paper", overrides={"unieval": "/models/unieval"})
    assert config.to_dict()["unieval_scorer"] == "paper"
    assert ScoreConfig.from_dict(config.to_dict(), home=None).unieval_scorer == "paper"
    assert ScoreConfig.from_dict({"profile": "offline"}, home=None).unieval_scorer == "upstream"
    assert ScoreConfig(unieval_scorer="paper").resolve_profile().unieval_scorer == "paper"
    with pytest.raises(ConfigurationError, match="unknown UniEval scorer 'shifted'"):
        ScoreConfig(unieval_scorer="shifted")
    # without a UniEval model the scorer cannot change a value: the offline key stays plain
    assert ScoreConfig(unieval_scorer="paper").resolve_profile().key == "offline"
