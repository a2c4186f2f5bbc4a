"""OpenAI and every OpenAI-compatible server (vLLM, Ollama, llama.cpp server, OpenRouter, Together,
Gemini's compatible endpoint) through the official ``openai`` SDK and ``base_url``."""

from __future__ import annotations

import asyncio
from typing import Any, Mapping

import openai
from openai.types.chat import ChatCompletion

from persobench.errors import ConfigurationError, ErrorKind, ProviderError
from persobench.providers.base import (
    translated_sdk_errors,
    capped_http_client,
    max_reply_bytes,
    Completion,
    Request,
    check_reachable,
    raw_prompt_text,
    rate_limit_headers,
    resolve_api_key,
)
from persobench.providers.spec import COMPLETIONS_ENDPOINT, SYSTEM_IN_USER
from persobench.core.secrets import shorten
from persobench.core.structured import FORMS, JSON_OBJECT, JSON_SCHEMA, SCHEMA_NAME

#: Local servers (vLLM, Ollama, llama.cpp) accept any key, but the SDK insists on a non-empty one.
PLACEHOLDER_KEY = "not-needed"

#: The request header by which the SDK's ``with_raw_response`` asks for the raw response (headers
#: and all) instead of the parsed body; ``client.post`` takes it as a request option.
_RAW_RESPONSE = {"X-Stainless-Raw-Response": "true"}

#: Spec options consumed here rather than sent in the request body.
TRANSPORT_OPTIONS = frozenset(
    {"timeout", "headers", "max_tokens_param", "organization", "project", "structured_format", "max_reply_bytes",
     COMPLETIONS_ENDPOINT, SYSTEM_IN_USER}
)

#: The ``response_format`` form each server takes, learned in this process: normalised base URL
#: (``""`` for the official API) -> "json_schema" or "json_object". A server that rejects the first
#: form is asked once, then always gets the second.
_SERVER_FORMS: dict[str, str] = {}

#: Words in an error that mean "this server does not take that response_format", whatever its
#: status (llama-cpp-python answers the json_schema form with HTTP 500 and a validation message).
_FORM_REJECTION_WORDS = ("response_format", "json_schema")


class OpenAIProvider:
    """Chat Completions. Output-affecting spec options (``top_k``, ``repetition_penalty``,
    ``frequency_penalty`` ...) are sent as extra body fields so servers with their own
    extensions work without SDK changes."""

    name = "openai"
    max_concurrency: int | None = None
    sample_dependent = False
    key_env = "OPENAI_API_KEY"
    # The official API needs a key; a self-hosted server usually does not, unless the user
    # named a variable explicitly (then its absence is a mistake worth stopping for).
    key_optional_with_base_url = True

    def __init__(self, spec: Any, *, api_key: str | None = None, timeout: float = 60.0) -> None:
        self.spec = spec
        self.model = spec.model
        key = resolve_api_key(self, spec, explicit=api_key)
        self._secrets = (key,)
        options = dict(spec.options)
        self._max_tokens_param = str(options.get("max_tokens_param", "max_tokens"))
        if self._max_tokens_param not in ("max_tokens", "max_completion_tokens"):
            raise ConfigurationError(
                f"option max_tokens_param must be 'max_tokens' or 'max_completion_tokens', got {self._max_tokens_param!r}"
            )
        self._body = {k: v for k, v in options.items() if k not in TRANSPORT_OPTIONS}
        self._server = (spec.base_url or "").rstrip("/")
        declared = options.get("structured_format") or getattr(spec, "structured_format", None)
        if declared is not None and declared not in FORMS:
            raise ConfigurationError(
                f"structured_format must be one of {', '.join(FORMS)}, got {declared!r}"
            )
        self._declared_form: str | None = declared
        self._probe_lock = asyncio.Lock()
        self.request_deadline = float(options.get("timeout", timeout))
        """Seconds one request may take in all, reply included (the retry loop enforces it)."""
        self.client = openai.AsyncOpenAI(
            api_key=key or PLACEHOLDER_KEY,
            base_url=spec.base_url,
            timeout=self.request_deadline,
            http_client=capped_http_client(openai, max_bytes=max_reply_bytes(options)),
            max_retries=0,  # ours is the only retry loop; SDK retries would multiply it
            default_headers=options.get("headers") or None,
            organization=options.get("organization"),
            project=options.get("project"),
        )

    def check(self) -> None:
        if self.spec.base_url:
            check_reachable(self.spec.base_url)

    async def generate(self, request: Request) -> Completion:
        params = request.params
        kwargs = request_fields(self.model, request, self._max_tokens_param)
        if self._body:
            kwargs["extra_body"] = self._body
        if "prompt" in kwargs:
            return await self._send_text(kwargs)
        if params.response_schema is not None:
            return await self._structured(kwargs, params.response_schema)
        return await self._send(kwargs)

    async def _send_text(self, kwargs: Mapping[str, Any]) -> Completion:
        """``/v1/completions``: the prompt as raw text, no chat template on either side."""
        with translated_sdk_errors(openai, self._secrets):
            raw = await self.client.completions.with_raw_response.create(**kwargs)
            response = raw.parse()
        return _text_completion(response, raw.headers)

    async def _send(self, kwargs: Mapping[str, Any]) -> Completion:
        # What chat.completions.create sends, without its transform of typed parameters: the body is
        # plain JSON already (request_fields), and the transform re-walked every message of every
        # request, about a fifth of the SDK's CPU per request. extra_body merges into the body as the
        # SDK merges it; the same endpoint, auth, response type and errors.
        # The raw response (as ``with_raw_response`` asks for it) carries the headers: the rate limits
        # the server states go to the LLM layer's pacing with the completion.
        body = {**{k: v for k, v in kwargs.items() if k != "extra_body"}, **kwargs.get("extra_body", {})}
        with translated_sdk_errors(openai, self._secrets):
            # _RAW_RESPONSE makes the SDK return its raw response (``.parse()``, ``.headers``), not the
            # ChatCompletion its signature states.
            raw: Any = await self.client.post("/chat/completions", body=body, cast_to=ChatCompletion,
                                         options={"security": {"bearer_auth": True}, "headers": _RAW_RESPONSE})
            response = raw.parse()
        return _to_completion(response, self._secrets, raw.headers)

    @property
    def structured_form(self) -> str | None:
        """The ``response_format`` form this server takes: declared in the models file
        (``structured_format``), learned earlier in this process, or ``None`` (not known yet)."""
        return self._declared_form or _SERVER_FORMS.get(self._server)

    async def _structured(self, kwargs: dict[str, Any], schema: Mapping[str, Any]) -> Completion:
        """Send with the server's form; an unknown server is probed by ONE request at a time, so a
        server that rejects ``json_schema`` sees that form once per process, not once per sample."""
        form = self.structured_form
        if form is not None:
            return await self._send_form(kwargs, schema, form)
        async with self._probe_lock:
            form = self.structured_form
            if form is not None:  # another request found out while this one waited
                return await self._send_form(kwargs, schema, form)
            try:
                completion = await self._send(with_format(kwargs, schema, JSON_SCHEMA))
            except ProviderError as exc:
                if not _rejects_form(exc):
                    raise  # an ordinary failure: the next request probes again
                _SERVER_FORMS[self._server] = JSON_OBJECT
            else:
                _SERVER_FORMS[self._server] = JSON_SCHEMA
                return completion
        return await self._send_form(kwargs, schema, JSON_OBJECT)

    async def _send_form(self, kwargs: dict[str, Any], schema: Mapping[str, Any], form: str) -> Completion:
        try:
            return await self._send(with_format(kwargs, schema, form))
        except ProviderError as exc:
            if form == JSON_SCHEMA and not self._declared_form and _rejects_form(exc):
                # Learned, not declared: the URL may name another server now (a reused local port, a
                # backend swapped behind it), so its rejection is learned again rather than failing each sample.
                _SERVER_FORMS[self._server] = JSON_OBJECT
                return await self._send_form(kwargs, schema, JSON_OBJECT)
            if form == JSON_OBJECT and _rejects_form(exc):
                # Neither form is accepted: retrying cannot help, and the run should say why.
                raise ProviderError(
                    ErrorKind.BAD_REQUEST,
                    f"the server takes neither response_format form for structured output; run without "
                    f"--structured ({exc})", status_code=exc.status_code,
                ) from None
            raise

    async def aclose(self) -> None:
        await self.client.close()


def request_fields(model: str, request: Request, max_tokens_param: str = "max_tokens") -> dict[str, Any]:
    """The body fields of ``request`` (chat messages, or the raw-text ``prompt`` of a completions
    request) with its decoding parameters; the batch API sends exactly these too."""
    params = request.params
    fields: dict[str, Any] = {"model": model, "temperature": params.temperature}
    if not params.chat_template:  # raw text, as the paper's text-generation pipeline got it
        fields["prompt"] = raw_prompt_text(request.messages)
        fields["max_tokens"] = params.max_tokens
    else:
        fields["messages"] = [dict(m) for m in request.messages]
        fields[max_tokens_param] = params.max_tokens
    if params.top_p is not None:
        fields["top_p"] = params.top_p
    if params.seed is not None:
        fields["seed"] = params.seed
    if params.stop:
        fields["stop"] = list(params.stop)
    return fields


def _to_completion(response: Any, secrets: tuple[str | None, ...] = (), headers: Mapping[str, str] | None = None
                   ) -> Completion:
    """Read the first choice; anything not shaped like a chat completion is a bad response.
    ``headers``: the response's, whose rate limits the completion carries to the LLM layer."""
    try:
        choice = response.choices[0]
        message = choice.message
        text = message.content
        finish_reason = choice.finish_reason
        refusal = getattr(message, "refusal", None)
    except (AttributeError, IndexError, TypeError) as exc:
        raise ProviderError(
            ErrorKind.BAD_RESPONSE, shorten(f"response has no choices[0].message ({type(exc).__name__}): {response}", 250, secrets)
        ) from None
    if refusal and not text:
        # Structured-output refusals come in their own field; keep the words as the raw text.
        text, finish_reason = refusal, "refusal"
    return _completion(response, text, finish_reason, headers)


def _completion(response: Any, text: str | None, finish_reason: str | None, headers: Mapping[str, str] | None = None
                ) -> Completion:
    """The completion with the usage and model the response reports (chat or text completions alike)."""
    usage = getattr(response, "usage", None)
    return Completion(
        text=text or "",
        finish_reason=finish_reason,
        prompt_tokens=getattr(usage, "prompt_tokens", None) if usage else None,
        completion_tokens=getattr(usage, "completion_tokens", None) if usage else None,
        model=getattr(response, "model", None),
        rate_headers=rate_limit_headers(headers),
    )


def _text_completion(response: Any, headers: Mapping[str, str] | None = None) -> Completion:
    """Read the first choice of a text completion (``choices[0].text``)."""
    try:
        choice = response.choices[0]
        text, finish_reason = choice.text, choice.finish_reason
    except (AttributeError, IndexError, TypeError) as exc:
        raise ProviderError(
            ErrorKind.BAD_RESPONSE, f"response has no choices[0].text ({type(exc).__name__}): {str(response)[:200]}"
        ) from None
    return _completion(response, text, finish_reason, headers)


def with_format(kwargs: Mapping[str, Any], schema: Mapping[str, Any], form: str) -> dict[str, Any]:
    """``kwargs`` with ``response_format`` in ``form``: a strict json_schema, or llama-cpp-python's
    json_object with the schema inside."""
    if form == JSON_SCHEMA:
        response_format: dict[str, Any] = {
            "type": "json_schema", "json_schema": {"name": SCHEMA_NAME, "strict": True, "schema": dict(schema)},
        }
    else:
        response_format = {"type": "json_object", "schema": dict(schema)}
    return {**kwargs, "response_format": response_format}


def _rejects_form(exc: ProviderError) -> bool:
    """True when a failure is the server refusing the response_format form (any 4xx/5xx whose
    message names it), not an ordinary outage."""
    if exc.status_code is None or exc.status_code in (401, 403, 404, 408, 409, 429):
        return False
    message = str(exc).lower()
    return any(word in message for word in _FORM_REJECTION_WORDS)
