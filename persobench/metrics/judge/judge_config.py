"""The LLM judge resolved (:class:`Judge`): the user's :class:`~persobench.config.judge.JudgeConfig`
(what ``score --judge``'s flags and the app's judge form build, and a job's ``score`` step stores in
``job.json``) with its model resolved to a :class:`ModelSpec`, checked (prices for a cost cap, a batch
API for ``batch``, a known prompt) by :func:`resolve_judge`; what the labeller
(:mod:`persobench.metrics.judge.labeller`) sends with. :meth:`Judge.to_dict` is the config's stored form.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from persobench.config import (  # noqa: F401 - JUDGE_TIMEOUT_FLAG: part of this module's interface
    JUDGE_TIMEOUT_FLAG, JudgeConfig, offered_fields, validated,
)
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
from persobench.providers.provider_registry import enforces_schema


#: Field of :class:`~persobench.config.judge.JudgeConfig` -> its ``score`` flag (generated from
#: the field table; ``max_concurrency`` has no flag, ``cache_dir`` is the store's).
JUDGE_FLAGS = {offered.path[-1]: offered.ui.flag for offered in offered_fields(JudgeConfig) if offered.ui.flag}


# --- The judge's configuration ---------------------------------------------------------------------


@dataclass(frozen=True)
class Judge:
    """Which model judges, with which prompt, and how its requests are sent: a
    :class:`~persobench.config.judge.JudgeConfig` resolved (:func:`resolve_judge`)."""

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
        """Whether the label is asked for through structured output: the provider enforces a JSON schema
        (its registry entry says so: :func:`~persobench.providers.provider_registry.enforces_schema`)."""
        return not self.plain and enforces_schema(self.spec.provider)

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

    def config(self) -> JudgeConfig:
        """The judge as a user gives it: its base URL in the public form (credentials come from the
        environment), never the key."""
        batch = self.batch
        return JudgeConfig(model=self.model, base_url=public_url(self.spec.base_url) if self.spec.base_url else None,
                           concurrency=self.concurrency, max_cost=self.max_cost, retry=self.retry, prompt=self.prompt,
                           plain=self.plain, batch=batch is not None, max_concurrency=self.max_concurrency,
                           **({"batch_wait": batch.wait, "batch_poll": batch.poll, "batch_fallback": batch.fallback}
                              if batch is not None else {}))

    def to_dict(self) -> dict[str, Any]:
        """The stored form (``job.json``): :meth:`config` as JSON."""
        return self.config().model_dump(mode="json")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, home: Any) -> "Judge":
        """The checked judge of a stored form (also the judge dicts older ``job.json`` files hold), resolved
        against ``home`` (:func:`resolve_judge`); one-line :class:`ConfigurationError` for a bad one."""
        if not isinstance(data, Mapping):
            raise ConfigurationError(f"judge: expected an object with a model, got {data!r}")
        unknown = sorted(set(data) - set(JudgeConfig.model_fields) - {"timeout"})
        if unknown:
            raise ConfigurationError(f"judge: unknown field(s) {', '.join(unknown)}; known: "
                                     f"{', '.join(JudgeConfig.model_fields)}")
        return resolve_judge(validated(JudgeConfig, data), home=home)


def resolve_judge(config: JudgeConfig, *, home: Any = None, cache_dir: str | None = None, models_file: str | None = None,
                  api_key: str | None = None) -> Judge:
    """The :class:`Judge` of ``config``: its model resolved against ``home``'s models file, its responses
    cached in ``home``'s cache (or ``cache_dir``), its base URL with the credentials the environment
    carries (:func:`url_with_credentials`); one-line :class:`ConfigurationError` for anything wrong."""
    batch = BatchSettings(wait=config.batch_wait, poll=config.batch_poll, fallback=config.batch_fallback) \
        if config.batch else None
    if cache_dir is None and home is not None:
        cache_dir = str(default_cache_dir(home))
    return make_judge(config.model, base_url=url_with_credentials(config.base_url) or None, prompt=config.prompt,
                      concurrency=config.concurrency, max_concurrency=config.max_concurrency, max_cost=config.max_cost,
                      cache_dir=cache_dir, models_file=models_file, home=home, api_key=api_key, retry=config.retry,
                      plain=config.plain, batch=batch)


def make_judge(model: str, *, base_url: str | None = None, prompt: str | None = None,
               concurrency: int | str = 8, max_concurrency: int = 32, max_cost: float | None = None,
               cache_dir: str | None = None, models_file: str | None = None, home: Any = None,
               api_key: str | None = None, retry: "RetryPolicy | None" = None, plain: bool = False,
               batch: "BatchSettings | None" = None) -> Judge:
    """A checked :class:`Judge` (:class:`ConfigurationError`, one line, for anything wrong);
    ``prompt`` None: :data:`DEFAULT_PROMPT`."""

    prompt = prompt or DEFAULT_PROMPT
    spec = resolve_model(model, base_url=base_url, models_file=models_file, home=home)
    if spec.provider == "baseline":
        raise ConfigurationError(f"judge {model!r}: a baseline replies with fixed text and cannot label NLI pairs")
    # the field table's checks (concurrency, max_concurrency, max_cost): the lines the CLI and the form show
    validated(JudgeConfig, {"model": model, "concurrency": concurrency, "max_concurrency": max_concurrency,
                            "max_cost": max_cost})
    if max_cost is not None:
        if prices_for(spec) is None:
            raise ConfigurationError(f"judge {spec.name}: its prices are unknown, so a cost cap cannot be kept; "
                                     "give price_input_per_mtok and price_output_per_mtok in the models file")
    if batch is not None:

        if not supports_batch(spec.provider):
            raise ConfigurationError(f"--batch needs a judge whose provider has a batch API (openai, anthropic); "
                                     f"{spec.name!r} is provider {spec.provider!r}")
    config = Judge(spec, prompt, concurrency, max_concurrency, max_cost, cache_dir, retry, plain, api_key, batch)
    config.template  # noqa: B018 - an unknown prompt version fails here, before any request
    return config


