"""The model spec: which provider, model and options a run generates with.

Its own module so that :mod:`persobench.providers.models_registry` (which builds specs from the models file)
and :mod:`persobench.providers` (which builds providers from specs) both depend on it, and not on
each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping
from persobench.core.secrets import strip_secrets
from persobench.core.secrets import url_without_credentials

#: Spec option: the OpenAI-compatible server also has the raw-text completions endpoint
#: (``/v1/completions``, vLLM), where a run without a chat template (``paper-open``) sends its prompt
#: as it is, as the paper's ``text-generation`` pipeline got it.
COMPLETIONS_ENDPOINT = "completions_endpoint"
#: Spec option: the system text goes at the start of the one user message, joined by a blank line
#: (``closed_source_models.ipynb``'s Gemini call); part of the cache key, never sent as a field.
SYSTEM_IN_USER = "system_in_user"

#: Spec options that do not change what the model writes: kept out of cache keys and run ids.
NON_OUTPUT_OPTIONS = frozenset(
    {"timeout", "headers", "max_tokens_param", "device", "dtype", "organization", "project",
     "structured_format", "batch_size", "max_reply_bytes", "local_mode", COMPLETIONS_ENDPOINT}
)
#: The dtype every local model computed in when runs did not record one, and the paper's: a dtype
#: other than this one changes the output, so it joins the cache key and run id (float32 keeps the
#: keys runs always had).
PAPER_DTYPE = "float32"


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
    """Environment variable holding the key, overriding the provider's ``key_env``."""
    price_input_per_mtok: float | None = None
    """USD per million prompt tokens, for the cost estimate; ``None`` = use the built-in table."""
    price_output_per_mtok: float | None = None
    """USD per million completion tokens."""
    price_batch_input_per_mtok: float | None = None
    """USD per million prompt tokens through the provider's batch API (``run --batch``); ``None``:
    half the interactive price."""
    price_batch_output_per_mtok: float | None = None
    """USD per million completion tokens through the batch API; ``None``: half the interactive price."""
    structured: bool = False
    """The models file asks for structured output with this model (as ``run --structured`` does)."""
    structured_format: str | None = None
    """The ``response_format`` form an OpenAI-compatible server takes for structured output,
    ``"json_schema"`` or ``"json_object"`` (llama-cpp-python); ``None``: found out on first use."""

    @property
    def name(self) -> str:
        return self.label or f"{self.provider}:{self.model}"

    @property
    def output_options(self) -> dict[str, Any]:
        """Options that change the output (part of the cache key)."""

        return strip_secrets({k: v for k, v in self.options.items() if k not in NON_OUTPUT_OPTIONS
                              or (k == "dtype" and v not in (None, "", PAPER_DTYPE))})

    def to_public_dict(self) -> dict[str, Any]:
        """The spec as recorded in run manifests (secrets stripped, transport options kept
        only when harmless)."""

        data: dict[str, Any] = {"provider": self.provider, "model": self.model}
        if self.base_url:
            data["base_url"] = url_without_credentials(self.base_url)  # no user:pw@, no ?api-key=...
        options = {k: v for k, v in self.options.items() if k != "headers"}
        if options:
            data["options"] = strip_secrets(options)
        if self.label:
            data["label"] = self.label
        if self.provider == "baseline":
            data["baseline"] = True  # lets tables and leaderboards mark it as a floor/ceiling
        return data
