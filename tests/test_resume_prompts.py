"""A killed and resumed run sends only its samples' prompts, each in one form (issue 39 item 15).

The report: a 24-sample run (``--concurrency 4``) killed with SIGKILL after 8 replies, then run again
twice, once sent 25 distinct prompts (25 requests, none repeated) to a server logging the sha256 of
each request's messages. The cause: the HTTP client wrote a request's head and its body with two
socket writes, and let the event loop run other tasks between them; a SIGKILL in between (the
scheduler of a loaded machine pausing the process right there) left the server a request head that
announced a body and then a closed connection. A server counting requests as they arrive counted a
prompt of no sample (empty), and the resume sent that sample again whole: 9 + 16 = 25 distinct.

Here the interleaving is forced: the run stops itself (SIGSTOP) right after the socket write that
starts its Nth request, the test kills it there, then runs the same command twice. The server
records every request as its bytes arrived, complete or not."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from persobench.generation import GenerationConfig, plan_generation
from persobench.store.run_store import RunStore
from tests.fakes.fixtures import ANTHROPIC_SECRET, OPENAI_SECRET
from tests.fakes.servers import FakeLLMServer, _Handler

REPO = Path(__file__).resolve().parents[1]
SAMPLES, CONCURRENCY = 24, 4

#: Runs ``python -m persobench`` after patching the socket's ``send``: right after the write that
#: starts the Nth POST request ($STOP_AT_REQUEST), the process stops itself, as a scheduler may pause
#: it anywhere. Only that write has gone out when the test kills it.
CHILD = """
import os, runpy, signal, socket, sys
stop_at = int(os.environ.get("STOP_AT_REQUEST") or 0)
real_send, started = socket.socket.send, [0]
def send(self, data, *args):
    sent = real_send(self, data, *args)
    if stop_at and bytes(data[:5]) == b"POST ":
        started[0] += 1
        if started[0] == stop_at:
            os.kill(os.getpid(), signal.SIGSTOP)
    return sent
socket.socket.send = send
sys.argv = ["persobench", *sys.argv[1:]]
runpy.run_module("persobench", run_name="__main__", alter_sys=True)
"""


class RecordingHandler(_Handler):
    """The fake server's handler, recording each request's declared and received body length and
    the sha256 of its messages before anything else (a body cut short is recorded too)."""

    def do_POST(self) -> None:  # noqa: N802
        import io

        declared = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(declared)
        try:
            digest = _messages_digest(json.loads(raw)["messages"])
        except (ValueError, KeyError, TypeError):
            digest = None
        with self.fake._lock:
            self.fake.received.append((declared, len(raw), digest))
        self.rfile = io.BufferedReader(io.BytesIO(raw))  # the fake answers from the same bytes
        super().do_POST()


class RecordingServer(FakeLLMServer):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.received: list[tuple[int, int, str | None]] = []

    @classmethod
    def handler_class(cls) -> type:
        return RecordingHandler


def _messages_digest(messages: list[dict]) -> str:
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode("utf-8")).hexdigest()


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        return handle.read().rsplit(")", 1)[1].split()[0] in ("T", "t")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads a process's state in /proc")
@pytest.mark.parametrize("flavour, stop_at", [("openai", CONCURRENCY + 5), ("openai", CONCURRENCY + 9),
                                              ("anthropic", CONCURRENCY + 5)])
def test_a_run_killed_between_two_writes_of_a_request_then_resumed_sends_each_prompt_in_one_form(
        tmp_path, flavour, stop_at):
    home = tmp_path / "home"
    model = f"{flavour}:fake"
    env = {**os.environ, "OPENAI_API_KEY": OPENAI_SECRET, "ANTHROPIC_API_KEY": ANTHROPIC_SECRET,
           "PYTHONPATH": str(REPO)}
    with RecordingServer(flavour=flavour, latency=0.05) as server:
        argv = [sys.executable, "-c", CHILD, "--home", str(home), "run", "--dataset", "sample",
                "--limit", str(SAMPLES), "--model", model, "--base-url", server.base_url,
                "--concurrency", str(CONCURRENCY), "--no-progress"]
        child = subprocess.Popen(argv, cwd=REPO, env={**env, "STOP_AT_REQUEST": str(stop_at)},
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while not _stopped(child.pid):
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, "the run never reached the request to stop at"
            time.sleep(0.005)
        child.kill()  # SIGKILL, while stopped right after that write
        child.wait(timeout=30)
        child.stdout.close()
        child.stderr.close()
        time.sleep(0.3)  # the server reads what the dead client's connection still holds
        for _ in range(2):  # run the same command again, twice
            again = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
            assert again.returncode == 0, again.stderr[-1000:]

    plan = plan_generation(GenerationConfig(dataset="sample", limit=SAMPLES, model=model,
                                            base_url=server.base_url), store=RunStore(home))
    # what the server sees as messages: Anthropic's API takes the system text apart from them
    prompts = {_messages_digest([m for m in messages if flavour == "openai" or m["role"] != "system"])
               for messages in plan.messages}
    assert len(prompts) == SAMPLES
    cut = [(declared, got) for declared, got, _ in server.received if got != declared]
    assert cut == [], f"requests that reached the server without their whole body: {cut}"
    sent = [digest for _, _, digest in server.received]
    assert set(sent) == prompts  # every sample asked, in one form, and nothing else
    [run] = RunStore(home).runs()
    assert run.manifest.status == "completed" and len(run.read_table("generations")) == SAMPLES


def test_every_provider_client_hands_each_request_to_the_kernel_in_one_write():
    """The providers' HTTP clients connect through :class:`WholeRequestBackend` (checked on the SDKs'
    own default clients, so an SDK that builds its pool otherwise fails here, not in a killed run)."""
    import anthropic
    import openai

    from persobench.providers.base import capped_http_client
    from persobench.providers.whole_requests import WholeRequestBackend

    for sdk in (openai, anthropic):
        client = capped_http_client(sdk, max_bytes=1024)
        assert isinstance(client._transport._pool._network_backend, WholeRequestBackend), sdk.__name__


def test_a_connection_holds_its_writes_until_it_reads():
    """Head, body and end of a request go out as one write when the reply is first read; a TLS
    start (a proxy's CONNECT) sends what is held before the handshake."""
    import asyncio

    from persobench.providers.whole_requests import WholeRequestStream

    class Wire:  # the inner stream: what reached the socket, write by write
        def __init__(self) -> None:
            self.writes: list[bytes] = []

        async def write(self, buffer, timeout=None):
            self.writes.append(buffer)

        async def read(self, max_bytes, timeout=None):
            return b"HTTP/1.1 200 OK"

        async def start_tls(self, ssl_context, server_hostname=None, timeout=None):
            return Wire()

        def get_extra_info(self, info):
            return None

    async def scenario() -> list[bytes]:
        wire = Wire()
        stream = WholeRequestStream(wire)
        for part in (b"POST /v1 HTTP/1.1\r\nContent-Length: 2\r\n\r\n", b"{}", b""):
            await stream.write(part)
        assert wire.writes == []  # nothing left before the request was whole
        assert await stream.read(100) == b"HTTP/1.1 200 OK"
        await stream.write(b"CONNECT h:443 HTTP/1.1\r\n\r\n")
        await stream.start_tls(None)
        return wire.writes

    assert asyncio.run(scenario()) == [b"POST /v1 HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", b"CONNECT h:443 HTTP/1.1\r\n\r\n"]
