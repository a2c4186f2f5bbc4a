"""No byte of a credential the run knows reaches disk, exports or output (issue 9 item 3), whatever a
real (fake) server echoes back: the Authorization header in a 200 reply without choices, the key in
the reply text, credentials in the base URL and in secret-looking options."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from persobench.cli import main as cli_main
from persobench.store.run_store import RunStore
from tests.fakes import error, reply
from tests.fakes.fixtures import OPENAI_SECRET, openai_server  # noqa: F401
from tests.fakes.fixtures import LONG_KEY
from tests.cli_checks import all_bytes
from tests.cli_checks import run_cli
from tests.cli_checks import runs_of
import os

URL_PASSWORD = "pw-Hunter2-urlsecret"
OPTION_SECRET = "opt-5ecret-value-77"


def _echo_script(info):
    """Sample 0..: alternately a 200 without choices echoing the Authorization header in ``id``, and a
    reply whose text (inside and outside the JSON) contains the key."""
    auth = info.headers.get("authorization", "")
    if info.index % 2 == 0:
        return error(200, body={"id": f"echo {auth}", "object": "chat.completion", "created": 0})
    key = auth.removeprefix("Bearer ")
    return reply(f'Your key is {key}. {{"response": "I saw {key} and {auth}"}}')


def _all_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("credentials_in_url", [False, True])
def test_echoed_keys_never_reach_store_cache_exports_or_output(openai_server, tmp_path, capsys, credentials_in_url):
    openai_server.script = _echo_script
    home = tmp_path / "home"
    host = openai_server.base_url.split("://", 1)[1]
    # with user info in the URL, httpx sends it as HTTP Basic instead of the Bearer key: echoed too
    base_url = f"http://persouser:{URL_PASSWORD}@{host}" if credentials_in_url else openai_server.base_url
    assert cli_main(["--home", str(home), "run", "--model", "openai:fake", "--base-url", base_url, "--limit", "6",
                     "--no-progress", "--max-attempts", "1", "--option", f"x-api-key={OPTION_SECRET}",
                     "--option", "session_token=tok-" + OPTION_SECRET]) == 0
    # the server really saw and echoed the key
    basic = base64.b64encode(f"persouser:{URL_PASSWORD}".encode()).decode()
    sent = OPENAI_SECRET if not credentials_in_url else basic
    assert all(sent in r.headers.get("authorization", "") for r in openai_server.requests)
    [run] = RunStore(home).runs()
    table = run.read_table("generations")
    assert set(table["status"]) >= {"api_error"} and (table["status"] == "api_error").sum() == 3
    assert table["error"].str.contains("echo", na=False).any()  # the echo is there, without the key

    assert cli_main(["--home", str(home), "export", run.run_id, "--format", "csv", "-o", str(tmp_path / "x.csv")]) == 0
    assert cli_main(["--home", str(home), "export", run.run_id, "--format", "jsonl", "-o", str(tmp_path / "x.jsonl")]) == 0
    assert cli_main(["--home", str(home), "runs", "--format", "json"]) == 0
    captured = capsys.readouterr()
    everything = _all_bytes(home) + _all_bytes(tmp_path) + (captured.out + captured.err).encode()
    for secret in (OPENAI_SECRET, URL_PASSWORD, OPTION_SECRET, basic):
        assert secret.encode() not in everything, secret

    manifest = json.loads((run.path / "manifest.json").read_text())
    assert manifest["model"]["base_url"] == openai_server.base_url
    assert manifest["model"]["options"]["x-api-key"] == "[redacted]"  # the name is kept, not the value


# ---------------------------------------------------------------------------------------------
# item 1: the app sends the operator's key only where the operator configured it


def _launch_and_wait(home: Path, server, env: dict) -> list:
    from persobench.jobs import JobManager, LaunchChoice, launch_steps, plan_launch
    from tests.test_app import wait_for

    [plan] = plan_launch(home, [LaunchChoice("sample", "openai:fake", "vanilla", server.base_url)], limit=2, env=env)
    jobs = JobManager(home)
    job_id, started = jobs.launch("typed url", launch_steps([plan], limit=2, profile=None), env=env)
    assert started
    status = wait_for(lambda: (s := jobs.status(job_id)) and not s.active and s)
    assert status.state == "completed", status.message
    return plan


def test_typed_base_url_gets_no_operator_key_unless_allowed(openai_server, tmp_path, monkeypatch):
    monkeypatch.delenv("PERSOBENCH_KEY_HOSTS", raising=False)
    env = {**__import__("os").environ, "OPENAI_API_KEY": OPENAI_SECRET}
    plan = _launch_and_wait(tmp_path / "a", openai_server, env)
    assert plan["key_withheld"] and plan["problem"] == ""  # still launched, without the key
    assert len(openai_server.requests) == 2
    assert not any(OPENAI_SECRET in r.headers.get("authorization", "") for r in openai_server.requests)

    # the operator allows this server: now the key goes there
    host = openai_server.base_url.split("://", 1)[1].split("/", 1)[0]
    env["PERSOBENCH_KEY_HOSTS"] = f"other.example, {host}"
    plan = _launch_and_wait(tmp_path / "b", openai_server, env)
    assert not plan["key_withheld"]
    assert len(openai_server.requests) == 4
    assert all(OPENAI_SECRET in r.headers.get("authorization", "") for r in openai_server.requests[2:])


def test_key_allowed_rules():
    from persobench.core.secrets import key_allowed

    assert key_allowed(None)
    assert not key_allowed("http://evil.example/v1", env={})
    assert key_allowed("https://gw.example:8443/v1", configured=["https://gw.example:8443/v1/"], env={})
    assert not key_allowed("https://gw.example:9999/v1", configured=["https://gw.example:8443/v1"], env={})
    assert key_allowed("http://gw.example:81/v1", env={"PERSOBENCH_KEY_HOSTS": "gw.example"})
    assert not key_allowed("http://gw.example:81/v1", env={"PERSOBENCH_KEY_HOSTS": "gw.example:80"})
    assert not key_allowed("http://gw.example.evil.com/v1", env={"PERSOBENCH_KEY_HOSTS": "gw.example"})
    assert not key_allowed("http://[::1", env={"PERSOBENCH_KEY_HOSTS": "::1"})


def test_failures_page_shows_the_echo_but_not_the_key(openai_server, tmp_path, monkeypatch):
    """The Failures page (AppTest) of a run whose server echoed the key in errors and reply text shows
    those errors and raw outputs, scrubbed: the echo is visible, the key is not."""
    from tests.test_app import open_page, rendered_text

    openai_server.script = _echo_script
    home = tmp_path / "home"
    assert cli_main(["--home", str(home), "run", "--model", "openai:fake", "--base-url", openai_server.base_url,
                     "--limit", "6", "--no-progress", "--max-attempts", "1"]) == 0
    assert all(OPENAI_SECRET in r.headers.get("authorization", "") for r in openai_server.requests)
    monkeypatch.setenv("PERSOBENCH_HOME", str(home))
    # The page must not rely on the environment to hide the key: the app that shows a store need not
    # hold the key the run was made with.
    monkeypatch.delenv("OPENAI_API_KEY")
    at = open_page("pages/failures.py")
    statuses = list(at.selectbox(key="fail_status").options)
    assert any(s.startswith("api_error") for s in statuses) and len(statuses) == 2, statuses
    shown = []
    for option in statuses:
        at.selectbox(key="fail_status").set_value(option.split(" ")[0]).run()
        assert not at.exception
        shown.append(rendered_text(at))
    text = "\n".join(shown)
    assert OPENAI_SECRET not in text and OPENAI_SECRET[8:] not in text
    assert "echo Bearer ***" in text  # the error the server sent back, with the key scrubbed out
    assert "Your key is ***" in text  # the raw output of a reply quoting the key


# ---------------------------------------------------------------------------------------------
# Hardening, second round (issue 17): the edges a fault sweep found, against real parts


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


# ---------------------------------------------------------------------------------------------
# Hardening, fourth round (issue 39): files and inputs


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
