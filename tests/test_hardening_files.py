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
from persobench.generation.importer import import_persobench, samples_for_run
from persobench.store.run_store import RunStore
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


# ---------------------------------------------------------------------------------------------
# item 12: a base URL's query values never reach a file

#: Credentials as a gateway takes them in the query string, under names that do not look secret.
QUERY_SECRETS = {"pw": "hunter2-query-pw", "jwt": "eyJhbGciOi.query-jwt", "session_id": "sess-8f2k-query"}


def _query_url(base: str) -> str:
    return base + "?" + "&".join(f"{name}={value}" for name, value in QUERY_SECRETS.items()) + "&api-version=2"


def _stored_secrets(*folders: Path) -> list[str]:
    text = b"".join(p.read_bytes() for folder in folders for p in folder.rglob("*") if p.is_file())
    return [value for value in QUERY_SECRETS.values() if value.encode() in text]


def test_public_url_keeps_only_the_query_parameters_known_to_be_public():
    from persobench.core.secrets import public_text, public_url, url_without_credentials

    url = _query_url("http://user:pw0rd@host.example:8000/v1")
    assert public_url(url) == "http://host.example:8000/v1?api-version=2"
    assert url_without_credentials(url) == "http://host.example:8000/v1?pw=&jwt=&session_id=&api-version="
    assert public_text(f"GET {url} failed") == "GET http://host.example:8000/v1?api-version=2 failed"
    assert public_url("http://h/v1?api-version=2024-06&version=3") == "http://h/v1?api-version=2024-06&version=3"


def test_query_credentials_reach_neither_concurrency_json_nor_resume_json(openai_server, tmp_path):
    from persobench.cli import main
    from persobench.llm.concurrency import HeldLevel, LevelMemory

    home = tmp_path / "home"
    url = _query_url(openai_server.base_url)
    LevelMemory(home, "openai", url).save(HeldLevel(4, 5))
    assert LevelMemory(home, "openai", url).load() == HeldLevel(4, 5)
    main(["--home", str(home), "run", "--model", "openai:fake", "--base-url", url, "--limit", "2",
          "--concurrency", "auto", "--no-progress"])  # the SDK puts the query inside the path: the fake says 404
    [run] = RunStore(home).runs()
    assert (run.path / "resume.json").is_file() and (home / "concurrency.json").is_file()
    assert _stored_secrets(home) == []
    resume = json.loads((run.path / "resume.json").read_text(encoding="utf-8"))
    assert resume["config"]["base_url"] == openai_server.base_url + "?api-version=2"
    assert "the base URL's credentials" in resume["left_out"]


def test_query_credentials_never_reach_the_apps_job_json(openai_server, tmp_path, monkeypatch):
    from persobench.jobs import JobManager, LaunchChoice, launch_steps, plan_launch
    from tests.test_app import wait_for

    monkeypatch.delenv("PERSOBENCH_KEY_HOSTS", raising=False)
    home = tmp_path / "home"
    env = dict(os.environ)
    url = _query_url(openai_server.base_url)
    plans = plan_launch(home, [LaunchChoice("sample", "openai:fake", "vanilla", url)], limit=2, env=env)
    assert not [v for v in QUERY_SECRETS.values() if v in json.dumps(plans, default=str)]
    jobs = JobManager(home)
    job_id, started = jobs.launch("query url", launch_steps(plans, limit=2, profile=None), env=env)
    assert started
    status = wait_for(lambda: (s := jobs.status(job_id)) and not s.active and s)
    assert status.state in ("completed", "failed")  # it ran; with the query in the path the SDK gets 404s
    assert _stored_secrets(home) == []
    for value in QUERY_SECRETS.values():
        assert value not in status.message + status.log_tail


#: A mirror link's query as a presigned URL carries it.
MIRROR_QUERY = {"token": "signed-mirror-token", "X-Amz-Signature": "deadbeefsig", "pw": "hunter2-mirror"}


@pytest.fixture()
def mirror(reference_dir, tmp_path, monkeypatch):
    """(home, archive bytes, a server of the archive): a mirror of the paper's data on 127.0.0.1."""
    from tests.test_fetch_paper import ArchiveServer, build_archive

    home = tmp_path / "home"
    monkeypatch.setenv("PERSOBENCH_HOME", str(home))
    body = build_archive(reference_dir, "zip")
    with ArchiveServer(body) as server:
        yield home, body, server


def _mirror_url(server) -> str:
    return server.url() + "?" + "&".join(f"{name}={value}" for name, value in MIRROR_QUERY.items())


def _mirror_secrets_in(data: bytes) -> list[str]:
    return [value for value in MIRROR_QUERY.values() if value.encode() in data]


def test_a_mirror_urls_query_never_reaches_the_download_files(mirror):
    import hashlib

    from persobench.datasets.paper_archive import MARKER, PaperArchiveError, fetch_paper

    home, body, server = mirror
    pin = {"sha256": hashlib.sha256(body).hexdigest(), "size": len(body)}
    server.cut_at = len(body) // 2  # the first download stops half way: its progress file stays
    with pytest.raises(PaperArchiveError):
        fetch_paper(home, url=_mirror_url(server), **pin)
    interrupted = b"".join(p.read_bytes() for p in (home / "downloads").glob("*.json"))
    assert interrupted and _mirror_secrets_in(interrupted) == []
    fetch_paper(home, url=_mirror_url(server), **pin)
    marker = (home / "reference" / MARKER).read_bytes()
    assert server.url().encode() in marker and _mirror_secrets_in(marker) == []


def test_a_mirror_urls_query_never_reaches_job_json_and_the_job_still_gets_it(mirror):
    from persobench.jobs import JobManager, fetch_paper_steps
    from persobench.jobs.manager import step_base_urls
    from persobench.core.secrets import URL_CREDENTIALS_ENV, credentials_environment
    from tests.test_app import wait_for

    home, _, server = mirror
    steps = fetch_paper_steps(score="none", url=_mirror_url(server), trust_unpinned=True)
    assert step_base_urls(steps) == [server.url()]
    carried = credentials_environment(step_base_urls(steps))[URL_CREDENTIALS_ENV]
    assert json.loads(carried) == {server.url(): _mirror_url(server)}
    jobs = JobManager(home)
    job_id, started = jobs.launch("mirror", steps)
    assert started
    status = wait_for(lambda: (s := jobs.status(job_id)) and not s.active and s)
    assert status.state == "completed", status.log_tail  # fetched with the full URL, and imported
    assert _mirror_secrets_in(b"".join(p.read_bytes() for p in home.rglob("*") if p.is_file())) == []


# ---------------------------------------------------------------------------------------------
# item 14 (part): JSONL is split on "\n" only; a raw U+2028 (or U+2029, U+0085) inside a string is text

#: Characters ``str.splitlines`` breaks on that JSON allows raw inside a string.
NOT_LINE_BREAKS = "\u2028\u2029\u0085"


def test_a_user_jsonl_row_holding_a_raw_line_separator_loads(tmp_path):
    from persobench.datasets import load_dataset

    path = tmp_path / "data.jsonl"
    rows = [{"personas": f"I like tea.{NOT_LINE_BREAKS}I have a cat.", "context": "User1: Hi!",
             "act_response": f"Hello{NOT_LINE_BREAKS} there."},
            {"personas": "I run.", "context": "User1: Plans?", "act_response": "A run."}]
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    assert "\u2028" in path.read_text(encoding="utf-8")  # raw, as the file holds it
    samples = load_dataset(str(path))
    assert [s.metadata["row"] for s in samples] == [1, 2]
    assert samples[0].reference == f"Hello{NOT_LINE_BREAKS} there."


def test_a_recovered_reply_holding_a_raw_line_separator_is_restored(tmp_path, monkeypatch):
    import tempfile

    from persobench.generation.recovery import keep_reply, restore_replies
    from persobench.llm.response_cache import ResponseCache
    from persobench.providers.base import Completion

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    run_path = tmp_path / "home" / "runs" / "run-ls"
    run_path.mkdir(parents=True)
    text = json.dumps({"response": f"one{NOT_LINE_BREAKS}two"}, ensure_ascii=False)
    assert keep_reply(run_path, "b" * 64, Completion(text=text), 0.25) == run_path / "recovered.jsonl"
    assert "\u2028" in (run_path / "recovered.jsonl").read_text(encoding="utf-8")
    assert restore_replies(run_path, tmp_path / "cache", keys=["b" * 64]) == 1
    with ResponseCache(tmp_path / "cache") as cache:
        assert cache.get("b" * 64)[0].text == text


def test_batch_output_lines_holding_a_raw_line_separator_are_read_whole():
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from persobench.providers.batch_api import HttpClient

    lines = [{"custom_id": "k1", "response": {"body": {"text": f"a{NOT_LINE_BREAKS}b"}}}, {"custom_id": "k2"}]
    body = ("\n".join(json.dumps(line, ensure_ascii=False) for line in lines) + "\n").encode("utf-8")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "application/jsonl")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = HttpClient(f"http://127.0.0.1:{server.server_address[1]}", {})
        assert client.lines("/files/f1/content") == lines
        # the first record alone (Anthropic recovery reads its custom id), streamed: whole too
        assert client.first_line("/files/f1/content") == lines[0]
        client.close()
    finally:
        server.shutdown()
        server.server_close()
