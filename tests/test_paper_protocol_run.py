"""The paper's protocol as a run: default templates, no chat template for local models, manifest.

A tiny Llama model and word-level tokenizer are built in code and saved to a folder, then run as
``local:<folder>`` through the real loading path; a forward pre-hook on the loaded model records
the exact token ids it receives.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from persobench.datasets import load_dataset
from persobench.generation import plan_generation, run_generation
from persobench.prompts.templates import build_messages, get_template
from persobench.errors import ConfigurationError
from persobench.store.run_store import RunStore

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    torch = pytest.importorskip("torch")
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    texts = []
    for sample in load_dataset("sample", limit=2):
        for name in ("paper-open", "persobench"):
            texts += [m["content"] for m in build_messages(sample, get_template(name, "vanilla"))]
    words = sorted({w for text in texts for w in re.findall(r"\w+|[^\w\s]+", text)})
    specials = ["<unk>", "<s>", "</s>", "<|user|>", "<|system|>", "<|assistant|>", "<|end|>"]
    vocab = {token: i for i, token in enumerate(specials + words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", vocab["<s>"])])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                        additional_special_tokens=specials[3:])
    tokenizer.chat_template = CHAT_TEMPLATE
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=2048, bos_token_id=vocab["<s>"], eos_token_id=vocab["</s>"],
    ))
    folder = tmp_path_factory.mktemp("tiny-llama")
    tokenizer.save_pretrained(folder)
    model.save_pretrained(folder)
    return folder


def _record_inputs(folder: Path) -> list[list[int]]:
    """Load the model the way the provider does and record every input_ids it is given."""
    from persobench.providers import local

    # as a paper-protocol run loads it: float32 (the paper's local mode)
    options = local.local_mode_options({}, paper_protocol=True)
    loaded = local.load_model(local.resolve_local_model(str(folder), options), options)
    seen: list[list[int]] = []

    def hook(module, args, kwargs):  # noqa: ANN001
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None and ids.shape[1] > 1:  # the prompt pass, not the one-token decoding steps
            seen.append(ids[0].tolist())

    loaded.model.register_forward_pre_hook(hook, with_kwargs=True)
    return seen


def test_local_model_gets_paper_open_text_without_a_chat_template(tiny_model: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    seen = _record_inputs(tiny_model)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    sample = load_dataset("sample", limit=1)[0]
    run = run_generation(dataset="sample", model=f"local:{tiny_model}", limit=1, max_tokens=2, home=tmp_path)
    prompt = build_messages(sample, get_template("paper-open", "vanilla"))
    assert prompt == [{"role": "user", "content": prompt[0]["content"]}]  # one raw string, no system message
    # What the text-generation pipeline fed the model: the string tokenized as it is (BOS added).
    expected = tokenizer(prompt[0]["content"])["input_ids"]
    assert seen[-1] == expected and expected[0] == tokenizer.bos_token_id
    assert tokenizer.unk_token_id not in expected  # every word of the prompt is its own token
    assert tokenizer.convert_tokens_to_ids("<|user|>") not in seen[-1]
    manifest = run.manifest
    assert (manifest.template, manifest.template_family, manifest.chat_template) == ("paper-open", "paper", False)
    assert manifest.parameters["chat_template"] is False
    on_disk = json.loads((run.path / "manifest.json").read_text())
    assert on_disk["template"] == "paper-open" and on_disk["chat_template"] is False

    # --chat-template on: the tokenizer's template wraps the same text; another run, other cache keys.
    wrapped = run_generation(dataset="sample", model=f"local:{tiny_model}", limit=1, max_tokens=2, home=tmp_path,
                             chat_template=True)
    chat_ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, return_dict=True)["input_ids"]
    assert seen[-1] == list(chat_ids)
    assert seen[-1][0] == tokenizer.convert_tokens_to_ids("<|user|>")
    assert wrapped.run_id != run.run_id and wrapped.manifest.chat_template is True
    assert wrapped.read_table("generations")["cached"].tolist() == [False]


def test_default_templates_follow_the_provider_and_chat_apis_reject_raw_text(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    from persobench.generation import GenerationConfig

    api = plan_generation(GenerationConfig(model="openai:gpt-4o-mini", limit=1, mode="cot"), store=store)
    assert (api.template.name, api.template.mode, api.manifest.template_family) == ("paper", "cot", "paper")
    assert api.messages[0][0] == {"role": "system", "content": "You are a helpful response generator to output JSON."}
    assert api.manifest.chat_template is None and "chat_template" not in api.manifest.parameters
    assert api.paper_style == "closed"
    local = plan_generation(GenerationConfig(model="local:smollm2", limit=1), store=store)
    assert (local.template.name, local.manifest.chat_template, local.paper_style) == ("paper-open", False, "open")
    ours = plan_generation(GenerationConfig(model="local:smollm2", limit=1, template="persobench"), store=store)
    assert ours.manifest.chat_template is True and ours.manifest.template_family == "persobench"
    assert ours.keys != local.keys
    with pytest.raises(ConfigurationError, match="--chat-template off needs a local model"):
        plan_generation(GenerationConfig(model="openai:gpt-4o-mini", limit=1, chat_template=False), store=store)
    # paper-open to a chat API: one user message, no system message.
    open_api = plan_generation(GenerationConfig(model="openai:gpt-4o-mini", limit=1, template="paper-open"),
                               store=store)
    assert [m["role"] for m in open_api.messages[0]] == ["user"] and open_api.paper_style == "open"


def test_a_runs_prompt_is_shown_with_its_own_template() -> None:
    """Imported runs store no prompt: the Failures page rebuilds it with the run's template (an
    imported Gemma failure with paper-open), never with another one."""
    from persobench.app.dialogues import prompt_text

    sample = load_dataset("sample", limit=1)[0]
    text, note = prompt_text(None, "sample", sample.id, "cot", template="paper-open")
    assert text == "[USER]\n" + build_messages(sample, get_template("paper-open", "cot"))[0]["content"]
    assert "paper-open" in note and "(in 110 words or less)." in text and "[SYSTEM]" not in text
    closed, _ = prompt_text(None, "sample", sample.id, "vanilla", template="paper")
    assert closed.startswith("[SYSTEM]\nYou are a helpful response generator to output JSON.")
    ours, note = prompt_text(None, "sample", sample.id, "vanilla", template="cot")  # an old run's name
    assert "<your reply>" in ours and "persobench" in note
    stored, note = prompt_text("the stored user message", "sample", sample.id, "vanilla", template="paper-open")
    assert (stored, note) == ("the stored user message", "")
    missing, note = prompt_text(None, "sample", sample.id, "vanilla", template="my-file.toml")
    assert missing == "" and "my-file.toml" in note
    # the Gemini preset stores one user message that already starts with the system text: shown once
    folded = "You are a helpful response generator to output JSON.\n\nI will provide you ..."
    shown, _ = prompt_text(folded, "sample", sample.id, "vanilla", template="paper")
    assert shown == folded and shown.count("You are a helpful") == 1


# ---- the default parse policy follows the template family (issue 11) ---------------------------


def test_default_policy_follows_the_template_family(tmp_path: Path) -> None:
    from persobench.generation import GenerationConfig
    from persobench.prompts.protocol import paper_protocol, protocol_of

    store = RunStore(tmp_path)
    for model, mode in (("openai:gpt-4o-mini", "vanilla"), ("local:smollm2", "cot"), ("baseline:reference", "cot")):
        plan = plan_generation(GenerationConfig(model=model, mode=mode, limit=1), store=store)
        assert plan.manifest.parameters["policy"] == "paper" and plan.config.policy == "paper"
        assert protocol_of(plan.manifest) == paper_protocol(mode), (model, mode)
    ours = plan_generation(GenerationConfig(model="openai:gpt-4o-mini", template="persobench", limit=1), store=store)
    assert ours.manifest.parameters["policy"] == "robust" and ours.config.policy == "robust"
    explicit = plan_generation(GenerationConfig(model="openai:gpt-4o-mini", policy="robust", limit=1), store=store)
    assert explicit.manifest.parameters["policy"] == "robust"
    assert not protocol_of(explicit.manifest).is_paper

    # The app's planner (New run) and the demo leave the policy to the same rule.
    from persobench.generation.demo import demo_configs
    from persobench.jobs import LaunchChoice, launch_steps, plan_launch

    [row] = plan_launch(tmp_path, [LaunchChoice("sample", "baseline:reference", "cot")], limit=2)
    paper_run = plan_generation(GenerationConfig(model="baseline:reference", mode="cot", limit=2, policy="paper"),
                                store=store)
    assert row["run_id"] == paper_run.run_id
    [step, _score] = launch_steps([row], limit=2)
    assert step.request.config.policy is None  # the CLI's default is the same rule
    # The demo uses PersoBench's template on purpose (docs/app.md, "The demo"): the same rule gives it the
    # robust policy, and its plain runs share one protocol with the baselines.
    demo = [plan_generation(config, store=store) for config in demo_configs(limit=1, local=True)]
    assert {plan.manifest.parameters["policy"] for plan in demo} == {"robust"}
    plain = {protocol_of(plan.manifest) for plan in demo if plan.params.response_schema is None}
    assert len(plain) == 2 and {p.mode for p in plain} == {"vanilla", "cot"}  # one per mode


def test_a_default_cli_run_lands_on_the_published_runs_board(tmp_path: Path, monkeypatch, capsys) -> None:
    """``run`` with every default but dataset, model and server, next to the paper's published runs
    of that dataset: one protocol, one board (CLI leaderboard)."""
    from persobench.cli import main
    from tests.fakes import FakeLLMServer
    from tests.fakes.fixtures import OPENAI_SECRET
    from tests.test_importer import make_paper_folder

    folder = make_paper_folder(tmp_path / "paper")
    monkeypatch.setenv("PERSOBENCH_REFERENCE", str(folder))
    monkeypatch.delenv("PERSOBENCH_PROMPTS", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_SECRET)
    home = str(tmp_path / "home")
    assert main(["--home", home, "import-persobench", str(folder)]) == 0
    with FakeLLMServer("openai") as server:
        assert main(["--home", home, "run", "--dataset", "focus", "--model", "openai:my-model",
                     "--base-url", server.base_url, "--no-progress"]) == 0
    assert main(["--home", home, "score", "--metrics", "bleu,dist1", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["--home", home, "leaderboard", "--dataset", "focus", "--mode", "vanilla", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    boards = {(r["model"], r["board"]) for r in data["metrics"]}
    assert {model for model, _ in boards} == {"gpt-x", "open-7b", "openai:my-model"}
    assert len({board for _, board in boards}) == 1, boards
    from persobench.prompts.protocol import paper_protocol

    assert {board for _, board in boards} == {paper_protocol("vanilla").label} and len(data["protocols"]) == 1
    capsys.readouterr()
    assert main(["--home", home, "run", "--dataset", "focus", "--model", "openai:my-model", "--base-url",
                 "http://127.0.0.1:9/v1", "--dry-run"]) == 0
    assert "parse policy: paper" in capsys.readouterr().out  # the dry run says which policy a run gets
    capsys.readouterr()
    assert main(["--home", home, "leaderboard", "--dataset", "focus", "--mode", "vanilla"]) == 0
    table = capsys.readouterr().out
    assert table.count(paper_protocol("vanilla").label) == 1 and "openai:my-model" in table and "gpt-x" in table


# ---- local models under the paper protocol: float32, one prompt at a time (issue 26) ------------


def test_local_models_default_to_the_notebooks_float32_one_at_a_time_under_the_paper_protocol(tmp_path: Path) -> None:
    """open_source_models.ipynb ran the open models through the text-generation pipeline in float32,
    one prompt per call: the paper protocol's default for local models. ``batched-bf16`` stays a
    named option, with a protocol, run id and cache key of its own; other protocols keep batching."""
    from persobench.generation import GenerationConfig
    from persobench.prompts.protocol import paper_protocol, protocol_of
    from persobench.providers.local import DEFAULT_BATCH_SIZE, LocalProvider

    store = RunStore(tmp_path)
    paper = plan_generation(GenerationConfig(model="local:smollm2", limit=1), store=store)
    options = paper.manifest.model["options"]
    assert (options["dtype"], options["batch_size"], options["local_mode"]) == ("float32", 1, "paper")
    assert protocol_of(paper.manifest) == paper_protocol("vanilla")  # float32 is the paper's: same board
    assert LocalProvider(paper.spec).batch_size == 1

    fast = plan_generation(GenerationConfig(model="local:smollm2", limit=1, options={"local_mode": "batched-bf16"}),
                           store=store)
    fast_options = fast.manifest.model["options"]
    assert (fast_options["dtype"], fast_options["batch_size"]) == ("bfloat16", DEFAULT_BATCH_SIZE)
    proto = protocol_of(fast.manifest)
    assert proto.dtype == "bfloat16" and not proto.is_paper and proto.label.endswith(" · dtype=bfloat16")
    assert fast.run_id != paper.run_id and fast.keys != paper.keys  # never served the float32 replies

    explicit = plan_generation(GenerationConfig(model="local:smollm2", limit=1, batch_size=4), store=store)
    assert explicit.manifest.model["options"]["batch_size"] == 4 and explicit.run_id == paper.run_id

    ours = plan_generation(GenerationConfig(model="local:smollm2", template="persobench", limit=1), store=store)
    assert "dtype" not in ours.manifest.model.get("options", {})
    assert LocalProvider(ours.spec).batch_size == DEFAULT_BATCH_SIZE
    from persobench.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="local_mode must be one of"):
        plan_generation(GenerationConfig(model="local:smollm2", limit=1, options={"local_mode": "fast"}), store=store)
