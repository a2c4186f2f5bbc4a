"""OpenAI and every OpenAI-compatible server (vLLM, Ollama, llama.cpp server, OpenRouter, Together,
Gemini's compatible endpoint) through the official ``openai`` SDK and ``base_url``."""

from __future__ import annotations

from typing import Any

import openai

from persobench.providers.base import (
    translated_sdk_errors,
    Completion,
    ConfigurationError,
    ErrorKind,
    ProviderError,
    Request,
    check_reachable,
    resolve_api_key,
)

#: Local servers (vLLM, Ollama, llama.cpp) accept any key, but the SDK insists on a non-empty one.
PLACEHOLDER_KEY = "not-needed"

#: Spec options consumed here rather than sent in the request body.
_TRANSPORT_OPTIONS = frozenset({"timeout", "headers", "max_tokens_param", "organization", "project"})


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
        self._body = {k: v for k, v in options.items() if k not in _TRANSPORT_OPTIONS}
        self.client = openai.AsyncOpenAI(
            api_key=key or PLACEHOLDER_KEY,
            base_url=spec.base_url,
            timeout=float(options.get("timeout", timeout)),
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
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(m) for m in request.messages],
            "temperature": params.temperature,
            self._max_tokens_param: params.max_tokens,
        }
        if params.top_p is not None:
            kwargs["top_p"] = params.top_p
        if params.seed is not None:
            kwargs["seed"] = params.seed
        if params.stop:
            kwargs["stop"] = list(params.stop)
        if self._body:
            kwargs["extra_body"] = self._body
        with translated_sdk_errors(openai, self._secrets):
            response = await self.client.chat.completions.create(**kwargs)
        return _to_completion(response)

    async def aclose(self) -> None:
        await self.client.close()


def _to_completion(response: Any) -> Completion:
    """Read the first choice; anything not shaped like a chat completion is a bad response."""
    try:
        choice = response.choices[0]
        message = choice.message
        text = message.content
        finish_reason = choice.finish_reason
        refusal = getattr(message, "refusal", None)
    except (AttributeError, IndexError, TypeError) as exc:
        raise ProviderError(
            ErrorKind.BAD_RESPONSE, f"response has no choices[0].message ({type(exc).__name__}): {str(response)[:200]}"
        ) from None
    if refusal and not text:
        # Structured-output refusals come in their own field; keep the words as the raw text.
        text, finish_reason = refusal, "refusal"
    usage = getattr(response, "usage", None)
    return Completion(
        text=text or "",
        finish_reason=finish_reason,
        prompt_tokens=getattr(usage, "prompt_tokens", None) if usage else None,
        completion_tokens=getattr(usage, "completion_tokens", None) if usage else None,
        model=getattr(response, "model", None),
    )
