"""Every error PersoBench raises on purpose derives from :class:`PersoBenchError`.

Its message is one line that names what to change (the file, row and field, the flag, the
environment variable), so callers catch the base class once and show the message as is: the CLI
prints ``error: <message>`` and exits 2. A few families sit under it::

    PersoBenchError
    ├── ConfigurationError   (ValueError)    the run cannot start as asked: flag, model, key, template
    ├── DatasetError         (ValueError)    a dataset, prompt table, user file or import folder is bad
    ├── StoreError           (RuntimeError)  a run folder or table is missing, unreadable or corrupt
    ├── ProviderError                        a model request failed (classified by :class:`ErrorKind`)
    ├── MetricError                          a metric cannot be computed or is unknown
    └── RunAborted           (RuntimeError)  a run stopped early: its first requests all failed alike

The builtin bases are kept from before the hierarchy existed, so ``except ValueError`` around
configuration and dataset errors still works. Specific classes (``MissingKeyError``,
``CSVFormatError`` ...) live beside the code that raises them.
"""

from __future__ import annotations

import enum
from typing import Mapping, Protocol

__all__ = ["ConfigurationError", "DatasetError", "ErrorKind", "MetricError", "PersoBenchError", "ProviderError", "RETRYABLE_KINDS",
           "RunAborted", "ScoringError", "StoreBusy", "StoreError", "StoreWriteError"]


class PersoBenchError(Exception):
    """The base of every error PersoBench raises on purpose; ``str()`` is one line for a user."""


class ConfigurationError(PersoBenchError, ValueError):
    """The run cannot start: unknown provider or model, missing key, bad option, unreachable server.

    The message is one line that says what to change.
    """


class DatasetError(PersoBenchError, ValueError):
    """A dataset cannot be loaded; the message says which file, row and field, or what to set."""


class StoreError(PersoBenchError, RuntimeError):
    """A run folder or table is missing, unreadable or corrupt; the message names the file."""


class StoreWriteError(StoreError):
    """The disk refused a write (full, over quota, file size limit); the message names the file and
    says that the previous file is unchanged."""


class StoreBusy(StoreError):
    """Another process kept a run's state lock longer than a state change waits."""


class MetricError(PersoBenchError):
    """A metric cannot be computed (its model is unavailable, its inputs are bad) or is unknown."""


class ScoringError(MetricError, ValueError):
    """Inputs that cannot be scored (e.g. a run's sample ids missing from its dataset)."""


class ErrorKind(str, enum.Enum):
    """Why a request failed. The value is what the generations table shows in ``error``."""

    RATE_LIMIT = "rate_limit"
    SERVER = "server_error"
    OVERLOADED = "overloaded"
    TIMEOUT = "timeout"
    CONNECTION = "connection_error"
    BAD_RESPONSE = "bad_response"
    BAD_REQUEST = "bad_request"
    AUTH = "authentication"
    PERMISSION = "permission_denied"
    NOT_FOUND = "not_found"
    QUOTA = "quota_exceeded"
    CONFLICT = "conflict"
    TOO_LARGE = "too_large"
    OTHER = "other"


#: Kinds worth another attempt: the same request may well succeed a moment later.
RETRYABLE_KINDS = frozenset(
    {ErrorKind.RATE_LIMIT, ErrorKind.SERVER, ErrorKind.OVERLOADED, ErrorKind.TIMEOUT,
     ErrorKind.CONNECTION, ErrorKind.BAD_RESPONSE, ErrorKind.CONFLICT}
)


class ProviderError(PersoBenchError):
    """A classified request failure. ``str()`` never contains credentials (providers scrub them)."""

    def __init__(
        self, kind: ErrorKind, message: str, *, status_code: int | None = None, retry_after: float | None = None,
        head: str | None = None, rate_headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.status_code = status_code
        self.retry_after = retry_after
        self.head = head
        """The start of a reply that could not be used whole (``too_large``), kept for the Failures page."""
        self.rate_headers = rate_headers
        """The rate-limit headers of the error response (a 429 states where the client stands), for
        the LLM layer's pacing; never written anywhere."""

    @property
    def retryable(self) -> bool:
        return self.kind in RETRYABLE_KINDS

    @property
    def signature(self) -> tuple[str, int | None]:
        """What "the same reason" means when deciding that a run is failing for one cause."""
        return (self.kind.value, self.status_code)

    def describe(self) -> str:
        """One line for the ``error`` column: kind, HTTP status and the server's message."""
        status = f" HTTP {self.status_code}" if self.status_code is not None else ""
        message = " ".join(str(self).split())[:500]
        return f"{self.kind.value}{status}: {message}"


class StoppedRun(Protocol):
    """What :class:`RunAborted` says of its run (a :class:`~persobench.store.run_store.Run`; this
    module, below the store, names only what it reads)."""

    @property
    def run_id(self) -> str: ...


class RunAborted(PersoBenchError, RuntimeError):
    """The run stopped early because its first requests all failed for the same non-retryable
    reason (bad key, unknown model, no quota ...). The finished samples are saved."""

    def __init__(self, reason: str, run: StoppedRun) -> None:
        super().__init__(reason)
        self.run = run
        """The :class:`~persobench.store.run_store.Run` that stopped (its finished rows are on disk)."""
