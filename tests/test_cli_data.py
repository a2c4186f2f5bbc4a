"""The data-side CLI: datasets, show, runs (as a user runs it: a real subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from persobench.store.run_store import RunStore
from persobench.cli import main as cli_main
from tests.cli_checks import one_line_error
import pytest
import stat

REPO = Path(__file__).resolve().parents[1]


def cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PERSOBENCH_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "persobench", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def test_show_sample_prints_two_annotated_samples_and_prompts(tmp_path: Path) -> None:
    result = cli("show", "sample", "--limit", "2", home=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.count("=== sample ") == 2 and "=== sample 2/2: sample:" in out
    assert out.count("<system>") == 2 and out.count("<user>") == 2
    assert "[context]" in out and "[reference]" in out
    assert "Participant Personas:" in out and "family paper" in out  # the paper's prompt by default
    ours = cli("show", "sample", "--limit", "1", "--template", "persobench", home=tmp_path).stdout
    assert '{"response": "<your reply>"}' in ours and "family persobench" in ours
    local = cli("show", "sample", "--limit", "1", "--model", "local:smollm2", home=tmp_path).stdout
    assert "<system>" not in local and "paper-open vanilla" in local and "(in 110 words or less)." in local



def test_show_with_a_preset_prints_what_its_runs_send(tmp_path: Path) -> None:
    """A -vllm preset sends paper-open (raw text); Gemini one user message starting with the system text."""
    vllm = cli("show", "sample", "--limit", "1", "--model", "gemma-7b-it-vllm", home=tmp_path).stdout
    assert "paper-open vanilla" in vllm and "<system>" not in vllm
    gemini = cli("show", "sample", "--limit", "1", "--model", "gemini-1.5-pro", "--format", "json", home=tmp_path)
    messages = json.loads(gemini.stdout)[0]["messages"]
    assert [m["role"] for m in messages] == ["user"]
    assert messages[0]["content"].startswith("You are a helpful response generator to output JSON.\n\nI will provide")


def test_show_json_is_machine_readable(tmp_path: Path) -> None:
    result = cli("show", "sample", "--limit", "3", "--mode", "cot", "--format", "json", home=tmp_path)
    items = json.loads(result.stdout)
    assert len(items) == 3 and items[0]["messages"][0]["role"] == "system"
    assert '"reasoning"' in items[0]["messages"][1]["content"]
    assert set(items[0]) == {"sample", "messages"} and items[0]["sample"]["id"].startswith("sample:")
    # Exactly the messages a run would send: the same text the generation plan builds.
    from persobench.generation import GenerationConfig, plan_generation
    from persobench.store.run_store import RunStore

    plan = plan_generation(GenerationConfig(model="openai:gpt-4o-mini", mode="cot", limit=3), store=RunStore(tmp_path))
    assert [item["messages"] for item in items] == plan.messages
    raw = json.loads(cli("show", "sample", "--limit", "3", "--template", "paper-open", "--format", "json",
                         home=tmp_path).stdout)
    assert [[m["role"] for m in item["messages"]] for item in raw] == [["user"]] * 3


def test_datasets_lists_sizes(tmp_path: Path) -> None:
    result = cli("datasets", "--format", "json", home=tmp_path)
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert rows["sample"]["samples"] == "30" and rows["sample"]["kind"] == "builtin"
    assert rows["pec-hub"]["kind"] == "hub"


def test_unknown_dataset_is_a_one_line_error(tmp_path: Path) -> None:
    result = cli("show", "nope", home=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("error: unknown dataset 'nope'") and "sample" in result.stderr


def test_runs_lists_store_and_says_when_empty(tmp_path: Path) -> None:
    empty = cli("runs", home=tmp_path)
    assert empty.returncode == 0 and "no runs" in empty.stdout
    from persobench.store.run_store import RunManifest, RunStore

    RunStore(tmp_path).create(RunManifest(run_id="r1", dataset="sample", sample_ids=("sample:0",),
                                          model={"provider": "baseline", "model": "reference"}, mode="vanilla",
                                          template="vanilla", template_hash="h"))
    listed = cli("runs", home=tmp_path)
    assert "r1" in listed.stdout and "baseline:reference" in listed.stdout


# ---------------------------------------------------------------------------------------------
# Hardening, second round (issue 17): the edges a fault sweep found, against real parts


def test_export_of_a_run_with_an_unreadable_manifest_says_so(tmp_path, capsys):
    home = tmp_path / "home"
    argv = ["--home", str(home), "run", "--model", "baseline:reference", "--limit", "2", "--no-progress"]
    assert cli_main(argv) == 0
    [run] = RunStore(home).runs()
    capsys.readouterr()
    for content in ("", "{not json"):
        (run.path / "manifest.json").write_text(content)
        line = one_line_error(capsys, ["--home", str(home), "export", run.run_id], "manifest.json", "unreadable")
        assert "no run" not in line and "move" in line
        line = one_line_error(capsys, argv, "manifest.json", "unreadable")
        assert "move" in line


# ---------------------------------------------------------------------------------------------
# Hardening, fourth round (issue 39): files and inputs


@pytest.fixture(scope="module")
def small_store(tmp_path_factory) -> tuple[Path, str]:
    """A store with one scored run of the built-in dataset (a report has a board to show)."""
    from persobench.cli import main
    from persobench.generation import run_generation

    home = tmp_path_factory.mktemp("output-store") / "home"
    run = run_generation(dataset="sample", model="baseline:reference", limit=4, store=RunStore(home))
    assert main(["--home", str(home), "score", "--metrics", "bleu"]) == 0
    return home, run.run_id


def _output_commands(store: tuple[Path, str], target: Path | str) -> dict[str, list[str]]:
    home, run_id = store
    return {"report": ["--home", str(home), "report", "-o", str(target)],
            "export": ["--home", str(home), "export", run_id, "-o", str(target)]}


def _device(path: Path, minor: int) -> Path:
    """A character device node like /dev/null (1, 3) or /dev/full (1, 7), made where the test wants it."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
    except PermissionError:
        pytest.skip("making a device node needs CAP_MKNOD")
    return path


@pytest.mark.parametrize("command", ["report", "export"])
def test_output_into_a_character_device_writes_into_it(small_store, tmp_path, command, capsys):
    from persobench.cli import main

    null = _device(tmp_path / "null", 3)
    assert main(_output_commands(small_store, null)[command]) == 0
    assert stat.S_ISCHR(os.lstat(null).st_mode)  # still the device, not a file in its place
    assert [p.name for p in tmp_path.iterdir()] == ["null"]  # no temporary file left beside it

    full = _device(tmp_path / "full", 7)  # every write: ENOSPC
    capsys.readouterr()
    assert main(_output_commands(small_store, full)[command]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(full) in err[0] and "the disk is full" in err[0], err
    assert stat.S_ISCHR(os.lstat(full).st_mode)


@pytest.mark.parametrize("command", ["report", "export"])
def test_output_into_a_fifo_reaches_its_reader(small_store, tmp_path, command):
    from persobench.cli import main

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = tmp_path / "got"
    with open(got, "wb") as sink:
        reader = subprocess.Popen(["cat", str(fifo)], stdout=sink)
        try:
            assert main(_output_commands(small_store, fifo)[command]) == 0
            assert reader.wait(timeout=30) == 0
        finally:
            if reader.poll() is None:
                reader.kill()
                reader.wait()
                os.unlink(fifo)
    text = got.read_text(encoding="utf-8")
    assert ("<html" in text) if command == "report" else text.startswith("sample_id,")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("command", ["report", "export"])
def test_output_onto_a_socket_or_folder_is_refused_in_one_line(small_store, tmp_path, command, capsys):
    import socket

    from persobench.cli import main

    listening = socket.socket(socket.AF_UNIX)
    place = tmp_path / "sock"
    listening.bind(str(place))
    try:
        for target in (place, tmp_path):
            capsys.readouterr()
            assert main(_output_commands(small_store, target)[command]) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and str(target) in err[0] and "Traceback" not in err[0], err
        assert stat.S_ISSOCK(os.lstat(place).st_mode) and sorted(p.name for p in tmp_path.iterdir()) == ["sock"]
    finally:
        listening.close()


def test_report_dash_o_dash_writes_to_standard_output(small_store, tmp_path, monkeypatch, capsys):
    from persobench.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(_output_commands(small_store, "-")["report"]) == 0
    captured = capsys.readouterr()
    assert "<html" in captured.out and "</html>" in captured.out
    assert list(tmp_path.iterdir()) == []  # no file named "-"


def test_output_through_a_symlink_writes_its_file_and_keeps_the_link(small_store, tmp_path):
    from persobench.cli import main

    real = tmp_path / "real.csv"
    real.write_text("old", encoding="utf-8")
    link = tmp_path / "link.csv"
    link.symlink_to(real)
    assert main(_output_commands(small_store, link)["export"]) == 0
    assert link.is_symlink() and real.read_text(encoding="utf-8").startswith("sample_id,")
