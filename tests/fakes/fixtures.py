"""pytest fixtures for the fake servers; import them into a test module to use them."""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.fakes.servers import FakeLLMServer

#: API keys the tests hand to the SDKs; tests check that none of them reaches the disk.
OPENAI_SECRET = "sk-test-OPENAI-5ecret-9f8e7d6c5b4a"
ANTHROPIC_SECRET = "sk-ant-test-ANTHROPIC-5ecret-1a2b3c4d"
#: A long key (200 characters) a server echoes in an error body: no 16-character run of it may be stored.
LONG_KEY = "sk-" + "".join("abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789"[(i * 7) % 46] for i in range(197))
#: Credentials typed into a base URL (user info and a secret query parameter).
URL_PASSWORD = "pw-Hunter2-urlsecret"
QUERY_TOKEN = "qtok-93fj2k-secretvalue"


@pytest.fixture()
def openai_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLMServer]:
    """A fake OpenAI-compatible server on 127.0.0.1, with OPENAI_API_KEY set to a known secret."""
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_SECRET)
    with FakeLLMServer("openai") as server:
        yield server


@pytest.fixture()
def anthropic_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLMServer]:
    """A fake Anthropic Messages server on 127.0.0.1, with ANTHROPIC_API_KEY set to a known secret."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_SECRET)
    with FakeLLMServer("anthropic") as server:
        yield server
