"""Fake LLM servers speaking real HTTP on 127.0.0.1: an OpenAI-compatible Chat Completions server and
an Anthropic Messages server, scriptable per request.

A script is a function ``RequestInfo -> Action | None`` (``None``: the default reply). Actions:
:func:`reply` (optionally slow, cut off, refused), :func:`error` (any status, Retry-After),
:func:`hang` (no answer until the client times out), :func:`reset` (TCP reset, no response),
:func:`malformed` (HTTP 200 with a body that is not JSON), :func:`drip` (a valid reply sent one byte
at a time, so no single read ever times out). With ``limits`` (:mod:`tests.fakes.buckets`) the server
also counts requests and tokens per minute, states them in its flavour's rate-limit headers and
refuses (429, ``retry-after``) what its buckets cannot pay for.

The server records every request (prompt, per-prompt attempt number, arrival time, headers) and
the peak number of requests in flight, so tests assert on what the server saw, not on what the
client believes it sent.

Standalone (used by the benchmark)::

    python -m tests.fakes --flavour openai --latency 0.1   # prints the base URL
    python -m tests.fakes --latency 0.2 --rpm 600 --start requests=20 --tpm 40000   # rate-limited
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import socket
import struct
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BytesIO
from typing import Any, Callable, Mapping

from tests.fakes.buckets import RateLimits, count_tokens, prompt_tokens


@dataclass(frozen=True)
class Action:
    """What the server does with one request."""

    kind: str
    """"reply", "error", "hang", "reset", "malformed" or "drip"."""
    text: str | None = None
    """Reply text (``None``: the default JSON reply)."""
    finish_reason: str = "stop"
    """OpenAI finish_reason ("stop", "length", "content_filter"); mapped for Anthropic."""
    refusal: str | None = None
    """OpenAI: put this in message.refusal with null content."""
    status: int = 200
    """HTTP status for errors."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra response headers (e.g. Retry-After)."""
    body: Any = None
    """Error body (JSON-able); default: the flavour's error envelope."""
    message: str = "fake error"
    """Error message inside the default envelope."""
    delay: float | None = None
    """Seconds before answering (``None``: the server's default latency)."""
    usage: tuple[Any, Any] | None = (12, 7)
    """(prompt, completion) tokens reported; ``None`` omits usage. Sent as given: a hostile server's
    negative, fractional, string or absurd counts too."""
    interval: float = 0.0
    """Drip: seconds between two bytes of the reply."""


def reply(text: str | None = None, *, finish_reason: str = "stop", delay: float | None = None,
          refusal: str | None = None, usage: tuple[Any, Any] | None = (12, 7)) -> Action:
    return Action("reply", text=text, finish_reason=finish_reason, delay=delay, refusal=refusal, usage=usage)


def error(status: int, message: str = "fake error", *, headers: Mapping[str, str] | None = None,
          body: Any = None, delay: float | None = None) -> Action:
    return Action("error", status=status, message=message, headers=dict(headers or {}), body=body, delay=delay)


def _total(usage: tuple[Any, Any]) -> Any:
    try:
        return sum(usage)
    except TypeError:  # hostile counts (strings): the total is as odd as they are
        return f"{usage[0]}{usage[1]}"


def nested(depth: int = 100_000) -> str:
    """A reply nested ``depth`` deep (``[[[...]]]``): valid JSON that a recursive parser cannot read."""
    return "[" * depth + "]" * depth


def hang(seconds: float) -> Action:
    return Action("hang", delay=seconds)


def reset() -> Action:
    return Action("reset")


def malformed() -> Action:
    return Action("malformed")


def drip(text: str | None = None, *, interval: float = 0.5) -> Action:
    """A complete, valid reply whose body goes out one byte every ``interval`` seconds (headers at once)."""
    return Action("drip", text=text, interval=interval)


#: The OpenAI-compatible raw-text endpoint (vLLM serves it beside chat completions): the request
#: carries ``prompt`` instead of ``messages``.
COMPLETIONS_PATH = "/v1/completions"


@dataclass(frozen=True)
class RequestInfo:
    """One request as the server received it."""

    index: int
    """0-based arrival order across all prompts."""
    attempt: int
    """1-based count of requests so far carrying this prompt."""
    prompt: str
    """The last user message."""
    system: str
    """The system prompt (OpenAI system message or Anthropic ``system``)."""
    body: Mapping[str, Any]
    """The JSON request body."""
    headers: Mapping[str, str]
    """Request headers (lower-case names)."""
    path: str
    """Request path."""
    arrived: float
    """``time.monotonic()`` at arrival."""

    @property
    def prompt_id(self) -> str:
        return prompt_id(self.prompt)


def prompt_id(prompt: str) -> str:
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:12]


def default_text(info: RequestInfo) -> str:
    """A valid PersoBench reply; adds "reasoning" when the prompt asks for it (cot). With a schema
    in the request (structured output), exactly the schema's fields, each within its maxLength."""
    schema = requested_schema(info.body)
    obj: dict[str, str] = {}
    if schema is not None:
        for name, prop in schema.get("properties", {}).items():
            text = f"{name} for {info.prompt_id}, " * 40
            obj[name] = text[: int(prop.get("maxLength", 60))]
        return json.dumps(obj)
    if '"reasoning"' in info.prompt:
        obj["reasoning"] = "It fits the persona."
    obj["response"] = f"Reply to {info.prompt_id}"
    return json.dumps(obj)


def requested_schema(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The JSON schema a request asks the reply to match: OpenAI ``response_format`` (either form)
    or Anthropic ``output_config.format``; ``None`` for a plain request."""
    fmt = body.get("response_format")
    if isinstance(fmt, Mapping):
        if fmt.get("type") == "json_schema":
            return (fmt.get("json_schema") or {}).get("schema")
        return fmt.get("schema")
    output = (body.get("output_config") or {}).get("format")
    return output.get("schema") if isinstance(output, Mapping) else None


def response_format_problem(body: Mapping[str, Any], accepted: tuple[str, ...]) -> tuple[int, Any] | None:
    """Check an OpenAI request's ``response_format`` the way servers do; (status, error body) when
    it is rejected. A form not in ``accepted`` is answered as llama-cpp-python's server answers the
    json_schema form: HTTP 500 wrapping the request-validation error."""
    fmt = body.get("response_format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, Mapping) else None
    if kind not in accepted:
        message = (
            "1 validation error for CreateChatCompletionRequest\nresponse_format.type\n  Input should be "
            f"'text' or 'json_object' [type=literal_error, input_value={kind!r}, input_type=str]"
        )
        return 500, {"error": {"message": message, "type": "internal_server_error", "param": None, "code": None}}
    if kind == "json_schema":
        spec = fmt.get("json_schema") or {}
        if not spec.get("name") or not isinstance(spec.get("schema"), Mapping):
            return 400, {"error": {"message": "response_format.json_schema needs name and schema",
                                   "type": "invalid_request_error"}}
        if spec.get("strict") is not True:
            return 400, {"error": {"message": "this fake wants strict json_schema", "type": "invalid_request_error"}}
        schema = spec["schema"]
    else:
        schema = fmt.get("schema")
    if not isinstance(schema, Mapping) or schema.get("type") != "object" or not schema.get("properties"):
        return 400, {"error": {"message": f"response_format {kind}: schema must be an object schema",
                               "type": "invalid_request_error"}}
    return None


Script = Callable[[RequestInfo], "Action | None"]


class _Server(ThreadingHTTPServer):
    # socketserver's default listen backlog is 5: a burst of new connections would overflow it and
    # the kernel would delay the extra ones by a TCP retransmission (~0.2-1 s), which real API
    # servers never do.
    request_queue_size = 128


class FakeLLMServer:
    """A threaded HTTP server; ``flavour`` is "openai" or "anthropic"."""

    def __init__(self, flavour: str = "openai", *, script: Script | None = None, latency: float = 0.0,
                 port: int = 0, capacity: int | None = None, retry_after_ms: int | None = None,
                 response_formats: tuple[str, ...] = ("json_schema", "json_object"),
                 limits: RateLimits | None = None) -> None:
        if flavour not in ("openai", "anthropic"):
            raise ValueError(flavour)
        self.flavour = flavour
        self.response_formats = response_formats
        """OpenAI ``response_format`` types this server takes; ``("json_object",)`` behaves like
        llama-cpp-python's server (json_schema answered with HTTP 500)."""
        self.script = script
        self.latency = latency
        self.requests: list[RequestInfo] = []
        self.counts: Counter[str] = Counter()
        self.inflight = 0
        self.max_inflight = 0
        self.replies_sent = 0
        """Successful replies fully written to the socket."""
        self.last_reply: float | None = None
        """``time.monotonic()`` when the last successful reply was written."""
        self.capacity = capacity
        """When set, a request arriving while more than this many are in flight gets a 429 (like a
        provider's per-account limit on concurrent requests), with ``retry-after-ms`` when
        ``retry_after_ms`` is set."""
        self.retry_after_ms = retry_after_ms
        self.limits = limits
        """Requests and tokens per minute (:class:`~tests.fakes.buckets.RateLimits`): a request a
        bucket cannot pay for gets a 429 with ``retry-after``; every reply states the buckets in the
        headers of this server's flavour (unless the limits say nothing), and reports the fake's own
        token counts as usage."""
        self.refusals: list[tuple[float, float]] = []
        """(monotonic time the 429 was sent, seconds its retry-after-ms asked to wait) per refusal."""
        self._lock = threading.Lock()
        handler = type("Handler", (self.handler_class(),), {"fake": self})
        self.httpd = _Server(("127.0.0.1", port), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @classmethod
    def handler_class(cls) -> type:
        """The request handler (a subclass serving more endpoints overrides this)."""
        return _Handler

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> "FakeLLMServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "FakeLLMServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def base_url(self) -> str:
        """What to give the SDK: the OpenAI SDK wants the /v1 prefix, Anthropic's adds it itself."""
        return f"{self.url}/v1" if self.flavour == "openai" else self.url

    def reset_records(self) -> None:
        with self._lock:
            self.requests.clear()
            self.counts.clear()
            self.refusals.clear()
            self.max_inflight = 0
            self.replies_sent = 0

    # -- bookkeeping -----------------------------------------------------------------------------

    def _arrive(self, body: Mapping[str, Any], headers: Mapping[str, str], path: str) -> RequestInfo:
        messages = body.get("messages") or []
        users = [m for m in messages if m.get("role") == "user"]
        prompt = _content_text(users[-1].get("content")) if users else ""
        if path.split("?")[0] == COMPLETIONS_PATH:  # raw text: the prompt is the whole input
            prompt = str(body.get("prompt") or "")
        if self.flavour == "openai":
            system = "\n".join(_content_text(m.get("content")) for m in messages if m.get("role") == "system")
        else:
            system = _content_text(body.get("system"))
        with self._lock:
            self.counts[prompt_id(prompt)] += 1
            info = RequestInfo(len(self.requests), self.counts[prompt_id(prompt)], prompt, system, body,
                               headers, path, time.monotonic())
            self.requests.append(info)
            self.inflight += 1
            self.max_inflight = max(self.max_inflight, self.inflight)
        return info

    def _leave(self) -> None:
        with self._lock:
            self.inflight -= 1

    def requests_for(self, prompt: str) -> list[RequestInfo]:
        return [r for r in self.requests if r.prompt == prompt]


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # Anthropic/OpenAI content blocks
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return ""


class _Handler(BaseHTTPRequestHandler):
    fake: FakeLLMServer
    protocol_version = "HTTP/1.1"  # keep-alive, like real API servers
    # Headers and body go out in separate writes; with Nagle on, the client's delayed ACK would
    # add ~40 ms to every reply on a kept-alive connection.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server naming)
        fake = self.fake
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        expected = ("/v1/chat/completions", COMPLETIONS_PATH) if fake.flavour == "openai" else ("/v1/messages",)
        if self.path.split("?")[0] not in expected:
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._send_json(400, {"error": {"message": "request body is not JSON", "type": "invalid_request_error"}})
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        info = fake._arrive(body, headers, self.path)
        try:
            problem = response_format_problem(body, fake.response_formats) if fake.flavour == "openai" else None
            if problem is not None:
                self._send_json(*problem)
                return
            action = None
            admitted: int | None = None
            with fake._lock:
                over = fake.capacity is not None and fake.inflight > fake.capacity
            if over:
                wait = {"retry-after-ms": str(fake.retry_after_ms)} if fake.retry_after_ms is not None else {}
                action = error(429, "too many requests in flight", headers=wait, delay=fake.latency / 10)
            elif fake.limits is not None:
                admitted, stated = fake.limits.admit(body)
                if admitted is None:
                    over = True
                    action = error(429, "rate limit reached for requests or tokens per minute", headers=stated,
                                   delay=fake.latency / 10)
            action = action or (fake.script(info) if fake.script else None) or reply()
            delay = fake.latency if action.delay is None else action.delay
            if action.kind == "hang":
                time.sleep(delay)
                self._abort()
                return
            if delay:
                time.sleep(delay)
            if action.kind == "reset":
                self._abort()
            elif action.kind == "malformed":
                self._send_raw(200, b'{"id": "x", "choices": [ {"message": ', "application/json")
            elif action.kind == "drip":
                self._drip(json.dumps(self._reply_body(info, action)).encode("utf-8"), action.interval)
            elif action.kind == "error":
                self._send_json(action.status, action.body if action.body is not None else self._error_body(action),
                                action.headers)
                if over:
                    waited = float(action.headers.get("retry-after", (fake.retry_after_ms or 0) / 1000))
                    with fake._lock:
                        fake.refusals.append((time.monotonic(), waited))
            else:
                stated: dict[str, str] = {}
                if admitted is not None:
                    assert fake.limits is not None
                    text = action.text if action.text is not None else default_text(info)
                    used = min(count_tokens(text), int(body.get("max_tokens") or body.get("max_completion_tokens") or 0))
                    action = dataclasses.replace(action, text=text, usage=(prompt_tokens(body), used))
                    stated = fake.limits.settle(admitted, used)
                # counted before the bytes go out: a client that has its reply (and a test that reads the
                # count once the client exited) must find it counted, however late this thread runs again
                with fake._lock:
                    fake.replies_sent += 1
                    fake.last_reply = time.monotonic()
                self._send_json(200, self._reply_body(info, action), stated)
        finally:
            fake._leave()

    # -- responses -------------------------------------------------------------------------------

    def _reply_body(self, info: RequestInfo, action: Action) -> dict[str, Any]:
        text = action.text if action.text is not None else default_text(info)
        model = info.body.get("model", "fake")
        if self.fake.flavour == "openai" and info.path.split("?")[0] == COMPLETIONS_PATH:
            out = {"id": f"cmpl-{info.index}", "object": "text_completion", "created": 0, "model": model,
                   "choices": [{"index": 0, "text": text, "finish_reason": action.finish_reason, "logprobs": None}]}
            if action.usage:
                out["usage"] = {"prompt_tokens": action.usage[0], "completion_tokens": action.usage[1],
                                "total_tokens": _total(action.usage)}
            return out
        if self.fake.flavour == "openai":
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if action.refusal is not None:
                message = {"role": "assistant", "content": None, "refusal": action.refusal}
            out: dict[str, Any] = {
                "id": f"chatcmpl-{info.index}", "object": "chat.completion", "created": 0, "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": action.finish_reason}],
            }
            if action.usage:
                out["usage"] = {"prompt_tokens": action.usage[0], "completion_tokens": action.usage[1],
                                "total_tokens": _total(action.usage)}
            return out
        stop = {"stop": "end_turn", "length": "max_tokens", "content_filter": "refusal"}.get(
            action.finish_reason, action.finish_reason)
        out = {
            "id": f"msg_{info.index}", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": text}] if text else [], "stop_reason": stop,
            "stop_sequence": None,
        }
        if action.usage:
            out["usage"] = {"input_tokens": action.usage[0], "output_tokens": action.usage[1]}
        return out

    def _error_body(self, action: Action) -> dict[str, Any]:
        if self.fake.flavour == "openai":
            return {"error": {"message": action.message, "type": "fake_error", "code": None}}
        kind = {529: "overloaded_error", 429: "rate_limit_error", 401: "authentication_error"}.get(action.status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": action.message}}

    def _send_json(self, status: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
        self._send_raw(status, json.dumps(body).encode("utf-8"), "application/json", headers)

    def _send_raw(self, status: int, data: bytes, content_type: str, headers: Mapping[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):  # the client hung up (a reply over its size cap)
            self.close_connection = True

    def _drip(self, data: bytes, interval: float) -> None:
        """Send ``data`` byte by byte; stop quietly when the client hangs up."""
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.flush()
            for index in range(len(data)):
                self.wfile.write(data[index:index + 1])
                self.wfile.flush()
                time.sleep(interval)
        except OSError:
            self.close_connection = True

    def _abort(self) -> None:
        """Reset the TCP connection without a response (SO_LINGER 0 makes close() send RST)."""
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass
        self.close_connection = True
        # The base class flushes wfile after the handler: give it something harmless.
        self.wfile = BytesIO()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a fake LLM server until stdin closes or Ctrl-C.")
    parser.add_argument("--flavour", choices=("openai", "anthropic"), default="openai")
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--capacity", type=int, default=None,
                        help="answer 429 to a request arriving while more than this many are in flight")
    parser.add_argument("--retry-after-ms", type=int, default=None, help="retry-after-ms header on those 429s")
    for kind, what in (("rpm", "requests"), ("tpm", "tokens (prompt + reply)"), ("itpm", "input tokens"),
                       ("otpm", "output tokens")):
        parser.add_argument(f"--{kind}", type=float, default=None, help=f"limit {what} per minute (a token bucket)")
    parser.add_argument("--start", action="append", default=[], metavar="KIND=N",
                        help="how full a bucket starts (requests, tokens, input_tokens, output_tokens); default full")
    parser.add_argument("--silent-limits", action="store_true", help="enforce the limits but state them in no header")
    args = parser.parse_args(argv)
    limits = None
    if args.rpm or args.tpm or args.itpm or args.otpm:
        start = {k: float(v) for k, v in (item.split("=", 1) for item in args.start)}
        limits = RateLimits(rpm=args.rpm, tpm=args.tpm, itpm=args.itpm, otpm=args.otpm, start=start,
                            dialect=args.flavour, state=not args.silent_limits)
    server = FakeLLMServer(args.flavour, latency=args.latency, port=args.port, capacity=args.capacity,
                           retry_after_ms=args.retry_after_ms, limits=limits).start()
    print(server.base_url, flush=True)
    try:
        sys.stdin.read()  # the parent closes our stdin (or dies) to stop us
    except KeyboardInterrupt:
        pass
    arrivals = [r.arrived for r in server.requests]
    print(json.dumps({"requests": len(server.requests), "max_inflight": server.max_inflight,
                      "refused": len(server.refusals), "replies": server.replies_sent,
                      "first_arrival": min(arrivals, default=None), "last_reply": server.last_reply,
                      "limits": limits.summary() if limits is not None else None}), flush=True)
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
