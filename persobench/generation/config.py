"""A generation run's configuration (:class:`~persobench.config.run_config.GenerationConfig`, the field
table ``run``'s flags are generated from) as the stage uses it: its batch settings, its public form, and
the command that runs it again."""

from __future__ import annotations

import os
import shlex
from typing import Any, Mapping

from persobench.config import changed, config_argv
from persobench.config.run_config import GenerationConfig
from persobench.llm.batch_driver import BatchSettings
from persobench.core.secrets import SECRET_KEYS, is_secret_option
from persobench.core.secrets import public_url


def batch_settings(config: GenerationConfig) -> BatchSettings:
    """How the run uses the batch API (one-line :class:`ConfigurationError` for a bad number or
    fallback): with ``batch`` its wait and poll; without, only a look at a batch an earlier
    ``run --batch`` left (collected if it has ended, never waited for)."""
    if config.batch:
        return BatchSettings(wait=config.batch_wait, poll=config.batch_poll, fallback=config.batch_fallback)
    return BatchSettings(wait=0, fallback=config.batch_fallback)


#: Always printed, default or not: what the run is (a later change of a default must not turn the
#: printed command into another run).
_ALWAYS = ("dataset", "model", "mode", "template", "policy")


def without_secret_options(options: Mapping[str, Any], path: str = "") -> tuple[dict[str, Any], list[str]]:
    """``options`` with every credential-looking entry removed (recursively), and the removed names.

    Removed, not redacted: ``--option x-api-key="[redacted]"`` would send ``[redacted]`` as the key.
    """

    kept: dict[str, Any] = {}
    removed: list[str] = []
    for key, value in options.items():
        name = f"{path}{key}"
        if key.lower() in SECRET_KEYS or (is_secret_option(key) and not isinstance(value, Mapping)):
            removed.append(name)
        elif isinstance(value, Mapping):
            inner, gone = without_secret_options(value, f"{name}.")
            removed += gone
            if inner or not gone:
                kept[key] = inner
        else:
            kept[key] = value
    return kept, removed


def public_config(config: GenerationConfig) -> tuple[GenerationConfig, list[str]]:
    """``config`` without credentials (secret-looking options, the base URL's user info and query
    values), and what was left out, so it can be written to disk or shown."""

    options, removed = without_secret_options(dict(config.options))
    left_out = [f"--option {name}" for name in removed]
    base_url = config.base_url
    if base_url:
        public = public_url(base_url)
        if public not in (base_url, base_url.rstrip("/")):
            left_out.insert(0, "the base URL's credentials")
        base_url = public
    return changed(config, options=options, base_url=base_url), left_out


def config_command(config: GenerationConfig, home: str | os.PathLike[str]) -> tuple[str, list[str]]:
    """(the ``python -m persobench run`` command that runs ``config`` again, and so resumes it from
    the cache; what that command leaves out because it is secret). Its flags are the inverse of
    ``run``'s, generated from the field table (:func:`persobench.config.flags.config_argv`).

    The command carries every option of the run: what it is (dataset, model, mode, template,
    policy, sample subset, decoding, structured output, chat template, base URL, model options) and
    how it ran (concurrency, batch size, retries, checkpoints). It never carries a credential
    (:func:`public_config`); the second item names what was left out, so the user can give it again
    (API keys always come from the environment)."""
    config, left_out = public_config(config)
    argv = ["python", "-m", "persobench", "--home", str(home), "run", *config_argv(config, always=_ALWAYS)]
    return shlex.join(argv), left_out
