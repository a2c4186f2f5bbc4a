"""Anthropic Message Batches: ``POST /v1/messages/batches`` with every request's ``params`` inline,
polled with ``GET /v1/messages/batches/{id}``, results read as JSONL from the batch's ``results_url``."""

from __future__ import annotations

from typing import Any, Mapping

from persobench.errors import ErrorKind, ProviderError
from persobench.providers.anthropic_provider import _STOP_REASONS, _TRANSPORT_OPTIONS, structured_output_format
from persobench.providers.base import Completion, Request, max_reply_bytes
from persobench.providers.batch_api import (
    BatchStatus, HttpClient, capped, error_of, parse_time, safe_id, scrubbed_text,
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
        self._body = {k: v for k, v in options.items() if k not in _TRANSPORT_OPTIONS}
        self._max_bytes = max_reply_bytes(options)
        headers = {**(options.get("headers") or {}), "x-api-key": api_key or "", "anthropic-version": API_VERSION}
        self.http = HttpClient(f"{(spec.base_url or DEFAULT_BASE_URL).rstrip('/')}/v1", headers,
                               timeout=float(options.get("timeout", timeout)), secrets=self._secrets)

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

    def find(self, token: str, *, since: float, count: int) -> str | None:  # noqa: ARG002
        """Message batches carry no metadata: the one batch created since ``since`` (a minute of
        clock skew allowed) with exactly ``count`` requests, if there is exactly one."""
        listing = self.http.json("GET", "/messages/batches", params={"limit": 100})
        found = []
        for batch in listing.get("data") or []:
            created = parse_time(batch.get("created_at"))
            counts = batch.get("request_counts") or {}
            if created is not None and created >= since - 60 and sum(int(v or 0) for v in counts.values()) == count:
                found.append(safe_id(batch.get("id")))
        return found[0] if len(found) == 1 else None

    def status(self, batch_id: str) -> BatchStatus:
        data = self.http.json("GET", f"/messages/batches/{batch_id}")
        state = str(data.get("processing_status") or "unknown")
        counts = {k: int(v or 0) for k, v in (data.get("request_counts") or {}).items()}
        created, ended_at = parse_time(data.get("created_at")), parse_time(data.get("ended_at"))
        return BatchStatus(
            batch_id=batch_id, state=scrubbed_text(state, self._secrets) or state, ended=state == "ended",
            total=sum(counts.values()), succeeded=counts.get("succeeded", 0),
            failed=counts.get("errored", 0) + counts.get("canceled", 0) + counts.get("expired", 0),
            expired=counts.get("expired", 0) > 0,
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
        out: dict[str, Completion | ProviderError] = {}
        for line in self.http.lines(status.result_ref or f"/messages/batches/{status.batch_id}/results"):
            key, result = line.get("custom_id"), line.get("result") or {}
            kind = result.get("type")
            if not isinstance(key, str) or kind in ("expired", "canceled"):
                continue  # unanswered: may be submitted again
            if kind == "succeeded":
                out[key] = self._completion(result.get("message") or {})
            else:
                error = (result.get("error") or {}).get("error") or result.get("error") or result
                status_code = {"invalid_request_error": 400, "authentication_error": 401, "permission_error": 403,
                               "not_found_error": 404, "rate_limit_error": 429, "api_error": 500,
                               "overloaded_error": 529}.get(str(error.get("type")) if isinstance(error, Mapping) else "")
                out[key] = error_of(status_code, error, self._secrets)
        return out

    def _completion(self, message: Mapping[str, Any]) -> "Completion | ProviderError":
        blocks = message.get("content")
        if not isinstance(blocks, list):
            return ProviderError(ErrorKind.BAD_RESPONSE, "batch result has no content blocks")
        text = "".join(str(b.get("text") or "") for b in blocks if isinstance(b, Mapping) and b.get("type") == "text")
        usage = message.get("usage") or {}
        stop = message.get("stop_reason")
        return capped(Completion(text=text, finish_reason=_STOP_REASONS.get(stop, stop),
                                 prompt_tokens=usage.get("input_tokens"), completion_tokens=usage.get("output_tokens"),
                                 model=message.get("model")), self._max_bytes)

    def close(self) -> None:
        self.http.close()
