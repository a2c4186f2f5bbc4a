"""The foundation every stage may use: nothing here imports a stage (only :mod:`persobench.errors`).

* :mod:`~persobench.core.registry`: :class:`Registry`, name -> factory, imported on first use (datasets,
  providers, metric families, executors, batch backends).
* :mod:`~persobench.core.secrets`: the one secret-handling module (redact, scrub, secret environment, key hosts).
* :mod:`~persobench.core.console`: terminal output (control characters escaped, progress on stderr).
* :mod:`~persobench.core.processes`: whether another process is alive.
* :mod:`~persobench.core.structured`: the reply's JSON Schema for structured output.
* :mod:`~persobench.core.gc_pace`: fewer garbage-collector passes during a scoring pass.
* :mod:`~persobench.core.ngram_kernels`: the BLEU / ROUGE kernels a lexical worker process runs.
"""

from persobench.core.console import EscapingStream, ProgressBar, is_terminal, printable
from persobench.core.gc_pace import fewer_collections
from persobench.core.processes import pid_alive
from persobench.core.registry import Registry, UnknownNameError, load_object
from persobench.core.secrets import (REDACTED, SECRET_KEYS, credentials_environment, is_secret_name, key_allowed,
                                     known_secrets, public_address, public_text, public_url, redact, remember_url,
                                     scrub, secret_environment, shorten, strip_secrets, url_with_credentials,
                                     url_without_credentials)
from persobench.core.structured import BOARD_NOTE, FORMS, JSON_OBJECT, JSON_SCHEMA, LABEL_SUFFIX, reply_schema, structured_label

__all__ = [
    "BOARD_NOTE", "EscapingStream", "FORMS", "JSON_OBJECT", "JSON_SCHEMA", "LABEL_SUFFIX", "ProgressBar", "REDACTED",
    "Registry", "SECRET_KEYS", "UnknownNameError", "credentials_environment", "fewer_collections", "is_secret_name",
    "is_terminal", "key_allowed", "known_secrets", "load_object", "pid_alive", "printable", "public_address",
    "public_text", "public_url", "redact", "remember_url", "reply_schema", "scrub", "secret_environment", "shorten",
    "strip_secrets", "structured_label", "url_with_credentials", "url_without_credentials",
]
