"""A generation run's configuration (:class:`~persobench.config.run_config.GenerationConfig`, the field
table ``run``'s flags are generated from) as the stage uses it: its batch settings, its public form, and
the command that runs it again."""

from __future__ import annotations

import json
import os
import shlex
from typing import Any, Mapping

from persobench.config import changed, offered_fields
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


#: GenerationConfig field -> the ``run`` flag that sets it (value printed as ``str``), read from the
#: field table. The CLI parser's destinations carry the same names; :func:`config_command` prints a
#: config as the command that runs it again. Fields not listed are printed by :func:`config_command` in a form of their own (``chat_template``,
#: ``structured``, ``retry``, ``base_url``, ``options``) or have no flag (``cache_dir`` and
#: ``fail_fast_after``: ``run`` uses ``<home>/responses`` and the default).
RUN_FLAGS = {offered.path[0]: offered.ui.flag for offered in offered_fields(GenerationConfig)
             if len(offered.path) == 1 and offered.ui.flag and offered.info.annotation is not bool
             and offered.path[0] != "base_url"}
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
    the cache; what that command leaves out because it is secret).

    The command carries every option of the run: what it is (dataset, model, mode, template,
    policy, sample subset, decoding, structured output, chat template, base URL, model options) and
    how it ran (concurrency, batch size, retries, checkpoints). It never carries a credential
    (:func:`public_config`); the second item names what was left out, so the user can give it again
    (API keys always come from the environment)."""
    config, left_out = public_config(config)
    default = GenerationConfig()
    argv = ["python", "-m", "persobench", "--home", str(home), "run"]
    for name, flag in RUN_FLAGS.items():
        value = getattr(config, name)
        if value is not None and (name in _ALWAYS or value != getattr(default, name)):
            argv += [flag, str(value)]
    if config.chat_template is not None:
        argv += ["--chat-template", "on" if config.chat_template else "off"]
    if config.structured:
        argv.append("--structured")
    if config.batch:
        argv.append("--batch")
    if config.retry.max_attempts != default.retry.max_attempts:
        argv += ["--max-attempts", str(config.retry.max_attempts)]
    if config.retry.timeout != default.retry.timeout:
        argv += ["--timeout", repr(float(config.retry.timeout))]
    if config.base_url:
        argv += ["--base-url", config.base_url]
    for key, value in config.options.items():
        argv += ["--option", f"{key}={json.dumps(value)}"]
    return shlex.join(argv), left_out
