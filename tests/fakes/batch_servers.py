"""Fake batch APIs over real HTTP on 127.0.0.1, beside the interactive endpoints of
:class:`~tests.fakes.servers.FakeLLMServer` (so requests a batch failed can be retried one by one):

* OpenAI: ``POST /v1/files`` (multipart, ``purpose=batch``), ``GET /v1/files/{id}/content``,
  ``POST /v1/batches``, ``GET /v1/batches`` and ``GET /v1/batches/{id}``;
* Anthropic: ``POST /v1/messages/batches``, ``GET /v1/messages/batches[/{id}]`` and
  ``GET /v1/messages/batches/{id}/results``.

A batch ends on its ``finish_after``-th status request (``None``: never, until :meth:`release`).
``fail(custom_id, line)`` chooses lines answered with an error; the first ``expire`` batches expire
with every other line unanswered; the first ``lost_answers`` creations are answered HTTP 502
although the batch was created; ``echo_key`` puts the caller's credential in every reply text,
error message and batch error; ``answer(info)`` gives a reply's text. The server records what it saw (batches created, uploads, polls).
"""

from __future__ import annotations

import email
import itertools
import json
import threading
import time
from typing import Any, Callable, Mapping

from tests.fakes.servers import FakeLLMServer, RequestInfo, _content_text, _Handler, default_text


class FakeBatchServer(FakeLLMServer):
    """A :class:`FakeLLMServer` with the flavour's batch endpoints."""

    def __init__(self, flavour: str = "openai", *, finish_after: int | None = 1,
                 fail: Callable[[str, int], bool] | None = None, expire: int = 0, echo_key: bool = False,
                 answer: Callable[[RequestInfo], str] | None = None, lost_answers: int = 0, **kwargs: Any) -> None:
        super().__init__(flavour, **kwargs)
        self.status_errors = 0
        """The next this many status requests are answered HTTP 503 (then counted down)."""
        self.lost_answers = lost_answers
        """The first this many batch creations are carried out but answered with HTTP 502 (a proxy
        losing the answer): the client cannot know the batch exists."""
        self.answer = answer
        """Text of each batch reply (default: :func:`default_text`)."""
        self.finish_after = finish_after
        self.fail = fail
        self.expire = expire
        self.echo_key = echo_key
        self.batches: dict[str, dict[str, Any]] = {}
        """Batch id -> its record (lines, polls, state, output)."""
        self.created: list[str] = []
        """Batch ids in creation order: what tests count to prove nothing was submitted twice."""
        self.files: dict[str, bytes] = {}
        self.uploads = 0
        self.polls = 0
        self.released = threading.Event()
        self._ids = itertools.count(1)
        self.batch_lock = threading.Lock()

    @classmethod
    def handler_class(cls) -> type:
        return _BatchHandler

    def release(self) -> None:
        """Let every batch end on its next status request."""
        self.released.set()

    def custom_ids(self, batch_id: str) -> list[str]:
        return [line["custom_id"] for line in self.batches[batch_id]["lines"]]

    # -- the batch's end -------------------------------------------------------------------------

    def _poll(self, batch_id: str, key: str) -> dict[str, Any]:
        with self.batch_lock:
            self.polls += 1
            record = self.batches[batch_id]
            record["polls"] += 1
            if record["ended"] is None and (self.released.is_set() or (
                    self.finish_after is not None and record["polls"] >= self.finish_after)):
                self._end(record, key)
            return record

    def _end(self, record: dict[str, Any], key: str) -> None:
        expired = record["number"] <= self.expire
        results = []
        for index, line in enumerate(record["lines"]):
            custom_id = line["custom_id"]
            if expired and index % 2 == 0:
                results.append((custom_id, "expired", None))
            elif self.fail is not None and self.fail(custom_id, index):
                results.append((custom_id, "error", f"fake batch line error{' for ' + key if self.echo_key else ''}"))
            else:
                body = line.get("body") or line.get("params") or {}
                info = _info(index, body)
                text = self.answer(info) if self.answer is not None else default_text(info)
                if self.echo_key:
                    text = json.dumps({"response": f"your key is {key}"})
                results.append((custom_id, "ok", text))
        record["ended"] = time.time()
        record["expired"] = expired
        record["results"] = results


def _info(index: int, body: Mapping[str, Any]) -> RequestInfo:
    messages = body.get("messages") or []
    users = [m for m in messages if m.get("role") == "user"]
    prompt = _content_text(users[-1].get("content")) if users else str(body.get("prompt") or "")
    return RequestInfo(index, 1, prompt, _content_text(body.get("system")), body, {}, "", time.monotonic())


class _BatchHandler(_Handler):
    fake: FakeBatchServer

    def _key(self) -> str:
        auth = self.headers.get("authorization") or ""
        return auth.removeprefix("Bearer ") if auth else (self.headers.get("x-api-key") or "")

    def do_POST(self) -> None:  # noqa: N802
        path = self.path.split("?")[0]
        if path in ("/v1/files", "/v1/batches", "/v1/messages/batches"):
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length)
            if path == "/v1/files":
                return self._upload(raw)
            return self._create(json.loads(raw), path)
        return super().do_POST()

    def do_GET(self) -> None:  # noqa: N802
        fake = self.fake
        path = self.path.split("?")[0]
        with fake.batch_lock:
            flaky = fake.status_errors > 0 and path.rstrip("/").split("/")[-1] in fake.batches
            fake.status_errors -= 1 if flaky else 0
        if flaky:
            return self._send_json(503, {"error": {"message": "try again", "type": "server_error"}},
                                   {"retry-after": "0"})
        parts = path.strip("/").split("/")
        if path in ("/v1/batches", "/v1/messages/batches"):
            with fake.batch_lock:
                data = [self._batch_object(r, None) for r in fake.batches.values()]
            return self._send_json(200, {"data": data, "has_more": False})
        if parts[:2] == ["v1", "files"] and len(parts) == 4 and parts[3] == "content":
            data = fake.files.get(parts[2])
            if data is None:
                return self._send_json(404, {"error": {"message": "no such file", "type": "not_found"}})
            return self._send_raw(200, data, "application/octet-stream")
        if parts[:2] == ["v1", "batches"] and len(parts) == 3 and parts[2] in fake.batches:
            return self._send_json(200, self._batch_object(fake._poll(parts[2], self._key()), self._key()))
        if parts[:3] == ["v1", "messages", "batches"] and len(parts) >= 4 and parts[3] in fake.batches:
            if len(parts) == 5 and parts[4] == "results":
                return self._send_raw(200, self._anthropic_results(fake.batches[parts[3]]), "application/x-jsonl")
            return self._send_json(200, self._batch_object(fake._poll(parts[3], self._key()), self._key()))
        self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    # -- OpenAI ------------------------------------------------------------------------------------

    def _upload(self, raw: bytes) -> None:
        fake = self.fake
        message = email.message_from_bytes(b"Content-Type: " + self.headers["content-type"].encode() + b"\r\n\r\n" + raw)
        fields = {part.get_param("name", header="content-disposition"): part.get_payload(decode=True)
                  for part in message.get_payload()}
        if fields.get("purpose") != b"batch" or not fields.get("file"):
            return self._send_json(400, {"error": {"message": "purpose=batch and a file are required"}})
        with fake.batch_lock:
            file_id = f"file-in{next(fake._ids)}"
            fake.files[file_id] = fields["file"]
            fake.uploads += 1
        self._send_json(200, {"id": file_id, "object": "file", "purpose": "batch", "bytes": len(fields["file"])})

    def _create(self, body: Mapping[str, Any], path: str) -> None:
        fake = self.fake
        with fake.batch_lock:
            if path == "/v1/batches":
                data = fake.files.get(body.get("input_file_id"))
                if data is None:
                    return self._send_json(400, {"error": {"message": "unknown input_file_id"}})
                lines = [json.loads(line) for line in data.decode().split("\n") if line.strip()]
                batch_id = f"batch_{next(fake._ids)}"
            else:
                lines = list(body.get("requests") or [])
                batch_id = f"msgbatch_{next(fake._ids)}"
            fake.created.append(batch_id)
            fake.batches[batch_id] = {"id": batch_id, "lines": lines, "polls": 0, "ended": None, "created": time.time(),
                                      "number": len(fake.created), "metadata": dict(body.get("metadata") or {}),
                                      "endpoint": body.get("endpoint")}
            record = fake.batches[batch_id]
            lost = len(fake.created) <= fake.lost_answers
        if lost:
            return self._send_json(502, {"error": {"message": "bad gateway", "type": "server_error"}})
        self._send_json(200, self._batch_object(record, None))

    def _batch_object(self, record: Mapping[str, Any], key: str | None) -> dict[str, Any]:
        results = record.get("results") or []
        ok = sum(1 for r in results if r[1] == "ok")
        bad = sum(1 for r in results if r[1] == "error")
        expired = sum(1 for r in results if r[1] == "expired")
        if self.fake.flavour == "openai":
            out: dict[str, Any] = {"id": record["id"], "object": "batch", "endpoint": record["endpoint"],
                                   "completion_window": "24h", "created_at": int(record["created"]),
                                   "metadata": record["metadata"], "errors": None, "output_file_id": None,
                                   "error_file_id": None,
                                   "request_counts": {"total": len(record["lines"]), "completed": ok, "failed": bad}}
            if record["ended"] is None:
                out["status"] = "in_progress"
                return out
            out["status"] = "expired" if record.get("expired") else "completed"
            out["expired_at" if record.get("expired") else "completed_at"] = int(record["ended"])
            if self.fake.echo_key and key:
                out["errors"] = {"data": [{"message": f"we saw the key {key}"}]}
            out["output_file_id"] = self._file(record, "ok", key)
            out["error_file_id"] = self._file(record, "error", key) if bad else None
            return out
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record["created"]))
        out = {"id": record["id"], "type": "message_batch", "created_at": stamp,
               "processing_status": "in_progress" if record["ended"] is None else "ended",
               "request_counts": {"processing": len(record["lines"]) if record["ended"] is None else 0,
                                  "succeeded": ok, "errored": bad, "canceled": 0, "expired": expired},
               "ended_at": None, "results_url": None}
        if record["ended"] is not None:
            out["ended_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record["ended"]))
            out["results_url"] = f"{self.fake.url}/v1/messages/batches/{record['id']}/results"
        return out

    def _file(self, record: Mapping[str, Any], kind: str, key: str | None) -> str:
        file_id = f"file-{kind}-{record['id']}"
        lines = []
        for custom_id, outcome, text in record["results"]:
            if outcome != kind:
                continue
            if kind == "ok":
                body = {"id": f"chatcmpl-{custom_id[:8]}", "object": "chat.completion", "model": "fake",
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                     "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}}
                lines.append({"id": f"req-{custom_id[:8]}", "custom_id": custom_id,
                              "response": {"status_code": 200, "body": body}, "error": None})
            else:
                lines.append({"id": f"req-{custom_id[:8]}", "custom_id": custom_id,
                              "response": {"status_code": 400, "body": {"error": {"message": text}}}, "error": None})
        self.fake.files[file_id] = "".join(json.dumps(line) + "\n" for line in lines).encode()
        return file_id

    # -- Anthropic ---------------------------------------------------------------------------------

    def _anthropic_results(self, record: Mapping[str, Any]) -> bytes:
        lines = []
        for custom_id, outcome, text in record.get("results") or []:
            if outcome == "ok":
                message = {"id": f"msg_{custom_id[:8]}", "type": "message", "role": "assistant", "model": "fake",
                           "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                           "usage": {"input_tokens": 12, "output_tokens": 7}}
                result: dict[str, Any] = {"type": "succeeded", "message": message}
            elif outcome == "error":
                result = {"type": "errored", "error": {"type": "error", "error": {"type": "invalid_request_error",
                                                                                   "message": text}}}
            else:
                result = {"type": "expired"}
            lines.append(json.dumps({"custom_id": custom_id, "result": result}) + "\n")
        return "".join(lines).encode()
