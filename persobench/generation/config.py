"""What defines a generation run: :class:`GenerationConfig` (the CLI flags map one to one onto it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from persobench.generation.retry import RetryPolicy
from persobench.providers import DEFAULT_LOCAL_MODEL


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
    come back and halved on a 429 or 5xx (:mod:`persobench.generation.concurrency`)."""
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
    template family's (:func:`persobench.protocol.default_policy`: "paper" for the paper's
    templates, "robust" for the others). A plan's config holds the policy it resolved to."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Extra model options merged over the models-file entry."""
    models_file: str | None = None
    """Model registry file; default: discovered (see :mod:`persobench.models_registry`)."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """Retry and timeout settings."""
    checkpoint_every: int = 50
    """Rewrite the table after this many new completions."""
    fail_fast_after: int = 20
    """Stop the run when this many first requests all fail for the same non-retryable reason."""
    cache_dir: str | None = None
    """Response cache folder; default ``<home>/responses``."""
    structured: bool = False
    """Ask the provider to guarantee the reply's JSON shape (:mod:`persobench.structured`); a models
    file entry with ``structured = true`` turns it on too. Part of the cache key, run id and protocol.
    Baselines ignore it (their replies are already well-formed)."""
    batch_size: int | None = None
    """Samples per forward pass for in-process models; ``None``: the provider's measured default.
    Not part of the cache key (greedy outputs do not depend on it)."""
