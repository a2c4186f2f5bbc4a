"""The data-side CLI: datasets, show, runs (as a user runs it: a real subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PERSOBENCH_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "persobench", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def test_show_sample_prints_two_annotated_samples_and_prompts(tmp_path: Path) -> None:
    result = cli("show", "sample", "--limit", "2", home=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.count("=== sample ") == 2 and "=== sample 2/2: sample:" in out
    assert out.count("<system>") == 2 and out.count("<user>") == 2
    assert "[context]" in out and "[reference]" in out
    assert "Participant Personas:" in out and "family paper" in out  # the paper's prompt by default
    ours = cli("show", "sample", "--limit", "1", "--template", "persobench", home=tmp_path).stdout
    assert '{"response": "<your reply>"}' in ours and "family persobench" in ours
    local = cli("show", "sample", "--limit", "1", "--model", "local:smollm2", home=tmp_path).stdout
    assert "<system>" not in local and "paper-open vanilla" in local and "(in 110 words or less)." in local



def test_show_with_a_preset_prints_what_its_runs_send(tmp_path: Path) -> None:
    """A -vllm preset sends paper-open (raw text); Gemini one user message starting with the system text."""
    vllm = cli("show", "sample", "--limit", "1", "--model", "gemma-7b-it-vllm", home=tmp_path).stdout
    assert "paper-open vanilla" in vllm and "<system>" not in vllm
    gemini = cli("show", "sample", "--limit", "1", "--model", "gemini-1.5-pro", "--format", "json", home=tmp_path)
    messages = json.loads(gemini.stdout)[0]["messages"]
    assert [m["role"] for m in messages] == ["user"]
    assert messages[0]["content"].startswith("You are a helpful response generator to output JSON.\n\nI will provide")


def test_show_json_is_machine_readable(tmp_path: Path) -> None:
    result = cli("show", "sample", "--limit", "3", "--mode", "cot", "--format", "json", home=tmp_path)
    items = json.loads(result.stdout)
    assert len(items) == 3 and items[0]["messages"][0]["role"] == "system"
    assert '"reasoning"' in items[0]["messages"][1]["content"]
    assert set(items[0]) == {"sample", "messages"} and items[0]["sample"]["id"].startswith("sample:")
    # Exactly the messages a run would send: the same text the generation plan builds.
    from persobench.generation import GenerationConfig, plan_generation
    from persobench.store.run_store import RunStore

    plan = plan_generation(GenerationConfig(model="openai:gpt-4o-mini", mode="cot", limit=3), store=RunStore(tmp_path))
    assert [item["messages"] for item in items] == plan.messages
    raw = json.loads(cli("show", "sample", "--limit", "3", "--template", "paper-open", "--format", "json",
                         home=tmp_path).stdout)
    assert [[m["role"] for m in item["messages"]] for item in raw] == [["user"]] * 3


def test_datasets_lists_sizes(tmp_path: Path) -> None:
    result = cli("datasets", "--format", "json", home=tmp_path)
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert rows["sample"]["samples"] == "30" and rows["sample"]["kind"] == "builtin"
    assert rows["pec-hub"]["kind"] == "hub"


def test_unknown_dataset_is_a_one_line_error(tmp_path: Path) -> None:
    result = cli("show", "nope", home=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("error: unknown dataset 'nope'") and "sample" in result.stderr


def test_runs_lists_store_and_says_when_empty(tmp_path: Path) -> None:
    empty = cli("runs", home=tmp_path)
    assert empty.returncode == 0 and "no runs" in empty.stdout
    from persobench.store.run_store import RunManifest, RunStore

    RunStore(tmp_path).create(RunManifest(run_id="r1", dataset="sample", sample_ids=("sample:0",),
                                          model={"provider": "baseline", "model": "reference"}, mode="vanilla",
                                          template="vanilla", template_hash="h"))
    listed = cli("runs", home=tmp_path)
    assert "r1" in listed.stdout and "baseline:reference" in listed.stdout
