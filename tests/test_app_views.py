"""The app's views as issue 37 asks for them (AppTest): the landing states the finding on the imported
paper store, every column says its direction and meaning, the downloads deliver ``export_board`` of the
board on screen, Failures groups runs by board and its counts agree, Explore shows one dialogue side by
side with the values the board averages."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from tests.app_store import FAILURES, FAKE_MODEL, shared_app_store, shared_paper_store
from tests.test_app_links import session as page

@pytest.fixture()
def app_home(tmp_path_factory, monkeypatch):
    store = shared_app_store(tmp_path_factory)
    monkeypatch.setenv("PERSOBENCH_HOME", str(store["home"]))
    return store


@pytest.fixture()
def paper_home(tmp_path_factory, reference_dir, monkeypatch):
    store = shared_paper_store(tmp_path_factory, reference_dir)
    monkeypatch.setenv("PERSOBENCH_HOME", str(store["home"]))
    return store


def table(at: AppTest, *columns: str) -> tuple[pd.DataFrame, dict]:
    """The first table with ``columns``, and its column configuration (headers, help)."""
    for frame in at.dataframe:
        if set(columns) <= set(frame.value.columns):
            return frame.value, json.loads(frame.proto.columns or "{}")
    raise AssertionError(f"no table with {columns}")


def shown_board(home: Path, dataset: str, mode: str, models: list[str] | None = None) -> pd.DataFrame:
    """The board the Leaderboard shows by default for ``dataset`` and ``mode``, computed by the library."""
    from persobench.aggregate import leaderboard, load_results
    from persobench.prompts.protocol import paper_protocol
    from persobench.store.run_store import RunStore

    board = leaderboard(load_results(RunStore(home), dataset=dataset), dataset=dataset, invalid="worst")
    boards = sorted(set(board.loc[board["mode"] == mode, "board"]), key=lambda b: (b != paper_protocol(mode).label, b))
    board = board[(board["mode"] == mode) & (board["board"] == boards[0])]
    return board[board["model"].isin(models)] if models is not None else board


# ---- the landing states the finding ----------------------------------------------------------------


def test_the_landing_of_the_paper_store_states_the_finding(paper_home):
    """Issue 37: it opened on the alphabetically first dataset, without a headline, without directions."""
    from persobench.aggregate import model_ranking
    from persobench.aggregate.finding import board_finding
    from persobench.aggregate.published_ranking import published_ranks

    at = page()
    assert at.selectbox(key="lb_dataset").value == "focus"  # 16 runs, as two others: the paper leads with FoCus
    assert at.selectbox(key="lb_rank_by").value == "rougeL"
    board = shown_board(paper_home["home"], "focus", "vanilla")
    ranked = model_ranking(board, pd.DataFrame(columns=["model"]), "rougeL")
    finding = board_finding(ranked, "rougeL", {})
    leader = finding.split(" leads with ")[0].rsplit(", ", 1)[-1]
    worst = ranked.loc[ranked["failure_ratio"].idxmax(), "model"]
    infos = [str(i.value).replace("\\", "") for i in at.info]
    sentence = next(i for i in infos if i.startswith("By rougeL (higher is better), "))
    assert f"{leader} leads with " in sentence and "(95% CI " in sentence
    assert f"{worst} fails most: " in sentence and "of its 1,000 replies are invalid, " in sentence
    assert [c.key for c in at.get("plotly_chart")] == ["lb_rank_chart"]  # the CI bar chart, open by default
    ranking, config = table(at, "rank", "model", "paper rank")
    assert dict(zip(ranking["model"], ranking["paper rank"])) == published_ranks("vanilla")
    for column in ("rougeL", "rougeL 95% CI", "failure_ratio", "response_time", "instructability"):
        assert config[column]["label"][-1] in "↑↓" and config[column]["help"][0] in "↑↓", column
    assert config["failure_ratio"]["label"].endswith("↓") and config["rougeL"]["label"].endswith("↑")
    assert any("share a rank" in str(c.value) for c in at.caption)  # the ties legend
    cells, cell_config = table(at, "model", "bleu", "dist2")
    assert all(cell_config[m]["label"].endswith(("↑", "↓")) and cell_config[m]["help"] for m in ("bleu", "dist2"))


def test_the_radar_of_a_lexical_board_uses_its_own_metrics(paper_home):
    at = page(None, {"tab": "radar"})
    radar = next(c for c in at.get("plotly_chart") if c.key == "lb_radar")
    figure = json.loads(radar.proto.spec)
    axes = figure["data"][0]["theta"]
    assert {"bleu", "rougeL", "dist2"} <= set(axes) and "response_time" not in axes
    assert all(0 <= r <= 1 for trace in figure["data"] for r in trace["r"])


# ---- the downloads carry the board on screen ---------------------------------------------------------


def test_the_downloads_deliver_export_board_of_the_board_on_screen(app_home, monkeypatch):
    from streamlit.delta_generator import DeltaGenerator

    from persobench.aggregate import export_board

    captured: dict[str, object] = {}
    original = DeltaGenerator.download_button

    def spy(self, label, data, *args, **kwargs):
        captured[label] = (data, kwargs)
        return original(self, label, data, *args, **kwargs)

    monkeypatch.setattr(DeltaGenerator, "download_button", spy)
    models = ["baseline:persona-echo", FAKE_MODEL]
    at = page(None, {"mode": "cot", "model": models, "rank": "dist2"})
    assert set(at.multiselect(key="lb_models_sample_cot").value) == set(models)
    board = shown_board(app_home["home"], "sample", "cot", models)
    for label, fmt in (("CSV (long)", "csv"), ("JSON", "json"), ("Markdown", "markdown"), ("LaTeX", "latex")):
        data, kwargs = captured[label]
        assert callable(data) and kwargs["on_click"] == "ignore"  # made on the click, no rerun for it
        assert data().decode("utf-8") == export_board(board, fmt, rank_by="dist2"), label
    csv = pd.read_csv(io.StringIO(captured["CSV (long)"][0]().decode("utf-8")))
    assert set(csv["model"]) == set(models) and set(csv["mode"]) == {"cot"}
    # ranked as the screen ranks it, not by the export's own default
    assert set(csv["rank_by"]) == {"dist2"}
    assert captured["HTML report"][1]["on_click"] == "ignore"


# ---- failures by board -------------------------------------------------------------------------------


def test_failures_never_add_runs_of_different_protocols(tmp_path, monkeypatch):
    """Issue 37: a paper-protocol run of a model and its run under PersoBench's template were one row."""
    from persobench.store.run_store import RunStore
    from tests.test_aggregate import ALL, make_protocol_run

    store = RunStore(tmp_path / "home")
    paper = make_protocol_run(store, model="local:smollm2", ids=ALL[:5], template="paper-open", status="truncated")
    ours = make_protocol_run(store, model="local:smollm2", ids=ALL, template="persobench", policy="robust")
    # the paper run stored token counts for some replies, and wrote a sample twice (its last row counts)
    paper.write_table("generations", pd.DataFrame({
        "sample_id": [*ALL[:5], ALL[0]], "status": ["truncated"] * 5 + ["ok"], "response": [None] * 5 + ["r"],
        "completion_tokens": [110, 40, None, None, None, 12], "error": ["the text ends inside the JSON object opened "
                                                                      "at offset 0 (cut off by the token limit)"] * 6}))
    monkeypatch.setenv("PERSOBENCH_HOME", str(store.home))
    at = page("pages/failures.py")
    summary, _ = table(at, "protocol", "model", "total", "failed")
    rows = summary.set_index("protocol")
    assert len(summary) == 2 and set(summary["model"]) == {"local:smollm2"}
    paper_row = rows.loc[[p for p in rows.index if p.startswith("paper")][0]]
    assert (paper_row["total"], paper_row["failed"], paper_row["truncated"]) == (5, 4, 4)
    assert rows.loc[[p for p in rows.index if p.startswith("persobench")][0], "failed"] == 0
    assert at.selectbox(key="fail_model").value == paper.run_id
    replies, _ = table(at, "sample_id", "error", "cause")
    causes = dict(zip(replies["sample_id"], replies["cause"]))
    assert causes == {ALL[1]: "not the token limit: 40 of 110 tokens", ALL[2]: "unknown: no token count stored",
                      ALL[3]: "unknown: no token count stored", ALL[4]: "unknown: no token count stored"}
    assert not replies["error"].str.contains("cut off by the token limit").any()
    assert ours.run_id not in at.selectbox(key="fail_model").options


def test_failure_counts_agree_everywhere(app_home):
    """Issue 37: the Status box said "truncated (2912)" where its rows said otherwise."""
    at = page("pages/failures.py")
    summary, _ = table(at, "protocol", "model", "total", "failed")
    caption = next(str(c.value) for c in at.caption if str(c.value).startswith("Invalid replies in this selection"))
    for status in ("truncated", "invalid_json", "refused", "api_error"):
        total = int(summary[status].sum())
        assert f"{status.replace('_', chr(92) + '_')} {total}" in caption, (status, caption)
        at.selectbox(key="fail_status").set_value(status).run()
        shown = 0
        for run in at.selectbox(key="fail_model").options:
            at.selectbox(key="fail_model").set_value(run).run()
            shown += len(table(at, "sample_id", "error")[0])
        assert shown == total, status
    assert int(summary["truncated"].sum()) == 2 * sum(1 for kind in FAILURES.values() if kind == "truncated")


# ---- explore side by side ----------------------------------------------------------------------------


def test_one_dialogue_side_by_side_with_the_values_the_board_averages(app_home):
    from persobench.aggregate import leaderboard, load_results
    from persobench.aggregate.instances import instance_values
    from persobench.store.run_store import RunStore

    at = page("pages/explore.py", {"dataset": "sample", "sample": "sample:3", "mode": ["vanilla", "cot"]})
    headers = [str(m.value) for m in at.markdown if str(m.value).startswith("**") and "·" in str(m.value)]
    labels = {h.split("**")[1].replace("\\", "") for h in headers}
    assert {f"{FAKE_MODEL} · vanilla", f"{FAKE_MODEL} · cot", "baseline:reference · vanilla"} <= labels
    assert not any("__" in label for label in labels), "runs are named by model and mode, not by their ids"
    assert len(labels) == 6 and len(at.columns) >= 6  # each reply in a column of the grid
    cells = [str(m.value).replace("\\", "") for m in at.markdown if "rougeL ↑: " in str(m.value)]
    assert len(cells) == 6 and sum("rougeL ↑: 0.000 (worst)" in c and c.startswith("*Invalid reply: scored with each "
                                                                               "metric's worst value")
                                   for c in cells) == 2
    # each cell's value is the one the board averages: their mean over the samples is the board's mean
    results = load_results(RunStore(app_home["home"]), dataset="sample")
    values = instance_values(results, list(results.frame["run_id"].unique()))
    board = leaderboard(results, dataset="sample", invalid="worst")
    for run_id, rows in board[board["metric"] == "rougeL"].groupby("run_id"):
        mine = values[(values["run_id"] == run_id) & (values["metric"] == "rougeL")]["value"]
        assert mine.mean() == pytest.approx(float(rows["mean"].iloc[0])), run_id


def test_explore_finds_the_dialogues_where_models_differ_most(app_home):
    at = page("pages/explore.py", {"dataset": "sample", "differ": "rougeL"})
    options = at.selectbox(key="explore_pick").options
    spreads = [float(o.split(" · ")[0].removeprefix("spread ")) for o in options]
    assert spreads == sorted(spreads, reverse=True) and spreads[0] > 0 and all(s > 0 for s in spreads)
    first = at.selectbox(key="explore_pick").value
    assert at.query_params["sample"] == first and at.query_params["differ"] == "rougeL"
