"""Hardening, second round (issue 17): the edges a fault sweep found, each against real parts (fake HTTP
servers on 127.0.0.1, the real CLI, the real store and job runner)."""

from __future__ import annotations

import io
import json
import math
import os
import time
import zipfile
from pathlib import Path

import pytest

from persobench.cli import main as cli_main
from persobench.store.run_store import RunStore
from tests.fakes import drip, error, reply
from tests.fakes.fixtures import anthropic_server, openai_server  # noqa: F401


def one_line_error(capsys, argv: list[str], *needles: str, code: int = 2) -> str:
    """Run the CLI in-process; it must exit ``code`` with one stderr line containing every needle."""
    assert cli_main(argv) == code
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line.strip()]
    assert len(err) == 1, err
    for needle in needles:
        assert needle in err[0], err[0]
    return err[0]


def all_bytes(*folders: Path) -> bytes:
    return b"".join(p.read_bytes() for folder in folders for p in folder.rglob("*") if p.is_file())


def runs_of(key: str, size: int = 16) -> list[bytes]:
    """Every ``size``-character run of ``key``: none of them may be stored anywhere."""
    return [key[i:i + size].encode() for i in range(0, len(key) - size + 1)]


def run_cli(home: Path, server, *extra: str) -> int:
    return cli_main(["--home", str(home), "run", "--model", "openai:fake", "--base-url", server.base_url,
                     "--no-progress", *extra])


# ---------------------------------------------------------------------------------------------
# Secrets: a long key echoed in an error body is masked before the text is cut

LONG_KEY = "sk-" + "".join("abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789"[(i * 7) % 46] for i in range(197))


def test_long_echoed_key_never_stored_even_in_part(openai_server, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", LONG_KEY)
    assert len(LONG_KEY) == 200
    # a 200 reply with no choices that echoes the Authorization header: the error text quotes the body
    openai_server.script = lambda info: error(200, body={"id": "echo " + info.headers.get("authorization", ""),
                                                         "object": "chat.completion"})
    home = tmp_path / "home"
    assert run_cli(home, openai_server, "--limit", "2", "--max-attempts", "1") == 3  # nothing succeeded
    assert all(LONG_KEY in r.headers["authorization"] for r in openai_server.requests)
    [run] = RunStore(home).runs()
    errors = run.read_table("generations")["error"]
    assert errors.str.contains("echo", na=False).all()  # the echo is kept, the key is not
    for fmt in ("csv", "jsonl"):
        assert cli_main(["--home", str(home), "export", run.run_id, "--format", fmt,
                         "-o", str(tmp_path / f"x.{fmt}")]) == 0
    stored = all_bytes(home, tmp_path)
    leaked = [piece for piece in runs_of(LONG_KEY) if piece in stored]
    assert leaked == [], f"{len(leaked)} runs of the key stored, e.g. {leaked[:1]}"


def test_scrub_masks_long_runs_of_a_secret_and_shorten_masks_before_cutting():
    from persobench.core.secrets import scrub, shorten

    key = LONG_KEY
    assert key[:174] not in scrub("error: " + key[:174], [key])  # a cut copy
    assert key[30:90] not in scrub(f"...{key[30:90]}...", [key])  # a run from the middle
    assert scrub("a short word sk- stays", [key]) == "a short word sk- stays"  # runs under 16 chars stay
    text = shorten("body: " + key + " tail", 200, [key])
    assert len(text) <= 200 and "***" in text and key[:16] not in text
    assert shorten("x" * 500, 100, []).startswith("x" * 99) and len(shorten("x" * 500, 100, [])) <= 100


# ---------------------------------------------------------------------------------------------
# Secrets: credentials in a base URL typed into the New run page

URL_PASSWORD = "pw-Hunter2-urlsecret"
QUERY_TOKEN = "qtok-93fj2k-secretvalue"


def test_public_url_strips_user_info_and_secret_query_parameters():
    from persobench.core.secrets import public_text, public_url

    url = f"http://user:{URL_PASSWORD}@host.example:8000/v1?api-key={QUERY_TOKEN}&api-version=2024-06&token=t0k3n"
    clean = public_url(url)
    assert clean == "http://host.example:8000/v1?api-version=2024-06"
    assert public_url("https://api.example/v1") == "https://api.example/v1"
    assert "user" not in public_url("http://user@h/v1") and public_url("http://user@h/v1") == "http://h/v1"
    line = f"=== run: python -m persobench run --base-url {url} --limit 2"
    shown = public_text(line)
    assert URL_PASSWORD not in shown and QUERY_TOKEN not in shown and "t0k3n" not in shown
    assert "--base-url http://host.example:8000/v1?api-version=2024-06 --limit 2" in shown


def test_url_credentials_travel_in_the_environment_only():
    from persobench.core.secrets import URL_CREDENTIALS_ENV, credentials_environment, public_url, url_with_credentials

    url = f"http://user:{URL_PASSWORD}@host.example/v1?api-key={QUERY_TOKEN}"
    env = credentials_environment([url, "http://plain.example/v1"])
    assert set(env) == {URL_CREDENTIALS_ENV}  # plain URLs need nothing
    assert url_with_credentials(public_url(url), env=env) == url
    assert url_with_credentials("http://other.example/v1", env=env) == "http://other.example/v1"
    assert credentials_environment(["http://plain.example/v1"]) == {}


def test_base_url_credentials_never_reach_job_files_or_card(openai_server, tmp_path, monkeypatch):
    from persobench.jobs import JobManager, LaunchChoice, launch_steps, plan_launch
    from tests.test_app import wait_for

    monkeypatch.delenv("PERSOBENCH_KEY_HOSTS", raising=False)
    openai_server.script = lambda info: error(401, f"bad credentials {info.headers.get('authorization', '')}")
    host = openai_server.base_url.split("://", 1)[1]
    # user info (sent as HTTP Basic), and a query token (the SDK keeps it in the path: the fake answers 404)
    urls = [f"http://persouser:{URL_PASSWORD}@{host}", f"http://{host}/?api-key={QUERY_TOKEN}"]
    home = tmp_path / "home"
    env = dict(os.environ)
    plans = plan_launch(home, [LaunchChoice("sample", "openai:fake", mode, url)
                               for url, mode in zip(urls, ("vanilla", "cot"))], limit=2, env=env)
    assert URL_PASSWORD not in json.dumps(plans, default=str) and QUERY_TOKEN not in json.dumps(plans, default=str)
    jobs = JobManager(home)
    job_id, started = jobs.launch("typed url", launch_steps(plans, limit=2, profile=None), env=env)
    assert started
    status = wait_for(lambda: (s := jobs.status(job_id)) and not s.active and s)
    assert status.state == "failed"
    # the child got the credentials (through its environment): the server saw them
    assert openai_server.requests, status.log_tail
    import base64

    basic = base64.b64encode(f"persouser:{URL_PASSWORD}".encode()).decode()
    assert all(basic in r.headers.get("authorization", "") for r in openai_server.requests)
    card = status.message + status.log_tail + json.dumps([s.to_dict() for s in status.steps])
    stored = all_bytes(home)
    for secret in (URL_PASSWORD, QUERY_TOKEN, basic):
        assert secret not in card, secret
        assert secret.encode() not in stored, secret
    assert "api-key=[redacted]" in status.log_tail  # the child had the query token, the card does not show it


# ---------------------------------------------------------------------------------------------
# Network and downloads: schemes, a download that does not open


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.org/x.zip", "data:,hello"])
def test_fetch_paper_accepts_http_and_https_only(tmp_path, capsys, url):
    home = tmp_path / "home"
    assert cli_main(["--home", str(home), "fetch-paper", "--url", url, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "http" in err[0] and "https" in err[0], err
    assert not (home / "downloads").exists() or not any((home / "downloads").iterdir())


def _tiny_paper_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("PersoBench-x/Prompts/FoCus.csv", "personas,context,act_response\np,c,r\n")
        archive.writestr("PersoBench-x/Responses/FoCus/m.csv", "response\nhi\n")
    return buffer.getvalue()


def test_a_download_that_does_not_open_is_deleted_and_fetched_again(tmp_path):
    from persobench.datasets.paper_archive import PaperArchiveError, fetch_paper
    from tests.test_fetch_paper import ArchiveServer

    home = tmp_path / "home"
    with ArchiveServer(b"<html><body>mirror maintenance</body></html>") as server:
        with pytest.raises(PaperArchiveError, match="not a readable zip archive"):
            fetch_paper(home, url=server.url())
        assert [p.name for p in (home / "downloads").iterdir()] == []  # nothing kept to fail again
        server.body = _tiny_paper_zip()
        result = fetch_paper(home, url=server.url())
    assert result.files == 2 and (result.folder / "Prompts" / "FoCus.csv").is_file()
    assert len(server.ranges) == 2  # it really downloaded again


# ---------------------------------------------------------------------------------------------
# Network: --timeout is a deadline; a long Retry-After is said; a reply's size is capped


def test_timeout_is_a_deadline_for_the_whole_request(openai_server, tmp_path):
    openai_server.script = lambda info: drip(interval=0.3)  # ~100 bytes: 30 s, no read waits 2 s
    home = tmp_path / "home"
    started = time.monotonic()
    assert run_cli(home, openai_server, "--limit", "1", "--max-attempts", "1", "--timeout", "2") == 3
    assert time.monotonic() - started < 15
    [run] = RunStore(home).runs()
    [err] = run.read_table("generations")["error"]
    assert err.startswith("timeout") and "2" in err, err


def test_long_retry_after_is_announced_with_its_length_and_reason(openai_server, tmp_path, capsys):
    openai_server.script = lambda info: (error(429, "slow down", headers={"Retry-After": "2"})
                                         if info.attempt == 1 else None)
    home = tmp_path / "home"
    assert cli_main(["--home", str(home), "run", "--model", "openai:fake", "--base-url", openai_server.base_url,
                     "--limit", "1", "--concurrency", "1"]) == 0
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if "waiting" in line]
    assert notes, err
    assert "2 s" in notes[0] and "Retry-After" in notes[0] and "429" in notes[0], notes[0]


def test_progress_json_says_the_run_waits(openai_server, tmp_path):
    from persobench.generation import run_generation

    openai_server.script = lambda info: (error(429, "slow down", headers={"Retry-After": "1"})
                                         if info.attempt == 1 else None)
    seen: list[str] = []
    run_generation(dataset="sample", model="openai:fake", base_url=openai_server.base_url, limit=1,
                   home=tmp_path / "home", progress=lambda info: seen.append(info.note))
    assert any("waiting 1 s" in note and "Retry-After" in note for note in seen), seen
    assert seen[-1] == ""  # cleared once the wait is over


def test_a_huge_reply_is_capped_and_recorded_as_too_large(openai_server, tmp_path):
    from persobench.providers.base import DEFAULT_MAX_REPLY_BYTES

    big = "A" * (5 * 2**20)
    openai_server.script = lambda info: reply(big) if info.index == 0 else None
    home = tmp_path / "home"
    assert run_cli(home, openai_server, "--limit", "2", "--max-attempts", "1", "--concurrency", "1") == 0
    [run] = RunStore(home).runs()
    table = run.read_table("generations")
    row = table[table["status"] == "api_error"].iloc[0]
    assert row["error"].startswith("too_large"), row["error"]
    assert str(DEFAULT_MAX_REPLY_BYTES) in row["error"] and "--max-reply-bytes" in row["error"]
    assert row["raw_text"] and row["raw_text"].lstrip().startswith("{") and len(row["raw_text"]) <= 4096
    assert (table["status"] == "ok").sum() == 1
    assert openai_server.requests[0].headers.get("accept-encoding") == "identity"  # the cap counts real bytes
    assert sum(p.stat().st_size for p in (home / "responses").rglob("*") if p.is_file()) < 2**20
    # the option lets a big reply through
    home2 = tmp_path / "home2"
    openai_server.reset_records()
    assert run_cli(home2, openai_server, "--limit", "1", "--max-attempts", "1",
                   "--max-reply-bytes", str(8 * 2**20)) == 0
    [run2] = RunStore(home2).runs()
    assert run2.read_table("generations").iloc[0]["raw_text"] == big


def test_the_size_cap_and_deadline_are_shared_by_the_anthropic_provider(anthropic_server, tmp_path):
    from persobench.generation import RetryPolicy, run_generation

    anthropic_server.script = lambda info: (reply("B" * (2 * 2**20)) if info.index == 0
                                            else drip(interval=0.3) if info.index == 1 else None)
    run = run_generation(dataset="sample", model="anthropic:fake", base_url=anthropic_server.base_url, limit=3,
                         concurrency=1, home=tmp_path / "home",
                         retry=RetryPolicy(max_attempts=1, timeout=2))
    errors = sorted(str(e).split(":")[0] for e in run.read_table("generations")["error"] if e)
    assert "too_large" in errors and "timeout" in errors, errors


def test_remember_url_keeps_the_full_url_in_memory_only():
    from persobench.core.secrets import URL_CREDENTIALS_ENV, credentials_environment, remember_url, url_with_credentials

    url = f"https://u:{URL_PASSWORD}@gw.example/v1?token={QUERY_TOKEN}"
    public = remember_url(url)
    assert public == "https://gw.example/v1" and remember_url("https://plain.example") == "https://plain.example"
    env = credentials_environment([public])  # the public form is enough in the same process
    assert url_with_credentials(public, env=env) == url and URL_CREDENTIALS_ENV in env


# ---------------------------------------------------------------------------------------------
# Input: lone surrogates, NUL bytes, template placeholders, numbers


def test_lone_surrogate_in_jsonl_is_an_error_naming_row_and_column(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    good = {"personas": "I like tea.", "context": "User1: hi", "act_response": "hello"}
    path.write_text(json.dumps(good) + "\n" + json.dumps(good).replace("I like tea.", "I like \\ud800 tea.") + "\n",
                    encoding="utf-8")
    one_line_error(capsys, ["--home", str(tmp_path / "h"), "show", str(path)], str(path), "row 2", "personas",
                   "surrogate")
    one_line_error(capsys, ["--home", str(tmp_path / "h"), "run", "--dataset", str(path), "--model",
                            "baseline:reference", "--no-progress"], str(path), "row 2", "personas")


def test_nul_byte_in_a_csv_cell_is_reported_with_its_row(tmp_path):
    from persobench.datasets.user_files import DatasetFileError, load_user_file

    path = tmp_path / "nul.csv"
    path.write_bytes(b"personas,context,act_response\np1,User1: c1,r1\np2,User1: c\x002,r2\n")
    with pytest.raises(DatasetFileError) as info:
        load_user_file(path)
    message = str(info.value)
    assert str(path) in message and "row 2" in message and "context" in message and "NUL" in message


def test_every_template_field_is_rendered_and_unknown_placeholders_are_errors(tmp_path):
    from persobench.datasets import load_dataset
    from persobench.prompts.templates import TemplateError, build_messages, load_template

    good = tmp_path / "good.toml"
    good.write_text('mode = "vanilla"\nsystem = "You are {responder}. Personas:\\n{personas}"\n'
                    'user = "{context}\\n{output_format}"\noutput_format = "Reply as {responder} in JSON: '
                    '{\\"response\\": \\"...\\"}"\n', encoding="utf-8")
    [sample] = load_dataset("sample", limit=1)
    system, user = build_messages(sample, load_template(good))
    assert "{" + "personas}" not in system["content"] and "{responder}" not in system["content"]
    assert sample.personas[0].sentences[0] in system["content"]
    assert f"Reply as {sample.responder}" in user["content"] and '{"response": "..."}' in user["content"]

    for field in ("system", "user", "output_format"):
        bad = tmp_path / f"bad_{field}.toml"
        fields = {"system": "s", "user": "{context} {output_format}", "output_format": '{"response": "x"}'}
        fields[field] += " {Personas}"
        bad.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in fields.items()), encoding="utf-8")
        with pytest.raises(TemplateError) as info:
            load_template(bad)
        assert str(bad) in str(info.value) and "{Personas}" in str(info.value) and field in str(info.value)


@pytest.mark.parametrize("flag, value", [
    ("--timeout", "0"), ("--timeout", "-1"), ("--timeout", "nan"), ("--timeout", "inf"),
    ("--temperature", "nan"), ("--temperature", "-0.5"), ("--top-p", "1.5"), ("--top-p", "nan"),
    ("--max-tokens", "0"), ("--limit", "0"), ("--max-reply-bytes", "0"), ("--checkpoint-every", "0"),
])
def test_bad_numbers_are_refused_in_one_line_naming_the_flag(tmp_path, capsys, flag, value):
    one_line_error(capsys, ["--home", str(tmp_path), "run", "--model", "baseline:reference", "--no-progress",
                            "--dry-run", flag, value], flag, value)
    assert not (tmp_path / "runs").exists()


def test_the_app_checks_numbers_with_the_same_rules(tmp_path):
    from persobench.generation.numbers import check_number
    from persobench.jobs import LaunchChoice, plan_launch

    [row] = plan_launch(tmp_path, [LaunchChoice("sample", "baseline:reference", "vanilla")], limit=-3)
    assert "--limit" in row["problem"] and "-3" in row["problem"]
    with pytest.raises(ValueError, match="--timeout"):
        check_number("timeout", math.nan)


# ---------------------------------------------------------------------------------------------
# The store's edges: a damaged cache.db, an unreadable manifest, a run where nothing succeeded


def test_damaged_response_cache_is_named_with_the_way_out(tmp_path, capsys):
    home = tmp_path / "home"
    (home / "responses").mkdir(parents=True)
    (home / "responses" / "cache.db").write_bytes(b"this is not an SQLite header" * 100)
    for extra in (["--dry-run"], []):
        line = one_line_error(capsys, ["--home", str(home), "run", "--model", "baseline:reference", "--limit", "2",
                                       "--no-progress", *extra], str(home / "responses" / "cache.db"), "damaged")
        assert "move" in line and "runs" in line


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


def test_exit_status_3_when_no_sample_succeeded_and_0_when_some_did(openai_server, tmp_path, capsys):
    openai_server.script = lambda info: error(500, "down")
    assert run_cli(tmp_path / "a", openai_server, "--limit", "2", "--max-attempts", "1") == 3
    assert "no sample succeeded" in capsys.readouterr().err
    openai_server.script = lambda info: error(500, "down") if info.index == 0 else None
    openai_server.reset_records()
    assert run_cli(tmp_path / "b", openai_server, "--limit", "2", "--max-attempts", "1", "--concurrency", "1") == 0
