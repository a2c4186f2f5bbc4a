"""Anthropic's Messages API through the official ``anthropic`` SDK (system prompt as ``system``)."""

from __future__ import annotations

from typing import Any, Mapping

import anthropic

from persobench.errors import ErrorKind, ProviderError
from persobench.providers.base import (
    translated_sdk_errors,
    capped_http_client,
    max_reply_bytes,
    Completion,
    Request,
    check_reachable,
    rate_limit_headers,
    resolve_api_key,
)

from persobench.core.secrets import shorten

#: Spec options consumed here rather than sent in the request body.
TRANSPORT_OPTIONS = frozenset({"timeout", "headers", "max_reply_bytes"})

#: Anthropic stop reasons in the vocabulary the rest of the pipeline uses.
STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "refusal": "refusal"}


class AnthropicProvider:
    """Messages API; other output-affecting options (``top_k`` ...) go in the request body."""

    name = "anthropic"
    max_concurrency: int | None = None
    sample_dependent = False
    key_env = "ANTHROPIC_API_KEY"
    key_optional_with_base_url = False  # a gateway in front of Anthropic still wants the key

    def __init__(self, spec: Any, *, api_key: str | None = None, timeout: float = 60.0) -> None:
        self.spec = spec
        self.model = spec.model
        key = resolve_api_key(self, spec, explicit=api_key)
        self._secrets = (key,)
        options = dict(spec.options)
        self._body = {k: v for k, v in options.items() if k not in TRANSPORT_OPTIONS}
        self.request_deadline = float(options.get("timeout", timeout))
        """Seconds one request may take in all, reply included (the retry loop enforces it)."""
        self.client = anthropic.AsyncAnthropic(
            api_key=key,
            base_url=spec.base_url,
            timeout=self.request_deadline,
            http_client=capped_http_client(anthropic, max_bytes=max_reply_bytes(options)),
            max_retries=0,  # ours is the only retry loop
            default_headers=options.get("headers") or None,
        )

    def check(self) -> None:
        if self.spec.base_url:
            check_reachable(self.spec.base_url)

    async def generate(self, request: Request) -> Completion:
        params = request.params
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": request.chat,
            "max_tokens": params.max_tokens,
        }
        if request.system:
            kwargs["system"] = request.system
        if params.stop:
            kwargs["stop_sequences"] = list(params.stop)
        # Recent SDK releases dropped the sampling keywords from create(); the API still takes them
        # in the body, so they travel as body fields (as do other options such as top_k).
        body: dict[str, Any] = {"temperature": params.temperature}
        if params.top_p is not None:
            body["top_p"] = params.top_p
        kwargs["extra_body"] = {**body, **self._body}
        if params.response_schema is not None:
            kwargs["output_config"] = {"format": structured_output_format(params.response_schema)}
        with translated_sdk_errors(anthropic, self._secrets):
            raw = await self.client.messages.with_raw_response.create(**kwargs)  # the headers state the limits
            response = await raw.parse()
        return _to_completion(response, self._secrets, raw.headers)

    async def aclose(self) -> None:
        await self.client.close()


def structured_output_format(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The Messages API's structured-output format (``output_config.format``) for ``schema``.

    The SDK's own ``transform_schema`` rewrites the schema into the subset the API enforces: the
    API does not enforce ``maxLength``, so the SDK moves the bound into the field's description,
    where the model reads it as an instruction. The reply comes back as one text block holding the
    JSON object, read like any other reply.
    """
    return {"type": "json_schema", "schema": anthropic.transform_schema(dict(schema))}


def _to_completion(response: Any, secrets: tuple[str | None, ...] = (), headers: Mapping[str, str] | None = None
                   ) -> Completion:
    try:
        blocks = response.content
        text = "".join(getattr(b, "text", "") or "" for b in blocks if getattr(b, "type", None) == "text")
        stop_reason = response.stop_reason
    except (AttributeError, TypeError) as exc:
        raise ProviderError(
            ErrorKind.BAD_RESPONSE, shorten(f"response has no content blocks ({type(exc).__name__}): {response}", 250, secrets)
        ) from None
    usage = getattr(response, "usage", None)
    return Completion(
        text=text,
        finish_reason=STOP_REASONS.get(stop_reason, stop_reason),
        prompt_tokens=getattr(usage, "input_tokens", None) if usage else None,
        completion_tokens=getattr(usage, "output_tokens", None) if usage else None,
        model=getattr(response, "model", None),
        rate_headers=rate_limit_headers(headers),
    )
