"""Unit tests of persobench.core.secrets: the one place credentials are scrubbed, redacted and kept off disk."""

from __future__ import annotations

from persobench.core import secrets
from persobench.core.secrets import redact, scrub, secret_environment, strip_secrets
from tests.fakes.fixtures import LONG_KEY
from tests.fakes.fixtures import QUERY_TOKEN
from tests.fakes.fixtures import URL_PASSWORD


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


# ---------------------------------------------------------------------------------------------
# Hardening, second round (issue 17): the edges a fault sweep found, against real parts


def test_scrub_masks_long_runs_of_a_secret_and_shorten_masks_before_cutting():
    from persobench.core.secrets import scrub, shorten

    key = LONG_KEY
    assert key[:174] not in scrub("error: " + key[:174], [key])  # a cut copy
    assert key[30:90] not in scrub(f"...{key[30:90]}...", [key])  # a run from the middle
    assert scrub("a short word sk- stays", [key]) == "a short word sk- stays"  # runs under 16 chars stay
    text = shorten("body: " + key + " tail", 200, [key])
    assert len(text) <= 200 and "***" in text and key[:16] not in text
    assert shorten("x" * 500, 100, []).startswith("x" * 99) and len(shorten("x" * 500, 100, [])) <= 100


def test_public_url_strips_user_info_and_secret_query_parameters():
    from persobench.core.secrets import public_text, public_url

    url = f"http://user:{URL_PASSWORD}@host.example:8000/v1?api-key={QUERY_TOKEN}&api-version=2024-06&token=t0k3n"
    clean = public_url(url)
    assert clean == "http://host.example:8000/v1?api-version=2024-06"
    assert public_url("https://api.example/v1") == "https://api.example/v1"
    assert "user" not in public_url("http://user@h/v1") and public_url("http://user@h/v1") == "http://h/v1"
    line = f"=== run: python -m persobench run --base-url {url} --limit 2"
    shown = public_text(line)
    assert URL_PASSWORD not in shown and QUERY_TOKEN not in shown and "t0k3n" not in shown
    assert "--base-url http://host.example:8000/v1?api-version=2024-06 --limit 2" in shown


def test_url_credentials_travel_in_the_environment_only():
    from persobench.core.secrets import URL_CREDENTIALS_ENV, credentials_environment, public_url, url_with_credentials

    url = f"http://user:{URL_PASSWORD}@host.example/v1?api-key={QUERY_TOKEN}"
    env = credentials_environment([url, "http://plain.example/v1"])
    assert set(env) == {URL_CREDENTIALS_ENV}  # plain URLs need nothing
    assert url_with_credentials(public_url(url), env=env) == url
    assert url_with_credentials("http://other.example/v1", env=env) == "http://other.example/v1"
    assert credentials_environment(["http://plain.example/v1"]) == {}


def test_remember_url_keeps_the_full_url_in_memory_only():
    from persobench.core.secrets import URL_CREDENTIALS_ENV, credentials_environment, remember_url, url_with_credentials

    url = f"https://u:{URL_PASSWORD}@gw.example/v1?token={QUERY_TOKEN}"
    public = remember_url(url)
    assert public == "https://gw.example/v1" and remember_url("https://plain.example") == "https://plain.example"
    env = credentials_environment([public])  # the public form is enough in the same process
    assert url_with_credentials(public, env=env) == url and URL_CREDENTIALS_ENV in env
