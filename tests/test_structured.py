"""Structured output (``--structured``) through the real paths: the reply schema, OpenAI-compatible
servers (a strict json_schema server and one that rejects that form the way llama-cpp-python's
server does), Anthropic's output_config, the run's identity (cache key, run id, protocol, label),
and the CLI / models-file switches. Local constrained decoding is in test_local_batching.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from persobench.generation import GenerationConfig, RetryPolicy, RunAborted, plan_generation, run_generation
from persobench.prompts.protocol import protocol_of
from persobench.providers import GenerationParams, Request, make_provider
from persobench.providers.spec import ModelSpec
from persobench.store.run_store import RunStore
from persobench.core.structured import reply_schema
from tests.fakes import reply
from tests.fakes.fixtures import anthropic_server, openai_server  # noqa: F401
from tests.fakes.servers import FakeLLMServer, requested_schema

REPO = Path(__file__).resolve().parents[1]
FAST = RetryPolicy(base_delay=0.01, max_delay=0.05, timeout=30.0)


def _forms(server: FakeLLMServer) -> list[str | None]:
    return [(r.body.get("response_format") or {}).get("type") for r in server.requests]


def _statuses(run) -> dict[str, int]:
    return run.read_table("generations")["status"].value_counts().to_dict()


# ---------------------------------------------------------------------------------------------
# the schema


@pytest.mark.parametrize("mode, fields", [("vanilla", ["response"]), ("cot", ["reasoning", "response"])])
def test_reply_schema_bounds_every_string_within_the_budget(mode, fields):
    schema = reply_schema(mode, 110 if mode == "vanilla" else 220)
    assert schema["type"] == "object" and schema["required"] == fields
    assert schema["additionalProperties"] is False and list(schema["properties"]) == fields
    bounds = [p["maxLength"] for p in schema["properties"].values()]
    assert all(p["type"] == "string" for p in schema["properties"].values())
    # Together the strings fit in the budget at 3 characters per token, scaffolding aside.
    budget = 110 if mode == "vanilla" else 220
    assert 40 <= min(bounds) and sum(bounds) <= 3 * budget
    assert reply_schema(mode, 2000)["properties"]["response"]["maxLength"] > max(bounds)
    with pytest.raises(ValueError, match="unknown mode"):
        reply_schema("json", 100)


# ---------------------------------------------------------------------------------------------
# OpenAI-compatible servers


def test_openai_structured_run_sends_strict_json_schema(openai_server, tmp_path):
    run = run_generation(dataset="sample", model="openai:fake", base_url=openai_server.base_url, home=tmp_path,
                         limit=4, mode="cot", structured=True, retry=FAST, concurrency=2)
    assert _statuses(run) == {"ok": 4}
    assert _forms(openai_server) == ["json_schema"] * 4
    for seen in openai_server.requests:
        fmt = seen.body["response_format"]
        assert fmt["json_schema"]["strict"] is True and fmt["json_schema"]["name"] == "persobench_reply"
        assert fmt["json_schema"]["schema"] == reply_schema("cot", 220)
    frame = run.read_table("generations")
    assert all(len(text) <= reply_schema("cot", 220)["properties"]["response"]["maxLength"] for text in frame["response"])
    # The run says what it is: parameters, protocol, label.
    assert run.manifest.parameters["structured"] is True
    assert protocol_of(run.manifest).structured is True
    assert run.manifest.model_label == "openai:fake +structured"


def test_structured_is_its_own_configuration(openai_server, tmp_path):
    store = RunStore(tmp_path)
    base = GenerationConfig(dataset="sample", model="openai:fake", base_url=openai_server.base_url, limit=3)
    plain = plan_generation(base, store=store)
    structured = plan_generation(GenerationConfig(**{**base.__dict__, "structured": True}), store=store)
    assert plain.run_id != structured.run_id
    assert set(plain.keys).isdisjoint(structured.keys)
    assert "structured" not in plain.manifest.parameters and protocol_of(plain.manifest).structured is False
    # a plain run's cached replies are never served to the structured one
    run_generation(base, store=store, retry=FAST)
    assert len(plan_generation(GenerationConfig(**{**base.__dict__, "structured": True}), store=store).hits) == 0
    # batch size is a speed setting, not a configuration
    batched = plan_generation(GenerationConfig(**{**base.__dict__, "batch_size": 4}), store=store)
    assert batched.run_id == plain.run_id and batched.keys == plain.keys


def test_baselines_ignore_structured(tmp_path):
    store = RunStore(tmp_path)
    plain = plan_generation(GenerationConfig(model="baseline:reference", limit=3), store=store)
    asked = plan_generation(GenerationConfig(model="baseline:reference", limit=3, structured=True), store=store)
    assert asked.run_id == plain.run_id and asked.keys == plain.keys and asked.params.response_schema is None


def test_llama_cpp_python_style_server_is_asked_json_schema_once(tmp_path, monkeypatch):
    """llama-cpp-python's server answers the json_schema form with HTTP 500: the first structured
    request finds out, every other one (in flight at the same time or later) uses json_object."""
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    with FakeLLMServer("openai", response_formats=("json_object",), latency=0.05) as server:
        run = run_generation(dataset="sample", model="openai:fake", base_url=server.base_url, home=tmp_path,
                             limit=6, structured=True, retry=FAST, concurrency=4)
        assert _statuses(run) == {"ok": 6}
        assert _forms(server).count("json_schema") == 1 and _forms(server).count("json_object") == 6
        assert run.manifest.extra["usage"]["requests"] == 6  # the fallback is not a retry
        fallback = [r for r in server.requests if _forms(server)[r.index] == "json_object"]
        assert all(requested_schema(r.body) == reply_schema("vanilla", 110) for r in fallback)
        # remembered for the rest of the process: a later run never sends json_schema again
        server.reset_records()
        run_generation(dataset="sample", model="openai:fake", base_url=server.base_url, home=tmp_path,
                       limit=6, seed=1, structured=True, retry=FAST)
        assert "json_schema" not in _forms(server) and _forms(server)


def test_a_server_that_stops_taking_the_learned_form_is_asked_the_other_one(tmp_path, monkeypatch):
    """The form a server takes is learned per base URL for the process; the URL can come to name
    another server (a local port reused by another backend, an operator swapping vLLM for
    llama-cpp-python in a long-lived app). A rejection of the learned json_schema form is then learned
    again, not failed on every sample: in the suite, an earlier test's server on the same port made
    this file's llama-cpp test fail all six samples as api_error."""
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    with FakeLLMServer("openai", latency=0.05) as server:  # takes both forms: json_schema is learned
        first = run_generation(dataset="sample", model="openai:fake", base_url=server.base_url, home=tmp_path,
                               limit=3, structured=True, retry=FAST)
        assert _statuses(first) == {"ok": 3} and set(_forms(server)) == {"json_schema"}
        server.response_formats = ("json_object",)  # the same URL now answers like llama-cpp-python
        server.reset_records()
        # another store, so no reply comes from the first run's cache; what was learned is the process's
        run = run_generation(dataset="sample", model="openai:fake", base_url=server.base_url,
                             home=tmp_path / "other", limit=6, structured=True, retry=FAST, concurrency=4)
        assert _statuses(run) == {"ok": 6}
        assert _forms(server).count("json_object") == 6 and 1 <= _forms(server).count("json_schema") <= 4
        assert run.manifest.extra["usage"]["requests"] == 6  # the switch is not a retry


def test_models_file_names_the_form_so_json_schema_is_never_sent(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    with FakeLLMServer("openai", response_formats=("json_object",)) as server:
        models = tmp_path / "models.toml"
        models.write_text(f'[models.llamacpp]\nspec = "openai:fake"\nbase_url = "{server.base_url}"\n'
                          'structured = true\nstructured_format = "json_object"\n')
        run = run_generation(dataset="sample", model="llamacpp", models_file=str(models), home=tmp_path,
                             limit=3, retry=FAST)
        assert _statuses(run) == {"ok": 3}
        assert _forms(server) == ["json_object"] * 3  # structured from the file, in the declared form
        assert run.manifest.model_label == "llamacpp +structured"


def test_models_file_rejects_unknown_forms(tmp_path):
    from persobench.providers.models_registry import resolve_model
    from persobench.errors import ConfigurationError

    models = tmp_path / "models.toml"
    models.write_text('[models.x]\nspec = "openai:m"\nstructured_format = "grammar"\n')
    with pytest.raises(ConfigurationError, match="structured_format must be one of json_schema, json_object"):
        resolve_model("x", models_file=str(models))
    models.write_text('[models.x]\nspec = "openai:m"\nstructured = "yes"\n')
    with pytest.raises(ConfigurationError, match="structured must be true or false"):
        resolve_model("x", models_file=str(models))


def test_server_taking_no_form_fails_fast_without_six_retries(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    with FakeLLMServer("openai", response_formats=()) as server:
        with pytest.raises(RunAborted, match="neither response_format form") as info:
            run_generation(dataset="sample", model="openai:fake", base_url=server.base_url, home=tmp_path,
                           limit=3, structured=True, retry=FAST, concurrency=1, fail_fast_after=3)
        # one json_schema probe, then one json_object request per sample: no 5xx retries
        assert _forms(server).count("json_schema") == 1 and _forms(server).count("json_object") == 3
        assert _statuses(info.value.run) == {"api_error": 3}


def test_a_server_ignoring_the_schema_shows_failures_not_a_crash(openai_server, tmp_path):
    openai_server.script = lambda info: reply("Sure! Here is my reply: hello there.")
    run = run_generation(dataset="sample", model="openai:fake", base_url=openai_server.base_url, home=tmp_path,
                         limit=3, structured=True, retry=FAST)
    assert run.manifest.status == "completed"
    statuses = _statuses(run)
    assert "ok" not in statuses and sum(statuses.values()) == 3


# ---------------------------------------------------------------------------------------------
# Anthropic


def test_anthropic_structured_uses_output_config(anthropic_server):
    import asyncio

    provider = make_provider(ModelSpec("anthropic", "claude-x", base_url=anthropic_server.base_url))
    schema = reply_schema("cot", 220)
    request = Request(({"role": "system", "content": "JSON only."}, {"role": "user", "content": "Hi"}),
                      GenerationParams(max_tokens=220, response_schema=schema))

    async def go():
        try:
            return await provider.generate(request)
        finally:
            await provider.aclose()

    completion = asyncio.run(go())
    [seen] = anthropic_server.requests
    fmt = seen.body["output_config"]["format"]
    assert fmt["type"] == "json_schema"
    sent = fmt["schema"]
    assert sent["required"] == ["reasoning", "response"] and sent["additionalProperties"] is False
    # the API does not enforce maxLength: the SDK moves the bound into the description
    assert "maxLength" not in sent["properties"]["response"]
    assert str(schema["properties"]["response"]["maxLength"]) in sent["properties"]["response"]["description"]
    assert set(json.loads(completion.text)) == {"reasoning", "response"}


# ---------------------------------------------------------------------------------------------
# CLI


def test_cli_structured_dry_run(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "persobench", "--home", str(tmp_path), "run", "--model", "openai:m",
         "--base-url", "http://127.0.0.1:9/v1", "--limit", "2", "--structured", "--dry-run"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "structured output: on" in out.stdout and '"maxLength"' in out.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "persobench", "--home", str(tmp_path), "run", "--model", "local:smollm2",
         "--batch-size", "0", "--dry-run"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert bad.returncode == 2 and "batch_size must be at least 1" in bad.stderr
