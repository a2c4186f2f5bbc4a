"""The provider registry: model providers registered by name and imported only when a run asks for them.

A model is named by a spec ``"provider:model"`` (``openai:gpt-4o-mini``, ``anthropic:claude-3-5-haiku-latest``,
``openai:llama3.1:8b`` with ``base_url`` for Ollama, ``local:smollm2``, ``baseline:reference``);
:func:`persobench.providers.models_registry.resolve_model` also accepts names from the model registry file
(that module depends on this one, never the reverse). No SDK is imported here: the adapter module
loads when :func:`make_provider` builds it.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from persobench.errors import ConfigurationError
from persobench.providers.base import (
    Provider,
    key_requirement_of,
)
from persobench.providers.spec import ModelSpec
from persobench.core.registry import Registry, UnknownNameError
from persobench.providers.base import check_options, parse_base_url
import os


#: name -> provider class (``cls(spec, api_key=..., timeout=...)``), as lazy "module:attr" paths. The
#: entry's fact ``structured=True``: the provider enforces a JSON schema on the reply
#: (``Request.response_schema``: OpenAI-compatible ``response_format``, Anthropic ``output_config``,
#: grammar-constrained local decoding), so the LLM judge asks it for its label through structured output
#: (:func:`enforces_schema`); the others are asked for one bare word.
PROVIDERS: Registry[Callable[..., Provider]] = Registry("provider")
PROVIDERS.register("openai", "persobench.providers.openai_provider:OpenAIProvider", structured=True,
                   description="OpenAI and any OpenAI-compatible server (vLLM, Ollama, llama.cpp, OpenRouter, ...) via base_url")
PROVIDERS.register("anthropic", "persobench.providers.anthropic_provider:AnthropicProvider", structured=True,
                   description="Anthropic Messages API")
PROVIDERS.register("local", "persobench.providers.local:LocalProvider", structured=True,
                   description="in-process Hugging Face transformers model (hub id, folder or GGUF file); local:smollm2 is the offline default")
PROVIDERS.register("baseline", "persobench.providers.baselines:BaselineProvider",
                   description="BASELINES, not models: baseline:reference (gold reply, ceiling), baseline:persona-echo (floor)")

def enforces_schema(provider: str) -> bool:
    """Whether ``provider`` was registered as enforcing a JSON schema on the reply (``structured=True``);
    read from the registry, without importing the provider or its SDK."""
    return bool(PROVIDERS.fact(provider, "structured", False))


#: The offline default model.
DEFAULT_LOCAL_MODEL = "local:smollm2"


def parse_spec(spec: str, *, base_url: str | None = None, options: Mapping[str, Any] | None = None) -> ModelSpec:
    """``"provider:model"`` -> :class:`ModelSpec`. Only the first colon separates, so Ollama tags
    such as ``openai:llama3.1:8b`` keep theirs."""
    provider, sep, model = spec.partition(":")
    provider = provider.strip().lower()
    if not sep or not model.strip():
        raise ConfigurationError(
            f"unknown model {spec!r}: give PROVIDER:MODEL (providers: {', '.join(PROVIDERS.names())}) "
            "or a name from the models file"
        )
    if provider not in PROVIDERS:
        raise ConfigurationError(
            f"unknown provider {provider!r} in model {spec!r}; known providers: {', '.join(PROVIDERS.names())}"
        )
    return checked_spec(ModelSpec(provider=provider, model=model.strip(), base_url=base_url or None,
                                  options=dict(options or {})))


def checked_spec(spec: ModelSpec) -> ModelSpec:
    """``spec`` after checking its base URL and transport options (:class:`ConfigurationError` if bad)."""

    if spec.base_url:
        parse_base_url(spec.base_url)
    check_options(spec.options)
    return spec


def provider_class(name: str) -> Callable[..., Provider]:
    """The registered provider class (importing its module, hence its SDK, on first use)."""
    try:
        return PROVIDERS.get(name)
    except UnknownNameError as exc:
        raise ConfigurationError(str(exc)) from None


def key_requirement(spec: ModelSpec) -> tuple[str, bool] | None:
    """(environment variable, whether a key is required) for ``spec``; ``None`` for providers
    without keys. Each provider class declares its variable (``key_env``); see
    :func:`~persobench.providers.base.key_requirement_of` for when a key is optional."""
    return key_requirement_of(provider_class(spec.provider), spec)


def missing_key_env(spec: ModelSpec, env: "Mapping[str, str] | None" = None) -> str | None:
    """The variable to set when ``spec`` needs a key that ``env`` (default: the process environment)
    lacks, for pre-flight checks in the app; never returns a value, only the name."""

    requirement = key_requirement(spec)
    if requirement is None:
        return None
    env_var, required = requirement
    source = os.environ if env is None else env
    return env_var if required and not source.get(env_var) else None


def make_provider(spec: ModelSpec, *, api_key: str | None = None, timeout: float = 60.0) -> Provider:
    """Build the provider for ``spec``; fails at once (:class:`MissingKeyError`) without a needed key."""
    return provider_class(spec.provider)(spec, api_key=api_key, timeout=timeout)
