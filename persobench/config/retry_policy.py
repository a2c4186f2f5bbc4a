"""How failed requests are retried (:class:`RetryPolicy`): a field table, offered by the configurations
that hold one (``run --max-attempts/--timeout``, ``score --judge-timeout``)."""

from __future__ import annotations

import random
from typing import Annotated

from pydantic import Field

from persobench.config.fields import ConfigModel


class RetryPolicy(ConfigModel):
    """How failed requests are retried. None of this is part of the cache key."""

    max_attempts: Annotated[int, Field(ge=1, description="Attempts per request, the first included.")] = 6
    base_delay: Annotated[float, Field(ge=0, description="Backoff before the second attempt, doubled for each "
                                                         "further one (before jitter).")] = 1.0
    max_delay: Annotated[float, Field(ge=0, description="Cap on one backoff wait.")] = 60.0
    max_retry_after: Annotated[float, Field(ge=0, description="A server asking to wait longer than this "
                                                              "(seconds) fails the request instead.")] = 600.0
    timeout: Annotated[float, Field(gt=0, description="Seconds one HTTP request may take in all, reply included, "
                                                      "before it counts as timed out.")] = 60.0
    timeout_flag: Annotated[str, Field(description="The command-line flag that sets ``timeout``, named when a "
                                                   "request runs out of time (``run``: ``--timeout``; "
                                                   "``score --judge``: ``--judge-timeout``).")] = "--timeout"

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """Wait after failed attempt ``attempt`` (1-based): exponential with "equal jitter" (half
        fixed, half random), so simultaneous failures do not retry in lockstep."""
        ceiling = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        return ceiling / 2 + rng.uniform(0, ceiling / 2)
