"""Hardening, fourth round (issue 39), files and inputs: the kept samples of a prompt table are
checked before they are trusted (item 8), a FIFO planted as a recovery file never blocks a run
(item 9), ``-o`` never replaces a device or FIFO (item 10), a remembered concurrency level is only
a hint (item 11), a base URL's query never reaches a file (item 12) and JSONL is split on "\\n"
only (item 14)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from persobench.datasets import parsed_tables
from persobench.datasets.parsed_tables import table_samples, tables_dir_of_store
from persobench.importer import import_persobench, samples_for_run
from persobench.store import RunStore
from tests.fakes.fixtures import OPENAI_SECRET, openai_server  # noqa: F401
from tests.test_importer import make_paper_folder


def _forget_parsed(monkeypatch) -> None:
    """As a new process: no prompt table loaded in memory."""
    monkeypatch.setattr(parsed_tables, "_LOADED", {})
    monkeypatch.setattr(parsed_tables, "_KEYS", {})


@pytest.fixture(autouse=True)
def _fresh_tables(monkeypatch):
    _forget_parsed(monkeypatch)  # nothing another test loaded in this process


# ---------------------------------------------------------------------------------------------
# item 8: the kept samples of a prompt table are verified when read back


def _edit_kept(store: RunStore, old: str, new: str) -> Path:
    """Edit the text of the one kept table the way a hand (or a disk) would: valid JSON, the right
    dataset, one reference changed."""
    (kept,) = tables_dir_of_store(store.home).glob("*.json")
    text = kept.read_text(encoding="utf-8")
    assert old in text
    kept.write_text(text.replace(old, new), encoding="utf-8")
    return kept


def test_an_edited_kept_table_is_parsed_again_never_trusted(tmp_path, monkeypatch):
    store = RunStore(tmp_path / "home")
    report = import_persobench(store, make_paper_folder(tmp_path / "paper"))
    run = store.get(report.runs[0].run_id)
    prompts_file = run.manifest.extra["import"]["prompts_file"]
    kept = _edit_kept(store, "Pasta, mostly: it is quick.", "Rice, mostly: it is slow.")

    _forget_parsed(monkeypatch)
    samples = samples_for_run(run)
    assert samples["focus:1"].reference == "Pasta, mostly: it is quick."  # the table's, not the edited file's
    parsed = {s.id: s for s in parsed_tables.parse_all("focus", source=prompts_file)}
    assert samples == parsed and all(samples[i].input_hash == parsed[i].input_hash for i in parsed)
    assert "Rice, mostly" not in kept.read_text(encoding="utf-8")  # rebuilt from the table


def test_a_kept_table_copied_under_another_tables_key_is_refused(tmp_path, monkeypatch):
    """A file of another version of the table (valid, checksummed for its own key) put in place of
    this version's is not this version's samples."""
    folder = make_paper_folder(tmp_path / "paper")
    table, cache = folder / "Prompts" / "FoCus.csv", tmp_path / "samples"
    original = table_samples("focus", table, cache)
    (first,) = cache.glob("*.json")
    table.write_text(table.read_text(encoding="utf-8").replace("Pasta, mostly", "Rice, mostly"), encoding="utf-8")
    edited = table_samples("focus", table, cache)
    (second,) = set(cache.glob("*.json")) - {first}
    second.write_bytes(first.read_bytes())  # the old version's samples under the new version's key
    _forget_parsed(monkeypatch)
    again = table_samples("focus", table, cache)
    assert again == edited and again != original
    assert again[1].reference.startswith("Rice, mostly")


def test_lexical_scores_of_an_imported_run_ignore_an_edited_kept_table(tmp_path, monkeypatch):
    """The symptom of the report: ``score`` read edited references from the kept table and stored
    other BLEU and ROUGE-1 values without a word."""
    from persobench.pipeline import score

    values = {}
    for edited in (False, True):
        store = RunStore(tmp_path / f"home-{edited}")
        _forget_parsed(monkeypatch)
        report = import_persobench(store, make_paper_folder(tmp_path / f"paper-{edited}"))
        if edited:
            _edit_kept(store, "I will walk my dogs in the hills.", "Hiking with the dogs, of course!")
        _forget_parsed(monkeypatch)
        score([r.run_id for r in report.runs], store=store, metrics=["bleu", "rouge1"])
        frames = [store.get(r.run_id).read_table("scores") for r in report.runs]
        values[edited] = sorted((f"{sid}|{m}", round(float(v), 12)) for frame in frames
                                for sid, m, v in zip(frame["sample_id"], frame["metric"], frame["value"]))
    assert values[True] == values[False] and len(values[False]) > 0


# ---------------------------------------------------------------------------------------------
# item 9: a FIFO planted as a recovery file never blocks a run

REPO = Path(__file__).resolve().parents[1]


def _child_env(temp: Path) -> dict[str, str]:
    return {**os.environ, "OPENAI_API_KEY": OPENAI_SECRET, "PYTHONPATH": str(REPO), "TMPDIR": str(temp)}


@pytest.mark.parametrize("where", ["run folder", "private folder"])
def test_a_fifo_planted_as_the_recovery_file_is_ignored_and_the_run_goes_on(openai_server, tmp_path, where):
    home, temp = tmp_path / "home", tmp_path / "tmp"
    temp.mkdir()
    argv = [sys.executable, "-m", "persobench", "--home", str(home), "run", "--model", "openai:fake",
            "--base-url", openai_server.base_url, "--limit", "3", "--no-progress"]
    first = subprocess.run(argv, cwd=REPO, env=_child_env(temp), capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    [run] = RunStore(home).runs()
    if where == "run folder":
        fifo = run.path / "recovered.jsonl"
    else:
        private = temp / f"persobench-{os.geteuid()}"
        private.mkdir(mode=0o700)
        fifo = private / f"recovered-{run.run_id}.jsonl"
    os.mkfifo(fifo, 0o600)
    started = time.monotonic()
    try:
        again = subprocess.run(argv, cwd=REPO, env=_child_env(temp), capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"run hung on the FIFO at {fifo}")
    assert again.returncode == 0, again.stderr
    assert time.monotonic() - started < 60 and stat.S_ISFIFO(os.lstat(fifo).st_mode)  # left alone, not read


def test_a_reply_is_never_written_into_a_fifo(tmp_path):
    """A refused cache write keeps the reply in a recovery file: a FIFO there (nobody reading it)
    must neither block the run nor take the reply; the reply goes to the next place."""
    temp, run_path = tmp_path / "tmp", tmp_path / "home" / "runs" / "run-fifo"
    temp.mkdir()
    run_path.mkdir(parents=True)
    os.mkfifo(run_path / "recovered.jsonl", 0o600)
    script = ("from persobench.generation.recovery import keep_reply; from persobench.providers.base import Completion; "
              f"print(keep_reply({str(run_path)!r}, 'a' * 64, Completion(text='kept'), 0.5))")
    try:
        done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=_child_env(temp), capture_output=True,
                              text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("keeping a reply blocked on a FIFO")
    assert done.returncode == 0, done.stderr
    kept = Path(done.stdout.strip())
    assert kept == temp / f"persobench-{os.geteuid()}" / "recovered-run-fifo.jsonl"
    assert '"kept"' in kept.read_text(encoding="utf-8") and stat.S_ISFIFO(os.lstat(run_path / "recovered.jsonl").st_mode)


# ---------------------------------------------------------------------------------------------
# item 10: -o writes into a character device or FIFO, never replaces what is not a regular file


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


# ---------------------------------------------------------------------------------------------
# item 11: a remembered concurrency level is a hint, read only when it is a whole number in range


def _remember(home: Path, server: str, entry: str) -> None:
    """``<home>/concurrency.json`` holding ``entry`` (JSON text, so 1e400 and NaN stay as written)."""
    home.mkdir(parents=True, exist_ok=True)
    text = '{"version": 1, "servers": {' + json.dumps(server) + ": " + entry + "}}"
    (home / "concurrency.json").write_text(text, encoding="utf-8")


@pytest.mark.parametrize("entry, held", [
    ('{"level": 1e400}', None), ('{"level": -1e400}', None), ('{"level": NaN}', None),
    ('{"level": 2.5}', None), ('{"level": "8"}', None), ('{"level": true}', None), ('{"level": 0}', None),
    ('{"level": 100000000000000000000000000000}', None), ('{"level": [4]}', None),
    ('{"level": 6, "refused": 1e400, "probe_rounds": 1e400}', (6, None, 4)),
    ('{"level": 6, "refused": NaN, "probe_rounds": -Infinity}', (6, None, 4)),
    ('{"level": 6.0, "refused": 7, "probe_rounds": 16}', (6, 7, 16)),
    ('{"level": 6, "refused": "7", "probe_rounds": 2.5}', (6, None, 4)),
])
def test_a_remembered_level_that_is_not_a_whole_number_in_range_is_ignored(tmp_path, entry, held):
    from persobench.llm.concurrency import AdaptiveLimit, HeldLevel, LevelMemory

    _remember(tmp_path, "http://127.0.0.1:9/v1", entry)
    memory = LevelMemory(tmp_path, "openai", "http://127.0.0.1:9/v1")
    assert memory.load() == (HeldLevel(*held) if held else None)
    limit = AdaptiveLimit(ceiling=32, memory=memory)  # the run's start: never an exception
    assert 1 <= limit.limit <= 32


def test_a_memory_nested_too_deeply_is_ignored(tmp_path):
    from persobench.llm.concurrency import LevelMemory

    _remember(tmp_path, "http://127.0.0.1:9/v1", '{"level": ' + "[" * 100_000 + "4" + "]" * 100_000 + "}")
    assert LevelMemory(tmp_path, "openai", "http://127.0.0.1:9/v1").load() is None


def test_a_run_with_an_infinite_remembered_level_completes(openai_server, tmp_path, capsys):
    from persobench.cli import main

    home = tmp_path / "home"
    _remember(home, openai_server.base_url, '{"level": 1e400, "refused": null, "probe_rounds": 4}')
    argv = ["--home", str(home), "run", "--model", "openai:fake", "--base-url", openai_server.base_url, "--limit", "3",
            "--concurrency", "auto", "--no-progress"]
    assert main(argv) == 0, capsys.readouterr().err
    [run] = RunStore(home).runs()
    assert run.manifest.status == "completed" and len(openai_server.requests) == 3
    assert main(argv) == 0  # and again: nothing "failed for good"
