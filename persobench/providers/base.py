"""The provider contract: one request in, one :class:`Completion` out, or a classified error.

Providers only translate: a request into one SDK call and the SDK's answer (or exception) into the
types below. Retries, deadlines, concurrency and caching live once in :mod:`persobench.llm`, and
post-processing in :mod:`persobench.generation`, so every provider gets the same behaviour for free.
"""

from __future__ import annotations

import contextlib
import functools
import email.utils
import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Protocol, Sequence, runtime_checkable

from persobench.errors import ConfigurationError, ErrorKind, ProviderError
from persobench.core.secrets import scrub, shorten
from persobench.records import Sample
from persobench.providers.whole_requests import send_whole_requests
import os
from urllib.parse import urlsplit
import socket
from persobench.core.secrets import url_without_credentials



class MissingKeyError(ConfigurationError):
    """No API key for a provider that needs one; the message names the environment variable."""

    def __init__(self, provider: str, env_var: str) -> None:
        super().__init__(f"missing API key for provider {provider!r}: set the environment variable {env_var}")
        self.env_var = env_var


@dataclass(frozen=True)
class GenerationParams:
    """Every parameter that changes what a model writes (and so belongs in the cache key)."""

    temperature: float = 0.0
    """Sampling temperature; 0 means greedy decoding (the paper's setting)."""
    max_tokens: int = 110
    """Completion budget in tokens (paper: 110 vanilla, 220 chain-of-thought)."""
    top_p: float | None = None
    """Nucleus sampling mass; ``None`` leaves the provider's default."""
    seed: int | None = None
    """Sampling seed, passed to providers that accept one; only set when temperature > 0."""
    stop: tuple[str, ...] = ()
    """Stop sequences. Provider-specific fields that change the output (``top_k``, ...) live in the
    model spec's options, which are part of the cache key too."""
    chat_template: bool = True
    """Local models: wrap the messages in the tokenizer's chat template (``False``: the text goes to
    the model as it is, as the paper's ``text-generation`` pipeline did). Chat APIs always apply their
    own template, so only the local provider reads this."""
    response_schema: Mapping[str, Any] | None = None
    """JSON Schema the reply must match (structured output, see :mod:`persobench.core.structured`);
    ``None`` asks for free text and leaves the format to the prompt."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; fields left at "provider default" are omitted so adding a new optional
        field later does not change existing cache keys."""
        data: dict[str, Any] = {"temperature": float(self.temperature), "max_tokens": int(self.max_tokens)}
        if self.top_p is not None:
            data["top_p"] = float(self.top_p)
        if self.seed is not None:
            data["seed"] = int(self.seed)
        if self.stop:
            data["stop"] = list(self.stop)
        if not self.chat_template:
            data["chat_template"] = False
        if self.response_schema is not None:
            data["response_schema"] = dict(self.response_schema)
        return data


@dataclass(frozen=True)
class Request:
    """One generation request."""

    messages: tuple[Mapping[str, str], ...]
    """Chat messages, system first; each ``{"role": ..., "content": ...}``."""
    params: GenerationParams
    """Decoding parameters."""
    sample: "Sample | None" = None
    """The benchmark sample the messages were built from; baselines read it, models ignore it."""

    @property
    def system(self) -> str:
        """The system messages joined (Anthropic takes them as a separate parameter)."""
        return "\n\n".join(m["content"] for m in self.messages if m["role"] == "system")

    @property
    def chat(self) -> list[dict[str, str]]:
        """The non-system messages."""
        return [dict(m) for m in self.messages if m["role"] != "system"]


def raw_prompt_text(messages: "Sequence[Mapping[str, str]]") -> str:
    """The text a model gets without a chat template: the one message's content as it is; several
    messages are joined with a blank line (system first, as the paper's Gemini call did:
    ``closed_source_models.ipynb`` sends ``"You are a helpful response generator to output
    JSON.\\n\\n" + prompt`` as its only content)."""
    return "\n\n".join(m["content"] for m in messages)


@dataclass(frozen=True)
class Completion:
    """What a provider returned for one request."""

    text: str
    """The raw generated text (a refusal message when the provider reports one separately)."""
    finish_reason: str | None = None
    """Normalised stop reason: "stop", "length", "content_filter", "refusal", or the provider's own word."""
    prompt_tokens: int | None = None
    """Input tokens as reported by the provider; ``None`` when it reports no usage."""
    completion_tokens: int | None = None
    """Output tokens as reported by the provider."""
    model: str | None = None
    """The model name the server says answered (may differ from the requested alias)."""
    rate_headers: Mapping[str, str] | None = field(default=None, compare=False, repr=False)
    """The reply's rate-limit headers (:func:`rate_limit_headers`), read by the LLM layer's pacing;
    not part of the reply: never cached, compared or written."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text, "finish_reason": self.finish_reason, "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens, "model": self.model,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Completion":
        return cls(
            text=str(data.get("text") or ""), finish_reason=data.get("finish_reason"),
            prompt_tokens=data.get("prompt_tokens"), completion_tokens=data.get("completion_tokens"),
            model=data.get("model"),
        )


#: Phrases in a 429/403 body meaning "out of credit", which waiting does not fix.
_QUOTA_MARKERS = ("insufficient_quota", "quota", "billing", "credit balance", "spend limit", "exceeded your current")


def kind_for_status(status: int, body_text: str = "") -> ErrorKind:
    """Classify an HTTP error status (plus its body, to tell a quota error from a rate limit)."""
    lowered = body_text.lower()
    if status == 429:
        return ErrorKind.QUOTA if any(m in lowered for m in _QUOTA_MARKERS) else ErrorKind.RATE_LIMIT
    if status == 402:
        return ErrorKind.QUOTA
    if status == 400:
        return ErrorKind.BAD_REQUEST
    if status == 401:
        return ErrorKind.AUTH
    if status == 403:
        return ErrorKind.QUOTA if any(m in lowered for m in _QUOTA_MARKERS) else ErrorKind.PERMISSION
    if status == 404:
        return ErrorKind.NOT_FOUND
    if status == 408:
        return ErrorKind.TIMEOUT
    if status == 409:
        return ErrorKind.CONFLICT
    if status == 529:
        return ErrorKind.OVERLOADED
    if status >= 500:
        return ErrorKind.SERVER
    return ErrorKind.OTHER  # 405, 413, 422, ...: our request is wrong; do not retry


def parse_retry_after(headers: Mapping[str, str] | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` (OpenAI) or ``Retry-After`` (seconds or HTTP date)."""
    if not headers:
        return None
    lower = {k.lower(): v for k, v in headers.items()}
    raw_ms = lower.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000.0)
        except ValueError:
            pass
    raw = lower.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def error_from_http(
    status: int, headers: Mapping[str, str] | None, body: Any, message: str, *, secrets: Sequence[str | None] = (),
) -> ProviderError:
    """The shared translation of an HTTP error response (used by every HTTP provider)."""
    body_text = body if isinstance(body, str) else json.dumps(body, default=str) if body is not None else ""
    kind = kind_for_status(status, f"{body_text} {message}")
    retry_after = parse_retry_after(headers)
    return ProviderError(kind, scrub(message, secrets), status_code=status, retry_after=retry_after,
                         rate_headers=rate_limit_headers(headers))


#: Response headers that state rate limits: OpenAI's (and the servers that copy it) and Anthropic's.
RATE_LIMIT_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-")


def rate_limit_headers(headers: Mapping[str, str] | None) -> dict[str, str] | None:
    """The rate-limit headers among ``headers`` (names lower-case), or ``None`` when there are
    none: what a provider hands the LLM layer with each reply (``Completion.rate_headers``) and error."""
    if not headers:
        return None
    found = {name.lower(): value for name, value in headers.items() if name.lower().startswith(RATE_LIMIT_PREFIXES)}
    return found or None


@runtime_checkable
class Provider(Protocol):
    """A model behind one interface. Implementations are small adapters around one SDK call."""

    name: str
    """Provider registry name ("openai", "anthropic", "local", "baseline")."""
    model: str
    """Model name as given in the spec."""
    max_concurrency: int | None
    """Upper bound on parallel requests this provider can use (``1`` for an in-process model);
    ``None`` means "whatever the run asks for"."""
    sample_dependent: bool
    """True when the output depends on the sample beyond the messages (baselines read the
    reference), so the cache key must include the sample id."""
    key_env: str | None
    """Environment variable holding the API key (``OPENAI_API_KEY`` ...); ``None`` for providers
    that take no key. A spec's ``api_key_env`` overrides it."""
    key_optional_with_base_url: bool
    """True when a server named by ``base_url`` usually needs no key (a self-hosted
    OpenAI-compatible server), so only an explicit ``api_key_env`` makes the key required."""

    async def generate(self, request: Request) -> Completion:
        """Return the completion or raise :class:`ProviderError`."""
        ...

    def check(self) -> None:
        """Cheap pre-flight check (e.g. the server accepts TCP connections); raises
        :class:`ConfigurationError`. Must not send a generation request."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


@runtime_checkable
class BatchingProvider(Protocol):
    """A provider that answers several requests in one call, more cheaply than one by one (an
    in-process model generating them in one forward pass). The runner hands such a provider up to
    ``batch_size`` requests at a time; every other provider gets them one by one."""

    batch_size: int
    """Requests per call the provider handles best (``1``: no gain from batching)."""

    async def generate_batch(self, requests: Sequence[Request]) -> "list[Completion | ProviderError]":
        """One result per request, in order: its completion, or the :class:`ProviderError` that is
        that request's alone. Raises only for a failure of the whole call."""
        ...


def key_requirement_of(provider_class: Any, spec: Any) -> tuple[str, bool] | None:
    """(environment variable, whether a key is required) for ``spec`` served by ``provider_class``;
    ``None`` when the provider declares no ``key_env``. The key is required unless the provider
    says a ``base_url`` server needs none and the spec names no variable of its own."""
    default = getattr(provider_class, "key_env", None)
    if default is None:
        return None
    optional = getattr(provider_class, "key_optional_with_base_url", False) and spec.base_url is not None
    return spec.api_key_env or default, not optional or spec.api_key_env is not None


def resolve_api_key(provider: Any, spec: Any, *, explicit: str | None) -> str | None:
    """The key passed in (e.g. from Streamlit secrets) or read from the variable the provider
    (or the spec's ``api_key_env``) names; ``None`` when none is needed or found.

    Raises :class:`MissingKeyError` naming the variable when a needed key is absent, before any
    request is sent.
    """

    requirement = key_requirement_of(provider, spec)
    if requirement is None:
        return explicit or None
    env_var, required = requirement
    key = explicit or os.environ.get(env_var) or None
    if key is None and required:
        raise MissingKeyError(provider.name, env_var)
    return key


def parse_base_url(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a server URL; a malformed one (``http://[::1``, port 99999, no host)
    is a :class:`ConfigurationError` naming it."""

    def invalid(why: str) -> ConfigurationError:

        return ConfigurationError(f"invalid base URL {url_without_credentials(url)!r}: {why}; "
                                  "expected http(s)://host[:port][/path]")

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise invalid(str(exc)) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise invalid("no http(s) scheme or no host")
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80)


def check_options(options: Mapping[str, Any]) -> None:
    """Reject transport options of the wrong type before any request (one line naming the option)."""
    if "timeout" in options:
        value = options["timeout"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ConfigurationError(f"option timeout must be a positive number of seconds, got {value!r}")
    if "headers" in options and not isinstance(options["headers"], Mapping):
        raise ConfigurationError("option headers must be a JSON object of header names to values")


def check_reachable(url: str, *, timeout: float = 5.0) -> None:
    """Open (and close) a TCP connection to the host of ``url``: an unreachable server is a
    configuration error reported before the run starts, not thousands of failed samples."""

    scheme, host, port = parse_base_url(url)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigurationError(f"cannot reach server {scheme}://{host}:{port} ({reason})") from None


#: Largest reply body (bytes on the wire) a provider reads; a bigger one fails the request as
#: ``too_large`` without being stored whole. Change it with the model option ``max_reply_bytes``
#: (``run --max-reply-bytes``). Chat replies are a few kilobytes; 1 MiB leaves room for long ones.
DEFAULT_MAX_REPLY_BYTES = 1_048_576
#: Characters of a too-large reply kept in the row's ``raw_text`` (the Failures page shows them).
TOO_LARGE_HEAD_CHARS = 2000


def max_reply_bytes(options: Mapping[str, Any]) -> int:
    """The reply size cap for a model's options (``max_reply_bytes``, default :data:`DEFAULT_MAX_REPLY_BYTES`)."""
    value = options.get("max_reply_bytes", DEFAULT_MAX_REPLY_BYTES)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"option max_reply_bytes must be a whole number of bytes >= 1, got {value!r}")
    return value


def capped_http_client(sdk: Any, *, max_bytes: int) -> Any:
    """An HTTP client for a Stainless SDK (``openai``, ``anthropic``) that reads at most ``max_bytes``
    of any reply: a bigger one raises :class:`ProviderError` ``too_large`` carrying its head, so a
    5 MB reply is neither held in memory nor cached. Replies are asked for uncompressed, so the cap
    counts the reply's real size and the head is readable text."""
    # Each request in one socket write: a run killed mid-request never leaves a server half of one.
    return send_whole_requests(sdk.DefaultAsyncHttpxClient(
        event_hooks={"response": [_ReplySizeCap(max_bytes)]}, headers={"Accept-Encoding": "identity"},
    ))


class _ReplySizeCap:
    """A response hook replacing the body stream with one that stops past ``max_bytes``."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes

    async def __call__(self, response: Any) -> None:
        library = sys.modules[type(response).__module__.split(".")[0]]  # httpx or its fork httpx2
        declared = response.headers.get("content-length", "")
        declared_size = int(declared) if declared.isdigit() else None
        response.stream = _capped_stream(library, response.stream, self.max_bytes, declared_size)


def _capped_stream(library: Any, inner: Any, max_bytes: int, declared: int | None) -> Any:
    return _capped_stream_class(library)(inner, max_bytes, declared)


@functools.cache
def _capped_stream_class(library: Any) -> Any:
    """The capped stream type for ``library`` (httpx or its fork), made once: a class statement per
    reply cost more than the rest of the size check."""

    class CappedStream(library.AsyncByteStream):  # the client requires its own stream type
        def __init__(self, inner: Any, max_bytes: int, declared: int | None) -> None:
            self.inner, self.max_bytes, self.declared = inner, max_bytes, declared

        async def __aiter__(self) -> Any:
            inner, max_bytes, declared = self.inner, self.max_bytes, self.declared
            received, head = 0, bytearray()
            async for chunk in inner:
                received += len(chunk)
                if len(head) < TOO_LARGE_HEAD_CHARS:
                    head += chunk[:TOO_LARGE_HEAD_CHARS - len(head)]
                too_big = received > max_bytes or (declared is not None and declared > max_bytes)
                if too_big and (len(head) >= TOO_LARGE_HEAD_CHARS or received > max_bytes):
                    size = f"{declared} bytes" if declared is not None else f"more than {max_bytes} bytes"
                    raise ProviderError(
                        ErrorKind.TOO_LARGE,
                        f"the reply is {size}, over the cap of {max_bytes} bytes (raise it with "
                        f"--max-reply-bytes or the model option max_reply_bytes); its start is kept in raw_text",
                        head=bytes(head).decode("utf-8", errors="replace"),
                    )
                yield chunk

        async def aclose(self) -> None:
            await self.inner.aclose()

    return CappedStream


@contextlib.contextmanager
def translated_sdk_errors(sdk: Any, secrets: Sequence[str | None]) -> Iterator[None]:
    """Turn the exceptions of a Stainless-generated SDK (``openai``, ``anthropic``: same class
    names) into :class:`ProviderError`, so the one retry loop classifies every provider alike."""
    try:
        yield
    except sdk.APIConnectionError as exc:  # APITimeoutError is one too
        if isinstance(exc.__cause__, ProviderError):  # our own check inside the HTTP client (too_large)
            raise exc.__cause__ from None
        if isinstance(exc, sdk.APITimeoutError):
            raise ProviderError(ErrorKind.TIMEOUT, scrub(str(exc), secrets)) from None
        cause = exc.__cause__ or exc
        raise ProviderError(ErrorKind.CONNECTION, scrub(f"{exc} ({type(cause).__name__})", secrets)) from None
    except sdk.APIStatusError as exc:
        raise error_from_http(exc.status_code, exc.response.headers, exc.body, str(exc), secrets=secrets) from None
    except (json.JSONDecodeError, sdk.APIResponseValidationError, ValueError) as exc:
        raise ProviderError(
            ErrorKind.BAD_RESPONSE, shorten(f"unparseable response body ({type(exc).__name__}: {exc})", 300, secrets)
        ) from None
