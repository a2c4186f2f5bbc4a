"""The one layer that sends prompts to a model: generation and the LLM judge both go through it.

One concern per module:

``session``         :class:`LLMSession`: provider resolution, the workers, and :meth:`~LLMSession.send`
                    (run-deleted check, spend reservation, retries, scrubbing, cache-first write, usage)
                    and :func:`call_with_retries`, THE retry loop (Retry-After pause gate, backoff, deadline)
``retry``           :class:`RetryPolicy`, :class:`CallOutcome`, the pause gate
``concurrency``     :class:`AdaptiveLimit`, ``--concurrency auto``
``response_cache``  :class:`ResponseCache` and :func:`cache_key`: every reply stored before it is parsed
``usage``           the one check of reported token counts, the prompt estimate, :class:`UsageTotals`
``spend``           :class:`SpendLedger`, the cost cap shared by every process and Ray actor of an invocation
``ratelimits``      the rate limits a reply's headers state (OpenAI's ``x-ratelimit-*``, Anthropic's)
``pacing``          :class:`~persobench.llm.pacing.Pacer`: request and token budgets per server, key and model,
                    shared by the processes of a store, that sends wait for
``batch_driver``    :func:`fill_cache`: the one batch-API driver (submit once, poll, collect into the cache)
``batch_state``     ``batch.json``, read strictly; the store's batch listing

Importing this package is cheap: the providers, diskcache and the SDKs load when a session connects.
"""

from __future__ import annotations

from persobench.llm.batch_driver import (FALLBACKS, BatchFailed, BatchSettings, batch_cost, estimated_max_batch_cost,
                                         fill_cache)
from persobench.llm.batch_state import BatchListing, BatchState, batch_listing, read_state
from persobench.llm.response_cache import ResponseCache, cache_key, default_cache_dir
from persobench.llm.retry import CallOutcome, PauseGate, RetryPolicy
from persobench.llm.session import LLMSession, Sent, call_with_retries, sending_for
from persobench.llm.spend import SpendLedger, SpendLedgerError, SpendTotals
from persobench.llm.usage import UsageRefused, UsageTotals, check_usage

__all__ = ["FALLBACKS", "BatchFailed", "BatchListing", "BatchSettings", "BatchState", "CallOutcome", "LLMSession",
           "PauseGate", "ResponseCache", "RetryPolicy", "Sent", "SpendLedger", "SpendLedgerError", "SpendTotals",
           "UsageRefused", "UsageTotals", "batch_cost", "batch_listing", "cache_key", "call_with_retries",
           "check_usage", "default_cache_dir", "estimated_max_batch_cost", "fill_cache", "read_state", "sending_for"]
