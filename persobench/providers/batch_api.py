"""Batch APIs: many requests submitted at once, answered within a day, at about half the price.

A :class:`BatchBackend` is a small adapter around one provider's batch endpoints (the OpenAI Batch
API in :mod:`persobench.providers.openai_batch`, Anthropic Message Batches in
:mod:`persobench.providers.anthropic_batch`). It only translates: requests into the provider's
batch input, the provider's batch object into :class:`BatchStatus`, result lines into
:class:`~persobench.providers.base.Completion` or :class:`~persobench.errors.ProviderError`.
Submitting once, remembering the batch id, polling, caching and resubmitting live once in
:mod:`persobench.llm.batch_driver`.

Each request's ``custom_id`` is ``<token>-<n>`` (:func:`custom_id`): the submission's token and the
request's place in the list of cache keys the state file holds for that batch (short, and within
Anthropic's 64 characters of ``[A-Za-z0-9_-]`` whatever the keys look like). The token is written to
the state file before submitting, so a batch whose id was never recorded is recognised by its custom
ids (and by OpenAI's ``metadata``), never by its size or time. Both APIs promise a custom id once per
batch: :func:`one_result_per_id` uses neither line of one the output repeats.
"""

from __future__ import annotations

import json
import random
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol, Sequence, overload, runtime_checkable

from persobench.store.files import jsonl_lines
from persobench.errors import ConfigurationError, ErrorKind, ProviderError
from persobench.providers.base import Completion, Request, error_from_http, resolve_api_key
from persobench.core.secrets import scrub, shorten
from persobench.providers.spec import ModelSpec
from persobench.core.registry import Registry
from persobench.providers.provider_registry import provider_class
from persobench.providers.base import TOO_LARGE_HEAD_CHARS
from datetime import datetime


#: Provider name -> its batch backend class, built as ``cls(spec, api_key=..., timeout=...)`` (the module
#: is imported when a batch is first made). A provider with a batch API registers one line here.
BATCH_BACKENDS: Registry[Callable[..., BatchBackend]] = Registry("batch backend")
BATCH_BACKENDS.register("openai", "persobench.providers.openai_batch:OpenAIBatchBackend")
BATCH_BACKENDS.register("anthropic", "persobench.providers.anthropic_batch:AnthropicBatchBackend")


@dataclass(frozen=True)
class BatchStatus:
    """Where a submitted batch stands, as the provider reports it."""

    batch_id: str
    """The provider's id of the batch (``batch_...``, ``msgbatch_...``)."""
    state: str
    """The provider's own word for it (``validating``, ``in_progress``, ``finalizing``, ``completed``,
    ``expired``, ``failed``, ``cancelled`` for OpenAI; ``in_progress``, ``canceling``, ``ended`` for Anthropic)."""
    ended: bool
    """No request of the batch will be answered any more: its results can be collected."""
    total: int = 0
    """Requests in the batch."""
    succeeded: int = 0
    """Requests answered so far."""
    failed: int = 0
    """Requests that failed (errored, and for Anthropic also canceled or expired)."""
    expired: bool = False
    """The batch ran out of its completion window or was cancelled: the requests it left unanswered
    (absent, or answered ``batch_expired`` / ``batch_cancelled``, ``expired`` / ``canceled``) may be
    submitted again."""
    batch_failed: bool = False
    """The batch failed as a whole (OpenAI ``failed``: its input was refused); ``error`` says why."""
    elapsed: float | None = None
    """Seconds from creation to the end, when the provider says (each reply's latency is its share)."""
    result_ref: str | None = None
    """Where the results are: OpenAI's output file id and error file id joined by a space, or
    Anthropic's results URL."""
    error: str | None = None
    """Why the whole batch failed (OpenAI ``errors``), scrubbed of credentials."""

    def describe(self) -> str:
        """``in_progress 3/10 done, 1 failed``: the state and counts in one line."""
        text = f"{self.state} {self.succeeded}/{self.total} done"
        return text + (f", {self.failed} failed" if self.failed else "") + (f" ({self.error})" if self.error else "")


@runtime_checkable
class BatchBackend(Protocol):
    """One provider's batch endpoints."""

    provider: str
    """Provider name ("openai", "anthropic")."""
    max_requests: int
    """Requests one batch may hold; more are split into several batches."""

    def submit(self, requests: Mapping[str, Request], token: str) -> str:
        """Submit ``requests`` (custom id -> request) as one batch; returns its id. ``token`` tags
        the batch (where the API keeps metadata) so :meth:`find` can recognise it after a crash."""
        ...

    def find(self, token: str, *, since: float, count: int, tagged: bool = True) -> "Lookup":
        """The batch submitted with ``token`` whose id was never recorded (the process died, or the
        answer was lost, right after submitting): recognised by the token it carries (OpenAI
        ``metadata``, the custom-id prefix of :func:`custom_id`), never by size or time. ``since``
        (the submission's time) and ``count`` (its requests) only narrow which batches are read.
        ``tagged``: its custom ids carry the token (``False``: state files written before they did)."""
        ...

    def status(self, batch_id: str) -> BatchStatus:
        """The batch's state and counts."""
        ...

    def results(self, status: BatchStatus) -> "dict[str, Completion | ProviderError]":
        """The answered requests of an ended batch: custom id -> completion, or the request's own
        error (a :class:`RepeatedId` for an id the output repeats). Requests left unanswered
        (expired, canceled) are absent."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...


@dataclass(frozen=True)
class Lookup:
    """What :meth:`BatchBackend.find` learnt about a submission whose answer was lost."""

    batch_id: str | None = None
    """The batch carrying the submission's token; ``None`` with ``undecided == 0``: it never
    reached the provider."""
    undecided: int = 0
    """Batches that may be it but cannot be read yet (Anthropic shows custom ids only once a batch
    has ended): ask again later, submit nothing meanwhile."""


def custom_id(token: str, position: int) -> str:
    """The custom id of the request at ``position`` (from 0) in the submission tagged ``token``."""
    return f"{token}-{position}"


def carries_token(custom: Any, token: str) -> bool:
    """Whether result line custom id ``custom`` belongs to the submission tagged ``token``."""
    return isinstance(custom, str) and custom.startswith(f"{token}-")


class RepeatedId(ProviderError):
    """The batch output holds more than one line for a custom id: the server's fault; neither line
    is used and the request is sent again."""


#: A result line that says its request was never carried out (expired, cancelled): left out.
UNANSWERED = None


def one_result_per_id(lines: Iterable[tuple[Any, Any]]) -> "dict[str, Completion | ProviderError]":
    """(custom id, result or :data:`UNANSWERED`) pairs of every result line -> custom id -> result.
    Both APIs give each custom id once per batch; an id seen on two lines (of one file or of the
    output and error files) gets a :class:`RepeatedId` instead of either line."""
    seen: dict[str, list[Any]] = {}
    for key, result in lines:
        if isinstance(key, str):
            seen.setdefault(key, []).append(result)
    out: dict[str, Completion | ProviderError] = {}
    for key, results in seen.items():
        if len(results) > 1:
            out[key] = RepeatedId(ErrorKind.BAD_RESPONSE, f"the batch output holds {len(results)} lines for this "
                                  "custom_id (unique within a batch, both APIs say): neither is used")
        elif results[0] is not UNANSWERED:
            out[key] = results[0]
    return out


def supports_batch(provider: str) -> bool:
    """Whether ``provider`` has a batch backend (``run --batch`` accepts it)."""
    return provider in BATCH_BACKENDS


def make_batch_backend(spec: "ModelSpec", *, api_key: str | None = None, timeout: float = 60.0) -> BatchBackend:
    """The batch backend for ``spec``; a :class:`ConfigurationError` for a provider without one, a
    :class:`~persobench.providers.base.MissingKeyError` without a needed key (before any request)."""


    if not supports_batch(spec.provider):
        known = ", ".join(BATCH_BACKENDS.in_order())
        raise ConfigurationError(f"--batch needs a provider with a batch API ({known}), not {spec.provider!r}")
    key = resolve_api_key(provider_class(spec.provider), spec, explicit=api_key)
    return BATCH_BACKENDS.get(spec.provider)(spec, api_key=key, timeout=timeout)


@dataclass
class HttpClient:
    """The control calls of a batch API over one ``httpx`` client: JSON in and out, a few retries
    with backoff on 408/409/429/5xx and connection errors (never before ``Retry-After``), errors as
    :class:`ProviderError` with every credential scrubbed."""

    base_url: str
    """Root of the API, without a trailing slash (``https://api.openai.com/v1``)."""
    headers: Mapping[str, str]
    """Headers of every call (authentication included: never logged, never stored)."""
    timeout: float = 60.0
    """Seconds per call."""
    secrets: Sequence[str | None] = ()
    """Credentials to scrub from every error message."""
    attempts: int = 5
    """Tries per call, the first included."""
    _client: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        import httpx

        self._client = httpx.Client(timeout=self.timeout, headers=dict(self.headers))

    def url(self, path: str) -> str:
        return path if path.startswith(("http://", "https://")) else f"{self.base_url}{path}"

    def call(self, method: str, path: str, *, once: bool = False, stream: bool = False, **kwargs: Any) -> Any:
        """The response of ``method path`` (an ``httpx.Response`` with a 2xx status). ``once``: a call
        that must not happen twice (creating a batch) is retried only after a refusal that says it
        was not processed (429, 529); after a timeout or a lost connection it may have been, so the
        error is raised and the caller's state decides (:meth:`BatchBackend.find`). ``stream``: the
        body is left unread (the caller reads what it needs, then closes the response)."""
        import httpx

        attempt = 0
        while True:
            attempt += 1
            try:
                response = self._client.send(self._client.build_request(method, self.url(path), **kwargs),
                                             stream=stream)
                if response.status_code < 300:
                    return response
                response.read()
            except httpx.HTTPError as exc:
                error = ProviderError(ErrorKind.CONNECTION, shorten(f"{method} {path}: {exc} ({type(exc).__name__})",
                                                                    300, self.secrets))
            else:
                error = error_from_http(response.status_code, response.headers, response.text,
                                        shorten(f"{method} {path}: HTTP {response.status_code}: {response.text}",
                                                300, self.secrets), secrets=self.secrets)
            unprocessed = error.kind in (ErrorKind.RATE_LIMIT, ErrorKind.OVERLOADED)
            if not error.retryable or attempt >= self.attempts or (once and not unprocessed):
                raise error
            wait = max(error.retry_after or 0.0, min(30.0, 0.5 * 2 ** (attempt - 1)) * (0.5 + random.random()))
            time.sleep(wait)

    def json(self, method: str, path: str, *, once: bool = False, **kwargs: Any) -> Any:
        response = self.call(method, path, once=once, **kwargs)
        try:
            return response.json()
        except ValueError:
            raise ProviderError(ErrorKind.BAD_RESPONSE, shorten(f"{method} {path}: the reply is not JSON: {response.text}",
                                                                200, self.secrets)) from None

    def lines(self, path: str) -> list[Any]:
        """A JSONL document as objects (a line that is not JSON is skipped: its request stays unanswered)."""
        return [obj for line in jsonl_lines(self.call("GET", path).text) if (obj := _json_line(line)) is not None]

    def first_line(self, path: str) -> Any:
        """The first JSON line of a JSONL document, reading no further than it (``None``: none)."""
        import httpx

        response = self.call("GET", path, stream=True)
        try:
            # Split on "\n" only, as jsonl_lines does: httpx's iter_lines also breaks at U+2028,
            # which JSON allows raw inside a string.
            pending = ""
            for text in response.iter_text():
                pending += text
                *lines, pending = pending.split("\n")
                for line in lines:
                    if (obj := _json_line(line)) is not None:
                        return obj
            if (obj := _json_line(pending)) is not None:
                return obj
        except httpx.HTTPError as exc:
            raise ProviderError(ErrorKind.CONNECTION, shorten(f"GET {path}: {exc} ({type(exc).__name__})", 300,
                                                              self.secrets)) from None
        finally:
            response.close()
        return None

    def listing(self, path: str, *, after: str, since: float) -> Iterator[Mapping[str, Any]]:
        """Every object of a paginated list (newest first: ``has_more``, ``last_id``, the next page
        ``after`` it), up to the first one created before ``since``."""
        params: dict[str, Any] = {"limit": 100}
        while True:
            page = self.json("GET", path, params=params)
            data = [item for item in (page.get("data") or []) if isinstance(item, Mapping)]
            for item in data:
                created = parse_time(item.get("created_at"))
                if created is not None and created < since:
                    return
                yield item
            last = page.get("last_id") or (data[-1].get("id") if data else None)
            if not page.get("has_more") or not data or not last:
                return
            params = {"limit": 100, after: safe_id(last)}

    def close(self) -> None:
        self._client.close()


def _json_line(line: str) -> Any:
    if not line.strip():
        return None
    try:
        return json.loads(line)
    except ValueError:
        return None


#: How far before a submission a look-up for its batch reads the provider's list (newest first), in
#: seconds: a day, far beyond any difference between this machine's clock and the provider's.
CLOCK_SKEW = 86_400.0


def error_of(status: int | None, body: Any, secrets: Sequence[str | None]) -> ProviderError:
    """A result line's error as the :class:`ProviderError` the same reply would have been alone."""
    message = body if isinstance(body, str) else json.dumps(body, default=str)
    if status is None:
        return ProviderError(ErrorKind.OTHER, shorten(f"batch request failed: {message}", 300, secrets))
    return error_from_http(status, None, body, shorten(f"batch request failed: HTTP {status}: {message}", 300, secrets),
                           secrets=secrets)


@overload
def scrubbed_text(value: None, secrets: Sequence[str | None]) -> None: ...
@overload
def scrubbed_text(value: object, secrets: Sequence[str | None]) -> str: ...
def scrubbed_text(value: Any, secrets: Sequence[str | None]) -> str | None:
    """``value`` as text with credentials removed and control characters escaped (it is printed on
    terminals and written to state files); ``None`` stays ``None``."""
    if value is None:
        return None
    text = scrub(str(value), secrets)
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


_ID = re.compile(r"[A-Za-z0-9_.:-]{1,200}")


def safe_id(value: Any, what: str = "batch id") -> str:
    """An id a server gave (batch, file) checked before it goes into a URL path, a state file or a
    terminal line: letters, digits and ``_.:-`` only."""
    text = str(value)
    if not _ID.fullmatch(text):
        raise ProviderError(ErrorKind.BAD_RESPONSE, f"the server gave an unusable {what}: {text[:80]!r}")
    return text


def capped(completion: Completion, max_bytes: int) -> "Completion | ProviderError":
    """``completion``, or a ``too_large`` error keeping its start when its text passes the reply
    size cap (the cap interactive replies have: a batch line is no way around it)."""

    size = len(completion.text.encode("utf-8"))
    if size <= max_bytes:
        return completion
    return ProviderError(ErrorKind.TOO_LARGE, f"the reply is {size} bytes, over the cap of {max_bytes} bytes (raise it "
                         "with --max-reply-bytes or the model option max_reply_bytes); its start is kept in raw_text",
                         head=completion.text[:TOO_LARGE_HEAD_CHARS])


def parse_time(value: Any) -> float | None:
    """Seconds since the epoch from a Unix number or an RFC 3339 string (``None`` if neither)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):

        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None
