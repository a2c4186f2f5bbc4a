"""Unit tests of persobench.core.secrets: the one place credentials are scrubbed, redacted and kept off disk."""

from __future__ import annotations

from persobench.core import secrets
from persobench.core.secrets import redact, scrub, secret_environment, strip_secrets


def test_redact_removes_keys_and_env_secrets(monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-1234567890-secret")
    text = ("key sk-proj-ABCDEFGHIJKLMNOP, sk-ant-api03-xyzxyzxyzxyz, Authorization: Bearer abc.def.ghijkl, "
            'api_key="hunter2hunter2" and tok-1234567890-secret')
    clean = redact(text)
    for secret in ("sk-proj-ABCDEFGHIJKLMNOP", "sk-ant-api03-xyzxyzxyzxyz", "abc.def.ghijkl", "hunter2hunter2",
                   "tok-1234567890-secret"):
        assert secret not in clean
    assert "[redacted]" in clean


def test_secrets_become_environment_for_runs_and_are_redacted():
    secrets = {"OPENAI_API_KEY": "sk-secret-from-secrets-123", "title": "not a key", "lower_key": "x" * 12,
               "nested": {"ANTHROPIC_API_KEY": "no"}}
    found = secret_environment(secrets)
    assert found == {"OPENAI_API_KEY": "sk-secret-from-secrets-123"}
    env = {**secret_environment(secrets)}
    assert env["OPENAI_API_KEY"] == "sk-secret-from-secrets-123"
    assert "sk-secret-from-secrets-123" not in redact("error: bad key sk-secret-from-secrets-123")




def test_scrub_replaces_the_given_secrets_only():
    assert scrub("key abcd1234 and wxyz", ["abcd1234", None, "wxyz"]) == "key *** and ***"
    assert scrub("short ab stays", ["ab"]) == "short ab stays", "secrets under 4 characters are ignored"


def test_provider_errors_use_the_shared_scrub():
    from persobench.providers import base

    assert base.scrub is scrub
    error = base.error_from_http(401, {}, {"error": "bad key sk-live-0123456789"}, "bad key sk-live-0123456789",
                                 secrets=["sk-live-0123456789"])
    assert "sk-live-0123456789" not in str(error)


def test_strip_secrets_drops_credential_fields_recursively():
    spec = {"provider": "openai", "api_key": "x", "options": {"HF_TOKEN": "t", "base_url": "u", "x_secret": "s"}}
    assert strip_secrets(spec) == {"provider": "openai", "options": {"base_url": "u"}}


def test_registered_secret_needs_eight_characters():
    secrets.register_secret("tiny")
    assert redact("a tiny word") == "a tiny word"
    secrets.register_secret("registered-value-42")
    assert redact("echo registered-value-42") == "echo [redacted]"


def test_every_piece_of_a_key_is_masked_at_every_offset():
    """scrub checks a few blocks of each key before looking for its pieces (the usual reply holds
    none): a piece of SECRET_RUN characters or more starting anywhere in the key is still masked."""
    from persobench.core.secrets import SECRET_RUN, scrub

    secret = "sk-proj-Zq8XmV2pL0aB7cD4eF6gH9iJ1kL3mN5oP7"
    for start in range(len(secret) - SECRET_RUN + 1):
        for length in (SECRET_RUN, SECRET_RUN + 3):
            piece = secret[start:start + length]
            if len(piece) < SECRET_RUN:
                continue
            masked = scrub(f"echo: {piece}.", [secret])
            assert piece not in masked and "***" in masked, (start, length)
    assert scrub("nothing of it here " * 50, [secret]) == "nothing of it here " * 50
