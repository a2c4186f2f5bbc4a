"""Model providers, registered by name and imported only when a run asks for them.

A model is named by a spec ``"provider:model"`` (``openai:gpt-4o-mini``, ``anthropic:claude-3-5-haiku-latest``,
``openai:llama3.1:8b`` with ``base_url`` for Ollama, ``local:smollm2``, ``baseline:reference``) or by a
name from the model registry file (:mod:`persobench.models_registry`). ``import persobench.providers``
imports no SDK: the adapter module loads when :func:`make_provider` builds it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from persobench.providers.base import (
    Completion,
    ConfigurationError,
    ErrorKind,
    GenerationParams,
    MissingKeyError,
    Provider,
    ProviderError,
    Request,
)
from persobench.registry import Registry, UnknownNameError

__all__ = [
    "Completion", "ConfigurationError", "ErrorKind", "GenerationParams", "MissingKeyError", "ModelSpec",
    "KEY_ENV", "PROVIDERS", "Provider", "ProviderError", "Request", "key_requirement", "make_provider",
    "missing_key_env", "parse_spec", "resolve_model",
]

#: name -> provider class (``cls(spec, api_key=..., timeout=...)``), as lazy "module:attr" paths.
PROVIDERS: Registry[Callable[..., Provider]] = Registry("provider")
PROVIDERS.register("openai", "persobench.providers.openai_provider:OpenAIProvider",
                   description="OpenAI and any OpenAI-compatible server (vLLM, Ollama, llama.cpp, OpenRouter, ...) via base_url")
PROVIDERS.register("anthropic", "persobench.providers.anthropic_provider:AnthropicProvider",
                   description="Anthropic Messages API")
PROVIDERS.register("local", "persobench.providers.local:LocalProvider",
                   description="in-process Hugging Face transformers model (hub id, folder or GGUF file); local:smollm2 is the offline default")
PROVIDERS.register("baseline", "persobench.providers.baselines:BaselineProvider",
                   description="BASELINES, not models: baseline:reference (gold reply, ceiling), baseline:persona-echo (floor)")

#: Spec options that do not change what the model writes: kept out of cache keys and run ids.
NON_OUTPUT_OPTIONS = frozenset(
    {"timeout", "headers", "max_tokens_param", "device", "dtype", "organization", "project"}
)

#: The offline default model.
DEFAULT_LOCAL_MODEL = "local:smollm2"


@dataclass(frozen=True)
class ModelSpec:
    """A fully resolved model: provider, model and options. Never holds a secret."""

    provider: str
    """Registered provider name."""
    model: str
    """Model name as the provider knows it (hub id or path for ``local``)."""
    base_url: str | None = None
    """Server URL for OpenAI-compatible servers (``http://localhost:8000/v1`` for vLLM,
    ``http://localhost:11434/v1`` for Ollama) or an Anthropic gateway; ``None`` for the official API."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Provider options: output-affecting body fields (``top_p``, ``top_k``, ``extra_body`` ...) and
    transport settings listed in :data:`NON_OUTPUT_OPTIONS`."""
    label: str | None = None
    """Display name (the registry entry's name); defaults to ``provider:model``."""
    api_key_env: str | None = None
    """Environment variable holding the key, overriding the provider's default (``OPENAI_API_KEY`` ...)."""
    price_input_per_mtok: float | None = None
    """USD per million prompt tokens, for the cost estimate; ``None`` = use the built-in table."""
    price_output_per_mtok: float | None = None
    """USD per million completion tokens."""

    @property
    def name(self) -> str:
        return self.label or f"{self.provider}:{self.model}"

    @property
    def output_options(self) -> dict[str, Any]:
        """Options that change the output (part of the cache key)."""
        from persobench.store import strip_secrets

        return strip_secrets({k: v for k, v in self.options.items() if k not in NON_OUTPUT_OPTIONS})

    def to_public_dict(self) -> dict[str, Any]:
        """The spec as recorded in run manifests (secrets stripped, transport options kept
        only when harmless)."""
        from persobench.store import strip_secrets

        data: dict[str, Any] = {"provider": self.provider, "model": self.model}
        if self.base_url:
            data["base_url"] = self.base_url
        options = {k: v for k, v in self.options.items() if k != "headers"}
        if options:
            data["options"] = strip_secrets(options)
        if self.label:
            data["label"] = self.label
        if self.provider == "baseline":
            data["baseline"] = True  # lets tables and leaderboards mark it as a floor/ceiling
        return data


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
    from persobench.providers.base import check_options, parse_base_url

    if spec.base_url:
        parse_base_url(spec.base_url)
    check_options(spec.options)
    return spec


def resolve_model(
    name: str, *, base_url: str | None = None, options: Mapping[str, Any] | None = None,
    models_file: str | None = None, home: Any = None,
) -> ModelSpec:
    """A registry-file name or a ``provider:model`` spec, with CLI overrides applied on top."""
    from persobench.models_registry import find_model

    entry = find_model(name, path=models_file, home=home)
    if entry is None:
        return parse_spec(name, base_url=base_url, options=options)
    if entry.provider not in PROVIDERS:
        raise ConfigurationError(
            f"model {name!r}: unknown provider {entry.provider!r}; known providers: {', '.join(PROVIDERS.names())}"
        )
    return checked_spec(replace(
        entry,
        base_url=base_url or entry.base_url,
        options={**dict(entry.options), **dict(options or {})},
    ))


#: Default environment variable of each provider that takes a key.
KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


def key_requirement(spec: ModelSpec) -> tuple[str, bool] | None:
    """(environment variable, whether a key is required) for ``spec``; ``None`` for providers
    without keys. The official OpenAI API needs one; a self-hosted OpenAI-compatible server
    (``base_url``) does not, unless the spec names a variable explicitly. Anthropic always does."""
    default = KEY_ENV.get(spec.provider)
    if default is None:
        return None
    required = spec.provider == "anthropic" or spec.base_url is None or spec.api_key_env is not None
    return spec.api_key_env or default, required


def missing_key_env(spec: ModelSpec, env: "Mapping[str, str] | None" = None) -> str | None:
    """The variable to set when ``spec`` needs a key that ``env`` (default: the process environment)
    lacks, for pre-flight checks in the app; never returns a value, only the name."""
    import os

    requirement = key_requirement(spec)
    if requirement is None:
        return None
    env_var, required = requirement
    source = os.environ if env is None else env
    return env_var if required and not source.get(env_var) else None


def make_provider(spec: ModelSpec, *, api_key: str | None = None, timeout: float = 60.0) -> Provider:
    """Build the provider for ``spec``; fails at once (:class:`MissingKeyError`) without a needed key."""
    try:
        cls = PROVIDERS.get(spec.provider)
    except UnknownNameError as exc:
        raise ConfigurationError(str(exc)) from None
    return cls(spec, api_key=api_key, timeout=timeout)


def provider_descriptions() -> dict[str, str]:
    return {name: PROVIDERS.describe(name) for name in PROVIDERS.names()}
