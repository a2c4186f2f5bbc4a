"""The NLI/UniEval input layout outside the scorer itself: the New run page's judge estimate counts
what scoring will send, ``score --nli-inputs`` chooses the layout, and a run scored against its
default reference says which one and why."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from persobench.cli import main as cli_main
from persobench.errors import ConfigurationError
from persobench.generation.importer import import_persobench, samples_for_run
from persobench.metrics.judge.labeller import make_judge
from persobench.scoring import estimate_new_runs
from persobench.scoring import score_run
from persobench.store.run_store import RunStore
from tests.fakes.fixtures import openai_server  # noqa: F401 - fixture
from tests.fakes.judge import judge_script, pair_of
from tests.test_importer import PROMPTS, _write_csv  # the importer's published folder, FoCus-like

JUDGED = "c_score,p_consistency,ue_score,persona_coverage"


def _published_run(root: Path, home: Path, model: str = "gpt-x"):
    """An imported published run (the paper protocol; PROMPTS: FoCus-like rows, speaker-labelled
    references) whose replies are the label-free references,
    so the estimate's stand-in replies are exactly the replies the judge is sent."""
    _write_csv(root / "Prompts" / "FoCus.csv", PROMPTS, ["personas", "context", "act_response"])
    _write_csv(root / "Responses" / "FoCus" / f"{model}.csv",
               [{"gen_response": row["act_response"].removeprefix("User2: "), "response_time": "1"} for row in PROMPTS],
               ["gen_response", "response_time"])
    store = RunStore(home)
    report = import_persobench(store, root)
    return store, store.get(report.runs[0].run_id)


def _judge_args(home: Path, server, *extra: str) -> list[str]:
    return ["--home", str(home), "score", "--metrics", JUDGED, "--no-progress", "--judge", "openai:judge-model",
            "--judge-base-url", server.base_url, *extra]


def test_the_new_run_estimate_counts_what_a_paper_protocol_judge_pass_sends(openai_server, tmp_path):
    """Under the paper protocol ue_score sends a third input per reply (the notebook layout): the
    estimate for a run not generated yet equals the requests the fake judge server then receives."""
    store, run = _published_run(tmp_path / "published", tmp_path / "home")
    samples = list(samples_for_run(run).values())
    judge = make_judge("openai:judge-model", base_url=openai_server.base_url, cache_dir=str(tmp_path / "estimate"))
    estimate = estimate_new_runs(judge, samples, 1, template=run.manifest.template, mode=run.manifest.mode)
    elsewhere = estimate_new_runs(judge, samples, 1, template="persobench", mode="vanilla")

    openai_server.script = judge_script({}, default="entailment")
    assert cli_main(_judge_args(tmp_path / "home", openai_server)) == 0
    sent = len(openai_server.requests)
    assert sent == estimate.requests == estimate.pairs
    # one more input per reply with a persona and a reference than PersoBench's pairs layout sends
    assert estimate.requests == elsewhere.requests + len(samples)
    assert estimate_new_runs(judge, samples, 3, template=run.manifest.template).requests == 3 * sent


def test_published_runs_record_which_reference_they_were_scored_against_and_why(reference_dir, tmp_path):
    """Scored with no reference given (as ``score`` does), a published FoCus run's provenance names the
    reference datasets/published_references.py recorded for it, not "given by the caller"."""
    folder = tmp_path / "published"
    (folder / "Prompts").mkdir(parents=True)
    (folder / "Responses" / "FoCus").mkdir(parents=True)
    shutil.copy(reference_dir / "Prompts" / "FoCus.csv", folder / "Prompts" / "FoCus.csv")
    for model in ("gpt-3.5-turbo", "gpt-4o-mini"):  # vanilla: recorded raw, and stripped
        shutil.copy(reference_dir / "Responses" / "FoCus" / f"{model}.csv", folder / "Responses" / "FoCus")
    store = RunStore(tmp_path / "home")
    import_persobench(store, folder)
    assert cli_main(["--home", str(tmp_path / "home"), "score", "--metrics", "rouge1,dist1", "--no-progress"]) == 0
    notes = {}
    for run in store.runs():
        metrics = run.manifest.details.profile_scores("offline").metrics
        assert metrics["dist1"].reference is None  # reads no reference
        notes[run.manifest.model["model"]] = metrics["rouge1"].reference
    assert notes["gpt-3.5-turbo"].startswith("published run: the act_response cell as published, speaker label "
                                             "('User2:') kept, per datasets/published_references.py (raw: ")
    assert notes["gpt-4o-mini"].startswith("published run: stripped 'User2:' label, per "
                                           "datasets/published_references.py (stripped: ")
    assert all("given by the caller" not in note for note in notes.values())
    # references a caller passes are still recorded as the caller's
    run = next(r for r in store.runs() if r.manifest.model["model"] == "gpt-4o-mini")
    samples = samples_for_run(run)
    score_run(run, samples, metrics=["rouge2"], references={sid: "A reference." for sid in list(samples)[:2]})
    note = store.get(run.run_id).manifest.details.profile_scores("offline").metrics["rouge2"].reference
    assert note == "given by the caller for 2 sample(s)"


def test_score_nli_inputs_chooses_the_layout_and_boards_keep_the_layouts_apart(openai_server, tmp_path, capsys):
    """``score --nli-inputs pairs`` on a paper-protocol run sends PersoBench's (persona, reply) pairs
    and stores them under the plain judge key; the default (auto) sends the notebook's (reply, personas)
    and stores them under ``+inputs=notebook``: two boards, each with its own numbers."""
    from persobench import aggregate
    from persobench.scoring import ScoreConfig

    home = tmp_path / "home"
    store, run = _published_run(tmp_path / "published", home)
    replies = {row["personas"]: row["act_response"].removeprefix("User2: ") for row in PROMPTS}
    # PersoBench's pair (personas cell, reply) entails; the notebook's (reply, personas cell) contradicts
    openai_server.script = judge_script({pair: "entailment" for pair in replies.items()}, default="contradiction")
    args = ["--home", str(home), "score", "--metrics", "c_score", "--no-progress", "--judge", "openai:judge-model",
            "--judge-base-url", openai_server.base_url]
    # The dry run counts in the chosen layout: ue_score's inputs are 2 per reply as pairs, 3 in the notebook's
    for choice, per_reply in (("pairs", 2), ("auto", 3)):
        dry = [*args[:4], "c_score,ue_score", *args[5:], "--nli-inputs", choice, "--dry-run"]
        assert cli_main(dry) == 0
        assert f"total: {per_reply * len(PROMPTS)} distinct pair(s)" in capsys.readouterr().out
    assert openai_server.requests == []
    assert cli_main([*args, "--nli-inputs", "pairs"]) == 0
    assert {pair_of(r) for r in openai_server.requests} == set(replies.items())
    openai_server.reset_records()
    assert cli_main(args) == 0  # auto: the paper protocol's notebook layout
    assert "NLI/UniEval inputs: auto (runs under the paper protocol: the notebooks' layout, stored under " \
           "offline+inputs=notebook+judge=openai:judge-model@" in capsys.readouterr().out
    assert {pair_of(r) for r in openai_server.requests} == {(reply, cell) for cell, reply in replies.items()}
    capsys.readouterr()

    keys = aggregate.available_profiles(store)
    assert len(keys) == 2
    notebook = next(k for k in keys if "+inputs=notebook" in k)
    pairs = next(k for k in keys if k != notebook)
    assert notebook.startswith("offline+inputs=notebook+judge=") and pairs.startswith("offline+judge=")
    means = {}
    for key in (pairs, notebook):
        board = aggregate.leaderboard(aggregate.load_results(store, profile=key), profile=key)
        assert set(board["profile"]) == {key}
        means[key] = board.loc[board["metric"] == "c_score", "mean"].tolist()
        layout = store.get(run.run_id).manifest.details.profile_scores(key).metrics["c_score"].other["input_layout"]
        assert layout == ("notebook" if key == notebook else "pairs")
    assert means == {pairs: [1.0], notebook: [-1.0]}

    # A job stores the choice; a bad one is one line, before anything is sent.
    config = ScoreConfig(input_layout="pairs")
    assert ScoreConfig.from_dict(config.to_dict(), home=home) == config and config.to_dict()["input_layout"] == "pairs"
    assert config.resolve_profile().input_layout == "pairs" and ScoreConfig().resolve_profile().input_layout == "auto"
    with pytest.raises(ConfigurationError, match="unknown NLI input layout 'sideways'"):
        ScoreConfig.from_dict({"input_layout": "sideways"}, home=home)
    openai_server.reset_records()
    with pytest.raises(SystemExit) as stop:
        cli_main([*args, "--nli-inputs", "sideways"])
    assert stop.value.code == 2 and openai_server.requests == []
