"""How failed requests are retried (:class:`RetryPolicy`): a field table, offered by the configurations
that hold one (``run --max-attempts/--timeout``, ``score --judge-timeout``)."""

from __future__ import annotations

import random
from typing import Annotated, Any

from pydantic import Field, model_validator

from persobench.config.fields import ConfigModel


class RetryPolicy(ConfigModel):
    """How failed requests are retried. None of this is part of the cache key. The flag a timeout
    error names is not stored here: whoever runs the session gives it
    (:class:`~persobench.llm.session.LLMSession`'s ``timeout_flag``)."""

    max_attempts: Annotated[int, Field(ge=1, description="Attempts per request, the first included.")] = 6
    base_delay: Annotated[float, Field(ge=0, description="Backoff before the second attempt, doubled for each "
                                                         "further one (before jitter).")] = 1.0
    max_delay: Annotated[float, Field(ge=0, description="Cap on one backoff wait.")] = 60.0
    max_retry_after: Annotated[float, Field(ge=0, description="A server asking to wait longer than this "
                                                              "(seconds) fails the request instead.")] = 600.0
    timeout: Annotated[float, Field(gt=0, description="Seconds one HTTP request may take in all, reply included, "
                                                      "before it counts as timed out.")] = 60.0

    @model_validator(mode="before")
    @classmethod
    def _older_forms(cls, data: Any) -> Any:
        """A policy stored before the flag named in a timeout error was the session's to give (its
        ``timeout_flag``, ``--timeout`` or ``--judge-timeout``, in older ``resume.json`` and ``job.json``)."""
        if isinstance(data, dict) and "timeout_flag" in data:
            data = {key: value for key, value in data.items() if key != "timeout_flag"}
        return data

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """Wait after failed attempt ``attempt`` (1-based): exponential with "equal jitter" (half
        fixed, half random), so simultaneous failures do not retry in lockstep."""
        ceiling = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        return ceiling / 2 + rng.uniform(0, ceiling / 2)
