"""The paper's eight models as ready-made model names: ``--model gpt-4o-mini``, ``--model gemma-7b-it``.

The four API models run through their providers; Gemini 1.5 Pro through Google's OpenAI-compatible
endpoint with its key in ``GEMINI_API_KEY``. The four open models are the hub ids the paper's
``open_source_models.ipynb`` loaded, for ``local:`` (in-process transformers, the paper's way);
each also has a ``-vllm`` twin that talks to a vLLM server serving that hub id (default
``http://localhost:8000/v1``, ``--base-url`` to change it) and sends the ``paper-open`` prompt as raw
text to its completions endpoint (``/v1/completions``), so its runs are on the paper's protocol;
``--chat-template on`` sends it to the chat endpoint instead, which is another protocol. Gemini gets
one user message that starts with the system text, as the notebook sent it. Prices are the providers' public list
prices in USD per million tokens (input, output), for dry-run cost estimates; local models cost 0.

A name in the models file (:mod:`persobench.providers.models_registry`) takes precedence over a preset.
"""

from __future__ import annotations

from persobench.providers.spec import COMPLETIONS_ENDPOINT, SYSTEM_IN_USER, ModelSpec

__all__ = ["GEMINI_OPENAI_BASE_URL", "PAPER_PRESETS", "VLLM_BASE_URL", "preset"]

#: Google's OpenAI-compatible endpoint for Gemini models.
GEMINI_OPENAI_BASE_URL = "https://generativelanguage.googleapis.com/v1beta/openai/"
#: Where ``vllm serve <hub id>`` listens by default.
VLLM_BASE_URL = "http://localhost:8000/v1"

#: The paper's open models: preset name -> hub id (as loaded by the paper's notebook).
OPEN_MODELS = {
    "mistral-7b-instruct": "mistralai/Mistral-7B-Instruct-v0.2",
    "qwen2-7b-instruct": "Qwen/Qwen2-7B-Instruct",
    "gemma-7b-it": "google/gemma-7b-it",
    "llama-3.1-8b-instruct": "meta-llama/Meta-Llama-3.1-8B-Instruct",
}


def _presets() -> dict[str, ModelSpec]:
    presets = {
        "gpt-3.5-turbo": ModelSpec("openai", "gpt-3.5-turbo", label="gpt-3.5-turbo",
                                   price_input_per_mtok=0.50, price_output_per_mtok=1.50),
        "gpt-4-turbo": ModelSpec("openai", "gpt-4-turbo", label="gpt-4-turbo",
                                 price_input_per_mtok=10.00, price_output_per_mtok=30.00),
        "gpt-4o-mini": ModelSpec("openai", "gpt-4o-mini", label="gpt-4o-mini",
                                 price_input_per_mtok=0.15, price_output_per_mtok=0.60),
        # Gemini 1.5 Pro list price for prompts up to 128k tokens.
        # closed_source_models.ipynb sent Gemini one user message starting with the system text.
        "gemini-1.5-pro": ModelSpec("openai", "gemini-1.5-pro", base_url=GEMINI_OPENAI_BASE_URL,
                                    options={SYSTEM_IN_USER: True},
                                    label="gemini-1.5-pro", api_key_env="GEMINI_API_KEY",
                                    price_input_per_mtok=1.25, price_output_per_mtok=5.00),
    }
    for name, hub_id in OPEN_MODELS.items():
        presets[name] = ModelSpec("local", hub_id, label=name)
        # paper-open as raw text to /v1/completions, as the notebook's text-generation pipeline got it.
        presets[f"{name}-vllm"] = ModelSpec("openai", hub_id, base_url=VLLM_BASE_URL, label=f"{name}-vllm",
                                            options={COMPLETIONS_ENDPOINT: True},
                                            price_input_per_mtok=0.0, price_output_per_mtok=0.0)
    return presets


#: Preset name -> model spec.
PAPER_PRESETS: dict[str, ModelSpec] = _presets()


def preset(name: str) -> ModelSpec | None:
    """The preset called ``name``, or ``None``."""
    return PAPER_PRESETS.get(name)
