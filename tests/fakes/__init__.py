"""Test doubles that speak real protocols (HTTP on 127.0.0.1), never patched SDKs."""

from tests.fakes.buckets import RateLimits
from tests.fakes.servers import (
    Action,
    FakeLLMServer,
    RequestInfo,
    default_text,
    drip,
    error,
    hang,
    malformed,
    prompt_id,
    reply,
    reset,
)

__all__ = [
    "Action", "FakeLLMServer", "RateLimits", "RequestInfo", "default_text", "drip", "error", "hang", "malformed", "prompt_id",
    "reply", "reset",
]
