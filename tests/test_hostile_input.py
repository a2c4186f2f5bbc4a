"""Hostile and broken input (issue 9 items 4, 5, 6): every bad file is one line on stderr naming the
file and what is wrong (exit 2), no row is silently lost, and no CSV we write starts a formula."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from persobench.cli import main as cli_main
from persobench.store.csv_io import CSVFormatError, csv_text, neutralize_cell, read_csv_rows
from persobench.datasets.user_files import DatasetFileError, load_user_file
from tests.fakes import reply
from tests.fakes.fixtures import openai_server  # noqa: F401
from persobench.generation.config import GenerationConfig
from persobench.store.run_store import RunStore

REPO = Path(__file__).resolve().parents[1]
HEADER = "personas,context,act_response\n"


def one_line_error(capsys, argv: list[str], *needles: str) -> str:
    """Run the CLI in-process; it must exit 2 with one stderr line containing every needle."""
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    for needle in needles:
        assert needle in err[0], err[0]
    return err[0]


# ---------------------------------------------------------------------------------------------
# item 4: an unclosed quote never swallows rows


@pytest.mark.parametrize("body, line", [
    # opened in the last field of row 1 and never closed: the csv module returns 1 row, not 3
    ('p1,User1: c1,"r1\np2,User1: c2,r2\np3,User1: c3,r3\n', 2),
    # opened in row 2
    ('p1,User1: c1,r1\np2,"User1: c2,r2\np3,User1: c3,r3\n', 3),
    # a stray quote closed by a later one: still 3 fields, so only the line structure shows it
    ('p1,"User1: c1,r1\np2,User1: c2,r2\np3,User1: c3",r3\n', 2),
])
def test_unclosed_quote_is_rejected_naming_the_row(tmp_path, body, line):
    path = tmp_path / "quotes.csv"
    path.write_text(HEADER + body, encoding="utf-8")
    with pytest.raises(DatasetFileError) as info:
        load_user_file(path)
    message = str(info.value)
    assert f"row {line - 1} (line {line})" in message and "quote" in message and str(path) in message


def test_quoted_newlines_elsewhere_still_load(tmp_path):
    path = tmp_path / "multi.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["personas", "context", "act_response"])
        writer.writerow(["I ski.", "User1: Hi, you, there\nUser2: Hello, how, are", "User1: fine"])
        writer.writerow(["I cook.", "User1: What?\nUser2: Pasta", "User1: nice"])
        writer.writerow(["I run.", "User1: Go", "User2: ok"])
    assert len(load_user_file(path)) == 3


def test_paper_prompt_table_with_unclosed_quote_is_rejected(tmp_path, monkeypatch):
    prompts = tmp_path / "Prompts"
    prompts.mkdir()
    (prompts / "FoCus.csv").write_text(HEADER + 'p1,"User1: c1,r1\np2,User1: c2,r2\n', encoding="utf-8")
    monkeypatch.setenv("PERSOBENCH_PROMPTS", str(prompts))
    from persobench.errors import DatasetError
    from persobench.datasets.tables import load_paper_table

    with pytest.raises(DatasetError, match=r"FoCus.csv: row 1 \(line 2\).*quote"):
        load_paper_table(dataset="focus", file_stem="FoCus", unlabelled_owner="partner")


def test_read_csv_rows_reports_line_of_the_opening_quote():
    with pytest.raises(CSVFormatError, match=r"x.csv: row 3 \(line 5\)"):
        read_csv_rows('a,b\n1,2\n"3\n4",5\n6,"7\n', "x.csv")


# ---------------------------------------------------------------------------------------------
# item 5: CSV injection


@pytest.mark.parametrize("cell", ["=HYPERLINK(\"http://x\")", "+1+2", "-2+3", "@SUM(A1)", "\tx", "\rx", "=1"])
def test_formula_cells_get_a_leading_quote(cell):
    assert neutralize_cell(cell) == "'" + cell


@pytest.mark.parametrize("value", ["-0.5", "+3", "-1e-3", 1.5, -2, None, "plain", "a=b"])
def test_numbers_and_plain_text_are_untouched(value):
    assert neutralize_cell(value) == value


def test_csv_text_keeps_numeric_columns_numeric():
    frame = pd.DataFrame({"model": ["=cmd|' /C calc'!A0", "ok"], "mean": [-0.25, 0.5]})
    back = pd.read_csv(io.StringIO(csv_text(frame)))
    assert back["model"].tolist() == ["'=cmd|' /C calc'!A0", "ok"]
    assert back["mean"].dtype.kind == "f" and back["mean"].tolist() == [-0.25, 0.5]


def test_export_csv_neutralises_replies(openai_server, tmp_path, capsys):
    openai_server.script = lambda info: reply(json.dumps({"response": "=HYPERLINK(\"http://evil\",\"x\")"}))
    assert cli_main(["--home", str(tmp_path), "run", "--model", "openai:fake", "--base-url",
                     openai_server.base_url, "--limit", "2", "--no-progress"]) == 0
    run_id = capsys.readouterr().out.split()[1].rstrip(":")
    assert cli_main(["--home", str(tmp_path), "export", run_id, "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 2
    assert all(row["response"].startswith("'=HYPERLINK") for row in rows)
    assert all(not value.startswith(("=", "+", "@", "\t", "\r")) for row in rows for value in row.values())
    assert all(float(row["latency"]) >= 0 for row in rows)  # numbers stay numbers


def test_leaderboard_csv_neutralises_imported_model_names(tmp_path, capsys):
    from tests.test_importer import PROMPTS, _write_csv

    root = tmp_path / "paper"
    _write_csv(root / "Prompts" / "FoCus.csv", PROMPTS, ["personas", "context", "act_response"])
    _write_csv(root / "Responses" / "FoCus" / "=1+cmd.csv",
               [{"gen_response": "-hi", "response_time": "1.0"}] * 3, ["gen_response", "response_time"])
    home = tmp_path / "home"
    assert cli_main(["--home", str(home), "import-persobench", str(root)]) == 0
    capsys.readouterr()
    assert cli_main(["--home", str(home), "leaderboard", "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert rows and {row["model"] for row in rows} == {"'=1+cmd"}
    assert all(float(row["n"]) >= 1 for row in rows)


# ---------------------------------------------------------------------------------------------
# item 6: one-line errors instead of tracebacks


def test_field_over_128_kib_loads(tmp_path):
    path = tmp_path / "big.csv"
    big = "I like tea. " * 20000  # ~240 KB in one field
    path.write_text(f'{HEADER}"{big}",User1: hi,User2: hello\n', encoding="utf-8")
    [sample] = load_user_file(path)
    assert sum(len(s) for p in sample.personas for s in p.sentences) > 128 * 1024


def test_deeply_nested_jsonl(tmp_path, capsys):
    path = tmp_path / "deep.jsonl"
    path.write_text('{"personas": ' + "[" * 100000 + "]" * 100000 + ', "context": "c", "act_response": "r"}\n')
    one_line_error(capsys, ["show", str(path)], str(path), "row 1", "nested")


@pytest.mark.parametrize("record, column", [
    ({"personas": {"a": 1}, "context": "User1: hi", "act_response": "ok"}, "personas"),
    ({"personas": "p", "context": "User1: hi", "act_response": "ok", "id": {"x": 1}}, "id"),
    ({"personas": "p", "context": ["User1: hi", 5], "act_response": "ok"}, "context"),
    ({"personas": "p", "context": "User1: hi", "act_response": 3}, "act_response"),
])
def test_wrong_typed_jsonl_values_are_errors(tmp_path, record, column):
    path = tmp_path / "typed.jsonl"
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(DatasetFileError, match=rf"row 1, column {column}: expected"):
        load_user_file(path)


def test_dataset_path_that_is_a_folder(tmp_path, capsys):
    folder = tmp_path / "data.csv"
    folder.mkdir()
    one_line_error(capsys, ["--home", str(tmp_path), "run", "--dataset", str(folder), "--dry-run"],
                   str(folder), "folder")


@pytest.mark.parametrize("toml, field", [
    ('user = 5\n', "user"),
    ('user = "{output_format}"\nmax_tokens = "abc"\n', "max_tokens"),
    ('user = "{output_format}"\ntemperature = [1]\n', "temperature"),
])
def test_template_field_of_wrong_type(tmp_path, capsys, toml, field):
    path = tmp_path / "t.toml"
    path.write_text(toml)
    one_line_error(capsys, ["show", "sample", "--template", str(path)], str(path), field)


@pytest.mark.parametrize("url, needle", [("http://[::1", "IPv6"), ("http://127.0.0.1:99999/v1", "out of range"),
                                         ("http://user:hunter2@[::1/v1", "invalid base URL")])
def test_invalid_base_url(tmp_path, capsys, url, needle):
    err = one_line_error(capsys, ["--home", str(tmp_path), "run", "--model", "openai:m", "--base-url", url,
                                  "--dry-run"], needle)
    assert "hunter2" not in err


def test_option_timeout_not_a_number(tmp_path, capsys, openai_server):
    one_line_error(capsys, ["--home", str(tmp_path), "run", "--model", "openai:m", "--base-url",
                            openai_server.base_url, "--option", "timeout=abc", "--no-progress"], "timeout", "'abc'")


@pytest.mark.parametrize("damage", ["prompt-folder", "response-folder", "response-loop"])
def test_import_with_folder_or_symlink_loop_in_place_of_a_csv(tmp_path, capsys, damage):
    from tests.test_importer import make_paper_folder

    root = make_paper_folder(tmp_path / "paper")
    if damage == "prompt-folder":
        target = root / "Prompts" / "FoCus.csv"
        target.unlink()
        target.mkdir()
    elif damage == "response-folder":
        target = root / "Responses" / "FoCus" / "zzz.csv"
        target.mkdir()
    else:
        target = root / "Responses" / "FoCus" / "loop.csv"
        target.symlink_to("loop.csv")
    one_line_error(capsys, ["--home", str(tmp_path / "home"), "import-persobench", str(root)], str(target))


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every folder")
def test_unreadable_run_folder_is_a_one_line_error(tmp_path, capsys):
    run = _baseline_run(tmp_path)
    run.path.chmod(0)
    try:
        one_line_error(capsys, ["--home", str(tmp_path), "export", run.run_id], run.run_id)
    finally:
        run.path.chmod(0o755)


def _baseline_run(home: Path):
    from persobench.generation import run_generation

    return run_generation(dataset="sample", model="baseline:reference", limit=2, home=home)


def test_closed_pipe_is_one_line_not_a_traceback(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        f"{sys.executable} -m persobench show sample --limit 30 | head -1", shell=True, cwd=REPO, env=env,
        capture_output=True, text=True, timeout=120,
    )
    assert proc.stdout.startswith("=== sample 1/30")
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) <= 1
    assert proc.stderr.strip() in ("", "error: standard output was closed before everything was written (broken pipe)")


# ---------------------------------------------------------------------------------------------
# Hardening, third round (issue 25): the edges a fault sweep found, against real parts


EVIL = "evil\x1b]0;owned\x07\x1b[2J\x9b31m\u202e"


def _evil_run(home: Path) -> str:
    from persobench import pipeline

    run = pipeline.generate(GenerationConfig(dataset="sample", model="baseline:reference", limit=2),
                            store=RunStore(home))
    manifest = run.path / "manifest.json"
    data = json.loads(manifest.read_text(encoding="utf-8"))
    data["model"] = {"provider": "openai", "model": EVIL}  # an imported or edited store: the name is what the file says
    manifest.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return run.run_id


def _no_controls(text: str) -> None:
    for char in ("\x1b", "\x07", "\x9b", "\u202e"):
        assert char not in text, repr(text)


def test_runs_and_leaderboard_print_a_model_name_escaped(tmp_path, capsys):
    home = tmp_path / "home"
    _evil_run(home)
    capsys.readouterr()
    assert cli_main(["--home", str(home), "runs"]) == 0
    out = capsys.readouterr().out
    _no_controls(out)
    assert "evil\\u001b]0;owned\\u0007" in out
    assert cli_main(["--home", str(home), "runs", "--format", "json"]) == 0
    [listed] = json.loads(capsys.readouterr().out)["runs"]
    assert listed["model"]["model"] == EVIL  # escaped for the terminal, the same value for a program
    for fmt in ("table", "markdown"):
        assert cli_main(["--home", str(home), "leaderboard", "--format", fmt]) == 0
        captured = capsys.readouterr()
        _no_controls(captured.out + captured.err)
        assert "evil\\u001b" in captured.out


def test_dataset_text_and_error_lines_are_printed_escaped(tmp_path, capsys):
    path = tmp_path / "evil.jsonl"
    path.write_text(json.dumps({"personas": "I like \x1b[31mred", "context": "User1: hi\x1b[2J",
                                "act_response": "ok"}) + "\n", encoding="utf-8")
    assert cli_main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    _no_controls(out)
    assert "I like \\u001b[31mred" in out
    line = one_line_error(capsys, ["show", str(tmp_path / "x\x1b[2J.csv")], "x\\u001b[2J.csv")
    _no_controls(line)
