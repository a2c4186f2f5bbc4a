"""The paper's eight models as presets: they resolve, price dry runs, name their key variable, and
send the paper's prompt (checked on a real fake server)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from persobench.generation import GenerationConfig, plan_generation, run_generation
from persobench.providers.models_registry import resolve_model
from persobench.providers.presets import GEMINI_OPENAI_BASE_URL, PAPER_PRESETS, VLLM_BASE_URL
from persobench.providers import missing_key_env
from persobench.store.run_store import RunStore
from tests.fakes.fixtures import openai_server  # noqa: F401

REPO = Path(__file__).resolve().parents[1]


def test_the_eight_paper_models_resolve() -> None:
    expected = {
        "gpt-3.5-turbo": ("openai", "gpt-3.5-turbo"), "gpt-4-turbo": ("openai", "gpt-4-turbo"),
        "gpt-4o-mini": ("openai", "gpt-4o-mini"), "gemini-1.5-pro": ("openai", "gemini-1.5-pro"),
        "mistral-7b-instruct": ("local", "mistralai/Mistral-7B-Instruct-v0.2"),
        "qwen2-7b-instruct": ("local", "Qwen/Qwen2-7B-Instruct"), "gemma-7b-it": ("local", "google/gemma-7b-it"),
        "llama-3.1-8b-instruct": ("local", "meta-llama/Meta-Llama-3.1-8B-Instruct"),
    }
    for name, (provider, model) in expected.items():
        spec = resolve_model(name)
        assert (spec.provider, spec.model, spec.label) == (provider, model, name)
        if provider == "local":
            vllm = resolve_model(f"{name}-vllm")
            assert (vllm.provider, vllm.model, vllm.base_url) == ("openai", model, VLLM_BASE_URL)
            assert resolve_model(f"{name}-vllm", base_url="http://gpu:9000/v1").base_url == "http://gpu:9000/v1"
    gemini = resolve_model("gemini-1.5-pro")
    assert gemini.base_url == GEMINI_OPENAI_BASE_URL and gemini.api_key_env == "GEMINI_API_KEY"
    assert len(PAPER_PRESETS) == 12


def test_a_models_file_entry_wins_over_a_preset(tmp_path: Path) -> None:
    models = tmp_path / "models.toml"
    models.write_text('[models.gpt-4o-mini]\nspec = "openai:gpt-4o-mini-2024-07-18"\n')
    assert resolve_model("gpt-4o-mini", models_file=str(models)).model == "gpt-4o-mini-2024-07-18"


def test_dry_runs_estimate_cost_and_pick_the_papers_template(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    costs = {}
    for name in ("gpt-3.5-turbo", "gpt-4-turbo", "gpt-4o-mini", "gemini-1.5-pro", "gemma-7b-it", "gemma-7b-it-vllm"):
        plan = plan_generation(GenerationConfig(model=name, limit=4), store=store)
        costs[name] = plan.estimated_max_cost()
        assert plan.template.family == "paper"
        assert plan.template.name == ("paper-open" if name.startswith("gemma-7b-it") else "paper")
    assert costs["gemma-7b-it"] == 0 and costs["gemma-7b-it-vllm"] == 0
    assert 0 < costs["gpt-4o-mini"] < costs["gpt-3.5-turbo"] < costs["gemini-1.5-pro"] < costs["gpt-4-turbo"]
    plan = plan_generation(GenerationConfig(model="gpt-4-turbo", limit=4), store=store)
    # list prices: $10 in / $30 out per million tokens
    expected = (plan.estimated_prompt_tokens * 10 + 4 * 110 * 30) / 1e6
    assert costs["gpt-4-turbo"] == pytest.approx(expected, rel=1e-6)


def test_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert missing_key_env(resolve_model("gemini-1.5-pro")) == "GEMINI_API_KEY"
    assert missing_key_env(resolve_model("gpt-4o-mini")) == "OPENAI_API_KEY"
    assert missing_key_env(resolve_model("gemma-7b-it")) is None
    assert missing_key_env(resolve_model("gemma-7b-it-vllm")) is None  # a vLLM server takes no key
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("GEMINI_API_KEY", "OPENAI_API_KEY")}
    out = subprocess.run([sys.executable, "-m", "persobench", "--home", str(tmp_path), "run", "--model",
                          "gemini-1.5-pro", "--limit", "1", "--no-progress"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "error: missing API key for provider 'openai': set the environment variable GEMINI_API_KEY"]


def test_gemini_preset_sends_the_papers_prompt_with_its_own_key(openai_server, monkeypatch, tmp_path) -> None:  # noqa: F811
    monkeypatch.setenv("GEMINI_API_KEY", "gemini-test-key-123456")
    run = run_generation(dataset="sample", model="gemini-1.5-pro", base_url=openai_server.base_url, limit=2,
                         mode="cot", home=tmp_path)
    seen = openai_server.requests
    assert len(seen) == 2 and all(r.body["model"] == "gemini-1.5-pro" for r in seen)
    assert all(r.headers.get("authorization") == "Bearer gemini-test-key-123456" for r in seen)
    # closed_source_models.ipynb: contents="You are a helpful response generator to output JSON.\n\n" + prompt
    assert all([m["role"] for m in r.body["messages"]] == ["user"] and r.system == "" for r in seen)
    assert all(r.prompt.startswith("You are a helpful response generator to output JSON.\n\n"
                                   "I will provide you with a conversation context") for r in seen)
    assert run.manifest.template == "paper" and run.manifest.model["label"] == "gemini-1.5-pro"
    assert set(run.read_table("generations")["status"]) == {"ok"}


def test_vllm_presets_send_paper_open_as_raw_text_and_land_on_the_paper_board(openai_server, tmp_path) -> None:  # noqa: F811
    """The paper's text-generation pipeline got the paper-open prompt as raw text: a -vllm preset
    sends it to /v1/completions (the paper protocol); with --chat-template on it goes to the chat
    endpoint, where the server applies its chat template: another protocol, never the paper board."""
    from persobench import aggregate
    from persobench.prompts.templates import build_messages, get_template
    from persobench.prompts.protocol import paper_protocol, protocol_of

    raw = run_generation(dataset="sample", model="gemma-7b-it-vllm", base_url=openai_server.base_url, limit=2,
                         home=tmp_path)
    seen = openai_server.requests
    assert [r.path for r in seen] == ["/v1/completions"] * 2
    plan = plan_generation(GenerationConfig(model="gemma-7b-it-vllm", base_url=openai_server.base_url, limit=2),
                           store=RunStore(tmp_path))
    assert sorted(r.body["prompt"] for r in seen) == sorted(m[0]["content"] for m in plan.messages)  # any order
    assert plan.messages[0] == build_messages(plan.samples[0], get_template("paper-open", "vanilla"))
    assert "messages" not in seen[0].body and "completions_endpoint" not in seen[0].body
    assert raw.manifest.template == "paper-open" and raw.manifest.chat_template is False
    assert set(raw.read_table("generations")["status"]) == {"ok"}
    assert protocol_of(raw.manifest) == paper_protocol("vanilla")

    openai_server.reset_records()
    chat = run_generation(dataset="sample", model="gemma-7b-it-vllm", base_url=openai_server.base_url, limit=2,
                          home=tmp_path, chat_template=True)
    assert [r.path for r in openai_server.requests] == ["/v1/chat/completions"] * 2
    assert chat.run_id != raw.run_id and chat.manifest.chat_template is True
    assert protocol_of(chat.manifest).chat_template is True and not protocol_of(chat.manifest).is_paper
    assert protocol_of(chat.manifest).label.endswith(" · chat template")

    board = aggregate.leaderboard(aggregate.load_results(RunStore(tmp_path)))
    paper_rows = board[board["protocol"] == paper_protocol("vanilla").label]
    assert set(paper_rows["run_id"]) == {raw.run_id}
    assert chat.run_id in set(board["run_id"]) - set(paper_rows["run_id"])


def test_a_chat_template_never_puts_paper_open_on_the_paper_board() -> None:
    """Protocol of manifests as the store keeps them: a local paper-open run with its chat template
    on, or paper-open sent to a chat API, is not the paper's protocol; raw text is."""
    from persobench.prompts.protocol import Protocol, paper_protocol, protocol_of

    def manifest(provider: str, template: str, chat_template):
        return {"run_id": "r", "dataset": "focus", "sample_ids": ["focus:0"], "mode": "vanilla",
                "model": {"provider": provider, "model": "m"}, "template": template, "template_hash": "h",
                "template_family": "paper", "chat_template": chat_template,
                "parameters": {"temperature": 0.0, "max_tokens": 110, "policy": "paper"}}

    paper = paper_protocol("vanilla")
    assert protocol_of(manifest("local", "paper-open", False)) == paper
    assert protocol_of(manifest("openai", "paper", None)) == paper  # the closed models, as the paper ran them
    assert protocol_of(manifest("openai", "paper-open", False)) == paper  # a completions endpoint
    for wrapped in (manifest("local", "paper-open", True), manifest("openai", "paper-open", None)):
        protocol = protocol_of(wrapped)
        assert not protocol.is_paper and protocol.label != paper.label
        assert Protocol.from_label(protocol.label) == protocol
    assert protocol_of(manifest("local", "paper", False)).chat_template is False


def test_presets_command_lists_every_preset_with_its_prices(capsys) -> None:
    import json

    from persobench.cli import main

    assert main(["presets"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line.split() for line in lines[2:] if line and not line.startswith("Prices")}
    assert set(rows) == set(PAPER_PRESETS)
    assert rows["gpt-4-turbo"][3:5] == ["10.00", "30.00"] and rows["gpt-4o-mini"][3:5] == ["0.15", "0.60"]
    assert rows["gemini-1.5-pro"][5] == "GEMINI_API_KEY"
    assert rows["gemma-7b-it-vllm"][3:7] == ["0.00", "0.00", "–", "paper-open"]
    assert rows["gemma-7b-it-vllm"][7] == VLLM_BASE_URL
    assert main(["presets", "--format", "json"]) == 0
    data = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert data["gemini-1.5-pro"]["price_input_per_mtok"] == 1.25 and data["gemini-1.5-pro"]["template"] == "paper"
    assert data["gemini-1.5-pro"]["base_url"] == GEMINI_OPENAI_BASE_URL
    assert data["qwen2-7b-instruct"]["key_env"] is None and data["qwen2-7b-instruct"]["template"] == "paper-open"
