"""Planning a run: resolve model, template and samples, compute cache keys and the run id.

:func:`plan_generation` sends nothing and needs no key, so the app and ``--dry-run`` can show what
a run would cost before it starts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from persobench.llm.response_cache import ResponseCache, cache_key, default_cache_dir
from persobench.config import changed
from persobench.generation.config import GenerationConfig, batch_settings
from persobench.providers.models_registry import resolve_model
from persobench.providers import PROVIDERS, ModelSpec
from persobench.errors import ConfigurationError, PersoBenchError
from persobench.providers.base import Completion, GenerationParams, raw_prompt_text
from persobench.providers.spec import COMPLETIONS_ENDPOINT, SYSTEM_IN_USER
from persobench.store.run_store import RunManifest, RunStore, make_run_id
from persobench.core.structured import reply_schema
from persobench.prompts.templates import PromptTemplate
from persobench.store.run_records import DatasetFileRecord
from persobench.records import Sample
from persobench.datasets import load_dataset
from persobench.prompts.templates import MODES, TemplateError, get_template
from persobench.generation.postprocess import POLICIES
from persobench.prompts.templates import DEFAULT_LOCAL_TEMPLATE, default_template_name
from persobench.prompts.templates import build_messages
from persobench.datasets import is_file_dataset
from persobench.store.files import sha256_file
from persobench.providers.models_registry import estimate_cost
from persobench.providers.batch_api import supports_batch
from persobench.prompts.protocol import default_policy
from persobench.prompts.protocol import PAPER
from persobench.providers.local import local_mode_options



@dataclass
class GenerationPlan:
    """A resolved configuration: what would be sent, and what the cache already holds."""

    config: GenerationConfig
    spec: ModelSpec
    template: "PromptTemplate"
    params: GenerationParams
    samples: list["Sample"]
    messages: list[list[dict[str, str]]]
    keys: list[str]
    hits: dict[int, tuple[Completion, float]]
    """Sample position -> cached (completion, original latency)."""
    manifest: RunManifest
    cache_dir: Path
    paper_style: str = "open"
    """How the "paper" policy reads replies: "open", "closed" or "closed-fences" (see :func:`paper_parse_style`)."""
    dataset_file: "DatasetFileRecord | None" = None
    """The user file the samples were read from (absolute path and checksum); ``None`` for a
    registered dataset or samples given by the caller."""

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    @property
    def policy(self) -> str:
        """The post-processing policy the plan resolved (:func:`plan_generation` sets ``config.policy``)."""
        if self.config.policy is None:
            raise ConfigurationError("the plan's post-processing policy is not resolved")
        return self.config.policy

    @property
    def n_requests(self) -> int:
        """Requests a run would send (before retries)."""
        return len(self.samples) - len(self.hits)

    @property
    def estimated_prompt_tokens(self) -> int:
        """Rough prompt tokens of the requests to send (4 characters per token)."""
        chars = sum(
            len(m["content"]) for i, msgs in enumerate(self.messages) if i not in self.hits for m in msgs
        )
        return chars // 4

    def estimated_max_cost(self) -> float | None:
        """Upper-bound USD for the requests to send (every reply at the token limit)."""

        return estimate_cost(self.spec, self.estimated_prompt_tokens, self.n_requests * self.params.max_tokens)


def _load_samples(config: GenerationConfig) -> list["Sample"]:

    try:
        return load_dataset(config.dataset, limit=config.limit, seed=config.seed)
    except (PersoBenchError, ValueError, OSError) as exc:  # a bad dataset is a bad configuration of this run
        raise ConfigurationError(" ".join(str(exc).split())) from None


def plan_generation(
    config: GenerationConfig, *, store: RunStore, samples: list["Sample"] | None = None,
) -> GenerationPlan:
    """Resolve model, template, samples, run id and cache hits. Sends nothing, needs no key."""


    if config.mode not in MODES:
        raise ConfigurationError(f"unknown mode {config.mode!r}; expected one of {', '.join(MODES)}")

    if config.policy is not None and config.policy not in POLICIES:
        raise ConfigurationError(f"unknown post-processing policy {config.policy!r}; known: {', '.join(POLICIES)}")
    spec = resolve_model(
        config.model, base_url=config.base_url, options=config.options, models_file=config.models_file,
        home=store.home,
    )
    if config.batch:

        if not supports_batch(spec.provider):
            raise ConfigurationError(f"--batch needs a provider with a batch API (openai, anthropic); "
                                     f"{spec.name!r} is provider {spec.provider!r}")

        batch_settings(config)  # checks the numbers and the fallback, one line
    try:
        template = get_template(config.template or default_template_for(spec), config.mode)
    except TemplateError as exc:
        raise ConfigurationError(str(exc)) from None
    if config.template and template.mode != config.mode and config.mode != "vanilla":
        raise ConfigurationError(f"template {template.name!r} is in {template.mode!r} mode, not {config.mode!r}")
    mode = template.mode
    if config.policy is None:  # the template family decides: a default run is on the paper's protocol

        config = changed(config, policy=default_policy(template.family))
    chat_template = _chat_template(config, template, spec)
    temperature = template.temperature if config.temperature is None else float(config.temperature)
    max_tokens = template.max_tokens if config.max_tokens is None else int(config.max_tokens)
    if temperature < 0 or max_tokens < 1:
        raise ConfigurationError("temperature must be >= 0 and max_tokens >= 1")
    if config.batch_size is not None:
        spec = dataclasses.replace(spec, options={**dict(spec.options), "batch_size": int(config.batch_size)})
    if spec.provider == "local":  # the paper ran its open models in float32, one prompt at a time

        spec = dataclasses.replace(spec, options=local_mode_options(dict(spec.options),
                                                                    paper_protocol=template.family == PAPER))
    # A baseline's reply is well-formed by construction: structured output would change nothing.
    structured = (config.structured or spec.structured) and spec.provider != "baseline"
    if structured and chat_template is False and spec.provider != "local":
        raise ConfigurationError("--structured needs the chat endpoint: a completions endpoint takes raw text "
                                 "without a response schema; run with --chat-template on or without --structured")
    params = GenerationParams(
        temperature=temperature, max_tokens=max_tokens, top_p=config.top_p,
        seed=config.seed if temperature > 0 else None,  # greedy decoding has nothing to seed
        chat_template=chat_template is not False,
        response_schema=reply_schema(mode, max_tokens) if structured else None,
    )
    dataset_file = None
    if samples is None:
        samples = _load_samples(config)
        dataset_file = _dataset_file(config.dataset)
    if not samples:
        raise ConfigurationError(f"dataset {config.dataset!r} selected no samples")

    # The class attribute is enough: no client (and no key) is needed to compute keys.
    sample_dependent = bool(getattr(PROVIDERS.get(spec.provider), "sample_dependent", False))
    options = spec.output_options
    messages = [messages_for(sample, template, spec) for sample in samples]
    keys = [
        cache_key(
            provider=spec.provider, model=spec.model, base_url=spec.base_url, messages=msgs, params=params,
            options=options, sample_id=sample.id, sample_dependent=sample_dependent,
        )
        for sample, msgs in zip(samples, messages)
    ]
    cache_dir = Path(config.cache_dir) if config.cache_dir else default_cache_dir(store.home)
    with ResponseCache(cache_dir) as cache:
        hits = {i: hit for i, key in enumerate(keys) if (hit := cache.get(key)) is not None}

    parameters: dict[str, Any] = {
        "temperature": temperature, "max_tokens": max_tokens, "seed": config.seed, "limit": config.limit,
        "policy": config.policy,
    }
    if config.top_p is not None:
        parameters["top_p"] = config.top_p
    if chat_template is False:  # raw text changes what the model writes; "on" is how runs always were
        parameters["chat_template"] = False
    if structured:  # only when on, so the ids of plain runs stay what they were
        parameters["structured"] = True
    identity = {"provider": spec.provider, "model": spec.model, "base_url": spec.base_url,
                "options": options, "label": spec.label}
    sample_ids = tuple(s.id for s in samples)
    run_id = make_run_id(
        dataset=config.dataset, model={k: v for k, v in identity.items() if v}, mode=mode,
        template_hash=template.version_hash, sample_ids=sample_ids, parameters=parameters,
    )
    manifest = RunManifest(
        run_id=run_id, dataset=config.dataset, sample_ids=sample_ids, model=spec.to_public_dict(), mode=mode,
        template=template.name, template_hash=template.version_hash, parameters=parameters,
        template_family=template.family, chat_template=chat_template,
    )
    return GenerationPlan(config, spec, template, params, samples, messages, keys, hits, manifest, cache_dir,
                          paper_parse_style(template.name, spec.provider, spec.model), dataset_file)


def default_template_for(spec: ModelSpec) -> str:
    """The paper's template for ``spec``: ``paper-open`` for local models and for servers with a
    completions endpoint (the vLLM presets serve the paper's open models), else ``paper``."""

    return DEFAULT_LOCAL_TEMPLATE if spec.options.get(COMPLETIONS_ENDPOINT) else default_template_name(spec.provider)


def messages_for(sample: "Sample", template: "PromptTemplate", spec: ModelSpec) -> list[dict[str, str]]:
    """The messages a run of ``spec`` sends for ``sample``: the template's, folded into one user
    message that starts with the system text when the spec says so (``system_in_user``, as
    ``closed_source_models.ipynb``'s Gemini call: ``contents="You are a helpful response generator
    to output JSON.\\n\\n" + prompt``)."""

    messages = build_messages(sample, template)
    if spec.options.get(SYSTEM_IN_USER) and len(messages) > 1:
        return [{"role": "user", "content": raw_prompt_text(messages)}]
    return messages


def _dataset_file(dataset: str) -> "DatasetFileRecord | None":
    """Where a user-file dataset was read from, with its checksum (``None`` for registered datasets)."""

    if not is_file_dataset(dataset):
        return None
    path = Path(dataset).expanduser().resolve()
    try:
        return DatasetFileRecord(path=str(path), sha256=sha256_file(path))
    except OSError as exc:
        raise ConfigurationError(f"{path}: unreadable ({exc.strerror or exc})") from None


def _chat_template(config: GenerationConfig, template: "PromptTemplate", spec: ModelSpec) -> bool | None:
    """Whether a local model gets its chat template (``None``: the provider has no choice)."""
    raw_capable = bool(getattr(PROVIDERS.get(spec.provider), "raw_text_input", False)) \
        or bool(spec.options.get(COMPLETIONS_ENDPOINT))
    if not raw_capable:
        if config.chat_template is False:
            raise ConfigurationError(
                f"--chat-template off needs a local model or a server with a completions endpoint (the -vllm "
                f"presets, option completions_endpoint=true); provider {spec.provider!r} is a chat API that applies "
                "its own template (the paper-open prompt is sent to it as one user message)"
            )
        return None
    return template.chat_template if config.chat_template is None else bool(config.chat_template)


def paper_parse_style(template: str, provider: str, model: str = "") -> str:
    """How the "paper" policy reads a run's replies, as the paper's notebook for it did: "open"
    (``open_source_models.ipynb``/``post-processing.ipynb``: the first non-greedy ``{...}`` with a
    "response") for ``paper-open`` and local models; for ``paper`` and API models strict
    ``json.loads`` of the whole reply (``closed_source_models.ipynb``), after removing code fences
    ("closed-fences") for the Gemini family only, as that notebook's Gemini cell did, and as it came
    ("closed") for every other model, as its OpenAI cell did for the gpt models."""
    if template == "paper-open":
        return "open"
    if template != "paper" and provider == "local":
        return "open"
    return "closed-fences" if "gemini" in model.lower() else "closed"
