"""Broken stores (issue 9 items 7 and 8): a run folder that cannot be read is listed as unreadable with
the reason and skipped everywhere else with a visible warning; nothing outside ``runs/`` is ever read
or written through a symlink or a path given as a run id."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from persobench.cli import main as cli_main
from persobench.generation import run_generation
from persobench.store.run_store import RunStore, StoreError

BREAKAGES = ("created_at-int", "extra-str", "garbage-generations", "garbage-scores", "manifest-unreadable")


def _scored_run(home: Path, limit: int):
    run = run_generation(dataset="sample", model="baseline:reference", limit=limit, home=home)
    assert cli_main(["--home", str(home), "score", run.run_id, "--metrics", "dist1", "--no-progress"]) == 0
    return run


def _break(run, how: str) -> None:
    manifest = run.path / "manifest.json"
    data = json.loads(manifest.read_text())
    if how == "created_at-int":
        data["created_at"] = 5
        manifest.write_text(json.dumps(data))
    elif how == "extra-str":
        data["extra"] = "str"
        manifest.write_text(json.dumps(data))
    elif how == "garbage-generations":
        run.table_path("generations").write_bytes(b"not parquet at all")
    elif how == "garbage-scores":
        run.table_path("scores").write_bytes(b"PAR1 garbage")
    elif how == "manifest-unreadable":  # the test runs as root, where chmod cannot hide a file
        manifest.unlink()
        manifest.mkdir()


@pytest.fixture()
def broken_store(tmp_path, capsys):
    home = tmp_path / "home"
    good = _scored_run(home, 2)
    broken = {}
    for limit, how in enumerate(BREAKAGES, start=3):
        run = _scored_run(home, limit)
        _break(run, how)
        broken[how] = run
    capsys.readouterr()
    return {"home": home, "good": good, "broken": broken}


def test_runs_lists_every_broken_run_as_unreadable_with_its_reason(broken_store, capsys):
    home = broken_store["home"]
    assert cli_main(["--home", str(home), "runs"]) == 0
    out = capsys.readouterr().out
    assert broken_store["good"].run_id in out
    reasons = {"created_at-int": "created_at", "extra-str": "'extra'", "garbage-generations": "generations.parquet",
               "garbage-scores": "scores.parquet", "manifest-unreadable": "unreadable"}
    for how, run in broken_store["broken"].items():
        [line] = [line for line in out.splitlines() if run.run_id in line]
        assert line.startswith("unreadable:") and reasons[how] in line, line
    assert cli_main(["--home", str(home), "runs", "--format", "json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert [r["run_id"] for r in listing["runs"]] == [broken_store["good"].run_id]
    assert len(listing["problems"]) == len(BREAKAGES)


@pytest.mark.parametrize("command", [
    ["leaderboard"], ["leaderboard", "--format", "csv"], ["score", "--metrics", "dist1", "--no-progress"],
])
def test_commands_skip_broken_runs_with_a_warning(broken_store, capsys, command):
    home = broken_store["home"]
    assert cli_main(["--home", str(home), *command]) == 0
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if line.startswith("warning: skipped unreadable run")]
    assert len(warnings) == len(BREAKAGES)
    for run in broken_store["broken"].values():
        assert any(run.run_id in line for line in warnings)
    assert "Traceback" not in captured.err


def test_compare_works_beside_broken_runs(broken_store, capsys):
    home = broken_store["home"]
    other = _scored_run(home, 9)
    capsys.readouterr()
    good = broken_store["good"].run_id
    assert cli_main(["--home", str(home), "compare", good, other.run_id, "--metric", "dist1", "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["n"] == 2
    assert captured.err.count("warning: skipped unreadable run") == len(BREAKAGES)


def test_every_app_page_renders_beside_broken_runs(broken_store, monkeypatch):
    from tests.test_app import PAGES, open_page, rendered_text

    monkeypatch.setenv("PERSOBENCH_HOME", str(broken_store["home"]))
    for page in PAGES:
        at = open_page(page)  # asserts no exception
        sidebar = " ".join(str(e.label) for e in at.sidebar.expander)
        assert f"{len(BREAKAGES)} unreadable run folder(s)" in sidebar, page
    text = rendered_text(open_page("pages/data.py"))
    for run in broken_store["broken"].values():
        assert run.run_id in text


# ---------------------------------------------------------------------------------------------
# item 8: nothing outside the store


def test_symlinked_run_is_not_a_run_and_score_never_writes_through_it(tmp_path, capsys):
    home = tmp_path / "home"
    elsewhere = tmp_path / "elsewhere"
    outside = run_generation(dataset="sample", model="baseline:reference", limit=2, home=elsewhere)
    link = home / "runs" / outside.run_id
    link.parent.mkdir(parents=True)
    link.symlink_to(outside.path, target_is_directory=True)
    before = sorted(p.name for p in outside.path.iterdir())

    runs, problems = RunStore(home).scan()
    assert runs == [] and [p.path for p in problems] == [link] and "symbolic link" in problems[0].reason
    assert cli_main(["--home", str(home), "score", outside.run_id, "--metrics", "dist1", "--no-progress"]) == 2
    assert cli_main(["--home", str(home), "score", "--metrics", "dist1", "--no-progress"]) == 0
    assert sorted(p.name for p in outside.path.iterdir()) == before  # no scores.parquet written there
    with pytest.raises(StoreError, match="symbolic link"):
        RunStore(home).get(outside.run_id)


@pytest.mark.parametrize("name", ["../../x", "..", "../home/runs/x", "/etc", ".hidden"])
def test_run_ids_that_are_paths_are_refused(tmp_path, capsys, name):
    home = tmp_path / "a" / "home"
    run_generation(dataset="sample", model="baseline:reference", limit=2, home=home)
    # a readable run two levels up: `export ../../x` must not find it
    target = tmp_path / "a" / "x"
    shutil.copytree(next((home / "runs").iterdir()), target)
    capsys.readouterr()
    assert cli_main(["--home", str(home), "export", name]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    with pytest.raises(StoreError):
        RunStore(home).get(name)
