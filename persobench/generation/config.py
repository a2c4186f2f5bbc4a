"""What defines a generation run: :class:`GenerationConfig` (the CLI flags map one to one onto it)."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from dataclasses import dataclass, field
from typing import Any, Mapping

from persobench.errors import ConfigurationError
from persobench.llm.batch_driver import BatchSettings
from persobench.llm.retry import RetryPolicy
from persobench.providers import DEFAULT_LOCAL_MODEL
from persobench.core.secrets import SECRET_KEYS, is_secret_option
from persobench.core.secrets import public_url


@dataclass(frozen=True)
class GenerationConfig:
    """Everything that defines a generation run (the CLI flags map one to one onto these)."""

    dataset: str = "sample"
    """Registered dataset name or path to a .csv/.jsonl file."""
    model: str = DEFAULT_LOCAL_MODEL
    """``provider:model`` spec or a name from the models file."""
    base_url: str | None = None
    """Server URL for OpenAI-compatible servers (overrides the models file)."""
    mode: str = "vanilla"
    """Prompt mode, "vanilla" (reply only) or "cot" (reasoning, then reply)."""
    template: str | None = None
    """Template name (``paper``, ``paper-open``, ``persobench``) or file; default: the paper's
    protocol, ``paper-open`` for local models and ``paper`` for every other provider."""
    chat_template: bool | None = None
    """Local models: wrap the prompt in the tokenizer's chat template; default: the template's own
    setting (off for ``paper-open``, on otherwise). Chat APIs always apply theirs."""
    limit: int | None = None
    """Number of samples (a deterministic subset chosen by ``seed``); ``None`` for all."""
    seed: int = 0
    """Subset seed, and the sampling seed when temperature > 0."""
    concurrency: int | str = 8
    """Maximum requests in flight, or ``"auto"``: found while the run goes, raised while replies
    come back and halved on a 429 or 5xx (:mod:`persobench.llm.concurrency`)."""
    max_concurrency: int = 32
    """The most requests in flight ``"auto"`` may reach."""
    max_tokens: int | None = None
    """Completion budget; default from the template (110 vanilla, 220 cot)."""
    temperature: float | None = None
    """Sampling temperature; default from the template (0)."""
    top_p: float | None = None
    """Nucleus sampling mass; ``None`` for the provider default."""
    policy: str | None = None
    """Post-processing policy ("robust" or "paper"; "paper" reads replies as the paper's notebook for
    the template did, see :func:`persobench.generation.plan.paper_parse_style`); default: the
    template family's (:func:`persobench.prompts.protocol.default_policy`: "paper" for the paper's
    templates, "robust" for the others). A plan's config holds the policy it resolved to."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Extra model options merged over the models-file entry."""
    models_file: str | None = None
    """Model registry file; default: discovered (see :mod:`persobench.providers.models_registry`)."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """Retry and timeout settings."""
    checkpoint_every: int = 50
    """Rewrite the table after this many new completions."""
    fail_fast_after: int = 20
    """Stop the run when this many first requests all fail for the same non-retryable reason."""
    cache_dir: str | None = None
    """Response cache folder; default ``<home>/responses``."""
    structured: bool = False
    """Ask the provider to guarantee the reply's JSON shape (:mod:`persobench.core.structured`); a models
    file entry with ``structured = true`` turns it on too. Part of the cache key, run id and protocol.
    Baselines ignore it (their replies are already well-formed)."""
    batch_size: int | None = None
    """Samples per forward pass for in-process models; ``None``: the provider's measured default.
    Not part of the cache key (greedy outputs do not depend on it)."""
    batch: bool = False
    """Send the requests through the provider's batch API (OpenAI Batch API, Anthropic Message
    Batches: about half the price, answered within 24 hours; :mod:`persobench.llm.batch_driver`).
    Not part of the cache key or run id: the same requests, sent another way."""
    batch_wait: float | None = None
    """With ``batch``: seconds to wait for the batch; ``None`` until it ends, ``0`` submit and
    return (a later run of the same command collects it)."""
    batch_poll: float = 30.0
    """With ``batch``: seconds between two status requests."""
    batch_fallback: str = "stop"
    """The requests of a batch that failed as a whole: ``stop`` (the run stops and names the command
    that sends them one by one) or ``interactive`` (sent one by one at full price). Not part of the
    cache key or run id."""

    def batch_settings(self) -> BatchSettings:
        """How the run uses the batch API (one-line :class:`ConfigurationError` for a bad number or
        fallback): with ``batch`` its wait and poll; without, only a look at a batch an earlier
        ``run --batch`` left (collected if it has ended, never waited for)."""
        if self.batch:
            return BatchSettings(wait=self.batch_wait, poll=self.batch_poll, fallback=self.batch_fallback)
        return BatchSettings(wait=0, fallback=self.batch_fallback)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``retry`` as an object); :meth:`from_dict` inverts it. Jobs store it in
        ``job.json`` and runs in ``resume.json``, so a front end never passes a config as argv."""
        data = dataclasses.asdict(self)
        data["options"] = dict(self.options)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "GenerationConfig":
        """The config of :meth:`to_dict`; unknown keys are an error naming them."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigurationError(f"generation config: unknown field(s) {', '.join(unknown)}")
        values = dict(data)
        if isinstance(values.get("retry"), Mapping):
            values["retry"] = RetryPolicy(**values["retry"])
        return cls(**values)


#: GenerationConfig field -> the ``run`` flag that sets it (value printed as ``str``): the one
#: mapping between the config and the command line. The CLI parser's destinations carry the same
#: names; :func:`config_command` prints a config as the command that runs it again. Fields not
#: listed are printed by :func:`config_command` in a form of their own (``chat_template``,
#: ``structured``, ``retry``, ``base_url``, ``options``) or have no flag (``cache_dir`` and
#: ``fail_fast_after``: ``run`` uses ``<home>/responses`` and the default).
RUN_FLAGS = {"dataset": "--dataset", "model": "--model", "mode": "--mode", "template": "--template",
             "policy": "--policy", "limit": "--limit", "seed": "--seed", "max_tokens": "--max-tokens",
             "temperature": "--temperature", "top_p": "--top-p", "models_file": "--models",
             "concurrency": "--concurrency", "max_concurrency": "--max-concurrency", "batch_size": "--batch-size",
             "checkpoint_every": "--checkpoint-every", "batch_wait": "--batch-wait", "batch_poll": "--batch-poll",
             "batch_fallback": "--batch-fallback"}
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
    return dataclasses.replace(config, options=options, base_url=base_url), left_out


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
