"""Hardening, third round (issue 25): planted recovery files, archive bombs, huge JSONL integers,
terminal escapes in untrusted text, credentials in Ray addresses, out-of-range numbers. Each against
real parts (fake HTTP servers on 127.0.0.1, the real CLI, the real store and response cache)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from persobench.llm.response_cache import ResponseCache
from persobench.cli import main as cli_main
from persobench.generation.config import GenerationConfig
from persobench.generation.plan import plan_generation
from persobench.generation.recovery import keep_reply, recovery_paths, restore_replies
from persobench.providers.base import Completion
from persobench.store.run_store import RunStore
from tests.fakes.fixtures import openai_server  # noqa: F401

REPO = Path(__file__).resolve().parents[1]


def one_line_error(capsys, argv: list[str], *needles: str, code: int = 2) -> str:
    """Run the CLI in-process; it must exit ``code`` with one stderr line containing every needle."""
    assert cli_main(argv) == code
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line.strip()]
    assert len(err) == 1, err
    assert "Traceback" not in err[0]
    for needle in needles:
        assert needle in err[0], err[0]
    return err[0]


# ---------------------------------------------------------------------------------------------
# 1. Recovered replies: never planted through the shared temp dir, never written through a symlink

@pytest.fixture
def temp_dir(tmp_path, monkeypatch) -> Path:
    """A temp dir of the test's own (what ``tempfile.gettempdir()`` answers), world-writable like /tmp."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    folder.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def private_dir() -> Path:
    """The per-user fallback folder the recovery module must use (and check) in the temp dir."""
    return Path(tempfile.gettempdir()) / f"persobench-{os.geteuid()}"


def planted_line(run_id: str, key: str, text: str = "PLANTED") -> str:
    return json.dumps({"run": run_id, "key": key, "completion": Completion(text=json.dumps({"response": text})).to_dict(),
                       "latency": 0.0}) + "\n"


def _plan(home: Path, server, limit: int = 2):
    config = GenerationConfig(model="openai:fake", base_url=server.base_url, limit=limit)
    return plan_generation(config, store=RunStore(home))


def _run(home: Path, server, limit: int = 2) -> int:
    return cli_main(["--home", str(home), "run", "--model", "openai:fake", "--base-url", server.base_url,
                     "--limit", str(limit), "--no-progress"])


def _responses(home: Path, run_id: str) -> list[str]:
    return RunStore(home).get(run_id).read_table("generations")["response"].astype(str).tolist()


def test_replies_planted_in_the_shared_temp_dir_are_never_imported(openai_server, tmp_path, temp_dir):
    home = tmp_path / "home"
    plan = _plan(home, openai_server)
    # the old fallback's predictable name, and the new private folder made by someone else
    (temp_dir / f"persobench-recovered-{plan.run_id}.jsonl").write_text(
        "".join(planted_line(plan.run_id, key) for key in plan.keys), encoding="utf-8")
    if os.geteuid() == 0:  # only root can give a folder away: the private folder made by another user
        foreign = private_dir()
        foreign.mkdir(mode=0o700)
        (foreign / f"recovered-{plan.run_id}.jsonl").write_text(
            "".join(planted_line(plan.run_id, key) for key in plan.keys), encoding="utf-8")
        os.chown(foreign, 65534, 65534)
        os.chown(foreign / f"recovered-{plan.run_id}.jsonl", 65534, 65534)
    assert _run(home, openai_server) == 0
    assert len(openai_server.requests) == 2, "a planted reply replaced a request"
    assert not any("PLANTED" in r for r in _responses(home, plan.run_id))


def test_a_private_folder_open_to_others_or_a_symlink_is_not_used(openai_server, tmp_path, temp_dir):
    home = tmp_path / "home"
    plan = _plan(home, openai_server)
    elsewhere = tmp_path / "attacker"
    elsewhere.mkdir(mode=0o700)
    (elsewhere / f"recovered-{plan.run_id}.jsonl").write_text(planted_line(plan.run_id, plan.keys[0]))
    private_dir().symlink_to(elsewhere)
    assert _run(home, openai_server) == 0
    assert not any("PLANTED" in r for r in _responses(home, plan.run_id))
    private_dir().unlink()
    private_dir().mkdir(mode=0o700)
    private_dir().chmod(0o777)  # anybody could have put a file in it
    (private_dir() / f"recovered-{plan.run_id}.jsonl").write_text(planted_line(plan.run_id, plan.keys[0]))
    shutil.rmtree(plan.cache_dir)  # the replies must come from the server again, not from the planted file
    openai_server.reset_records()
    assert _run(home, openai_server) == 0
    assert len(openai_server.requests) == 2
    assert not any("PLANTED" in r for r in _responses(home, plan.run_id))


def test_a_planted_symlink_never_redirects_the_fallback_write(tmp_path, temp_dir):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    run_path = tmp_path / "home" / "runs" / "run-abc"  # missing: the run folder refuses the write
    (temp_dir / "persobench-recovered-run-abc.jsonl").symlink_to(victim)  # the old fallback name
    private_dir().mkdir(mode=0o700)
    (private_dir() / "recovered-run-abc.jsonl").symlink_to(victim)  # even inside a good private folder
    kept = keep_reply(run_path, "a" * 64, Completion(text="reply"), 0.1)
    assert victim.read_text() == "precious\n"
    assert kept is None
    (private_dir() / "recovered-run-abc.jsonl").unlink()
    kept = keep_reply(run_path, "a" * 64, Completion(text="reply"), 0.1)
    assert kept == private_dir() / "recovered-run-abc.jsonl"
    assert victim.read_text() == "precious\n"
    assert (kept.stat().st_mode & 0o777) == 0o600 and (private_dir().stat().st_mode & 0o777) == 0o700


def test_only_lines_of_the_run_and_its_keys_are_restored(tmp_path, temp_dir):
    run_path = tmp_path / "home" / "runs" / "run-abc"
    cache_dir = tmp_path / "home" / "responses"
    mine, foreign = "a" * 64, "b" * 64
    assert keep_reply(run_path, mine, Completion(text="mine"), 0.1) == private_dir() / "recovered-run-abc.jsonl"
    with open(private_dir() / "recovered-run-abc.jsonl", "a", encoding="utf-8") as handle:
        handle.write(planted_line("run-other", mine))  # another run's line
        handle.write(planted_line("run-abc", foreign))  # a key the run does not request (a judge answer)
        handle.write(planted_line("run-abc", "not-a-key"))
    assert restore_replies(run_path, cache_dir, keys=[mine]) == 1
    with ResponseCache(cache_dir) as cache:
        assert cache.get(mine)[0].text == "mine"
        assert foreign not in cache
    assert not (private_dir() / "recovered-run-abc.jsonl").exists()


def test_a_failed_recovery_write_leaves_no_empty_file(tmp_path, temp_dir):
    """A write refused after the file was created (a file size limit, as on a full disk) leaves no
    empty recovered.jsonl in the run folder and no cut line anywhere."""
    run_path = tmp_path / "home" / "runs" / "run-abc"
    run_path.mkdir(parents=True)
    script = (
        "import resource, sys, tempfile; tempfile.tempdir = sys.argv[2]\n"
        "from persobench.generation.recovery import keep_reply\n"
        "from persobench.providers.base import Completion\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (200, 200))\n"
        "print(keep_reply(sys.argv[1], 'a' * 64, Completion(text='x' * 5000), 0.1))\n")
    done = subprocess.run([sys.executable, "-c", script, str(run_path), str(temp_dir)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"
    assert not (run_path / "recovered.jsonl").exists()
    assert not any(p.is_file() for p in temp_dir.rglob("*"))
    assert recovery_paths(run_path)[0] == run_path / "recovered.jsonl"


# ---------------------------------------------------------------------------------------------
# 6. fetch-paper: the archive and every member it unpacks are capped (declared and counted)

def _bomb_zip(member_bytes: int, *, lie_to: int | None = None) -> bytes:
    """A small zip: the paper's two needed files and one ``member_bytes`` member of zeros (whose
    declared size is rewritten to ``lie_to`` when given: zip headers can lie)."""
    import io
    import struct
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("PersoBench-x/Prompts/FoCus.csv", "personas,context,act_response\np,c,r\n")
        archive.writestr("PersoBench-x/Responses/FoCus/m.csv", "response\nhi\n")
        archive.writestr("PersoBench-x/Responses/FoCus/big.csv", b"\0" * member_bytes)
    data = bytearray(buffer.getvalue())
    if lie_to is not None:  # rewrite the uncompressed size in the local header and the central directory
        size = struct.pack("<I", member_bytes)
        for offset in [i for i in range(len(data) - 4) if data[i:i + 4] == size]:
            data[offset:offset + 4] = struct.pack("<I", lie_to)
    return bytes(data)


def _fetch(capsys, home: Path, url: str, *flags: str) -> str:
    return one_line_error(capsys, ["--home", str(home), "fetch-paper", "--url", url, "--no-progress", *flags])


def _unpacked(home: Path) -> list[str]:
    return sorted(p.name for p in home.glob("*reference*")) if home.exists() else []


def test_a_zip_bomb_member_is_refused_by_default_in_one_line(tmp_path, capsys):
    from tests.test_fetch_paper import ArchiveServer

    home = tmp_path / "home"
    body = _bomb_zip(80 * 2**20)  # 80 MiB of zeros in a ~80 KB archive
    assert len(body) < 200_000
    with ArchiveServer(body) as server:
        line = _fetch(capsys, home, server.url())
    assert "big.csv" in line and "--max-member-bytes" in line and "nothing unpacked" in line
    assert _unpacked(home) == []
    assert sum(p.stat().st_size for p in home.rglob("*") if p.is_file()) < 1_000_000


def test_member_cap_flag_and_a_lying_header(tmp_path, capsys):
    from tests.test_fetch_paper import ArchiveServer

    home = tmp_path / "home"
    with ArchiveServer(_bomb_zip(300_000)) as server:
        line = _fetch(capsys, home, server.url(), "--max-member-bytes", "100000")
        assert "big.csv" in line and "300000" in line and "100000" in line
        assert _unpacked(home) == []
        server.body = _bomb_zip(300_000, lie_to=1000)  # declares 1000 bytes, holds 300000
        line = _fetch(capsys, home, server.url(), "--max-member-bytes", "100000")
        assert "big.csv" in line
        assert _unpacked(home) == []
        server.body = _bomb_zip(300_000)
        assert cli_main(["--home", str(home), "fetch-paper", "--url", server.url(), "--no-progress",
                         "--max-member-bytes", "400000"]) == 0
    assert (home / "reference" / "Responses" / "FoCus" / "big.csv").stat().st_size == 300_000


def test_archive_cap_counts_the_bytes_even_without_a_declared_length(tmp_path, capsys):
    from tests.test_fetch_paper import ArchiveServer

    home = tmp_path / "home"
    body = _bomb_zip(10) + b"\0" * 300_000  # a zip followed by padding: opens fine, but too big
    with ArchiveServer(body) as server:
        line = one_line_error(capsys, ["--home", str(home), "fetch-paper", "--url", server.url(), "--no-progress",
                                       "--max-archive-bytes", "200000"], "--max-archive-bytes", "200000")
        assert list((home / "downloads").iterdir()) == []
        server.declare_length = False  # no Content-Length: only counting finds the size
        line = one_line_error(capsys, ["--home", str(home), "fetch-paper", "--url", server.url(), "--no-progress",
                                       "--max-archive-bytes", "200000"], "--max-archive-bytes")
        assert list((home / "downloads").iterdir()) == []
        assert len(server.ranges) == 2
    assert _unpacked(home) == []
    assert line.startswith("error: ")


@pytest.mark.parametrize("value", ["0", "-5", "1" * 23])
def test_archive_caps_refuse_out_of_range_values(tmp_path, capsys, value):
    one_line_error(capsys, ["--home", str(tmp_path / "home"), "fetch-paper", "--url", "http://127.0.0.1:9/x.zip",
                            "--no-progress", "--max-member-bytes", value], "--max-member-bytes")


# ---------------------------------------------------------------------------------------------
# 7. An integer longer than Python reads (4,300 digits) is one line naming file, row and column

HUGE = "7" * 5000


def test_a_huge_integer_in_a_jsonl_dataset_names_file_row_and_column(tmp_path, capsys):
    path = tmp_path / "huge.jsonl"
    good = json.dumps({"personas": "p", "context": "User1: hi", "act_response": "ok"})
    path.write_text(good + "\n" + '{"personas": "p", "context": "User1: hi", "act_response": "ok", "id": '
                    + HUGE + "}\n", encoding="utf-8")
    line = one_line_error(capsys, ["show", str(path)], str(path), "row 2", "column id", "5000 digits")
    assert "set_int_max_str_digits" not in line
    path.write_text(good + "\n" + good + "\n" + '{"personas": ["p", ' + HUGE
                    + '], "context": "User1: hi", "act_response": "ok"}\n', encoding="utf-8")
    one_line_error(capsys, ["--home", str(tmp_path / "home"), "run", "--dataset", str(path), "--dry-run",
                            "--model", "baseline:reference"], str(path), "row 3", "column personas")


def test_a_huge_integer_in_a_raw_source_file_names_record_and_field(tmp_path):
    from persobench.datasets import sources
    from persobench.errors import DatasetError

    path = tmp_path / "valid_focus.json"
    path.write_text('{"data": [{"dialogID": "a"}, {"dialogID": ' + HUGE + "}]}", encoding="utf-8")
    with pytest.raises(DatasetError) as caught:
        sources.load_focus(str(path))
    message = str(caught.value)
    assert "\n" not in message and str(path) in message
    assert "record 2" in message and "dialogID" in message and "5000 digits" in message


def test_a_huge_integer_in_the_models_file_names_its_line_and_field(tmp_path, capsys):
    models = tmp_path / "models.toml"
    models.write_text(f'[models.x]\nprovider = "openai"\nmodel = "m"\nmax_tokens = {HUGE}\n', encoding="utf-8")
    line = one_line_error(capsys, ["--home", str(tmp_path / "home"), "run", "--models", str(models), "--model", "x",
                                   "--dry-run"], str(models), "line 4", "max_tokens", "5000 digits")
    assert "set_int_max_str_digits" not in line


# ---------------------------------------------------------------------------------------------
# 8. Terminal escape codes in untrusted text (a model name, dataset text, an error) are printed escaped

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


# ---------------------------------------------------------------------------------------------
# 9. A Ray address's credentials are never printed; an out-of-range --max-reply-bytes is refused

def test_a_ray_address_with_credentials_is_printed_in_its_public_form(tmp_path, capsys):
    pytest.importorskip("ray", reason="Ray is the optional extra persobench[ray]")
    import socket

    from persobench import pipeline

    home = tmp_path / "home"
    pipeline.generate(GenerationConfig(dataset="sample", model="baseline:reference", limit=2), store=RunStore(home))
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens on it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    capsys.readouterr()
    code = cli_main(["--home", str(home), "score", "--metrics", "dist1", "--executor", "ray", "--ray-address",
                     f"ray://alice:s3cretpw@127.0.0.1:{port}", "--no-progress"])
    captured = capsys.readouterr()
    assert code == 2, captured
    assert "s3cretpw" not in captured.out + captured.err and "alice" not in captured.out + captured.err
    assert f"ray://127.0.0.1:{port}" in captured.err
    assert len(captured.err.strip().splitlines()) == 1


@pytest.mark.parametrize("value", ["1" * 23, str(2**63), "0"])
def test_an_out_of_range_max_reply_bytes_is_refused_in_one_line(tmp_path, capsys, value):
    one_line_error(capsys, ["--home", str(tmp_path / "home"), "run", "--model", "baseline:reference", "--limit", "1",
                            "--max-reply-bytes", value], "--max-reply-bytes")
    assert not (tmp_path / "home" / "runs").exists() or not any((tmp_path / "home" / "runs").iterdir())
