"""Fake batch APIs over real HTTP on 127.0.0.1, beside the interactive endpoints of
:class:`~tests.fakes.servers.FakeLLMServer` (so requests a batch failed can be retried one by one):

* OpenAI: ``POST /v1/files`` (multipart, ``purpose=batch``), ``GET /v1/files/{id}/content``,
  ``POST /v1/batches``, ``GET /v1/batches`` and ``GET /v1/batches/{id}``;
* Anthropic: ``POST /v1/messages/batches``, ``GET /v1/messages/batches[/{id}]`` and
  ``GET /v1/messages/batches/{id}/results``.

A batch ends on its ``finish_after``-th status request or listing (``None``: never, until
:meth:`release`).
``fail(custom_id, line)`` chooses lines answered with an error; the first ``expire`` batches expire
with every other line unanswered, the next ``cancel`` batches end cancelled the same way (OpenAI:
``expiry_form="missing"`` leaves those lines out of both files, ``"error_file"`` writes them to the
error file with the documented codes ``batch_expired`` / ``batch_cancelled``); the next
``fail_batch`` batches fail as a whole (OpenAI status ``failed`` with ``errors``; Anthropic has no
such state: use ``fail``); ``repeat(custom_id, line)`` chooses lines the output carries twice, the
second time with :data:`WRONG_TEXT`; the first ``lost_answers`` creations are answered HTTP 502
although the batch was created; ``echo_key`` puts the caller's credential in every reply text,
error message and batch error; ``answer(info)`` gives a reply's text; ``page_size`` caps a listing
page (newest first, ``has_more`` / ``last_id``, ``after`` or ``after_id`` for the next page). The
server records what it saw (batches created, uploads, polls, every batch call's headers).
"""

from __future__ import annotations

import email
import itertools
import json
import threading
import time
from typing import Any, Callable, Mapping

from tests.fakes.servers import FakeLLMServer, RequestInfo, _content_text, _Handler, default_text

#: The text of the second line of a repeated custom id (a reply that belongs to no request).
WRONG_TEXT = json.dumps({"response": "WRONG REPLY: this line repeats another request's custom_id"})


class FakeBatchServer(FakeLLMServer):
    """A :class:`FakeLLMServer` with the flavour's batch endpoints."""

    def __init__(self, flavour: str = "openai", *, finish_after: int | None = 1,
                 fail: Callable[[str, int], bool] | None = None, expire: int = 0, echo_key: bool = False,
                 answer: Callable[[RequestInfo], str] | None = None, lost_answers: int = 0, cancel: int = 0,
                 expiry_form: str = "missing", fail_batch: int = 0, repeat: Callable[[str, int], bool] | None = None,
                 page_size: int = 100, **kwargs: Any) -> None:
        super().__init__(flavour, **kwargs)
        self.cancel = cancel
        self.expiry_form = expiry_form
        self.fail_batch = fail_batch
        self.repeat = repeat
        self.page_size = page_size
        self.batch_headers: list[tuple[str, str, dict[str, str]]] = []
        """(method, path, lower-cased headers) of every batch-API call."""
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
            self._look(record, key)
            return record

    def refresh(self, record: dict[str, Any]) -> None:
        """A listing shows the batch: it counts as a look at it (as time passing on a real server)."""
        with self.batch_lock:
            self._look(record, "")

    def _look(self, record: dict[str, Any], key: str) -> None:
        record["polls"] += 1
        if record["ended"] is None and (self.released.is_set() or (
                self.finish_after is not None and record["polls"] >= self.finish_after)):
            self._end(record, key)

    def _end(self, record: dict[str, Any], key: str) -> None:
        number = record["number"]
        expired = number <= self.expire
        cancelled = not expired and number <= self.expire + self.cancel
        record["failed"] = not expired and not cancelled and number <= self.expire + self.cancel + self.fail_batch
        results = []
        for index, line in enumerate(record["lines"]):
            custom_id = line["custom_id"]
            if record["failed"]:
                continue
            if (expired or cancelled) and index % 2 == 0:
                results.append((custom_id, "expired" if expired else "cancelled", None))
            elif self.fail is not None and self.fail(custom_id, index):
                results.append((custom_id, "error", f"fake batch line error{' for ' + key if self.echo_key else ''}"))
            else:
                body = line.get("body") or line.get("params") or {}
                info = _info(index, body)
                text = self.answer(info) if self.answer is not None else default_text(info)
                if self.echo_key:
                    text = json.dumps({"response": f"your key is {key}"})
                results.append((custom_id, "ok", text))
                if self.repeat is not None and self.repeat(custom_id, index):
                    results.append((custom_id, "ok", WRONG_TEXT))
        record["ended"] = time.time()
        record["expired"] = expired
        record["cancelled"] = cancelled
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

    def _seen(self, method: str, path: str) -> None:
        with self.fake.batch_lock:
            self.fake.batch_headers.append((method, path, {k.lower(): v for k, v in self.headers.items()}))

    def do_POST(self) -> None:  # noqa: N802
        path = self.path.split("?")[0]
        if path in ("/v1/files", "/v1/batches", "/v1/messages/batches"):
            self._seen("POST", path)
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
        if parts[:2] == ["v1", "files"] or "batches" in parts:
            self._seen("GET", path)
        if path in ("/v1/batches", "/v1/messages/batches"):
            return self._list()
        if parts[:2] == ["v1", "files"] and len(parts) == 4 and parts[3] == "content":
            data = fake.files.get(parts[2])
            if data is None:
                return self._send_json(404, {"error": {"message": "no such file", "type": "not_found"}})
            return self._send_raw(200, data, "application/octet-stream")
        if parts[:2] == ["v1", "batches"] and len(parts) == 3 and parts[2] in fake.batches:
            return self._send_json(200, self._batch_object(fake._poll(parts[2], self._key()), self._key()))
        if parts[:3] == ["v1", "messages", "batches"] and len(parts) >= 4 and parts[3] in fake.batches:
            if len(parts) == 5 and parts[4] == "results":
                record = fake.batches[parts[3]]
                if record["ended"] is None:  # as the API: results exist once processing has ended
                    return self._send_json(404, {"type": "error", "error": {
                        "type": "not_found_error", "message": "results are not available yet"}})
                return self._send_raw(200, self._anthropic_results(record), "application/x-jsonl")
            return self._send_json(200, self._batch_object(fake._poll(parts[3], self._key()), self._key()))
        self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def _list(self) -> None:
        """Batches newest first, ``page_size`` at a time (``limit`` honoured below it)."""
        from urllib.parse import parse_qs, urlsplit

        fake = self.fake
        query = {k: v[-1] for k, v in parse_qs(urlsplit(self.path).query).items()}
        for record in list(fake.batches.values()):
            fake.refresh(record)
        with fake.batch_lock:
            records = sorted(fake.batches.values(), key=lambda r: r["number"], reverse=True)
            after = query.get("after") or query.get("after_id")
            if after in fake.batches:
                records = records[[r["id"] for r in records].index(after) + 1:]
            size = min(fake.page_size, int(query.get("limit") or 20))
            page = [self._batch_object(r, None) for r in records[:size]]
        body = {"data": page, "has_more": len(records) > size, "first_id": page[0]["id"] if page else None,
                "last_id": page[-1]["id"] if page else None}
        return self._send_json(200, body)

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
        ok = len({r[0] for r in results if r[1] == "ok"})
        bad = sum(1 for r in results if r[1] == "error")
        expired = sum(1 for r in results if r[1] == "expired")
        cancelled = sum(1 for r in results if r[1] == "cancelled")
        if self.fake.flavour == "openai":
            out: dict[str, Any] = {"id": record["id"], "object": "batch", "endpoint": record["endpoint"],
                                   "completion_window": "24h", "created_at": int(record["created"]),
                                   "metadata": record["metadata"], "errors": None, "output_file_id": None,
                                   "error_file_id": None,
                                   "request_counts": {"total": len(record["lines"]), "completed": ok, "failed": bad}}
            if record["ended"] is None:
                out["status"] = "in_progress"
                return out
            out["status"] = ("failed" if record.get("failed") else "expired" if record.get("expired")
                             else "cancelled" if record.get("cancelled") else "completed")
            out[f"{out['status']}_at"] = int(record["ended"])
            if self.fake.echo_key and key:
                out["errors"] = {"data": [{"message": f"we saw the key {key}"}]}
            if record.get("failed"):
                out["errors"] = {"object": "list", "data": [
                    {"code": "invalid_request", "line": 1, "param": "body.model",
                     "message": "The model `gpt-nonexistent` does not exist" + (f" (key {key})" if self.fake.echo_key
                                                                               else "")}]}
                out["request_counts"] = {"total": 0, "completed": 0, "failed": 0}
                return out
            unanswered = self.fake.expiry_form == "error_file" and (expired or cancelled)
            if unanswered:
                out["request_counts"]["failed"] = bad + expired + cancelled
            out["output_file_id"] = self._file(record, "ok", key)
            out["error_file_id"] = self._file(record, "error", key) if bad or unanswered else None
            return out
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record["created"]))
        out = {"id": record["id"], "type": "message_batch", "created_at": stamp,
               "processing_status": "in_progress" if record["ended"] is None else "ended",
               "request_counts": {"processing": len(record["lines"]) if record["ended"] is None else 0,
                                  "succeeded": ok, "errored": bad, "canceled": cancelled, "expired": expired},
               "ended_at": None, "results_url": None}
        if record["ended"] is not None:
            out["ended_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record["ended"]))
            out["results_url"] = f"{self.fake.url}/v1/messages/batches/{record['id']}/results"
        return out

    def _file(self, record: Mapping[str, Any], kind: str, key: str | None) -> str:
        file_id = f"file-{kind}-{record['id']}"
        lines = []
        for custom_id, outcome, text in record["results"]:
            code = {"expired": "batch_expired", "cancelled": "batch_cancelled"}.get(outcome)
            if code and kind == "error" and self.fake.expiry_form == "error_file":  # the documented form
                what = ("could not be executed before the completion window expired" if outcome == "expired"
                        else "was cancelled before this request executed")
                lines.append({"id": f"req-{custom_id[:8]}", "custom_id": custom_id, "response": None,
                              "error": {"code": code, "message": f"This request {what}."}})
                continue
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
                result = {"type": "expired" if outcome == "expired" else "canceled"}
            lines.append(json.dumps({"custom_id": custom_id, "result": result}) + "\n")
        return "".join(lines).encode()
