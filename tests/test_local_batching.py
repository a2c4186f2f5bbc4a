"""The local (transformers) provider: grammar-constrained decoding for ``--structured`` (llguidance)
and batched generation (``--batch-size``), through the real paths: the CLI and ``run_generation``
with ``local:<folder>`` naming a tiny causal LM built in code and saved to disk, the real response
cache, and SmolLM2 (the offline default) for batched == unbatched on the demo's samples.

The runner's batch path is also driven by a fake batching provider registered like any other, to
check what a model cannot be made to do on cue (per-sample errors, retries, cancel between batches).
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest

from persobench.cli import main as cli_main
from persobench.generation import RetryPolicy, run_generation
from persobench.errors import ErrorKind, ProviderError
from persobench.providers import PROVIDERS, Completion, GenerationParams, Request
from persobench.providers.base import BatchingProvider
from persobench.store.run_store import RunStore
from persobench.core.structured import reply_schema
from tests.fakes.tiny_models import build_tiny_causal_lm

FAST = RetryPolicy(base_delay=0.01, max_delay=0.05, timeout=30.0)
#: The demo's samples: ``python -m persobench demo`` answers the first 10 of ``sample`` (seed 0).
DEMO_LIMIT = 10
#: Statuses a well-formed reply can have (a random model may write an empty reply or a refusal word).
FORMED = {"ok", "empty", "refused"}


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory) -> Path:
    return build_tiny_causal_lm(tmp_path_factory.mktemp("tiny-lm"))


def _matches(text: str, schema: dict) -> dict:
    """``text`` parsed, after checking it against the reply schema (keys in order, strings, bounds)."""
    data = json.loads(text)
    assert list(data) == schema["required"], text
    for key, prop in schema["properties"].items():
        assert isinstance(data[key], str) and len(data[key]) <= prop["maxLength"], (key, text)
    return data


def _by_sample(run) -> dict[str, dict]:
    frame = run.read_table("generations")
    return {row["sample_id"]: row for row in frame.to_dict("records")}


# ---------------------------------------------------------------------------------------------
# constrained decoding (--structured)


@pytest.mark.parametrize("mode", ["vanilla", "cot"])
def test_cli_structured_run_on_a_tiny_model_always_closes_the_object(tiny_lm, tmp_path, mode):
    """At the paper's budgets (110 / 220 tokens), every reply of a random-weight model parses and
    matches the schema: the grammar, not the model, closes the object in time."""
    assert cli_main(["--home", str(tmp_path), "run", "--model", f"local:{tiny_lm}", "--structured", "--mode", mode,
                     "--limit", "6", "--batch-size", "4", "--no-progress"]) == 0
    (run,) = RunStore(tmp_path).runs()
    assert run.manifest.parameters["structured"] is True
    max_tokens = run.manifest.parameters["max_tokens"]
    schema = reply_schema(mode, max_tokens)
    rows = _by_sample(run)
    assert len(rows) == 6
    for row in rows.values():
        _matches(row["raw_text"], schema)
        assert row["finish_reason"] == "stop" and row["completion_tokens"] <= max_tokens
        assert row["status"] in FORMED, row
    assert run.manifest.model_label.endswith("+structured")


@pytest.mark.parametrize("mode, max_tokens", [("vanilla", 24), ("cot", 40), ("vanilla", 300)])
def test_structured_replies_fit_tight_and_loose_budgets(tiny_lm, tmp_path, mode, max_tokens):
    """A budget barely above the scaffolding still closes the object; a large one fills the strings
    only up to their maxLength. Raw text (paper-open, no chat template) and batches of 3."""
    run = run_generation(dataset="sample", model=f"local:{tiny_lm}", mode=mode, structured=True, home=tmp_path,
                         limit=4, max_tokens=max_tokens, batch_size=3)
    assert run.manifest.chat_template is False
    schema = reply_schema(mode, max_tokens)
    for row in _by_sample(run).values():
        _matches(row["raw_text"], schema)
        assert row["completion_tokens"] <= max_tokens and row["finish_reason"] == "stop"


def test_any_other_schema_is_enforced_as_json_schema(tiny_lm):
    """A schema that is not an object of bounded strings is compiled as JSON Schema as it is."""
    from persobench.providers import make_provider, parse_spec

    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99},
                                               "ok": {"type": "boolean"}},
              "required": ["n", "ok"], "additionalProperties": False}
    provider = make_provider(parse_spec(f"local:{tiny_lm}"))
    params = GenerationParams(max_tokens=40, response_schema=schema)
    messages = [({"role": "user", "content": f"question {k}"},) for k in range(3)]
    results = asyncio.run(provider.generate_batch([Request(m, params) for m in messages]))
    for result in results:
        data = json.loads(result.text)
        assert set(data) == {"n", "ok"} and 0 <= data["n"] <= 99 and isinstance(data["ok"], bool)


def test_structured_without_llguidance_fails_each_sample_in_one_line(tiny_lm, monkeypatch):
    import sys

    from persobench.providers import make_provider, parse_spec

    monkeypatch.setitem(sys.modules, "llguidance", None)  # as if the package were not installed
    monkeypatch.setitem(sys.modules, "llguidance.hf", None)
    provider = make_provider(parse_spec(f"local:{tiny_lm}"))
    params = GenerationParams(max_tokens=30, response_schema=reply_schema("vanilla", 30))
    results = asyncio.run(provider.generate_batch([Request(({"role": "user", "content": "hi"},), params)] * 2))
    assert all(isinstance(r, ProviderError) and r.kind is ErrorKind.BAD_REQUEST for r in results)
    assert "pip install llguidance" in str(results[0]) and "\n" not in str(results[0])


# ---------------------------------------------------------------------------------------------
# batched generation == one at a time


@pytest.mark.parametrize("chat_template, structured, max_tokens", [
    (False, False, 24), (True, False, 24), (False, True, 48), (True, True, 48),
])
def test_tiny_model_batched_equals_unbatched(tiny_lm, tmp_path, chat_template, structured, max_tokens):
    """Greedy replies are the same whether the demo's samples go one at a time or 4 per pass (left
    padding, attention mask), in raw-text and chat-template modes, with and without the grammar."""
    runs = {
        size: run_generation(dataset="sample", model=f"local:{tiny_lm}", home=tmp_path / f"b{size}",
                             limit=DEMO_LIMIT, max_tokens=max_tokens, chat_template=chat_template,
                             structured=structured, batch_size=size)
        for size in (1, 4)
    }
    one, four = (_by_sample(runs[size]) for size in (1, 4))
    assert set(one) == set(four) and len(one) == DEMO_LIMIT
    for sid in one:
        for column in ("raw_text", "completion_tokens", "finish_reason", "prompt_tokens"):
            assert one[sid][column] == four[sid][column], (sid, column)
    # The prompts differ in length, so the batches really were padded.
    assert len({row["prompt_tokens"] for row in four.values()}) > 1


@pytest.fixture
def one_torch_thread():
    """One torch thread while SmolLM2 generates: on a 2-core machine shared with other jobs, two
    threads waiting for each other at every matrix product made the same run 5 to 20 times slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.slow
@pytest.mark.parametrize("chat_template", [False, True])
@pytest.mark.usefixtures("one_torch_thread")
def test_smollm2_batched_equals_unbatched_on_the_demo_samples(tmp_path, chat_template):
    """SmolLM2 (the demo's model), paper-open raw text and its chat template, 24 new tokens, on the
    demo's first 5 samples: a full pass of 4 prompts of different lengths (left-padded) and a pass of
    one. (The 10 samples of the tiny model's test took twice as long on SmolLM2, 0.2 s per decoding
    step on one thread here, and showed nothing more.)"""
    limit = 5
    runs = {
        size: run_generation(dataset="sample", model="local:smollm2", home=tmp_path / f"b{size}", limit=limit,
                             max_tokens=24, chat_template=chat_template, batch_size=size)
        for size in (1, 4)
    }
    one, four = (_by_sample(runs[size]) for size in (1, 4))
    assert len(one) == len(four) == limit
    # 3 prompt lengths among 5 prompts: whichever 4 share the first pass, it was padded.
    assert len({row["prompt_tokens"] for row in four.values()}) >= 3
    different = [sid for sid in one if one[sid]["raw_text"] != four[sid]["raw_text"]]
    assert not different, [(one[s]["raw_text"], four[s]["raw_text"]) for s in different]


# ---------------------------------------------------------------------------------------------
# the runner's batch path, with a fake batching provider registered like any other


class FakeBatchingProvider:
    """Answers each request with its last message; remembers each call's size. A request whose
    prompt contains ``BAD`` fails alone (not retryable), one with ``FLAKY`` fails once (retryable)."""

    name = "batchfake"
    max_concurrency = 1
    sample_dependent = False
    key_env = None
    key_optional_with_base_url = False
    calls: list[int] = []
    singles: list[str] = []
    flaky_seen: set[str] = set()
    gate: threading.Event | None = None

    def __init__(self, spec, *, api_key=None, timeout=60.0):
        self.model = spec.model
        self.batch_size = int(spec.options.get("batch_size", 3))

    def check(self) -> None:
        pass

    def _answer(self, request: Request) -> Completion | ProviderError:
        text = request.messages[-1]["content"]
        sid = request.sample.id
        if "BAD" in self.model and sid.endswith("1"):
            return ProviderError(ErrorKind.BAD_REQUEST, f"bad sample {sid}")
        if "FLAKY" in self.model and sid not in self.flaky_seen:
            self.flaky_seen.add(sid)
            return ProviderError(ErrorKind.SERVER, "try again")
        return Completion(text=json.dumps({"response": f"reply to {sid}: {len(text)}"}), finish_reason="stop")

    async def generate_batch(self, requests):
        type(self).calls.append(len(requests))
        while self.gate is not None and not self.gate.is_set():  # cancellable, as a model's batch is
            await asyncio.sleep(0.01)
        return [self._answer(r) for r in requests]

    async def generate(self, request):
        type(self).singles.append(request.sample.id)
        result = self._answer(request)
        if isinstance(result, ProviderError):
            raise result
        return result

    async def aclose(self) -> None:
        pass


@pytest.fixture
def batchfake(monkeypatch):
    monkeypatch.setattr(PROVIDERS, "_entries", dict(PROVIDERS._entries))
    PROVIDERS.register("batchfake", FakeBatchingProvider)
    FakeBatchingProvider.calls, FakeBatchingProvider.singles, FakeBatchingProvider.flaky_seen = [], [], set()
    FakeBatchingProvider.gate = None
    yield FakeBatchingProvider


def test_runner_hands_batches_and_caches_each_sample(batchfake, tmp_path):
    assert isinstance(batchfake(type("S", (), {"model": "m", "options": {}})()), BatchingProvider)
    run = run_generation(dataset="sample", model="batchfake:m", home=tmp_path, limit=7, batch_size=3, retry=FAST)
    assert batchfake.calls == [3, 3] and batchfake.singles and len(batchfake.singles) == 1  # 7 = 3 + 3 + 1
    assert run.manifest.extra["usage"]["requests"] == 7
    assert set(_by_sample(run)) and all(r["status"] == "ok" for r in _by_sample(run).values())
    # Each sample has its own cache entry: the same run sends nothing, a larger one only the new samples.
    batchfake.calls.clear(), batchfake.singles.clear()
    again = run_generation(dataset="sample", model="batchfake:m", home=tmp_path, limit=7, batch_size=3, retry=FAST)
    assert batchfake.calls == [] and batchfake.singles == [] and again.manifest.extra["usage"]["cached"] == 7
    more = run_generation(dataset="sample", model="batchfake:m", home=tmp_path, limit=12, batch_size=3, retry=FAST)
    assert sum(batchfake.calls) + len(batchfake.singles) == 5 and more.manifest.extra["usage"]["cached"] == 7


def test_batch_errors_stay_with_their_sample_and_retryable_ones_are_retried_alone(batchfake, tmp_path):
    bad = run_generation(dataset="sample", model="batchfake:BAD", home=tmp_path, limit=8, batch_size=4, retry=FAST,
                         fail_fast_after=0)
    rows = _by_sample(bad)
    failed = {sid for sid, row in rows.items() if row["status"] != "ok"}
    assert failed == {sid for sid in rows if sid.endswith("1")} and all(rows[s]["status"] == "api_error" for s in failed)
    assert all(rows[s]["attempts"] == 1 for s in failed)  # a bad request is not retried
    batchfake.calls.clear(), batchfake.singles.clear()
    flaky = run_generation(dataset="sample", model="batchfake:FLAKY", home=tmp_path, limit=6, batch_size=3, retry=FAST)
    rows = _by_sample(flaky)
    assert all(r["status"] == "ok" for r in rows.values()) and batchfake.calls == [3, 3]
    assert sorted(batchfake.singles) == sorted(rows)  # each retried alone, through the retry loop
    assert all(r["attempts"] == 2 for r in rows.values())  # the batch's attempt counts


def test_cancel_between_batches_keeps_replies_and_resume_finishes(batchfake, tmp_path):
    cancel = threading.Event()

    def progress(info):
        if info.done >= 2:  # after the first batch is recorded, the second one hangs until cancelled
            batchfake.gate.clear()
            cancel.set()

    batchfake.gate = threading.Event()
    batchfake.gate.set()
    first = run_generation(dataset="sample", model="batchfake:m", home=tmp_path, limit=8, batch_size=2, retry=FAST,
                           progress=progress, cancel=cancel)
    assert first.manifest.status == "cancelled"
    done = len(_by_sample(first))
    assert done == 2 and batchfake.calls == [2, 2]  # the abandoned batch's samples stay pending
    batchfake.gate.set()
    batchfake.calls.clear()
    resumed = run_generation(dataset="sample", model="batchfake:m", home=tmp_path, limit=8, batch_size=2, retry=FAST)
    assert resumed.manifest.status == "completed" and resumed.manifest.extra["usage"]["cached"] == done
    assert sum(batchfake.calls) == 8 - done


def test_cancel_abandons_a_batch_in_flight(batchfake, tmp_path):
    """A cancel does not wait for a batch (a forward pass can take a minute): its samples stay pending."""
    batchfake.gate = threading.Event()  # never set: the batch hangs until cancelled
    cancel = threading.Event()
    timer = threading.Timer(0.5, cancel.set)
    timer.start()
    try:
        run = run_generation(dataset="sample", model="batchfake:m", home=tmp_path, limit=4, batch_size=4,
                             retry=FAST, cancel=cancel)
    finally:
        timer.cancel()
    assert run.manifest.status == "cancelled" and len(_by_sample(run)) == 0
