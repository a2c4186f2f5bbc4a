"""The model registry file: name your models once, with their options, in TOML or YAML.

Looked up in this order: the path given (``--models FILE``), ``$PERSOBENCH_MODELS``, ``./models.toml``,
``./models.yaml``, ``./models.yml``, then ``<home>/models.toml``. Format (TOML)::

    [models.gpt4o-mini]
    provider = "openai"
    model = "gpt-4o-mini"
    price_input_per_mtok = 0.15          # USD per million tokens, for cost estimates
    price_output_per_mtok = 0.60
    price_batch_input_per_mtok = 0.075   # through the batch API (run --batch); default half the above
    price_batch_output_per_mtok = 0.30

    [models.llama-vllm]
    spec = "openai:meta-llama/Llama-3.1-8B-Instruct"   # shorthand for provider + model
    base_url = "http://localhost:8000/v1"
    api_key_env = "VLLM_API_KEY"         # optional: the variable that holds the key
    options = { top_k = 40, timeout = 120 }

YAML has the same shape under a top-level ``models:`` mapping. Keys never go in this file: an
``api_key`` field is rejected with a pointer to ``api_key_env``.

:func:`resolve_model` turns what a user typed (a registry name or a ``provider:model`` spec) into a
:class:`~persobench.providers.spec.ModelSpec`. This module depends on :mod:`persobench.providers`;
the providers know nothing of the registry file.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from persobench.providers.provider_registry import PROVIDERS, checked_spec, parse_spec
from persobench.errors import ConfigurationError
from persobench.providers.spec import ModelSpec
from persobench.datasets.json_numbers import HugeInteger, max_digits
from persobench.core.structured import FORMS
from persobench.providers.presets import preset

CANDIDATE_FILES = ("models.toml", "models.yaml", "models.yml")

_FIELDS = {"provider", "model", "spec", "base_url", "api_key_env", "label", "options",
           "price_input_per_mtok", "price_output_per_mtok", "price_batch_input_per_mtok",
           "price_batch_output_per_mtok", "description", "structured", "structured_format"}

#: USD per million tokens (input, output) for well-known hosted models, by name prefix; the
#: registry file overrides these. Prices change: treat costs as estimates.
DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4o": (2.50, 10.00),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-3.5-turbo": (0.50, 1.50),
    "gpt-4-turbo": (10.00, 30.00),
    "claude-3-5-haiku": (0.80, 4.00),
    "claude-3-haiku": (0.25, 1.25),
    "claude-3-5-sonnet": (3.00, 15.00),
    "claude-3-7-sonnet": (3.00, 15.00),
    "claude-sonnet-4": (3.00, 15.00),
    "claude-opus-4": (15.00, 75.00),
}


def find_registry_file(path: str | os.PathLike[str] | None = None, *, home: Any = None) -> Path | None:
    """The registry file in effect, or ``None``. An explicit path that does not exist is an error."""
    if path:
        p = Path(path)
        if not p.is_file():
            raise ConfigurationError(f"models file {p} does not exist")
        return p
    env = os.environ.get("PERSOBENCH_MODELS")
    if env:
        p = Path(env)
        if not p.is_file():
            raise ConfigurationError(f"PERSOBENCH_MODELS points to {p}, which does not exist")
        return p
    for name in CANDIDATE_FILES:
        if Path(name).is_file():
            return Path(name)
    if home is not None and (Path(home) / "models.toml").is_file():
        return Path(home) / "models.toml"
    return None


def _huge_integer(text: str) -> str | None:
    """Where ``text`` holds an integer too long for Python to convert ("line N, field F: ..."), or None."""

    if not max_digits():
        return None
    for number, line in enumerate(text.splitlines(), start=1):
        found = re.search(rf"\d{{{max_digits() + 1},}}", line)
        if found:
            field = line.partition("=")[0].partition(":")[0].strip() or "?"
            return f"line {number}, field {field}: {HugeInteger(len(found.group(0))).problem('no setting takes a number that long')}"
    return None


def _parse(path: Path) -> Mapping[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"{path}: cannot read models file ({exc})") from None
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            data = tomllib.loads(text)
    except Exception as exc:  # noqa: BLE001 - tomllib/yaml raise their own error types
        huge = _huge_integer(text)
        if huge:  # Python's own message names no line and suggests a call the user cannot make
            raise ConfigurationError(f"{path}: {huge}") from None
        raise ConfigurationError(f"{path}: invalid {path.suffix.lstrip('.').upper()} ({' '.join(str(exc).split())})") from None
    if not isinstance(data, Mapping) or not isinstance(data.get("models", {}), Mapping):
        raise ConfigurationError(f"{path}: expected a top-level 'models' table mapping names to settings")
    return data.get("models", {})


def load_registry(path: str | os.PathLike[str]) -> dict[str, ModelSpec]:
    """Every entry of a registry file as name -> :class:`~persobench.providers.spec.ModelSpec`."""
    path = Path(path)
    entries: dict[str, ModelSpec] = {}
    for name, raw in _parse(path).items():
        where = f"{path}: model {name!r}"
        if not isinstance(raw, Mapping):
            raise ConfigurationError(f"{where}: expected a table of settings")
        secret = next((k for k in raw if k.lower() in ("api_key", "key", "token", "secret")), None)
        if secret:
            raise ConfigurationError(
                f"{where}: field {secret!r} would store a secret in a file; use api_key_env = \"VAR_NAME\" instead"
            )
        unknown = sorted(set(raw) - _FIELDS)
        if unknown:
            raise ConfigurationError(f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(_FIELDS))}")
        provider, model = raw.get("provider"), raw.get("model")
        if raw.get("spec"):
            provider, _, model = str(raw["spec"]).partition(":")
        if not provider or not model:
            raise ConfigurationError(f"{where}: needs 'provider' and 'model' (or spec = \"provider:model\")")
        options = raw.get("options") or {}
        if not isinstance(options, Mapping):
            raise ConfigurationError(f"{where}: 'options' must be a table")
        entries[str(name)] = ModelSpec(
            provider=str(provider).lower(),
            model=str(model),
            base_url=raw.get("base_url") or None,
            options=dict(options),
            label=str(raw.get("label") or name),
            api_key_env=raw.get("api_key_env") or None,
            price_input_per_mtok=_price(raw, "price_input_per_mtok", where),
            price_output_per_mtok=_price(raw, "price_output_per_mtok", where),
            price_batch_input_per_mtok=_price(raw, "price_batch_input_per_mtok", where),
            price_batch_output_per_mtok=_price(raw, "price_batch_output_per_mtok", where),
            structured=_structured(raw, where),
            structured_format=_structured_format(raw, where),
        )
    return entries


def _structured(raw: Mapping[str, Any], where: str) -> bool:
    value = raw.get("structured", False)
    if not isinstance(value, bool):
        raise ConfigurationError(f"{where}: structured must be true or false, got {value!r}")
    return value


def _structured_format(raw: Mapping[str, Any], where: str) -> str | None:

    value = raw.get("structured_format")
    if value is not None and value not in FORMS:
        raise ConfigurationError(f"{where}: structured_format must be one of {', '.join(FORMS)}, got {value!r}")
    return value


def _price(raw: Mapping[str, Any], field_name: str, where: str) -> float | None:
    value = raw.get(field_name)
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigurationError(f"{where}: {field_name} must be a number, got {value!r}") from None


def find_model(name: str, *, path: str | os.PathLike[str] | None = None, home: Any = None) -> ModelSpec | None:
    """The registry entry called ``name``, or ``None`` when there is no file or no such entry."""
    registry_path = find_registry_file(path, home=home)
    if registry_path is None:
        return None
    return load_registry(registry_path).get(name)


def resolve_model(
    name: str, *, base_url: str | None = None, options: Mapping[str, Any] | None = None,
    models_file: str | None = None, home: Any = None,
) -> ModelSpec:
    """A registry-file name, a preset (:mod:`persobench.providers.presets`: the paper's eight models) or a
    ``provider:model`` spec, with CLI overrides applied on top."""

    entry = find_model(name, path=models_file, home=home) or preset(name)
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


def prices_for(spec: ModelSpec) -> tuple[float, float] | None:
    """(input, output) USD per million tokens for ``spec``, or ``None`` when unknown."""
    if spec.provider in ("local", "baseline"):
        return (0.0, 0.0)
    if spec.price_input_per_mtok is not None or spec.price_output_per_mtok is not None:
        return (spec.price_input_per_mtok or 0.0, spec.price_output_per_mtok or 0.0)
    if spec.base_url:  # a self-hosted or third-party server: official prices do not apply
        return None
    model = spec.model.lower()
    # Longest prefix first, so "gpt-4o-mini" is not priced as "gpt-4o".
    for prefix in sorted(DEFAULT_PRICES, key=len, reverse=True):
        if model.startswith(prefix):
            return DEFAULT_PRICES[prefix]
    return None


def estimate_cost(spec: ModelSpec, prompt_tokens: int, completion_tokens: int) -> float | None:
    """Estimated USD for the given usage, or ``None`` when the model's prices are unknown."""
    prices = prices_for(spec)
    if prices is None:
        return None
    return round((prompt_tokens * prices[0] + completion_tokens * prices[1]) / 1_000_000, 6)
