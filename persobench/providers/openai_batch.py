"""The OpenAI Batch API: a JSONL file of ``/v1/chat/completions`` (or ``/v1/completions``) requests
uploaded with ``purpose=batch``, one batch created on it (``POST /v1/batches``, 24 h window), polled
(``GET /v1/batches/{id}``), its output and error files read (``GET /v1/files/{id}/content``)."""

from __future__ import annotations

import json
from typing import Any, Mapping

from persobench.errors import ConfigurationError, ErrorKind, ProviderError
from persobench.providers.base import Completion, Request, max_reply_bytes
from persobench.providers.batch_api import (
    CLOCK_SKEW, UNANSWERED, BatchStatus, HttpClient, Lookup, capped, error_of, one_result_per_id, parse_time, safe_id,
    scrubbed_text,
)
from persobench.providers.openai_provider import TRANSPORT_OPTIONS, with_format, request_fields
from persobench.core.structured import FORMS, JSON_SCHEMA

#: The official API's root, when a spec names no server.
DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: The states after which nothing more will be answered.
_ENDED = frozenset({"completed", "expired", "failed", "cancelled"})
#: Metadata key tagging our batches, so one whose id a killed process never recorded is found again.
TOKEN_FIELD = "persobench_token"
#: Error-file codes of requests the batch never carried out (the documented expiry form): unanswered,
#: not failed, so they may be submitted again.
UNANSWERED_CODES = frozenset({"batch_expired", "batch_cancelled"})
#: Options the interactive client sends as headers (the SDK's ``organization`` and ``project``).
_OPTION_HEADERS = {"organization": "OpenAI-Organization", "project": "OpenAI-Project"}


class OpenAIBatchBackend:
    """Batches of chat (or raw-text) completions, with the bodies :class:`OpenAIProvider` sends."""

    provider = "openai"
    max_requests = 50_000
    """Requests per batch the API takes (and 200 MB of input file)."""

    def __init__(self, spec: Any, *, api_key: str | None, timeout: float = 60.0) -> None:
        options = dict(spec.options)
        self.spec = spec
        self._secrets = (api_key,)
        self._max_tokens_param = str(options.get("max_tokens_param", "max_tokens"))
        self._body = {k: v for k, v in options.items() if k not in TRANSPORT_OPTIONS}
        form = options.get("structured_format") or getattr(spec, "structured_format", None) or JSON_SCHEMA
        if form not in FORMS:
            raise ConfigurationError(f"structured_format must be one of {', '.join(FORMS)}, got {form!r}")
        self._form = form
        self._max_bytes = max_reply_bytes(options)
        # The headers the interactive client sends, the same way (the SDK's organization and project).
        named = {header: str(options[option]) for option, header in _OPTION_HEADERS.items() if options.get(option)}
        headers = {**named, **(options.get("headers") or {}), "Authorization": f"Bearer {api_key or 'not-needed'}"}
        self.http = HttpClient((spec.base_url or DEFAULT_BASE_URL).rstrip("/"), headers,
                               timeout=float(options.get("timeout", timeout)), secrets=self._secrets)

    def endpoint(self, request: Request) -> str:
        return "/v1/chat/completions" if request.params.chat_template else "/v1/completions"

    def body(self, request: Request) -> dict[str, Any]:
        """The request body, field for field what the interactive provider sends."""
        params = request.params
        body = request_fields(self.spec.model, request, self._max_tokens_param)
        body.update(self._body)
        if params.response_schema is not None and "messages" in body:
            body = with_format(body, params.response_schema, self._form)
        return body

    def submit(self, requests: Mapping[str, Request], token: str) -> str:
        endpoints = {self.endpoint(r) for r in requests.values()}
        if len(endpoints) != 1:
            raise ConfigurationError("a batch holds requests of one endpoint only")
        endpoint = endpoints.pop()
        lines = "".join(json.dumps({"custom_id": key, "method": "POST", "url": endpoint, "body": self.body(r)},
                                   ensure_ascii=False) + "\n" for key, r in requests.items())
        uploaded = self.http.json("POST", "/files", data={"purpose": "batch"},
                                  files={"file": ("persobench-batch.jsonl", lines.encode("utf-8"), "application/jsonl")})
        created = self.http.json("POST", "/batches", once=True, json={
            "input_file_id": safe_id(uploaded.get("id"), "file id"), "endpoint": endpoint, "completion_window": "24h",
            "metadata": {TOKEN_FIELD: token},
        })
        return safe_id(created.get("id"))

    def find(self, token: str, *, since: float, count: int, tagged: bool = True) -> Lookup:  # noqa: ARG002
        """The batch whose ``metadata`` carries ``token`` (every page back to ``since``)."""
        for batch in self.http.listing("/batches", after="after", since=since - CLOCK_SKEW):
            metadata = batch.get("metadata")
            if isinstance(metadata, Mapping) and metadata.get(TOKEN_FIELD) == token:
                return Lookup(safe_id(batch.get("id")))
        return Lookup()

    def status(self, batch_id: str) -> BatchStatus:
        data = self.http.json("GET", f"/batches/{batch_id}")
        state = str(data.get("status") or "unknown")
        counts = data.get("request_counts") or {}
        created = parse_time(data.get("created_at"))
        ended_at = parse_time(data.get("completed_at") or data.get("expired_at") or data.get("failed_at")
                              or data.get("cancelled_at"))
        errors = (data.get("errors") or {}).get("data") or []
        error = "; ".join(str(e.get("message") or e) for e in errors if isinstance(e, Mapping)) or None
        return BatchStatus(
            batch_id=batch_id, state=scrubbed_text(state, self._secrets) or state, ended=state in _ENDED,
            total=int(counts.get("total") or 0), succeeded=int(counts.get("completed") or 0),
            failed=int(counts.get("failed") or 0), expired=state in ("expired", "cancelled"),
            batch_failed=state == "failed",
            elapsed=ended_at - created if created is not None and ended_at is not None else None,
            result_ref=" ".join(safe_id(data[f], "file id") if data.get(f) else "-"
                                for f in ("output_file_id", "error_file_id")),
            error=scrubbed_text(error, self._secrets)[:300] if error else None,
        )

    def results(self, status: BatchStatus) -> "dict[str, Completion | ProviderError]":
        lines = [line for file_id in (status.result_ref or "").split() if file_id != "-"
                 for line in self.http.lines(f"/files/{file_id}/content") if isinstance(line, Mapping)]
        return one_result_per_id((line.get("custom_id"), self._result(line)) for line in lines)

    def _result(self, line: Mapping[str, Any]) -> "Completion | ProviderError | None":
        error = line.get("error")
        if isinstance(error, Mapping) and error.get("code") in UNANSWERED_CODES and not line.get("response"):
            return UNANSWERED  # never carried out (the batch expired or was cancelled first)
        response = line.get("response")
        if not isinstance(response, Mapping):
            response = {}
        status_code = response.get("status_code")
        body = response.get("body")
        if line.get("error") or status_code != 200 or not isinstance(body, Mapping):
            return error_of(status_code if isinstance(status_code, int) else None, line.get("error") or body,
                            self._secrets)
        try:
            choice = body["choices"][0]
            if "message" in choice:
                message = choice["message"]
                text, finish = message.get("content"), choice.get("finish_reason")
                if message.get("refusal") and not text:
                    text, finish = message["refusal"], "refusal"
            else:
                text, finish = choice.get("text"), choice.get("finish_reason")
        except (KeyError, IndexError, TypeError, AttributeError):
            return ProviderError(ErrorKind.BAD_RESPONSE, f"batch result has no choices[0]: {scrubbed_text(body, self._secrets)[:200]}")
        usage = body.get("usage") or {}
        return capped(Completion(text=str(text or ""), finish_reason=finish, prompt_tokens=usage.get("prompt_tokens"),
                                 completion_tokens=usage.get("completion_tokens"), model=body.get("model")),
                      self._max_bytes)

    def close(self) -> None:
        self.http.close()
