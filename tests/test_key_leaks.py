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
