"""Secret handling, in one place: every credential that could reach a screen, a log or a file passes here.

* :func:`scrub` replaces the exact secrets a caller holds (a provider's API key) with ``***``: used in
  provider error messages, whatever a server echoes back.
* :func:`redact` removes credentials the caller does not hold: values of secret-looking environment
  variables, values registered from Streamlit secrets and strings shaped like API keys or bearer
  tokens become ``[redacted]``. Used for everything the app shows or a job writes to its log.
* :func:`secret_environment` takes key variables from Streamlit secrets (so background runs get them
  through their environment, never through a file) and registers their values for :func:`redact`.
* :func:`strip_secrets` drops credential fields from a mapping before it is written to disk, and
  :func:`url_without_credentials` user info and query values from a URL.
* :func:`public_url` strips user info and every query parameter not known to be public from a base
  URL before it is stored or shown (:func:`public_text` does it to every URL inside a text, such as a
  log line);
  :func:`remember_url`, :func:`credentials_environment` and :func:`url_with_credentials` carry the full URL to a child
  process through its environment, never through a file or its command line.
* :func:`shorten` cuts an error text to a length *after* masking the secrets in it.

Only the standard library is imported: providers, generation, the job runner and the app all use it.
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping, Sequence
import base64
from urllib.parse import parse_qsl, unquote, urlsplit
from urllib.parse import urlunsplit
from urllib.parse import urlencode
import json

__all__ = ["KEY_HOSTS_ENV", "PUBLIC_PARAMETERS", "REDACTED", "SECRET_KEYS", "URL_CREDENTIALS_ENV", "credentials_environment",
           "is_secret_name", "key_allowed", "is_secret_option", "known_secrets", "public_address", "public_text", "public_url", "redact", "remember_url",
           "register_secret", "scrub", "secret_environment", "shorten", "strip_secrets", "url_with_credentials",
           "url_without_credentials"]

#: (pattern, keep the first group) pairs; the rest of each match becomes "[redacted]".
_SECRET_PATTERNS: tuple[tuple[re.Pattern[str], bool], ...] = (
    (re.compile(r"\b(?:sk|rk|pk)-(?:ant-)?[A-Za-z0-9_\-]{8,}"), False),  # OpenAI / Anthropic keys
    (re.compile(r"\b(?:hf|gsk|xai|ghp|gho|github_pat)_[A-Za-z0-9_]{8,}"), False),
    (re.compile(r"\bAIza[0-9A-Za-z_\-]{20,}"), False),  # Google API keys
    (re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-~+/=]{8,}"), True),
    (re.compile(r"(?i)((?:api[_-]?key|token|secret|password|authorization)[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]{4,}"), True),
)
#: Environment variable names whose values are secrets.
_SECRET_NAME = re.compile(r"(?i)(KEY|TOKEN|SECRET|PASSWORD)")
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
#: Secret values read from Streamlit secrets; ``redact`` removes them like environment secrets.
_REGISTERED: set[str] = set()

#: Mapping keys that must never reach disk even if a caller passes them inside a model spec.
SECRET_KEYS = frozenset({"api_key", "apikey", "key", "token", "secret", "password", "authorization"})


def is_secret_name(name: str) -> bool:
    """True for an environment variable name that holds a credential (``OPENAI_API_KEY``, ``HF_TOKEN``)."""
    return bool(_SECRET_NAME.search(str(name)))


#: A run of this many consecutive characters of a known secret is masked wherever it appears: a copy
#: of a key cut short (an error body truncated by a server or a library) still gives most of it away.
SECRET_RUN = 16


def scrub(text: str, secrets: Sequence[str | None]) -> str:
    """``text`` with every given secret replaced by ``***``, so keys cannot leak through error messages.

    Any run of :data:`SECRET_RUN` or more consecutive characters of a secret is masked too (a key cut
    off by a truncation elsewhere, or a piece of its middle)."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
            if len(secret) > SECRET_RUN:
                text = _mask_runs(text, secret)
    return text


def _mask_runs(text: str, secret: str) -> str:
    """``text`` with every stretch covered by a :data:`SECRET_RUN`-character piece of ``secret`` masked."""
    # Every SECRET_RUN-character piece of the secret holds one of its aligned half-run blocks whole:
    # a text holding none of those few blocks holds no piece (the usual case, checked per reply).
    half = SECRET_RUN // 2
    if not any(secret[start:start + half] in text for start in range(0, len(secret) - half + 1, half)):
        return text
    covered = bytearray(len(text))
    found = False
    for start in range(len(secret) - SECRET_RUN + 1):
        piece = secret[start:start + SECRET_RUN]
        position = text.find(piece)
        while position != -1:
            covered[position:position + SECRET_RUN] = b"\x01" * SECRET_RUN
            found = True
            position = text.find(piece, position + 1)
    if not found:
        return text
    out, index = [], 0
    while index < len(text):
        if covered[index]:
            while index < len(text) and covered[index]:
                index += 1
            out.append("***")
        else:
            out.append(text[index])
            index += 1
    return "".join(out)


def shorten(text: str, limit: int, secrets: Sequence[str | None]) -> str:
    """``text`` masked with :func:`scrub`, then cut to at most ``limit`` characters: cutting first
    would leave a piece of a key that no longer matches the whole key."""
    text = scrub(str(text), secrets)
    return text if len(text) <= limit else text[:max(0, limit - 1)] + "…"


def register_secret(value: str) -> None:
    """Have :func:`redact` remove ``value`` from now on (values shorter than 8 characters are ignored:
    they would erase ordinary words)."""
    if isinstance(value, str) and len(value) >= 8:
        _REGISTERED.add(value)


def redact(text: Any) -> str:
    """``text`` with credentials removed: values of secret-looking environment variables, registered
    secrets and strings shaped like API keys or bearer tokens become ``[redacted]``."""
    if text is None:
        return ""
    value = str(text)
    for name, secret in os.environ.items():
        if is_secret_name(name) and secret and len(secret) >= 8 and secret in value:
            value = value.replace(secret, "[redacted]")
    for secret in _REGISTERED:
        value = value.replace(secret, "[redacted]")
    for pattern, keep_prefix in _SECRET_PATTERNS:
        if keep_prefix:
            value = pattern.sub(lambda m: m.group(1) + "[redacted]", value)
        else:
            value = pattern.sub("[redacted]", value)
    return value


def secret_environment(secrets: Mapping[str, Any] | None) -> dict[str, str]:
    """Environment-style credentials (``OPENAI_API_KEY = "..."``) found at the top level of
    Streamlit secrets. Only names that look like key variables are taken; their values are
    registered for :func:`redact`."""
    found: dict[str, str] = {}
    if secrets is None:
        return found
    try:
        items = list(secrets.items())
    except Exception:  # noqa: BLE001 - st.secrets raises on any access when no secrets file exists
        return found
    for name, value in items:
        if isinstance(value, str) and value and _ENV_NAME.match(str(name)) and is_secret_name(str(name)):
            found[str(name)] = value
            register_secret(value)
    return found


#: Option or header names whose values are credentials (``x-api-key``, ``authorization``, ``*token*``).
_SECRET_OPTION = re.compile(r"(?i)(key|token|secret|password|passwd|authorization|auth|credential|cookie|signature)")
REDACTED = "[redacted]"


def is_secret_option(name: str) -> bool:
    """True for an option, header or query-parameter name whose value is a credential."""
    return bool(_SECRET_OPTION.search(str(name)))


def strip_secrets(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``spec`` without credentials (recursively), safe to write to disk.

    Fields named like a key (``api_key``, ``token`` ...) are dropped; other secret-looking names
    (``x-api-key``, ``authorization``, ``session_token_v2``) keep their name with the value
    ``[redacted]``, so a manifest still shows which options were set."""
    clean: dict[str, Any] = {}
    for key, value in spec.items():
        if key.lower() in SECRET_KEYS or key.lower().endswith(("_key", "_token", "_secret")):
            continue
        if is_secret_option(key) and not isinstance(value, Mapping):
            clean[key] = REDACTED
            continue
        clean[key] = strip_secrets(value) if isinstance(value, Mapping) else value
    return clean


def known_secrets(*, api_keys: Sequence[str | None] = (), base_url: str | None = None,
                  options: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Every credential a run knows, for :func:`scrub`: its API keys, the values of secret-looking
    environment variables and Streamlit secrets, user info and query values of its base URL, and
    values of secret-looking options and headers (also as HTTP Basic ``user:password`` base64)."""

    found: list[str] = [k for k in api_keys if k]
    source = os.environ if env is None else env
    found += [v for name, v in source.items() if is_secret_name(name) and v]
    found += list(_REGISTERED)
    if base_url:
        try:
            parts = urlsplit(base_url)
            user, password = parts.username, parts.password
        except ValueError:
            parts, user, password = None, None, None
        for item in (user, password):
            if item:
                found += [item, unquote(item)]
        if user and password:
            found.append(base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode())
        if parts is not None:
            found += [value for _name, value in parse_qsl(parts.query) if value]

    def walk(mapping: Mapping[str, Any]) -> None:
        for name, value in mapping.items():
            if isinstance(value, Mapping):
                walk(value)
            elif is_secret_option(name) and isinstance(value, str) and value:
                found.append(value)
                if value.lower().startswith(("bearer ", "basic ")):
                    found.append(value.split(None, 1)[1])

    walk(options or {})
    # longest first, so a secret containing another is replaced whole
    return tuple(sorted({s for s in found if len(s) >= 4}, key=len, reverse=True))


def url_without_credentials(url: str) -> str:
    """``url`` without user info (``user:pw@``) and without query values; safe to write or show.

    ``http://user:pw@host:8000/v1?api-key=abc`` -> ``http://host:8000/v1?api-key=``.
    A URL too malformed to split still loses its user info and query.
    """

    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:  # still drop what could be a credential: user info and the query
        return re.sub(r"//[^/?#]*@", "//", url).split("?", 1)[0].split("#", 1)[0]
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port is not None else host
    query = "&".join(item.split("=", 1)[0] + "=" for item in parts.query.split("&") if item)
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


#: Query parameters whose values are never credentials (the API version a gateway serves): the only
#: ones :func:`public_url` keeps. Any other parameter may carry one under any name (``?pw=``,
#: ``?jwt=``, ``?session_id=``), so it is left out of every stored or shown URL.
PUBLIC_PARAMETERS = frozenset({"api-version", "api_version", "version"})


def public_url(url: str) -> str:
    """``url`` without user info and with only the query parameters known to be public
    (:data:`PUBLIC_PARAMETERS`, such as ``api-version``), safe to store and show: a gateway may take
    a credential in any parameter (``?pw=``, ``?jwt=``, ``?session_id=``), so the others are dropped.

    ``http://user:pw@host:8000/v1?jwt=abc&api-version=1`` -> ``http://host:8000/v1?api-version=1``.
    A URL too malformed to split loses its user info and its whole query.
    """

    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return re.sub(r"//[^/?#]*@", "//", url).split("?", 1)[0].split("#", 1)[0]
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port is not None else host
    kept = [(name, value) for name, value in parse_qsl(parts.query, keep_blank_values=True)
            if name.lower() in PUBLIC_PARAMETERS]
    return urlunsplit((parts.scheme, netloc, parts.path, urlencode(kept), ""))


def public_address(address: str) -> str:
    """A service address (``ray://user:pw@host:10001``, ``user:pw@host:6379``, ``auto``) without its
    user info: :func:`public_url` for one with a scheme, the part after the last ``@`` otherwise."""
    if "://" in address:
        return public_url(address)
    return address.rpartition("@")[2]


#: A URL with a scheme inside free text (a log line, a command line, an error message).
_URL_IN_TEXT = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"'<>]+")


def public_text(text: str) -> str:
    """``text`` with every URL in it replaced by its :func:`public_url`: for log lines, job files
    and anything else a page shows that may quote a base URL."""
    return _URL_IN_TEXT.sub(lambda m: public_url(m.group(0)) if _has_credentials(m.group(0)) else m.group(0),
                            str(text))


def _has_credentials(url: str) -> bool:
    return public_url(url) != url


#: Environment variable carrying the full form of base URLs whose credentials must not be stored:
#: a JSON object mapping each :func:`public_url` to its full URL. Its name holds none of the words
#: that mark a key variable, so a step that runs without the operator's keys still gets it (the
#: credentials were typed with the URL, they are not the operator's).
URL_CREDENTIALS_ENV = "PERSOBENCH_URL_CREDENTIALS"


#: Full base URLs this process was given, by their :func:`public_url` (filled by :func:`remember_url`).
_FULL_URLS: dict[str, str] = {}


def remember_url(url: str | None) -> str | None:
    """The :func:`public_url` of ``url`` to store and show instead of it; the full URL stays in this
    process's memory only (for :func:`credentials_environment`), and its credentials are registered
    for :func:`redact`."""
    if not url:
        return url
    public = public_url(url)
    if public != url:
        _FULL_URLS[public] = url
        register_secret_url(url)
    return public


def credentials_environment(urls: Sequence[str | None]) -> dict[str, str]:
    """The environment a child process needs to use ``urls`` in full while only their public forms
    appear in its command line and files; ``{}`` when no URL carries credentials. Each URL may be a
    full one or the public form of a URL given to :func:`remember_url` in this process."""

    full: dict[str, str] = {}
    for url in urls:
        if url and _has_credentials(url):
            full[public_url(url)] = url
        elif url and url in _FULL_URLS:
            full[url] = _FULL_URLS[url]
    return {URL_CREDENTIALS_ENV: json.dumps(full)} if full else {}


def url_with_credentials(url: str | None, *, env: Mapping[str, str] | None = None) -> str | None:
    """The full URL behind public ``url`` when :data:`URL_CREDENTIALS_ENV` carries it, else ``url``."""

    raw = (os.environ if env is None else env).get(URL_CREDENTIALS_ENV)
    if not url or not raw:
        return url
    try:
        full = json.loads(raw)
    except ValueError:
        return url
    value = full.get(url) if isinstance(full, dict) else None
    if isinstance(value, str) and value:
        register_secret_url(value)
        return value
    return url


def register_secret_url(url: str) -> None:
    """Have :func:`redact` remove the user info and the secret query values of ``url``."""

    try:
        parts = urlsplit(url)
        user, password = parts.username, parts.password
    except ValueError:
        return
    for item in (user, password):
        if item:
            register_secret(item)
            register_secret(unquote(item))
    if user and password:
        register_secret(base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode())
    for name, value in parse_qsl(parts.query):
        if name.lower() not in PUBLIC_PARAMETERS:
            register_secret(value)


#: Environment variable (or Streamlit secret) listing extra servers the app may send the operator's
#: API keys to: comma-separated hosts (``gateway.example.com``), ``host:port`` or URLs.
KEY_HOSTS_ENV = "PERSOBENCH_KEY_HOSTS"


def _origin(url: str) -> tuple[str, str, int | None] | None:

    try:
        parts = urlsplit(url if "://" in url else f"//{url}")
        return (parts.scheme.lower(), (parts.hostname or "").lower(), parts.port)
    except ValueError:
        return None


def key_allowed(base_url: str | None, *, configured: Sequence[str | None] = (),
                env: Mapping[str, str] | None = None) -> bool:
    """Whether the app may send the operator's API key to ``base_url``.

    Yes for the provider's own endpoint (``None``), for a base URL the operator configured (a
    models-file entry or preset, passed as ``configured``: same scheme, host and port) and for a
    server listed in ``$PERSOBENCH_KEY_HOSTS`` (a host allows every port and scheme, ``host:port``
    that port, a URL its scheme, host and port). A URL typed into the page is none of these.
    """
    if not base_url:
        return True
    target = _origin(base_url)
    if target is None or not target[1]:
        return False
    for url in configured:
        if url and _origin(url) == target:
            return True
    listed = (os.environ if env is None else env).get(KEY_HOSTS_ENV, "")
    for item in (i.strip() for i in listed.split(",") if i.strip()):
        allowed = _origin(item)
        if allowed is None or allowed[1] != target[1]:
            continue
        if allowed[2] is None and not allowed[0]:
            return True
        if (allowed[2] is None or allowed[2] == target[2]) and allowed[0] in ("", target[0]):
            return True
    return False
