"""The library functions behind the app's views (issue 37): the board's finding in one sentence, metric
directions, the radar's worst-to-best scale, the paper's own ranks, failures per run and their
truncation causes, per-dialogue values as the board scores them, and the colours every chart gives a
model. Pure functions on small frames: no store, no Streamlit."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from persobench.aggregate import model_ranking, radar_aspects
from persobench.aggregate.failures import failure_summary, latest_rows, stated_error, truncation_cause
from persobench.aggregate.finding import arrow, board_finding, how_it_fails, metric_help
from persobench.aggregate.published_ranking import paper_ranking, published_ranks
from persobench.aggregate.ranking import radar_metrics
from persobench.aggregate.results import scaled_worst_to_best, worst_and_best
from persobench.report.charts import model_colour, radar_figure, ranking_figure


def board_rows(rows: list[tuple[str, str, float, float, float]], n: int = 100) -> pd.DataFrame:
    """A one-board leaderboard from (model, metric, mean, ci_low, ci_high)."""
    return pd.DataFrame([{"dataset": "focus", "mode": "vanilla", "board": "p", "model": model, "profile": "offline",
                          "metric": metric, "mean": mean, "std": 0.1, "n": n, "ci_low": low, "ci_high": high,
                          "status": "ok", "reason": "", "run_id": f"run-{model}", "model_id": ""}
                         for model, metric, mean, low, high in rows])


# ---- directions and the finding ------------------------------------------------------------------


def test_every_metric_header_says_its_direction_and_meaning():
    assert arrow("rougeL") == "↑" and arrow("failure_ratio") == "↓" and arrow("response_time") == "↓"
    assert metric_help("failure_ratio").startswith("↓ lower is better. Share of samples")
    assert metric_help("overall").startswith("↑ higher is better. Mean of ue_score")


def test_the_finding_names_the_leader_with_its_ci_ties_and_who_fails_most_and_how():
    board = board_rows([
        ("gpt-a", "rougeL", 0.20, 0.19, 0.21), ("gpt-b", "rougeL", 0.195, 0.185, 0.205),
        ("small", "rougeL", 0.08, 0.07, 0.09), ("baseline:reference", "rougeL", 1.0, 1.0, 1.0),
        ("gpt-a", "failure_ratio", 0.03, 0.02, 0.05), ("gpt-b", "failure_ratio", 0.09, 0.07, 0.11),
        ("small", "failure_ratio", 0.5, 0.47, 0.53), ("baseline:reference", "failure_ratio", 0.0, 0.0, 0.01)])
    ranked = model_ranking(board, pd.DataFrame(columns=["model"]), "rougeL")
    sentence = board_finding(ranked, "rougeL", {"small": {"ok": 50, "truncated": 40, "invalid_json": 10}})
    # the ceiling ranks first but is not a model: the leader is the best model
    assert sentence.startswith("By rougeL (higher is better), gpt-a leads with 0.200 (95% CI 0.190 to 0.210), "
                               "tied with gpt-b (their 95% CIs overlap).")
    assert sentence.endswith("small fails most: 50.0% of its 100 replies are invalid, mostly truncated (it ended "
                             "before a complete JSON reply) (80% of them).")
    by_time = model_ranking(board_rows([("a", "response_time", 2.0, 1.9, 2.1), ("b", "response_time", 1.0, 0.9, 1.1),
                                        ("a", "failure_ratio", 0.0, 0.0, 0.0), ("b", "failure_ratio", 0.0, 0.0, 0.0)]),
                            pd.DataFrame(columns=["model"]), "response_time")
    assert board_finding(by_time, "response_time", {}) == ("By response_time (lower is better), b leads with 1.00 s "
                                                          "(95% CI 0.90 s to 1.10 s). No model produced an invalid reply.")


def test_how_a_model_fails_reads_its_statuses():
    assert how_it_fails({"ok": 3}) == ""
    assert how_it_fails({"ok": 1, "empty": 4}) == "all of them an empty response"
    assert how_it_fails({"truncated": 1, "invalid_json": 3}) == "mostly invalid JSON (75% of them)"


# ---- the radar's scale and the ranks ---------------------------------------------------------------


def test_radar_axes_run_from_the_worst_value_to_the_best():
    """Issue 37: a metric on [-1, 1] drew its worst value (0, what an invalid reply scores) at 0.5, so a
    model with no valid reply showed 0.5 fluency."""
    assert worst_and_best("bertscore_f1") == (0.0, 1.0) and worst_and_best("c_score") == (-1.0, 1.0)
    assert worst_and_best("failure_ratio") == (1.0, 0.0) and worst_and_best("response_time") is None
    assert scaled_worst_to_best("bertscore_f1", [0.0, 0.5, 1.0, -0.2]).tolist() == [0.0, 0.5, 1.0, 0.0]
    assert scaled_worst_to_best("failure_ratio", [0.25]).tolist() == [0.75]
    board = board_rows([("none valid", m, w, w, w) for m, w in
                        [("bertscore_f1", 0.0), ("dist2", 0.0), ("ue_score", 0.0), ("c_score", -1.0)]])
    radar = radar_aspects(board, normalize=True).set_index("model")
    assert radar.loc["none valid", ["fluency", "diversity", "coherence", "persona_consistency"]].tolist() == [0, 0, 0, 0]


def test_a_lexical_board_gets_a_radar_of_its_own_metrics():
    board = board_rows([("m", metric, 0.5, 0.4, 0.6) for metric in ("bleu", "rougeL", "dist2", "response_time")])
    assert radar_metrics(board) == {"bleu": "bleu", "rougeL": "rougeL", "dist2": "dist2"}  # time: no scale
    figure = radar_figure(radar_aspects(board, normalize=True, aspects=radar_metrics(board)), ["bleu", "rougeL", "dist2"])
    assert list(figure.data[0].r) == [0.5, 0.5, 0.5, 0.5]
    assert "worst value" in figure.layout.annotations[0].text


def test_the_papers_own_ranks_need_no_data_folder(reference_dir):
    vanilla, cot = published_ranks("vanilla"), published_ranks("cot")
    assert sorted(vanilla.values()) == list(range(1, 9)) and set(vanilla) == set(cot)
    assert vanilla["gpt-3.5-turbo"] == 1 and cot["Llama3-1-8B-Instruct"] == 1
    assert [cot[m] for m in ("gpt-4o-mini", "gpt-3.5-turbo", "Mistral-7B-Instruct")] == [2, 3, 4]
    assert published_ranks("other") == {}
    for mode, ranks in (("vanilla", vanilla), ("cot", cot)):  # the "published rank" of the Metrics page's table
        table = paper_ranking(str(reference_dir), mode)
        assert dict(zip(table["model"], table["published rank"])) == ranks


def test_baselines_are_drawn_apart_and_models_keep_their_colours():
    ranked = pd.DataFrame({"model": ["baseline:reference", "gpt-4o-mini", "baseline:persona-echo", "x-7b"],
                           "value": [1.0, 0.2, 0.3, 0.1], "value_ci_low": [1.0, 0.1, 0.2, 0.0],
                           "value_ci_high": [1.0, 0.3, 0.4, 0.2], "rank": ["1", "2=", "2=", "2="]})
    figure = ranking_figure(ranked, "rougeL")
    bar = figure.data[0]
    assert list(bar.y) == ["gpt-4o-mini", "x-7b", "baseline:reference", "baseline:persona-echo"]
    assert list(bar.marker.pattern.shape) == ["", "", "/", "/"]
    assert model_colour("baseline:reference") != model_colour("baseline:persona-echo")
    # the same model, the same colour: another board's label, a provider prefix, an escaped label
    assert model_colour("gpt-4o-mini") == model_colour("openai:gpt-4o-mini") == model_colour("gpt-4o-mini (paper · x)")
    assert model_colour("a&b") == model_colour("a&amp;b")
    assert len({model_colour(m) for m in published_ranks("vanilla")}) == 8


# ---- failures ------------------------------------------------------------------------------------------


def test_failures_are_one_row_per_run_never_summed_across_protocols():
    """Issue 37: a paper-protocol run and a PersoBench-template run of one model were added into one row."""
    counts = pd.DataFrame([
        ("r1", "sample", "vanilla", "paper · vanilla", "m", "ok", 3), ("r1", "sample", "vanilla", "paper · vanilla", "m",
                                                                        "truncated", 7),
        ("r2", "sample", "vanilla", "persobench · vanilla", "m", "ok", 8)],
        columns=["run_id", "dataset", "mode", "protocol", "model", "status", "count"])
    summary = failure_summary(counts)
    assert len(summary) == 2
    assert summary.set_index("protocol").loc["paper · vanilla", ["total", "failed", "truncated"]].tolist() == [10, 7, 7]
    assert summary.set_index("protocol").loc["persobench · vanilla", "failure ratio"] == 0


def test_a_sample_written_twice_counts_once():
    table = pd.DataFrame({"sample_id": ["a", "b", "a"], "status": ["truncated", "ok", "ok"]})
    assert latest_rows(table)["status"].tolist() == ["ok", "ok"]


def test_the_truncation_cause_comes_from_the_stored_token_count_or_is_unknown():
    assert truncation_cause(None, 110, 110) == "token limit: 110 of 110 tokens"
    assert truncation_cause("stop", 40, 110) == "not the token limit: 40 of 110 tokens"
    assert truncation_cause("length", None, 110) == "token limit (finish reason 'length')"
    assert truncation_cause(None, None, 110) == "unknown: no token count stored"
    assert truncation_cause(None, float("nan"), None) == "unknown: no token count stored"
    guessed = "the text ends inside the JSON object opened at offset 27 (cut off by the token limit)"
    assert stated_error(guessed, "truncated", "unknown: no token count stored") == (
        "the text ends inside the JSON object opened at offset 27; cause: unknown: no token count stored")
    assert stated_error("bad", "invalid_json", "") == "bad"


def test_scaled_values_keep_nan_for_missing():
    assert math.isnan(scaled_worst_to_best("rougeL", [np.nan])[0])
    with pytest.raises(AssertionError):
        assert worst_and_best("nope")


# ---- per-dialogue values and run labels ---------------------------------------------------------------


def results_rows() -> pd.DataFrame:
    """Two runs on three samples; run b's reply to s2 is invalid (its value NaN, as load_results stores it)."""
    rows = []
    for run, values, statuses in (("a", [0.2, 0.5, 0.9], ["ok", "ok", "ok"]), ("b", [0.4, np.nan, 0.9], ["ok", "truncated", "ok"])):
        for sample, value, status in zip(("s1", "s2", "s3"), values, statuses):
            rows += [{"run_id": run, "sample_id": sample, "status": status, "metric": "rougeL", "value": value},
                     {"run_id": run, "sample_id": sample, "status": status, "metric": "response_time", "value": 1.0}]
    return pd.DataFrame(rows)


def test_per_dialogue_values_apply_the_boards_rule_and_find_the_widest_spread():
    from persobench.aggregate.instances import instance_values, widest_spread

    values = instance_values(results_rows(), ["a", "b"])
    invalid = values[(values["run_id"] == "b") & (values["sample_id"] == "s2")].set_index("metric")
    assert invalid.loc["rougeL", "value"] == 0.0 and bool(invalid.loc["rougeL", "scored_worst"])
    assert invalid.loc["response_time", "value"] == 1.0 and not invalid.loc["response_time", "scored_worst"]
    excluded = instance_values(results_rows(), ["a", "b"], ["s2"], invalid="exclude").set_index(["run_id", "metric"])
    assert math.isnan(excluded.loc[("b", "rougeL"), "value"])
    spread = widest_spread(values, ["a", "b"], "rougeL")
    assert spread["sample_id"].tolist() == ["s2", "s1", "s3"]
    assert spread["spread"].tolist() == pytest.approx([0.5, 0.2, 0.0])
    assert widest_spread(values, ["a"], "rougeL").empty  # one run has nothing to differ from


def test_runs_are_labelled_by_name_never_by_hash_unless_nothing_else_tells_them_apart():
    from persobench.aggregate.failures import run_row_labels

    runs = pd.DataFrame({"run_id": ["r1", "r2", "r3", "r4"], "dataset": ["focus"] * 4,
                         "mode": ["vanilla", "vanilla", "cot", "vanilla"], "model": ["m", "m", "m", "n"],
                         "protocol": ["paper · v", "persobench · v", "paper · c", "paper · v"]})
    assert run_row_labels(runs) == {"r1": "m · vanilla · paper · v", "r2": "m · vanilla · persobench · v",
                                    "r3": "m · cot", "r4": "n · vanilla"}
    twins = pd.concat([runs.iloc[:1], runs.iloc[:1].assign(run_id="r9")])
    assert run_row_labels(twins) == {"r1": "m · vanilla · paper · v · r1", "r9": "m · vanilla · paper · v · r9"}


def test_a_model_alone_beside_the_baselines_leads_nothing():
    board = board_rows([("local:smollm2", "rougeL", 0.0, 0.0, 0.0), ("baseline:reference", "rougeL", 1.0, 1.0, 1.0),
                        ("local:smollm2", "failure_ratio", 1.0, 0.7, 1.0),
                        ("baseline:reference", "failure_ratio", 0.0, 0.0, 0.3)], n=8)
    ranked = model_ranking(board, pd.DataFrame(columns=["model"]), "rougeL")
    assert board_finding(ranked, "rougeL", {"local:smollm2": {"truncated": 8}}) == (
        "By rougeL (higher is better), local:smollm2, the only model on this board, scores 0.000 (95% CI 0.000 to 0.000). "
        "local:smollm2 "
        "fails: 100.0% of its 8 replies are invalid, all of them truncated (it ended before a complete JSON reply).")
