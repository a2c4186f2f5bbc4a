"""Leaderboards on a small synthetic store: policies, run-level metrics, overall score, exports, CLI."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from persobench import aggregate
from persobench.aggregate import stats
from persobench.cli import main
from persobench.store.run_store import RunManifest, RunStore, make_run_id
from persobench.core.structured import BOARD_NOTE

IDS = ["focus:0", "focus:1", "focus:2", "focus:3"]


def make_run(store, *, model, statuses, latency, scores, dataset="focus", mode="vanilla", provenance=None,
             profile="offline", extra_profiles=None, tag=""):
    ids = [f"{dataset}:{i}" for i in range(len(statuses))]
    spec = {"provider": "test", "model": model + tag, "label": model}
    run_id = make_run_id(dataset=dataset, model=spec, mode=mode, template_hash="t", sample_ids=ids, parameters={})
    run = store.create(RunManifest(run_id=run_id, dataset=dataset, sample_ids=tuple(ids), model=spec, mode=mode,
                                   template=mode, template_hash="t", status="completed"))
    run.write_table("generations", pd.DataFrame({
        "sample_id": ids, "status": statuses,
        "response": ["r" if s == "ok" else None for s in statuses], "latency": latency,
    }))
    rows = []
    for prof, table in [(profile, scores)] + list((extra_profiles or {}).items()):
        for metric, values in table.items():
            for sid, value, status in zip(ids, values, statuses):
                if status == "ok" and value is not None:
                    rows.append({"sample_id": sid, "metric": metric, "value": float(value), "profile": prof})
    run.write_table("scores", pd.DataFrame(rows))
    prov = {m: {"status": "ok", "reason": "", "model_id": "lexical"} for m in scores}
    prov.update(provenance or {})
    run.update(extra={"scores": {profile: {"metrics": prov}}})
    return run


@pytest.fixture()
def store(tmp_path):
    s = RunStore(tmp_path / "home")
    make_run(s, model="A", statuses=["ok", "ok", "ok", "empty"], latency=[1.0, 2.0, 3.0, 10.0], scores={
        "dist1": [0.5, 1.0, 0.75, None], "c_score": [1, 0, 1, None], "ue_score": [2, 0, 1, None],
        "persona_distance": [0.6, 0.4, 0.5, None], "unieval_groundedness": [0.9, 0.5, 0.7, None],
    }, extra_profiles={"standard": {"dist1": [0.1, 0.1, 0.1, None]}})
    make_run(s, model="B", statuses=["ok"] * 4, latency=[1.0, 1.0, 1.0, 1.0], scores={
        "dist1": [0.2, 0.4, 0.6, 0.8], "c_score": [0, -1, 1, 0], "ue_score": [0, 0, 1, 1],
        "persona_distance": [0.3, 0.3, 0.3, 0.3], "unieval_groundedness": [0.5, 0.5, 0.5, 0.5],
    })
    unavailable = "needs cross-encoder/nli-deberta-v3-base from the hub"
    make_run(s, model="C", mode="cot", statuses=["ok", "invalid_json", "ok", "ok"], latency=[2.0] * 4,
             scores={"dist1": [0.3, None, 0.3, 0.3], "persona_distance": [0.1, None, 0.2, 0.3]},
             provenance={m: {"status": "unavailable", "reason": unavailable, "model_id": ""}
                         for m in ("ue_score", "c_score", "unieval_groundedness")})
    return s


def _row(board, model, metric):
    rows = board[(board["model"] == model) & (board["metric"] == metric)]
    assert len(rows) == 1, (model, metric, rows)
    return rows.iloc[0]


def test_load_results_is_long_and_applies_no_policy(store):
    loaded = aggregate.load_results(store)
    results = loaded.frame
    assert list(results.columns) == aggregate.RESULT_COLUMNS
    a = results[(results["model"] == "A") & (results["metric"] == "dist1")]
    assert len(a) == 4 and a["value"].isna().sum() == 1  # the invalid sample is present, value NaN
    assert a.loc[a["status"] != "ok", "value"].isna().all()
    rt = results[(results["model"] == "A") & (results["metric"] == "response_time")]
    assert sorted(rt["value"]) == [1.0, 2.0, 3.0, 10.0]
    assert set(results["profile"]) == {"offline"}
    assert loaded.profile == "offline" and loaded.skipped_runs == ()
    assert {r["metric"] for r in loaded.metric_status if r["status"] == "unavailable"} == {
        "ue_score", "c_score", "unieval_groundedness"}


def test_worst_and_exclude_policies_differ_as_the_paper_says(store):
    results = aggregate.load_results(store)
    worst = aggregate.leaderboard(results, invalid="worst")
    exclude = aggregate.leaderboard(results, invalid="exclude")
    w, e = _row(worst, "A", "dist1"), _row(exclude, "A", "dist1")
    assert (w["mean"], w["n"]) == (pytest.approx((0.5 + 1.0 + 0.75 + 0.0) / 4), 4)
    assert w["std"] == pytest.approx(np.std([0.5, 1.0, 0.75, 0.0]))  # population std
    assert (e["mean"], e["n"]) == (pytest.approx(0.75), 3)
    assert e["std"] == pytest.approx(np.std([0.5, 1.0, 0.75]))
    # c_score's worst value is -1, not 0.
    assert _row(worst, "A", "c_score")["mean"] == pytest.approx((1 + 0 + 1 - 1) / 4)
    assert _row(exclude, "A", "c_score")["mean"] == pytest.approx(2 / 3)
    # Response time counts every sample whatever the policy.
    for board in (worst, exclude):
        rt = _row(board, "A", "response_time")
        assert (rt["mean"], rt["n"]) == (pytest.approx(4.0), 4)
    assert set(worst["invalid"]) == {"worst"} and set(exclude["invalid"]) == {"exclude"}
    ci = _row(worst, "B", "dist1")
    assert ci["ci_low"] <= ci["mean"] <= ci["ci_high"]
    with pytest.raises(ValueError, match="policy"):
        aggregate.leaderboard(results, invalid="drop")


def test_failure_ratio_and_instructability(store):
    board = aggregate.leaderboard(aggregate.load_results(store))
    assert _row(board, "A", "failure_ratio")["mean"] == pytest.approx(0.25)
    assert _row(board, "B", "failure_ratio")["mean"] == 0.0
    # (max failure - failure) / max failure among models of the same dataset and mode.
    assert _row(board, "A", "instructability")["mean"] == pytest.approx(0.0)
    assert _row(board, "B", "instructability")["mean"] == pytest.approx(1.0)
    # C is alone in its mode: it is its own worst.
    assert _row(board, "C", "instructability")["mean"] == pytest.approx(0.0)
    lo, hi = _row(board, "A", "failure_ratio")[["ci_low", "ci_high"]]
    assert lo < 0.25 < hi


def test_overall_score_both_variants_and_rank(store):
    board = aggregate.leaderboard(aggregate.load_results(store))
    table = aggregate.overall_table(board).set_index("model")
    ue, pd_, ug, c, ins = (3 / 4, 1.5 / 4, 2.1 / 4, 1 / 4, 0.0)  # model A, worst policy
    assert table.loc["A", "overall"] == pytest.approx(np.mean([100 * ue, 100 * pd_, 100 * ug, 100 * c, 100 * ins]))
    assert table.loc["A", "overall_paper"] == pytest.approx(np.mean([100 * ue, 100 * pd_, 100 * ug, 100 * c, ins]))
    b = [0.5, 0.3, 0.5, 0.0, 1.0]
    assert table.loc["B", "overall"] == pytest.approx(100 * np.mean(b))
    assert table.loc["B", "overall_paper"] == pytest.approx(np.mean([100 * v for v in b[:4]] + [1.0]))
    # B: 46 vs A: 37.5 corrected; the paper's variant nearly ignores instructability: A wins there.
    assert (table.loc["B", "rank"], table.loc["A", "rank"]) == (1, 2)
    assert (table.loc["A", "rank_paper"], table.loc["B", "rank_paper"]) == (1, 2)
    # Unavailable components: no number, and the reason names them and why.
    assert math.isnan(table.loc["C", "overall"]) and pd.isna(table.loc["C", "rank"])
    assert "ue_score (needs cross-encoder/nli-deberta-v3-base" in table.loc["C", "reason"]
    assert table.loc["A", "reason"] == ""
    unavailable = board[(board["model"] == "C") & (board["status"] == "unavailable")]
    assert set(unavailable["metric"]) == {"ue_score", "c_score", "unieval_groundedness"}
    assert (unavailable["n"] == 0).all() and unavailable["mean"].isna().all()


def test_radar_aspects(store):
    board = aggregate.leaderboard(aggregate.load_results(store))
    radar = aggregate.radar_aspects(board).set_index("model")
    assert list(radar.columns[-6:]) == list(aggregate.RADAR_ASPECTS)
    assert radar.loc["A", "persona_consistency"] == pytest.approx(0.25)
    assert radar.loc["A", "diversity"] != radar.loc["A", "diversity"]  # dist2 not scored: NaN
    normalized = aggregate.radar_aspects(board, normalize=True).set_index("model")
    assert normalized.loc["A", "persona_consistency"] == pytest.approx((0.25 + 1) / 2)
    assert normalized.loc["A", "coherence"] == pytest.approx(0.75 / 2)


def test_profiles_are_never_mixed(store):
    standard = aggregate.load_results(store, profile="standard")
    board = aggregate.leaderboard(standard, profile="standard")
    assert set(board["profile"]) == {"standard"}
    assert _row(board, "A", "dist1")["mean"] == pytest.approx(0.1 * 3 / 4)
    assert "c_score" not in set(board[board["model"] == "A"]["metric"])
    offline = aggregate.leaderboard(aggregate.load_results(store))
    assert _row(offline, "A", "dist1")["mean"] == pytest.approx(0.5625)
    assert aggregate.available_profiles(store) == ["offline"]


def test_compare_models_matches_scipy_and_applies_the_policy(store):
    results = aggregate.load_results(store)
    a_id = results.frame.loc[results.frame["model"] == "A", "run_id"].iloc[0]
    b_id = results.frame.loc[results.frame["model"] == "B", "run_id"].iloc[0]
    worst = aggregate.compare_models(results, a_id, b_id, "dist1")
    a, b = np.array([0.5, 1.0, 0.75, 0.0]), np.array([0.2, 0.4, 0.6, 0.8])
    assert worst.n == 4
    assert worst.t_statistic == pytest.approx(sps.ttest_rel(a, b).statistic)
    assert worst.wilcoxon_pvalue == pytest.approx(sps.wilcoxon(a, b).pvalue)
    assert (worst.wins, worst.losses) == (3, 1)
    excluded = aggregate.compare_models(results, a_id, b_id, "dist1", invalid="exclude")
    assert excluded.n == 3
    rt = aggregate.compare_models(results, a_id, b_id, "response_time")
    assert rt.higher_is_better is False and rt.wins == 0 and rt.losses == 3
    with pytest.raises(ValueError, match="run-level"):
        aggregate.compare_models(results, a_id, b_id, "instructability")
    with pytest.raises(ValueError, match="no results"):
        aggregate.compare_models(results, "nope", b_id, "dist1")


def test_duplicate_model_labels_get_distinct_names(store):
    make_run(store, model="A", statuses=["ok"] * 4, latency=[1.0] * 4, scores={"dist1": [1, 1, 1, 1]}, tag="-v2")
    results = aggregate.load_results(store).frame
    names = sorted(results[(results["dataset"] == "focus") & (results["mode"] == "vanilla")]["model"].unique())
    assert len(names) == 3 and names[2] == "B" and all(n.startswith("A [") for n in names[:2])


def test_csv_export_has_exactly_the_long_columns(store):
    board = aggregate.leaderboard(aggregate.load_results(store))
    text = aggregate.export_board(board, "csv")
    # the original long columns first; rank, CI and profile added after them (issue 37)
    assert text.splitlines()[0].startswith("dataset,mode,protocol,model,metric,mean,std,n,")
    back = pd.read_csv(io.StringIO(text))
    assert list(back.columns) == aggregate.CSV_COLUMNS
    row = back[(back["model"] == "A") & (back["metric"] == "dist1")].iloc[0]
    assert row["mean"] == _row(board, "A", "dist1")["mean"]  # unrounded numbers
    assert "ue_score" not in set(back[back["model"] == "C"]["metric"])  # unavailable: no row


def test_display_exports(store):
    board = aggregate.leaderboard(aggregate.load_results(store))
    md = aggregate.export_board(board, "markdown")
    assert "| model | n |" in md and "0.56 ± 0.37" in md
    assert "focus · protocol persobench · vanilla · ? tokens · T=? · policy robust · profile offline" in md
    assert "overall: n/a, missing ue_score" in md
    latex = aggregate.export_board(board, "latex")
    assert r"\begin{tabular}" in latex and r"failure\_ratio" in latex and r"$\pm$" in latex
    table = aggregate.export_board(board, "table")
    assert "failure_ratio" in table and "0.250" in table
    payload = json.loads(aggregate.export_board(board, "json"))
    assert payload["profiles"] == ["offline"]
    assert payload["protocols"] == ["persobench · cot · ? tokens · T=? · policy robust",
                                    "persobench · vanilla · ? tokens · T=? · policy robust"]
    failure = [r for r in payload["metrics"] if r["metric"] == "failure_ratio" and r["model"] == "A"][0]
    assert failure["std"] is None and failure["mean"] == 0.25  # NaN -> null, numbers stay numbers
    assert {r["model"] for r in payload["overall"]} == {"A", "B", "C"}
    with pytest.raises(ValueError, match="unknown format"):
        aggregate.export_board(board, "xlsx")


def test_cli_leaderboard(store, capsys):
    home = str(store.home)
    assert main(["--home", home, "leaderboard", "--format", "csv"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == ",".join(aggregate.CSV_COLUMNS)
    assert main(["--home", home, "leaderboard", "--format", "csv", "--invalid", "exclude", "--mode", "vanilla"]) == 0
    exclude = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert set(exclude["mode"]) == {"vanilla"}
    assert exclude[(exclude["model"] == "A") & (exclude["metric"] == "dist1")]["n"].iloc[0] == 3
    assert main(["--home", home, "leaderboard", "--dataset", "nope"]) == 2
    assert "no runs" in capsys.readouterr().err
    assert main(["--home", home, "leaderboard"]) == 0
    assert "profile offline" in capsys.readouterr().out
    results = aggregate.load_results(store)
    a_id = results.frame.loc[results.frame["model"] == "A", "run_id"].iloc[0]
    b_id = results.frame.loc[results.frame["model"] == "B", "run_id"].iloc[0]
    assert main(["--home", home, "compare", a_id, b_id, "--metric", "dist1", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["n"] == 4


def test_cli_leaderboard_on_an_empty_store(tmp_path, capsys):
    assert main(["--home", str(tmp_path / "empty"), "leaderboard"]) == 2
    assert "no completed runs" in capsys.readouterr().err


def test_a_run_whose_every_reply_failed_scores_worst_not_missing(tmp_path):
    store = RunStore(tmp_path / "home")
    make_run(store, model="Dead", statuses=["truncated", "empty", "invalid_json"], latency=[1.0, 1.0, 1.0],
             scores={"dist1": [None] * 3, "c_score": [None] * 3})
    worst = aggregate.leaderboard(aggregate.load_results(store), invalid="worst")
    assert _row(worst, "Dead", "dist1")["mean"] == 0.0 and _row(worst, "Dead", "dist1")["n"] == 3
    assert _row(worst, "Dead", "c_score")["mean"] == -1.0
    assert _row(worst, "Dead", "failure_ratio")["mean"] == 1.0
    exclude = aggregate.leaderboard(aggregate.load_results(store), invalid="exclude")
    row = exclude[(exclude["model"] == "Dead") & (exclude["metric"] == "dist1")]
    assert row.empty or row.iloc[0]["n"] == 0


# --- comparable boards --------------------------------------------------------------------------

def make_protocol_run(store, *, model, ids, template="paper", policy="paper", max_tokens=110, temperature=0.0,
                      source="generated", dist1=0.5, status="ok", structured=False, chat_template=None):
    """A completed focus/vanilla run over ``ids`` under the given protocol settings."""
    spec = {"provider": "test", "model": model, "label": model}
    parameters = {"temperature": temperature, "max_tokens": max_tokens, "policy": policy}
    if structured:
        parameters["structured"] = True
    run_id = make_run_id(dataset="focus", model=spec, mode="vanilla", template_hash=template, sample_ids=ids,
                         parameters=parameters)
    run = store.create(RunManifest(run_id=run_id, dataset="focus", sample_ids=tuple(ids), model=spec, mode="vanilla",
                                   template=template, template_hash=template, parameters=parameters,
                                   status="completed", source=source, chat_template=chat_template))
    run.write_table("generations", pd.DataFrame({"sample_id": ids, "status": [status] * len(ids),
                                                 "response": ["r"] * len(ids), "latency": [1.0] * len(ids)}))
    values = dist1 if isinstance(dist1, list) else [dist1] * len(ids)
    run.write_table("scores", pd.DataFrame({"sample_id": ids, "metric": "dist1", "value": values,
                                            "profile": "offline"}))
    run.update(extra={"scores": {"offline": {"metrics": {"dist1": {"status": "ok", "model_id": "lexical"}}}}})
    return run


ALL = [f"focus:{i}" for i in range(10)]
PAPER_LABEL = "paper · vanilla · 110 tokens · T=0 · policy paper"


def test_boards_never_mix_protocols(tmp_path):
    store = RunStore(tmp_path / "home")
    make_protocol_run(store, model="gpt-4o-mini", ids=ALL, source="imported", template="paper-vanilla",
                      dist1=0.9, status="empty")
    make_protocol_run(store, model="Gemma-7B-Instruct", ids=ALL, source="imported", template="paper-open")
    # a new paper-protocol run: paper-open as raw text, as a local model or a completions endpoint gets it
    make_protocol_run(store, model="mine", ids=ALL, template="paper-open", chat_template=False)
    # paper-open wrapped in a chat template (local --chat-template on): never on the paper board
    make_protocol_run(store, model="wrapped", ids=ALL, template="paper-open", chat_template=True)
    make_protocol_run(store, model="hot", ids=ALL, temperature=0.7)
    make_protocol_run(store, model="ours", ids=ALL, template="persobench", policy="robust")
    board = aggregate.leaderboard(aggregate.load_results(store))
    boards = {b: set(g["model"]) for b, g in board.groupby("board")}
    assert boards == {
        PAPER_LABEL: {"gpt-4o-mini", "Gemma-7B-Instruct", "mine"},
        PAPER_LABEL + " · chat template": {"wrapped"},
        "paper · vanilla · 110 tokens · T=0.7 · policy paper": {"hot"},
        "persobench · vanilla · 110 tokens · T=0 · policy robust": {"ours"},
    }
    # instructability and ranks are relative to the board's own runs only
    ins = board[board["metric"] == "instructability"].set_index("model")["mean"]
    assert ins["hot"] == 1.0 and ins["gpt-4o-mini"] == 0.0 and ins["mine"] == 1.0
    text = aggregate.export_board(board, "table")
    assert text.count("== focus · protocol ") == 4 and f"== focus · protocol {PAPER_LABEL} · profile offline" in text
    csv_rows = pd.read_csv(io.StringIO(aggregate.export_board(board, "csv")))
    assert list(csv_rows.columns) == aggregate.CSV_COLUMNS
    # csv names each row's protocol, as the markdown header and the json rows do
    assert dict(zip(csv_rows["model"], csv_rows["protocol"]))["hot"] == "paper · vanilla · 110 tokens · T=0.7 · policy paper"
    assert set(csv_rows.loc[csv_rows["model"] == "ours", "protocol"]) == {
        "persobench · vanilla · 110 tokens · T=0 · policy robust"}
    payload = json.loads(aggregate.export_board(board, "json"))
    wrapped = [r for r in payload["metrics"] if r["model"] == "wrapped" and r["metric"] == "dist1"][0]
    assert (wrapped["protocol_name"], wrapped["protocol_chat_template"]) == ("paper", True)
    hot = [r for r in payload["metrics"] if r["model"] == "hot" and r["metric"] == "dist1"][0]
    assert hot["protocol_chat_template"] is None
    assert (hot["protocol_name"], hot["protocol_max_tokens"], hot["protocol_temperature"], hot["protocol_policy"],
            hot["protocol_structured"]) == ("paper", 110, 0.7, "paper", False)


def test_side_by_side_only_when_asked_with_the_protocol_in_the_label(tmp_path):
    store = RunStore(tmp_path / "home")
    make_protocol_run(store, model="m", ids=ALL)
    make_protocol_run(store, model="m", ids=ALL, temperature=0.7)
    board = aggregate.leaderboard(aggregate.load_results(store), side_by_side=True)
    assert set(board["board"]) == {aggregate.SIDE_BY_SIDE}
    labels = sorted(set(board["model"]))
    assert len(labels) == 2 and all("(paper · vanilla · 110 tokens · T=" in label for label in labels)
    assert "protocols side by side" in aggregate.export_board(board, "markdown")
    assert main(["--home", str(store.home), "leaderboard", "--side-by-side"]) == 0


def test_structured_runs_are_labelled_and_the_board_says_instructability_is_not_measured(tmp_path, capsys):
    store = RunStore(tmp_path / "home")
    make_protocol_run(store, model="local:smollm2", ids=ALL, template="persobench", policy="robust", status="truncated")
    make_protocol_run(store, model="local:smollm2", ids=ALL, template="persobench", policy="robust", structured=True)
    board = aggregate.leaderboard(aggregate.load_results(store))
    assert set(board["model"]) == {"local:smollm2", "local:smollm2 +structured"}
    structured_board = board[board["model"] == "local:smollm2 +structured"]
    assert aggregate.structured_note(structured_board) == BOARD_NOTE
    assert aggregate.structured_note(board[board["model"] == "local:smollm2"]) is None
    text = aggregate.export_board(board, "table")
    plain_block, structured_block = text.split("\n\n")
    assert "structured" not in plain_block and "not measured" not in plain_block
    assert "policy robust · structured" in structured_block and BOARD_NOTE in structured_block
    assert "local:smollm2 +structured" in structured_block
    assert BOARD_NOTE in aggregate.export_board(board, "markdown")
    home = str(store.home)
    assert main(["--home", home, "leaderboard", "--format", "csv"]) == 0
    captured = capsys.readouterr()
    rows = pd.read_csv(io.StringIO(captured.out))
    assert set(rows["model"]) == {"local:smollm2", "local:smollm2 +structured"}
    assert f"note: {BOARD_NOTE}" in captured.err
    assert main(["--home", home, "leaderboard", "--side-by-side"]) == 0
    out = capsys.readouterr().out
    assert "local:smollm2 +structured (persobench · vanilla · 110 tokens · T=0 · policy robust · structured)" in out
    assert BOARD_NOTE in out
    plain_only = RunStore(tmp_path / "plain")
    make_protocol_run(plain_only, model="local:smollm2", ids=ALL)
    assert main(["--home", str(plain_only.home), "leaderboard"]) == 0
    assert "not measured" not in capsys.readouterr().out


def test_runs_over_different_sample_sets_compare_on_common_ids(tmp_path, capsys):
    store = RunStore(tmp_path / "home")
    few = ALL[:3]
    make_protocol_run(store, model="small", ids=few, dist1=[1.0, 1.0, 1.0])
    make_protocol_run(store, model="big", ids=ALL, dist1=[0.0, 0.0, 0.0] + [1.0] * 7)
    results = aggregate.load_results(store)
    board = aggregate.leaderboard(results).set_index(["model", "metric"])
    assert board.loc[("big", "dist1"), "mean"] == 0.0 and board.loc[("big", "dist1"), "n"] == 3
    assert board.loc[("big", "dist1"), "run_n"] == 10 and board.loc[("small", "dist1"), "run_n"] == 3
    md = aggregate.export_board(aggregate.leaderboard(results), "markdown")
    assert "compared on the 3 sample ids common to all 2 runs (runs have 3, 10 samples" in md
    everything = aggregate.leaderboard(results, all_samples=True).set_index(["model", "metric"])
    assert everything.loc[("big", "dist1"), "mean"] == pytest.approx(0.7) and everything.loc[("big", "dist1"), "n"] == 10
    assert main(["--home", str(store.home), "leaderboard", "--all-samples", "--format", "csv"]) == 0
    rows = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert rows[(rows["model"] == "big") & (rows["metric"] == "dist1")]["n"].iloc[0] == 10
    assert main(["--home", str(store.home), "leaderboard"]) == 0
    assert "common to all 2 runs" in capsys.readouterr().out


def test_runs_sharing_no_sample_are_each_over_their_own(tmp_path):
    store = RunStore(tmp_path / "home")
    make_protocol_run(store, model="a", ids=ALL[:3])
    make_protocol_run(store, model="b", ids=ALL[3:])
    board = aggregate.leaderboard(aggregate.load_results(store))
    assert board.set_index(["model", "metric"]).loc[("b", "dist1"), "n"] == 7
    assert "share no sample id" in aggregate.export_board(board, "table")


def test_a_board_whose_runs_share_no_sample_says_so_in_header_cli_and_which_runs_share_which(tmp_path, capsys):
    """A --limit 3 run beside two 7-sample runs of other ids: the board falls back to each run's own
    samples; the header, the CLI's csv/json warning and the note say so and group the runs by sample set."""
    store = RunStore(tmp_path / "home")
    make_protocol_run(store, model="a", ids=ALL[:3])
    make_protocol_run(store, model="b", ids=ALL[3:])
    make_protocol_run(store, model="c", ids=ALL[3:], dist1=0.6)
    board = aggregate.leaderboard(aggregate.load_results(store))
    sets = board.drop_duplicates("model").set_index("model")["sample_set"]
    assert sets["b"] == sets["c"] == "S1" and sets["a"] == "S2"
    note = aggregate.sample_set_note(board)
    assert note.startswith("warning: the 3 runs share no sample id")
    assert "S1 = 7 samples: b, c; S2 = 3 samples: a" in note
    text = aggregate.export_board(board, "table")
    assert f"== focus · protocol {PAPER_LABEL} · profile offline · invalid replies scored worst (paper) · " \
           "runs share no sample id ==" in text
    assert "S1 = 7 samples: b, c" in text and "sample ids common to all" not in text
    assert "runs share no sample id" in aggregate.export_board(board, "markdown").splitlines()[0]
    for fmt in ("csv", "json"):
        assert main(["--home", str(store.home), "leaderboard", "--format", fmt]) == 0
        err = capsys.readouterr().err
        assert f"warning: focus · vanilla · protocol {PAPER_LABEL}: the 3 runs share no sample id" in err
        assert "S2 = 3 samples: a" in err
    # runs that share samples get no set label and no warning
    common = RunStore(tmp_path / "common")
    make_protocol_run(common, model="a", ids=ALL[:5])
    make_protocol_run(common, model="b", ids=ALL)
    shared = aggregate.leaderboard(aggregate.load_results(common))
    assert set(shared["sample_set"]) == {""} and aggregate.sample_set_note(shared) is None


# ---- ranking with ties (moved from the app) -----------------------------------------------------


def test_rank_with_ties_shares_ranks_when_intervals_overlap():
    frame = pd.DataFrame({
        "model": ["a", "b", "c", "d"],
        "v": [0.90, 0.88, 0.50, math.nan],
        "lo": [0.85, 0.80, 0.45, math.nan],
        "hi": [0.95, 0.92, 0.55, math.nan],
    })
    ranked = aggregate.rank_with_ties(frame, "v", "lo", "hi", higher_is_better=True)
    assert list(ranked["model"]) == ["a", "b", "c", "d"]
    assert list(ranked["rank"]) == ["1=", "1=", "3", "–"]
    assert ranked.loc[0, "overlaps"] == "b" and ranked.loc[2, "overlaps"] == ""


def test_rank_with_ties_lower_is_better():
    frame = pd.DataFrame({"model": ["fast", "slow"], "v": [1.0, 5.0], "lo": [0.9, 4.0], "hi": [1.1, 6.0]})
    ranked = aggregate.rank_with_ties(frame, "v", "lo", "hi", higher_is_better=False)
    assert list(ranked["model"]) == ["fast", "slow"] and list(ranked["rank"]) == ["1", "2"]




# ---- the statistics the app shows: one implementation each, checked against hand computations ----


def test_score_invalid_is_the_one_worst_value_rule():
    values, ok = [0.5, np.nan, 0.25], [True, False, True]
    assert list(aggregate.score_invalid(values, ok, "dist1", "worst")) == [0.5, 0.0, 0.25]
    assert aggregate.score_invalid(values, ok, "c_score", "worst")[1] == -1.0  # the paper's worst C score
    excluded = aggregate.score_invalid([0.5, 0.7, 0.25], ok, "dist1", "exclude")
    assert excluded[0] == 0.5 and math.isnan(excluded[1])
    # Latency counts for every attempt, whatever the status or policy.
    assert list(aggregate.score_invalid([1.0, 9.0], [True, False], "response_time", "worst")) == [1.0, 9.0]
    # A metric without a worst value leaves invalid replies out even under "worst".
    assert math.isnan(aggregate.score_invalid([1.0, 2.0], [True, False], "no_such_metric", "worst")[1])
    original = np.array([0.5, 0.7])
    aggregate.score_invalid(original, [False, False], "dist1", "worst")
    assert list(original) == [0.5, 0.7], "the input is not modified"
    with pytest.raises(ValueError, match="invalid-reply policy"):
        aggregate.score_invalid(values, ok, "dist1", "drop")


def test_overall_with_ci_matches_a_hand_computed_composite(store):
    results = aggregate.load_results(store)
    table = aggregate.overall_with_ci(results, dataset="focus", mode="vanilla", invalid="worst")
    a = table[table["model"] == "A"].iloc[0]
    # A: instructability 0 (it has the most failures); per sample (ue, pd, ug, c) x100 and the invalid
    # fourth reply at the worst values (0, 0, 0, -1): composites 90, 18, 64, -20.
    composite = np.array([(200 + 60 + 90 + 100) / 5, (0 + 40 + 50 + 0) / 5, (100 + 50 + 70 + 100) / 5, -100 / 5])
    assert a["overall"] == pytest.approx(38.0) == pytest.approx(composite.mean())
    low, high = a["overall_ci_low"], a["overall_ci_high"]
    assert (low, high) == pytest.approx(stats.bootstrap_ci(composite))
    assert composite.min() <= low < a["overall"] < high <= composite.max()
    b = table[table["model"] == "B"].iloc[0]  # instructability 1: +100/5 on every sample
    composite_b = np.array([(0 + 30 + 50 + 0 + 100) / 5, (0 + 30 + 50 - 100 + 100) / 5,
                            (100 + 30 + 50 + 100 + 100) / 5, (100 + 30 + 50 + 0 + 100) / 5])
    assert b["overall"] == pytest.approx(composite_b.mean())
    assert (b["overall_paper_ci_low"], b["overall_paper_ci_high"]) == pytest.approx(
        stats.bootstrap_ci(composite_b - 100 / 5 + 1 / 5))
    offline_only = aggregate.overall_with_ci(results, dataset="focus", mode="cot")
    assert offline_only["overall"].isna().all() and offline_only["overall_ci_low"].isna().all()


def test_model_ranking_by_a_metric_and_by_overall(store):
    results = aggregate.load_results(store)
    board = aggregate.leaderboard(results, dataset="focus", mode="vanilla")
    overall = aggregate.overall_with_ci(results, dataset="focus", mode="vanilla", board=board)
    by_dist = aggregate.model_ranking(board, overall, "dist1")
    # dist1 means with the worst rule: A (0.5 + 1 + 0.75 + 0) / 4 = 0.5625, B 0.5; their CIs overlap.
    assert list(by_dist["model"]) == ["A", "B"]
    assert list(by_dist["value"]) == pytest.approx([0.5625, 0.5])
    assert list(by_dist["rank"]) == ["1=", "1="] and by_dist.loc[0, "overlaps"] == "B"
    assert list(by_dist["failure_ratio"]) == pytest.approx([0.25, 0.0]) and list(by_dist["n"]) == [4, 4]
    by_overall = aggregate.model_ranking(board, overall, "overall")
    assert list(by_overall["model"]) == ["B", "A"], "B: 46 against A: 38"
    assert by_overall.loc[0, "value"] == pytest.approx(overall.set_index("model").loc["B", "overall"])
    faster = aggregate.model_ranking(board, overall, "response_time")  # lower is better
    assert list(faster["model"]) == ["B", "A"]


def test_sample_and_paired_values_apply_the_policy(store):
    results = aggregate.load_results(store)
    worst = aggregate.sample_values(results, dataset="focus", mode="vanilla", metric="c_score", invalid="worst")
    assert sorted(worst.loc[worst["model"] == "A", "value"]) == [-1.0, 0.0, 1.0, 1.0]
    excluded = aggregate.sample_values(results, dataset="focus", mode="vanilla", metric="c_score", invalid="exclude")
    assert sorted(excluded.loc[excluded["model"] == "A", "value"]) == [0.0, 1.0, 1.0]
    runs = results.frame.drop_duplicates("model").set_index("model")["run_id"]
    pairs = aggregate.paired_values(results, runs["A"], runs["B"], "dist1", invalid="worst")
    assert list(pairs["sample_id"]) == IDS
    assert list(pairs["difference"]) == pytest.approx([0.3, 0.6, 0.15, -0.8])
    assert len(aggregate.paired_values(results, runs["A"], runs["B"], "dist1", invalid="exclude")) == 3
    failures = aggregate.paired_values(results, runs["A"], runs["B"], "failure_ratio")
    assert list(failures["A"]) == [0, 0, 0, 1] and list(failures["B"]) == [0, 0, 0, 0]
    with pytest.raises(ValueError, match="no results for run"):
        aggregate.paired_values(results, "nope", runs["B"], "dist1")


def test_comparison_table_rows_and_skips(store):
    results = aggregate.load_results(store)
    runs = results.frame.drop_duplicates("model").set_index("model")["run_id"]
    table, skipped = aggregate.comparison_table(results, runs["A"], runs["B"],
                                                ["dist1", "instructability", "bleu", "failure_ratio"])
    assert list(table.columns) == aggregate.COMPARISON_COLUMNS
    assert list(table["metric"]) == ["dist1", "failure_ratio"]
    dist1 = table.iloc[0]
    assert (dist1["n"], dist1["mean A"], dist1["mean B"]) == (4, pytest.approx(0.5625), pytest.approx(0.5))
    assert (dist1["A wins"], dist1["ties"], dist1["B wins"]) == (3, 0, 1)
    assert dist1["t-test p"] == pytest.approx(sps.ttest_rel([0.5, 1.0, 0.75, 0.0], [0.2, 0.4, 0.6, 0.8]).pvalue)
    assert dict(skipped).keys() == {"instructability", "bleu"}
    assert "run-level" in dict(skipped)["instructability"]


def test_comparison_table_equals_each_metrics_own_comparison(store):
    """The table takes each run's rows once for all its metrics: every row is the one
    ``compare_models`` gives alone, and a missing run is still each metric's skip, naming the runs."""
    results = aggregate.load_results(store)
    runs = results.frame.drop_duplicates("model").set_index("model")["run_id"]
    metrics = ["dist1", "dist2", "failure_ratio"]
    table, skipped = aggregate.comparison_table(results, runs["B"], runs["A"], metrics, invalid="exclude")
    assert [m for m, _ in skipped] == ["dist2"] and list(table["metric"]) == ["dist1", "failure_ratio"]
    for row in table.itertuples(index=False):
        alone = aggregate.compare_models(results, runs["B"], runs["A"], row[0], invalid="exclude")
        assert (row[1], row[2], row[3], row[5], row[6], row[7]) == (
            alone.n, alone.mean_a, alone.mean_b, alone.ci_low, alone.ci_high, alone.t_pvalue)
    table, skipped = aggregate.comparison_table(results, runs["A"], "nope", ["dist1", "failure_ratio"])
    assert table.empty and [m for m, _ in skipped] == ["dist1", "failure_ratio"]
    assert all("no results for run 'nope'" in why and runs["A"] in why for _, why in skipped)


def test_load_metric_status_of_every_profile(store):
    status = aggregate.load_metric_status(store, profile=None)
    assert list(status.columns) == aggregate.METRIC_STATUS_COLUMNS
    assert set(status["profile"]) == {"offline"}
    c = status[(status["metric"] == "ue_score") & (status["status"] == "unavailable")]
    assert len(c) == 1 and "nli-deberta" in c.iloc[0]["reason"]
    one = aggregate.load_metric_status(store)
    assert len(one) == len(status)


def test_sample_values_are_the_boards_samples_unless_all_samples(tmp_path):
    """The distributions use the runs and sample ids the board compared: one protocol, and the
    sample ids all its runs share (all of each run's samples with ``all_samples``)."""
    store = RunStore(tmp_path / "home")
    make_protocol_run(store, model="big", ids=ALL, dist1=[i / 10 for i in range(10)])
    make_protocol_run(store, model="small", ids=ALL[:4])
    make_protocol_run(store, model="big", ids=ALL, temperature=0.7, dist1=0.9)  # same label, another protocol
    results = aggregate.load_results(store)
    board = aggregate.leaderboard(results, dataset="focus", mode="vanilla")
    values = aggregate.sample_values(results, dataset="focus", mode="vanilla", metric="dist1", board=PAPER_LABEL)
    on_board = board[(board["board"] == PAPER_LABEL) & (board["metric"] == "dist1")].set_index("model")
    big = next(m for m in on_board.index if m.startswith("big"))  # two runs are labelled "big": told apart
    assert values.groupby("model").size().to_dict() == {big: 4, "small": 4} == on_board["n"].to_dict()
    assert set(values.loc[values["model"] == big, "sample_id"]) == set(ALL[:4])
    assert values[values["model"] == big]["value"].mean() == pytest.approx(on_board.loc[big, "mean"])
    every = aggregate.sample_values(results, dataset="focus", mode="vanilla", metric="dist1", board=PAPER_LABEL,
                                    all_samples=True)
    assert every.groupby("model").size().to_dict() == {big: 10, "small": 4}
    side = aggregate.sample_values(results, dataset="focus", mode="vanilla", metric="dist1",
                                   board=aggregate.SIDE_BY_SIDE, side_by_side=True)
    side_board = aggregate.leaderboard(results, dataset="focus", mode="vanilla", side_by_side=True)
    assert set(side["model"]) == set(side_board["model"]) and len(set(side["model"])) == 3


def test_results_rows_take_the_last_of_a_repeated_score_and_ignore_other_profiles_and_unknown_samples(tmp_path):
    """The results builder places each score by sample id and metric, never by row position: a
    repeated (sample, metric) pair keeps its last value (as a merge appends), rows of another profile
    and of a sample the run never answered are left out, a duplicated reply row keeps its last status,
    and every label column is a category."""
    store = RunStore(tmp_path / "home")
    run = make_run(store, model="A", statuses=["ok", "ok", "empty"], latency=[1.0, 2.0, 3.0],
                   scores={"dist1": [0.1, 0.2, None]})
    run.write_table("generations", pd.DataFrame({  # focus:1 answered twice: the second reply failed
        "sample_id": ["focus:0", "focus:1", "focus:2", "focus:1"], "status": ["ok", "ok", "empty", "refused"],
        "response": ["r", "r", None, None], "latency": [1.0, 2.0, 3.0, 4.0]}))
    run.write_table("scores", pd.DataFrame({
        "sample_id": ["focus:2", "focus:0", "focus:0", "focus:9", "focus:0", "focus:1"],
        "metric": ["dist1", "dist1", "dist1", "dist1", "dist1", "rougeL"],
        "value": [0.9, 0.1, 0.7, 0.5, 0.3, 0.4],
        "profile": ["offline", "offline", "offline", "offline", "standard", "offline"]}))
    frame = aggregate.load_results(store, cache=False).frame
    assert [str(frame[c].dtype) for c in aggregate.LABEL_COLUMNS] == ["category"] * len(aggregate.LABEL_COLUMNS)
    values = {(r.sample_id, r.metric): (r.status, r.value) for r in frame.itertuples()}
    assert values[("focus:0", "dist1")] == ("ok", 0.7)  # last offline row wins; the standard one is ignored
    assert values[("focus:1", "response_time")] == ("refused", 4.0)
    assert math.isnan(values[("focus:1", "rougeL")][1])  # its reply is invalid now: no value
    assert math.isnan(values[("focus:2", "dist1")][1])  # an invalid reply's stored value is never used
    assert "focus:9" not in set(frame["sample_id"])
    assert list(frame["sample_id"][:3]) == ["focus:0", "focus:2", "focus:1"]  # run order, the last reply kept
    # Categories sorted as pd.Categorical sorts them (a sort by sample id is by name), whatever the run order.
    assert list(frame["sample_id"].cat.categories) == sorted(set(frame["sample_id"]))


@pytest.mark.parametrize("table, why", [
    (pd.DataFrame({"sample_id": ["focus:0"], "metric": ["dist1"], "profile": ["offline"]}), "missing column(s) value"),
    (pd.DataFrame({"sample_id": ["focus:0"], "metric": ["dist1"], "value": ["high"], "profile": ["offline"]}),
     "column value holds non-numbers"),
])
def test_a_scores_table_without_usable_values_skips_its_run_and_says_which_file(tmp_path, table, why):
    """A hand-edited scores table that lost its value column, or holds words in it, leaves its run out
    of the results with the file and the column named; the other runs load (it used to stop the
    whole table with a KeyError or a ValueError)."""
    store = RunStore(tmp_path / "home")
    broken = make_run(store, model="A", statuses=["ok"], latency=[1.0], scores={"dist1": [0.5]})
    make_run(store, model="B", statuses=["ok"], latency=[1.0], scores={"dist1": [0.25]})
    broken.write_table("scores", table)
    results = aggregate.load_results(store, cache=False)
    assert set(results.frame["model"]) == {"B"}
    [(folder, reason)] = results.skipped_runs
    assert folder == str(broken.path) and str(broken.table_path("scores")) in reason and why in reason
