"""Exports carry the screen (issue 37 item 7): every format of a board (CSV, JSON, Markdown, LaTeX,
HTML, the terminal table) holds the rank, the mean with its 95% CI, the std, n, the protocol and the
profile, rows in rank order; CSV and JSON keep numbers as numbers; untrusted text (model labels,
notes) is escaped for each format and never starts a CSV formula."""

from __future__ import annotations

import io
import json
import re
from html.parser import HTMLParser

import pandas as pd
import pytest

from persobench import aggregate
from persobench.cli import main
from persobench.store.run_store import RunStore
from tests.test_aggregate import make_run

#: Alphabetical order is not rank order: the exports must not list the models alphabetically.
DIST1 = {"alpha": [0.1, 0.2, 0.1, 0.2], "mid": [0.5, 0.6, 0.5, 0.6], "zeta": [0.9, 1.0, 0.9, 1.0]}
RANKED = ["zeta", "mid", "alpha"]
EVIL = 'evil <img src=x onerror="alert(1)"> [l](javascript:alert(2)) ![t](https://example.invalid/p.png)'


@pytest.fixture()
def store(tmp_path):
    store = RunStore(tmp_path / "home")
    for model, values in DIST1.items():
        make_run(store, model=model, statuses=["ok"] * 4, latency=[1.0] * 4, scores={"dist1": values})
    return store


def board_of(store):
    return aggregate.leaderboard(aggregate.load_results(store))


def test_csv_holds_rank_ci_protocol_profile_as_numbers_in_rank_order(store):
    board = board_of(store)
    text = aggregate.export_board(board, "csv")
    rows = pd.read_csv(io.StringIO(text))
    assert list(rows.columns[:8]) == ["dataset", "mode", "protocol", "model", "metric", "mean", "std", "n"]
    assert {"ci_low", "ci_high", "rank", "rank_by", "profile", "invalid"} <= set(rows.columns)
    assert list(rows.columns) == aggregate.CSV_COLUMNS
    assert list(dict.fromkeys(rows["model"])) == RANKED
    for column in ("mean", "std", "ci_low", "ci_high"):
        assert pd.api.types.is_float_dtype(rows[column]), column
    assert pd.api.types.is_integer_dtype(rows["rank"]) and pd.api.types.is_integer_dtype(rows["n"])
    dist1 = rows[rows["metric"] == "dist1"].set_index("model")
    assert dist1["rank"].to_dict() == {"zeta": 1, "mid": 2, "alpha": 3}
    assert set(rows["rank_by"]) == {"dist1"} and set(rows["profile"]) == {"offline"}
    assert set(rows["invalid"]) == {"worst"}
    expected = board[board["metric"] == "dist1"].set_index("model")
    for model in RANKED:  # the board's own numbers, unrounded
        assert dist1.loc[model, "ci_low"] == expected.loc[model, "ci_low"]
        assert dist1.loc[model, "ci_high"] == expected.loc[model, "ci_high"]
        assert dist1.loc[model, "ci_low"] < dist1.loc[model, "mean"] < dist1.loc[model, "ci_high"]


def test_json_holds_a_ranking_and_ranked_metric_rows(store):
    payload = json.loads(aggregate.export_board(board_of(store), "json"))
    ranking = payload["ranking"]
    assert [r["model"] for r in ranking] == RANKED
    assert [r["rank"] for r in ranking] == [1, 2, 3] and not any(r["tied"] for r in ranking)
    first = ranking[0]
    assert first["rank_by"] == "dist1" and first["profile"] == "offline" and first["dataset"] == "focus"
    assert first["protocol"] == first["board"] and isinstance(first["value"], float)
    assert first["ci_low"] < first["value"] < first["ci_high"] and first["n"] == 4
    dist1 = [r for r in payload["metrics"] if r["metric"] == "dist1"]
    assert [r["model"] for r in dist1] == RANKED and [r["rank"] for r in dist1] == [1, 2, 3]
    assert all(isinstance(r["ci_low"], float) and r["std"] is not None for r in dist1)


class Tables(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[list[str]] = []
        self.tags: list[str] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _markdown_rows(text: str) -> list[list[str]]:
    lines = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]


def _latex_rows(text: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.removesuffix(r" \\").split(" & ")] for line in text.splitlines()
            if line.endswith(r" \\")]


@pytest.mark.parametrize("fmt", ["markdown", "latex", "html"])
def test_display_formats_lead_with_the_rank_and_show_the_ci_in_rank_order(store, fmt):
    text = aggregate.export_board(board_of(store), fmt)
    if fmt == "markdown":
        rows = _markdown_rows(text)
    elif fmt == "latex":
        rows = _latex_rows(text)
    else:
        parser = Tables()
        parser.feed(text)
        rows = parser.rows
    header, body = rows[0], rows[1:]
    assert header[:3] == ["rank", "model", "n"]
    assert [row[1] for row in body] == RANKED and [row[0] for row in body] == ["1", "2", "3"]
    cell = body[0][header.index("dist1")]
    low, high = (board_of(store).query("metric == 'dist1' and model == 'zeta'")[["ci_low", "ci_high"]].iloc[0])
    assert re.fullmatch(r"0\.95 (±|\$\\pm\$) 0\.05 \[\d\.\d\d, \d\.\d\d\]", cell), cell
    assert f"[{low:.2f}, {high:.2f}]" in cell
    assert "profile offline" in text and "protocol " in text  # the board's header names both
    assert "ranked by dist1 (higher is better)" in text


def test_terminal_table_ranks_the_models_left_to_right(store):
    text = aggregate.export_board(board_of(store), "table")
    model_line = next(line for line in text.splitlines() if line.startswith("metric "))
    assert model_line.split()[1:] == RANKED
    rank_line = next(line for line in text.splitlines() if line.startswith("rank "))
    assert rank_line.split()[1:] == ["1", "2", "3"]


def test_the_overall_score_ranks_with_its_ci_when_the_board_has_one(tmp_path, capsys):
    store = RunStore(tmp_path / "home")
    for model, level in (("low", 0.2), ("high", 0.8)):
        values = [level, level + 0.1, level, level + 0.1]
        make_run(store, model=model, statuses=["ok"] * 4, latency=[1.0] * 4, scores={
            "ue_score": values, "persona_distance": values, "unieval_groundedness": values, "c_score": values})
    assert main(["--home", str(store.home), "leaderboard", "--format", "csv"]) == 0
    rows = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert set(rows["rank_by"]) == {"overall"}
    assert list(dict.fromkeys(rows["model"])) == ["high", "low"]
    assert main(["--home", str(store.home), "leaderboard", "--format", "json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    high = payload["ranking"][0]
    assert high["model"] == "high" and high["rank"] == 1
    assert high["ci_low"] < high["value"] < high["ci_high"]  # the overall score's bootstrap CI
    assert main(["--home", str(store.home), "leaderboard", "--format", "markdown"]) == 0
    header, first, _ = _markdown_rows(capsys.readouterr().out)
    assert first[1] == "high" and re.fullmatch(r"\d+\.\d\d \[\d+\.\d\d, \d+\.\d\d\]", first[header.index("overall")])


def test_cli_leaderboard_writes_html(store, capsys):
    assert main(["--home", str(store.home), "leaderboard", "--format", "html"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("<!DOCTYPE html>") and "Content-Security-Policy" in text
    parser = Tables()
    parser.feed(text)
    assert [row[1] for row in parser.rows[1:]] == RANKED
    assert "script" not in parser.tags


@pytest.fixture()
def evil_store(tmp_path):
    """A hostile model label, and a hostile reason recorded for a degraded metric (a board note)."""
    store = RunStore(tmp_path / "home")
    label = "=HYPERLINK(\"http://example.invalid\")\n\\input{/etc/passwd} " + EVIL
    reason = "the model said:\n\\input{/etc/shadow} " + EVIL
    make_run(store, model=label, statuses=["ok"] * 4, latency=[1.0] * 4, scores={"dist1": [0.5, 0.5, 0.6, 0.6]},
             provenance={"dist1": {"status": "degraded", "reason": reason, "model_id": "lexical"}})
    make_run(store, model="plain", statuses=["ok"] * 4, latency=[1.0] * 4, scores={"dist1": [0.1] * 4})
    return store, label


def test_untrusted_labels_are_escaped_for_every_format(evil_store):
    store, label = evil_store
    board = board_of(store)
    assert (board["model"] == label).any()
    markdown = aggregate.export_board(board, "markdown")
    for raw in (r"<img", r"\]\(javascript:", r"!\[t\]\(", r"\[l\]\(", "https://"):
        assert not re.search(r"(?<!\\)" + raw, markdown), raw  # only its escaped form
    assert "\\input" not in markdown.replace("\\\\input", "")  # the note's backslash is escaped too
    assert r'\<img src=x onerror="alert(1)"\>' in markdown  # shown as the same characters
    latex = aggregate.export_board(board, "latex")
    assert not [line for line in latex.splitlines() if line.lstrip().startswith("\\input")]
    assert r"\textbackslash{}input\{/etc/passwd\}" in latex
    assert "degraded (the model said:" in latex  # the note is there, on one comment line
    html_text = aggregate.export_board(board, "html")
    assert "<img" not in html_text and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html_text
    csv_rows = pd.read_csv(io.StringIO(aggregate.export_board(board, "csv")))
    assert not [m for m in csv_rows["model"] if str(m).startswith(("=", "+", "-", "@"))]
    assert ("'" + label) in set(csv_rows["model"])
    payload = json.loads(aggregate.export_board(board, "json"))
    assert label in {r["model"] for r in payload["ranking"]}  # JSON keeps the value as it is
