"""The ONE description of an LLM judge (:class:`JudgeConfig`): what ``score --judge`` builds from its
flags, what the app's judge form builds from its widgets, what a job's ``score`` step stores in
``job.json`` (:meth:`JudgeConfig.to_dict`) and what the labeller (:mod:`persobench.metrics.judge.labeller`)
sends with. :data:`JUDGE_FLAGS` is the one mapping between its stored fields and the CLI flags.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from persobench.errors import ConfigurationError
from persobench.metrics.judge.judge_prompt import DEFAULT_PROMPT, JudgeTemplate, load_template
from persobench.llm.batch_driver import BatchSettings
from persobench.llm.retry import RetryPolicy
from persobench.providers.spec import ModelSpec
from persobench.providers.models_registry import prices_for, resolve_model
from persobench.core.secrets import public_url
from persobench.llm.response_cache import default_cache_dir
from persobench.core.secrets import url_with_credentials
from persobench.providers.batch_api import supports_batch
from persobench.providers.base import parse_base_url


#: Providers that enforce a JSON schema on the reply (OpenAI-compatible ``response_format``,
#: Anthropic ``output_config``, grammar-constrained local decoding); others get the plain form.
STRUCTURED_PROVIDERS = frozenset({"openai", "anthropic", "local"})

#: Stored field (:meth:`JudgeConfig.to_dict`, a :func:`make_judge` argument) -> its ``score`` flag.
#: The CLI reads the judge from these flags, the app's form offers the same fields, ``job.json``
#: stores them; ``max_concurrency`` has no flag (the default), ``cache_dir`` is the store's.
JUDGE_FLAGS = {"model": "--judge", "base_url": "--judge-base-url", "concurrency": "--judge-concurrency",
               "max_cost": "--judge-max-cost", "timeout": "--judge-timeout", "prompt": "--judge-prompt",
               "plain": "--judge-plain", "batch": "--batch", "batch_wait": "--batch-wait",
               "batch_poll": "--batch-poll", "batch_fallback": "--batch-fallback"}
#: The ``score`` flag that sets a judge request's deadline (named when a request runs out of time).
JUDGE_TIMEOUT_FLAG = JUDGE_FLAGS["timeout"]
#: Stored fields with no flag.
_UNFLAGGED = ("max_concurrency",)


# --- The judge's configuration ---------------------------------------------------------------------


@dataclass(frozen=True)
class JudgeConfig:
    """Which model judges, with which prompt, and how its requests are sent."""

    spec: "ModelSpec"
    """The judge model (any spec ``run`` takes: ``openai:gpt-4o-mini``, a preset, a models-file name)."""
    prompt: str = DEFAULT_PROMPT
    """Version of the prompt template (:func:`template_versions`)."""
    concurrency: int | str = 8
    """Requests in flight, or ``"auto"`` (raised while replies come back, halved on a 429 or 5xx)."""
    max_concurrency: int = 32
    """The most requests in flight ``"auto"`` may reach."""
    max_cost: float | None = None
    """Stop sending once the judge's estimated spend (USD) would pass this; ``None``: no cap."""
    cache_dir: str | None = None
    """The response cache folder (the store's ``<home>/responses``, shared with generation)."""
    retry: "RetryPolicy | None" = None
    """Retry and timeout settings; ``None``: generation's defaults."""
    plain: bool = False
    """Ask for the one-word answer even where the provider has structured output (a server that takes
    no ``response_format``). Part of the identity: the prompt differs."""
    api_key: str | None = field(default=None, repr=False, compare=False)
    """A key given by the caller (the app's secrets); else the provider's environment variable.
    Never written anywhere."""
    batch: "BatchSettings | None" = None
    """Send through the provider's batch API first (``score --judge ... --batch``; about half the
    price); ``None``: ordinary requests only. Not part of the identity: the same requests."""

    @property
    def structured(self) -> bool:
        """Whether the label is asked for through structured output."""
        return not self.plain and self.spec.provider in STRUCTURED_PROVIDERS

    @property
    def template(self) -> JudgeTemplate:
        return load_template(self.prompt)

    @property
    def model_name(self) -> str:
        """``provider:model``, plus the server's host and port when a base URL is set (never its
        credentials or path) and a hash of output-changing options when there are any."""
        name = f"{self.spec.provider}:{self.spec.model}"
        if self.spec.base_url:

            _, host, port = parse_base_url(self.spec.base_url)
            name += f"@{host}:{port}"
        options = self.spec.output_options
        if options:
            name += "#" + hashlib.sha256(json.dumps(options, sort_keys=True, default=str).encode()).hexdigest()[:8]
        return name

    @property
    def identity(self) -> str:
        """What a profile key carries after :data:`PROFILE_MARK`: ``<model name>,prompt=<version>``, plus
        ``,answer=word`` when the label is asked for as a bare word rather than through structured output."""
        return f"{self.model_name},prompt={self.prompt}" + ("" if self.structured else ",answer=word")

    @property
    def model_id(self) -> str:
        """The ``model_id`` of judge-labelled metrics in provenance."""
        return f"judge {self.model_name}"

    def describe(self) -> dict[str, Any]:
        """JSON-ready description for run manifests (no key, no URL credentials)."""
        return {"judge": self.spec.to_public_dict(), "prompt": self.prompt, "structured": self.structured}

    @property
    def model(self) -> str:
        """The judge as the user named it (a spec, preset or models-file name): what ``--judge`` takes."""
        return self.spec.name

    def to_dict(self) -> dict[str, Any]:
        """The stored form (``job.json``): the :data:`JUDGE_FLAGS` fields, the base URL in its public
        form (credentials come from the environment), never the key. Of the retry policy it keeps the
        request deadline (``timeout``, ``--judge-timeout``), the one retry setting ``score`` offers."""

        batch = self.batch
        return {"model": self.model, "base_url": public_url(self.spec.base_url) if self.spec.base_url else None,
                "concurrency": self.concurrency, "max_cost": self.max_cost,
                "timeout": self.retry.timeout if self.retry is not None else None, "prompt": self.prompt,
                "plain": self.plain, "max_concurrency": self.max_concurrency, "batch": batch is not None,
                "batch_wait": batch.wait if batch is not None else None,
                "batch_poll": batch.poll if batch is not None else None,
                "batch_fallback": batch.fallback if batch is not None else None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, home: Any) -> "JudgeConfig":
        """The checked judge of a stored form (the model resolved against ``home``'s models file, its
        responses cached in ``home``'s cache); one-line :class:`ConfigurationError` for a bad one.
        Also reads the judge dicts jobs stored before this type (``model, base_url, concurrency, max_cost``)
        and before the batch setting (no ``batch``: ordinary requests)."""

        if not isinstance(data, Mapping) or not str(data.get("model") or "").strip():
            raise ConfigurationError(f"judge: expected an object with a model, got {data!r}")
        unknown = sorted(set(data) - set(JUDGE_FLAGS) - set(_UNFLAGGED))
        if unknown:
            raise ConfigurationError(f"judge: unknown field(s) {', '.join(unknown)}; known: "
                                     f"{', '.join((*JUDGE_FLAGS, *_UNFLAGGED))}")
        given = {k: v for k, v in data.items() if v is not None}
        given["base_url"] = url_with_credentials(given.get("base_url")) or None
        given["plain"] = bool(given.get("plain", False))
        given["retry"] = judge_retry(given.pop("timeout", None))
        given["batch"] = batch_settings_of(given.pop("batch", None), given.pop("batch_wait", None),
                                           given.pop("batch_poll", None), given.pop("batch_fallback", None))
        return make_judge(str(given.pop("model")), cache_dir=str(default_cache_dir(home)), home=home, **given)


def judge_retry(timeout: Any) -> "RetryPolicy | None":
    """The judge's retry policy for a request deadline of ``timeout`` seconds (``--judge-timeout``, a
    stored judge's ``timeout``); ``None`` (the default deadline) without one. One-line
    :class:`ConfigurationError` for a value that is not a finite number > 0."""
    if timeout is None:
        return None
    number = float(timeout) if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) else math.nan
    if not (math.isfinite(number) and number > 0):
        raise ConfigurationError(f"judge_timeout must be a finite number > 0 (seconds for the whole request), "
                                 f"got {timeout!r} ({JUDGE_TIMEOUT_FLAG})")
    return RetryPolicy(timeout=number, timeout_flag=JUDGE_TIMEOUT_FLAG)


def batch_settings_of(batch: Any, wait: Any = None, poll: Any = None, fallback: Any = None) -> "BatchSettings | None":
    """The judge's :class:`BatchSettings` from its stored fields or flags (``batch``, ``batch_wait``,
    ``batch_poll``, ``batch_fallback``); ``None`` when ``batch`` is off. One-line
    :class:`ConfigurationError` for a bad value."""
    if batch is None or batch is False:
        return None
    if batch is not True:
        raise ConfigurationError(f"judge: batch must be true or false, got {batch!r}")
    try:
        seconds = (None if wait is None else float(wait), 30.0 if poll is None else float(poll))
    except (TypeError, ValueError):
        raise ConfigurationError(f"judge: batch_wait and batch_poll must be numbers of seconds, got {wait!r} and "
                                 f"{poll!r}") from None
    # its own one line for a negative number or an unknown fallback
    return BatchSettings(wait=seconds[0], poll=seconds[1], fallback="stop" if fallback is None else fallback)


def make_judge(model: str, *, base_url: str | None = None, prompt: str | None = None,
               concurrency: int | str = 8, max_concurrency: int = 32, max_cost: float | None = None,
               cache_dir: str | None = None, models_file: str | None = None, home: Any = None,
               api_key: str | None = None, retry: "RetryPolicy | None" = None, plain: bool = False,
               batch: "BatchSettings | None" = None) -> JudgeConfig:
    """A checked :class:`JudgeConfig` (:class:`ConfigurationError`, one line, for anything wrong);
    ``prompt`` None: :data:`DEFAULT_PROMPT`."""

    prompt = prompt or DEFAULT_PROMPT
    spec = resolve_model(model, base_url=base_url, models_file=models_file, home=home)
    if spec.provider == "baseline":
        raise ConfigurationError(f"judge {model!r}: a baseline replies with fixed text and cannot label NLI pairs")
    if concurrency != "auto" and (isinstance(concurrency, bool) or not isinstance(concurrency, int)
                                  or concurrency < 1):
        raise ConfigurationError(f"judge concurrency must be a whole number of at least 1 or 'auto', "
                                 f"got {concurrency!r}")
    if max_concurrency < 1:
        raise ConfigurationError(f"judge max concurrency must be at least 1, got {max_concurrency}")
    if max_cost is not None:
        if not max_cost >= 0:
            raise ConfigurationError(f"judge max cost must be a number of US dollars >= 0, got {max_cost!r}")
        if prices_for(spec) is None:
            raise ConfigurationError(f"judge {spec.name}: its prices are unknown, so a cost cap cannot be kept; "
                                     "give price_input_per_mtok and price_output_per_mtok in the models file")
    if batch is not None:

        if not supports_batch(spec.provider):
            raise ConfigurationError(f"--batch needs a judge whose provider has a batch API (openai, anthropic); "
                                     f"{spec.name!r} is provider {spec.provider!r}")
    config = JudgeConfig(spec, prompt, concurrency, max_concurrency, max_cost, cache_dir, retry, plain, api_key,
                         batch)
    config.template  # noqa: B018 - an unknown prompt version fails here, before any request
    return config


