"""Model providers, registered by name and imported only when a run asks for them.

A model is named by a spec ``"provider:model"`` (``openai:gpt-4o-mini``, ``anthropic:claude-3-5-haiku-latest``,
``openai:llama3.1:8b`` with ``base_url`` for Ollama, ``local:smollm2``, ``baseline:reference``), or by a
name of the models file (:func:`resolve_model`). ``import persobench.providers`` imports no SDK: an
adapter module loads when :func:`make_provider` builds it.

* :mod:`~persobench.providers.provider_registry`: :data:`PROVIDERS`, :func:`parse_spec`, :func:`make_provider`.
* :mod:`~persobench.providers.spec` (:class:`ModelSpec`), :mod:`~persobench.providers.base` (the
  :class:`Provider` protocol, :class:`Request`, :class:`Completion`, HTTP errors).
* the adapters: ``openai_provider``, ``anthropic_provider``, ``local`` (transformers / GGUF, with
  ``constrained`` decoding), ``baselines``; ``whole_requests`` (each HTTP request in one socket write).
* :mod:`~persobench.providers.batch_api` (:class:`BatchBackend`, :data:`BATCH_BACKENDS`) and its
  backends ``openai_batch``, ``anthropic_batch``.
* :mod:`~persobench.providers.presets` (the paper's models as names) and
  :mod:`~persobench.providers.models_registry` (the models file, prices).
"""

from persobench.providers.base import (Completion, GenerationParams, MissingKeyError, Provider, Request,
                                       parse_base_url)
from persobench.providers.batch_api import BATCH_BACKENDS, BatchBackend, make_batch_backend, supports_batch
from persobench.providers.models_registry import (estimate_cost, find_registry_file, load_registry, prices_for,
                                                  resolve_model)
from persobench.providers.presets import PAPER_PRESETS, preset
from persobench.providers.provider_registry import (DEFAULT_LOCAL_MODEL, PROVIDERS, checked_spec, enforces_schema,
                                                    key_requirement, make_provider, missing_key_env, parse_spec,
                                                    provider_class)
from persobench.providers.spec import NON_OUTPUT_OPTIONS, ModelSpec

__all__ = [
    "BATCH_BACKENDS", "BatchBackend", "Completion", "DEFAULT_LOCAL_MODEL", "GenerationParams", "MissingKeyError",
    "ModelSpec", "NON_OUTPUT_OPTIONS", "PAPER_PRESETS", "PROVIDERS", "Provider", "Request", "checked_spec",
    "enforces_schema", "estimate_cost", "find_registry_file", "key_requirement", "load_registry", "make_batch_backend",
    "make_provider", "missing_key_env", "parse_base_url", "parse_spec", "preset", "prices_for", "provider_class",
    "resolve_model", "supports_batch",
]
