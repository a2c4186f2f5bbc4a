"""Anthropic Message Batches: ``POST /v1/messages/batches`` with every request's ``params`` inline,
polled with ``GET /v1/messages/batches/{id}``, results read as JSONL from the batch's ``results_url``."""

from __future__ import annotations

from typing import Any, Mapping

from persobench.errors import ConfigurationError, ErrorKind, ProviderError
from persobench.providers.anthropic_provider import STOP_REASONS, TRANSPORT_OPTIONS, structured_output_format
from persobench.providers.base import Completion, Request, max_reply_bytes
from persobench.providers.batch_api import (
    CLOCK_SKEW, UNANSWERED, BatchStatus, HttpClient, Lookup, capped, carries_token, error_of, one_result_per_id,
    parse_time, safe_id, scrubbed_text,
)
from urllib.parse import urlsplit

#: The official API's root, when a spec names no server.
DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"


class AnthropicBatchBackend:
    """Message batches with the bodies :class:`AnthropicProvider` sends."""

    provider = "anthropic"
    max_requests = 100_000
    """Requests per batch the API takes (and 256 MB)."""

    def __init__(self, spec: Any, *, api_key: str | None, timeout: float = 60.0) -> None:
        options = dict(spec.options)
        self.spec = spec
        self._secrets = (api_key,)
        self._body = {k: v for k, v in options.items() if k not in TRANSPORT_OPTIONS}
        self._max_bytes = max_reply_bytes(options)
        headers = {**(options.get("headers") or {}), "x-api-key": api_key or "", "anthropic-version": API_VERSION}
        self.http = HttpClient(f"{(spec.base_url or DEFAULT_BASE_URL).rstrip('/')}/v1", headers,
                               timeout=float(options.get("timeout", timeout)), secrets=self._secrets)
        self._first_ids: dict[str, Any] = {}
        """Ended batch id -> the custom id of its first result line (read once per process)."""

    def params(self, request: Request) -> dict[str, Any]:
        """A request's ``params``, field for field what the interactive provider sends."""
        params = request.params
        body: dict[str, Any] = {"model": self.spec.model, "messages": request.chat, "max_tokens": params.max_tokens,
                                "temperature": params.temperature}
        if request.system:
            body["system"] = request.system
        if params.stop:
            body["stop_sequences"] = list(params.stop)
        if params.top_p is not None:
            body["top_p"] = params.top_p
        body.update(self._body)
        if params.response_schema is not None:
            body["output_config"] = {"format": structured_output_format(params.response_schema)}
        return body

    def submit(self, requests: Mapping[str, Request], token: str) -> str:  # noqa: ARG002 - no metadata field
        created = self.http.json("POST", "/messages/batches", once=True, json={
            "requests": [{"custom_id": key, "params": self.params(r)} for key, r in requests.items()]})
        return safe_id(created.get("id"))

    def find(self, token: str, *, since: float, count: int, tagged: bool = True) -> Lookup:
        """Message batches carry no metadata, and show their custom ids only in their results, once
        they have ended: the batch whose first result line's custom id carries ``token``. Batches
        created before ``since`` or of another size are not read (they cannot be it); one of the
        size that is still running is counted :attr:`Lookup.undecided`."""
        if not tagged:
            raise ConfigurationError("a batch submitted by an earlier PersoBench (its custom ids carry no token) "
                                     "lost its answer: look for it in the provider's console")
        undecided = 0
        for batch in self.http.listing("/messages/batches", after="after_id", since=since - CLOCK_SKEW):
            counts = batch.get("request_counts")
            if not isinstance(counts, Mapping) or sum(_count(v) for v in counts.values()) != count:
                continue
            batch_id = safe_id(batch.get("id"))
            if batch.get("processing_status") != "ended":
                undecided += 1
                continue
            if batch_id not in self._first_ids:
                first = self.http.first_line(self._results_url(batch.get("results_url"), batch_id))
                self._first_ids[batch_id] = first.get("custom_id") if isinstance(first, Mapping) else None
            if carries_token(self._first_ids[batch_id], token):
                return Lookup(batch_id)
        return Lookup(None, undecided)

    def status(self, batch_id: str) -> BatchStatus:
        data = self.http.json("GET", f"/messages/batches/{batch_id}")
        state = str(data.get("processing_status") or "unknown")
        counts = {k: _count(v) for k, v in (data.get("request_counts") or {}).items()}
        created, ended_at = parse_time(data.get("created_at")), parse_time(data.get("ended_at"))
        return BatchStatus(
            batch_id=batch_id, state=scrubbed_text(state, self._secrets) or state, ended=state == "ended",
            total=sum(counts.values()), succeeded=counts.get("succeeded", 0),
            failed=counts.get("errored", 0) + counts.get("canceled", 0) + counts.get("expired", 0),
            expired=counts.get("expired", 0) + counts.get("canceled", 0) > 0,
            elapsed=ended_at - created if created is not None and ended_at is not None else None,
            result_ref=self._results_url(data.get("results_url"), batch_id),
        )

    def _results_url(self, given: Any, batch_id: str) -> str:
        """The results URL the server names, when it is on the API's own origin; else the standard
        path: the key goes with the request, so a URL elsewhere is never followed."""

        own = urlsplit(self.http.base_url)
        if isinstance(given, str) and urlsplit(given)[:2] == own[:2]:
            return given
        return f"/messages/batches/{batch_id}/results"

    def results(self, status: BatchStatus) -> "dict[str, Completion | ProviderError]":
        lines = self.http.lines(status.result_ref or f"/messages/batches/{status.batch_id}/results")
        return one_result_per_id((line.get("custom_id"), self._result(line.get("result")))
                                 for line in lines if isinstance(line, Mapping))

    def _result(self, result: Any) -> "Completion | ProviderError | None":
        result = result if isinstance(result, Mapping) else {}
        kind = result.get("type")
        if kind in ("expired", "canceled"):
            return UNANSWERED  # may be submitted again
        if kind == "succeeded":
            message = result.get("message")
            return self._completion(message if isinstance(message, Mapping) else {})
        outer = result.get("error")
        error = (outer.get("error") if isinstance(outer, Mapping) else None) or outer or result
        status_code = {"invalid_request_error": 400, "authentication_error": 401, "permission_error": 403,
                       "not_found_error": 404, "rate_limit_error": 429, "api_error": 500,
                       "overloaded_error": 529}.get(str(error.get("type")) if isinstance(error, Mapping) else "")
        return error_of(status_code, error, self._secrets)

    def _completion(self, message: Mapping[str, Any]) -> "Completion | ProviderError":
        blocks = message.get("content")
        if not isinstance(blocks, list):
            return ProviderError(ErrorKind.BAD_RESPONSE, "batch result has no content blocks")
        text = "".join(str(b.get("text") or "") for b in blocks if isinstance(b, Mapping) and b.get("type") == "text")
        usage = message.get("usage") or {}
        stop = message.get("stop_reason")
        return capped(Completion(text=text, finish_reason=STOP_REASONS.get(stop, stop) if isinstance(stop, str) else None,
                                 prompt_tokens=usage.get("input_tokens"), completion_tokens=usage.get("output_tokens"),
                                 model=message.get("model")), self._max_bytes)

    def close(self) -> None:
        self.http.close()


def _count(value: Any) -> int:
    """A request count as the server gave it (anything but a whole number counts 0)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
