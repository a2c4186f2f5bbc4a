"""``score --judge ... --batch``: the judge's requests through the provider's batch API first.

The hook of :meth:`~persobench.metrics.judge.labeller.JudgeLabeller.predict`: the requests the response
cache lacks go to :func:`persobench.llm.batch_driver.fill_cache` (one batch, its id recorded in
``<home>/batches/judge-<identity hash>.json`` before any waiting); every answer it caches is
labelled here, what the batch answered with an error goes back to the ordinary send loop, and
what is still waiting on the provider at the ``--batch-wait`` deadline stays unanswered (no value,
as with the cost cap), for the next command to collect without submitting again. A batch that failed
as a whole stops the pass (:class:`~persobench.llm.batch_driver.BatchFailed`) unless the judge's
``--batch-fallback`` is ``interactive``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
import sys
from typing import Any, Callable, Mapping, Protocol
from persobench.errors import PersoBenchError, ProviderError
from persobench.llm.batch_driver import BatchFailed, BatchState, batch_cost, fill_cache
from persobench.providers.base import Request
from persobench.providers.batch_api import make_batch_backend
from persobench.core.secrets import known_secrets



class BatchedLabeller(Protocol):
    """What the batch hook uses of :class:`~persobench.metrics.judge.labeller.JudgeLabeller` (named here so
    this module, which the labeller calls, does not import it back)."""

    config: Any
    cache_dir: Path
    params: Any
    stats: Any

    def _label(self, completion: Any) -> Any: ...


def state_path(labeller: BatchedLabeller) -> Path:
    """The judge's batch state file: beside the response cache, one per judge identity."""
    digest = hashlib.sha256(labeller.config.identity.encode("utf-8")).hexdigest()[:16]
    return Path(labeller.cache_dir).parent / "batches" / f"judge-{digest}.json"


def pending_note(labeller: BatchedLabeller) -> str | None:
    """What a dry run says about the judge's batches still on the provider (``None``: none)."""
    try:
        waiting = BatchState.read(state_path(labeller), "").waiting()
    except PersoBenchError as exc:
        return f"judge batch state: {exc} (--batch stops on it)"
    return None if waiting is None else (f"judge batch pending: {waiting}; a command with --batch collects them "
                                         "instead of sending them")


def answer_by_batch(labeller: BatchedLabeller, todo: list[str], messages: Mapping[str, tuple],
                    positions: Mapping[str, list[int]], labels: dict[str, str], cache: Any,
                    progress: Callable[[int], None] | None) -> list[str]:
    """Label what the batch API answers; return the keys left for the ordinary send loop. Raises
    :class:`~persobench.errors.PersoBenchError` when the batch API itself fails (no key, refused),
    :class:`~persobench.llm.batch_driver.BatchFailed` when a batch failed as a whole and the judge's
    ``batch.fallback`` is ``stop``."""


    config = labeller.config
    timeout = config.retry.timeout if config.retry is not None else 60.0
    backend = make_batch_backend(config.spec, api_key=config.api_key, timeout=timeout)
    secrets = known_secrets(api_keys=getattr(backend, "_secrets", ()) or (), base_url=config.spec.base_url,
                            options=config.spec.options)
    path = state_path(labeller)
    path.parent.mkdir(parents=True, exist_ok=True)
    requests = {key: Request(messages=messages[key], params=labeller.params) for key in todo}
    try:
        outcome = fill_cache(backend, requests, cache=cache, state_path=path, settings=config.batch,
                             secrets=secrets, say=lambda line: print(f"judge {line}", file=sys.stderr, flush=True))
    except ProviderError as exc:
        raise ProviderError(exc.kind, f"the batch API failed: {exc.describe()}", status_code=exc.status_code) from None
    finally:
        backend.close()
    if outcome.failures and config.batch.fallback == "stop":
        raise BatchFailed(outcome.failure_line())
    left = []
    for key in todo:
        hit = cache.get(key)
        if hit is not None:
            completion = hit[0]
            labels[key] = labeller._label(completion)
            stats = labeller.stats
            stats.sent += 1
            stats.prompt_tokens += int(completion.prompt_tokens or 0)
            stats.completion_tokens += int(completion.completion_tokens or 0)
            cost = batch_cost(config.spec, int(completion.prompt_tokens or 0), int(completion.completion_tokens or 0))
            stats.cost_usd = None if cost is None or stats.cost_usd is None else round(stats.cost_usd + cost, 6)
            if progress is not None:
                progress(len(positions[key]))
        elif key not in outcome.pending_keys:
            left.append(key)  # the batch answered with an error (or failed, --batch-fallback interactive)
    return left
