"""A run store for the app tests, built with the library itself (no hand-written tables).

* the built-in ``sample`` dataset answered by both baselines in vanilla and cot modes;
* the same dataset answered by a model behind the fake OpenAI-compatible server, scripted so that
  one reply is an injection attempt (``<script>``, ``<img onerror>``, a ``javascript:`` link, a
  markdown image) and some replies fail in every way the post-processing knows (truncated, invalid
  JSON, missing field, refused, API error);
* a user CSV dataset whose persona, context and reference carry the same injection, answered by
  the reference baseline;
* every run scored with the offline profile's lexical metrics (fast, no model), and the fake
  model's vanilla run also with ``persona_coverage`` (per-persona-sentence similarity).

Building takes a few seconds; tests build it once per session (``build_app_store``).
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

from tests.fakes import FakeLLMServer, error, reply
from tests.fakes.fixtures import OPENAI_SECRET

#: The reply that tries every way of turning text into markup or code.
EVIL_REPLY = (
    'Hi! <script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"> '
    '[click me](javascript:window.__pwned=3) ![tracker](https://example.invalid/pixel.png) '
    '<a href="javascript:window.__pwned=4">link</a> :red[red] $x^2$ **bold** '
    '<iframe src="javascript:window.__pwned=5"></iframe>'
)

FAKE_MODEL = "openai:fake-persona-7b"
LEXICAL = ["bleu", "rouge1", "rouge2", "rougeL", "dist1", "dist2", "idf_overlap"]

#: Which sample of the built-in dataset gets which reply from the fake model.
EVIL_SAMPLE = "sample:0"
FAILURES = {
    "sample:3": "truncated",
    "sample:4": "truncated",
    "sample:5": "invalid_json",
    "sample:6": "missing_field",
    "sample:7": "refused",
    "sample:8": "api_error",
}


def _script(sample_prompts: dict[str, str]):
    """Map a request to a scripted action by finding which sample's prompt it carries."""
    by_prompt = {prompt: sample_id for sample_id, prompt in sample_prompts.items()}

    def script(info):
        sample_id = by_prompt.get(info.prompt)
        cot = '"reasoning"' in info.prompt
        if sample_id == EVIL_SAMPLE:
            payload = {"response": EVIL_REPLY}
            if cot:
                payload = {"reasoning": "Reasoning with <b>markup</b> and [a link](javascript:alert(1)).", **payload}
            return reply(json.dumps(payload))
        kind = FAILURES.get(sample_id or "")
        if kind == "truncated":
            return reply('{"response": "I was just about to tell you about my garden and', finish_reason="length")
        if kind == "invalid_json":
            return reply("{response: 'single quotes are not JSON'}")
        if kind == "missing_field":
            return reply(json.dumps({"answer": "wrong key"}))
        if kind == "refused":
            return reply("I'm sorry, but I can't help with that request.")
        if kind == "api_error":
            return error(400, "invalid request: context too long")
        text = f"Sure! I love that too. ({sample_id})"
        payload = {"reasoning": "It fits the persona.", "response": text} if cot else {"response": text}
        return reply(json.dumps(payload))

    return script


def write_evil_dataset(folder: Path) -> Path:
    """A user CSV dataset whose personas, context and reference carry the injection strings."""
    path = folder / "evil.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["personas", "context", "act_response"])
        writer.writerow([
            "[User 2 persona]: I love <script>window.__pwned=6</script> gardening. I keep ![cat](https://example.invalid/c.png) cats.",
            "User 1: Hello <img src=x onerror=\"window.__pwned=7\"> there, see [this](javascript:window.__pwned=8)\n"
            "User 2: Hi!\nUser 1: What do you grow?",
            "User 2: Tomatoes <script>window.__pwned=9</script> and herbs.",
        ])
        writer.writerow([
            "[User 2 persona]: I am a nurse. I work nights.",
            "User 1: How was work?",
            "User 2: Long night, but good.",
        ])
    return path


_BUILT: dict[str, dict] = {}


def shared_app_store(tmp_path_factory) -> dict:
    """The store, built once per test session however many modules ask for it."""
    if "store" not in _BUILT:
        _BUILT["store"] = build_app_store(tmp_path_factory.mktemp("app-store") / "home")
    return _BUILT["store"]


def build_app_store(home: Path) -> dict:
    """Build the store under ``home``; returns what the tests need to know about it."""
    from persobench.datasets import load_dataset, samples_by_id
    from persobench.generation import run_generation
    from persobench.scoring import score_run
    from persobench.prompts.templates import build_messages, get_template
    from persobench.store.run_store import RunStore

    home.mkdir(parents=True, exist_ok=True)
    store = RunStore(home)
    info: dict = {"home": home, "runs": {}}
    for model in ("baseline:reference", "baseline:persona-echo"):
        for mode in ("vanilla", "cot"):
            run = run_generation(dataset="sample", model=model, mode=mode, store=store)
            info["runs"][(model, mode)] = run.run_id

    samples = load_dataset("sample")
    old_key = os.environ.get("OPENAI_API_KEY")
    os.environ["OPENAI_API_KEY"] = OPENAI_SECRET
    try:
        for mode in ("vanilla", "cot"):
            template = get_template("paper", mode)  # what an API model gets by default
            prompts = {s.id: build_messages(s, template)[-1]["content"] for s in samples}
            with FakeLLMServer("openai", script=_script(prompts)) as server:
                run = run_generation(dataset="sample", model=FAKE_MODEL, mode=mode, base_url=server.base_url,
                                     store=store, concurrency=4)
            info["runs"][(FAKE_MODEL, mode)] = run.run_id
    finally:
        if old_key is None:
            os.environ.pop("OPENAI_API_KEY", None)
        else:
            os.environ["OPENAI_API_KEY"] = old_key

    evil_path = write_evil_dataset(home.parent)
    run = run_generation(dataset=str(evil_path), model="baseline:reference", mode="vanilla", store=store)
    info["runs"][("evil", "vanilla")] = run.run_id
    info["evil_dataset"] = str(evil_path)

    for (model, mode), run_id in info["runs"].items():
        run = store.get(run_id)
        samples_map = samples_by_id(run.manifest.dataset)
        metrics = list(LEXICAL)
        if (model, mode) == (FAKE_MODEL, "vanilla"):
            metrics.append("persona_coverage")
        if model == "evil":  # unavailable offline: recorded with the reason, no number (no model loads)
            metrics += ["c_score", "unieval_groundedness"]
        score_run(run, samples_map, profile="offline", metrics=metrics)
    return info


def build_demo_store(home: Path, *, limit: int = 4) -> dict:
    """The store ``python -m persobench demo`` makes, without decoding SmolLM2 (minutes on a CPU):
    the baselines' runs are generated from the demo's own configurations; SmolLM2's two runs, plain
    and structured, get the manifests its plans would write (the same run ids and provenance) and a
    table as the demo measured it: every plain reply truncated, every structured reply valid. Every
    run is scored with the lexical metrics of the offline profile (the demo's)."""
    import dataclasses

    import pandas as pd

    from persobench.datasets import samples_by_id
    from persobench.generation import plan_generation, run_generation
    from persobench.generation.demo import DEMO_PROFILE, demo_configs
    from persobench.scoring import score_run
    from persobench.store.run_store import RunStore

    store = RunStore(home)
    runs: dict[tuple[str, bool, str], str] = {}
    for config in demo_configs(limit=limit):
        key = (config.model, bool(config.structured), config.mode)
        if not config.model.startswith("local:"):
            runs[key] = run_generation(config, store=store).run_id
            continue
        plan = plan_generation(config, store=store)
        run = store.create(dataclasses.replace(plan.manifest, status="completed"))
        ids = [s.id for s in plan.samples]
        if config.structured:
            table = {"status": ["ok"] * len(ids), "response": [f"I like that too ({i})." for i in ids]}
        else:
            table = {"status": ["truncated"] * len(ids), "response": [None] * len(ids)}
        run.write_table("generations", pd.DataFrame({"sample_id": ids, **table, "latency": [1.5] * len(ids)}))
        runs[key] = run.run_id
    samples = samples_by_id("sample")
    for run_id in runs.values():
        score_run(store.get(run_id), samples, profile=DEMO_PROFILE, metrics=LEXICAL)
    return {"home": home, "runs": runs, "limit": limit}


def shared_paper_store(tmp_path_factory, reference: Path) -> dict:
    """:func:`build_paper_store`, built once per test session however many modules ask for it."""
    if "paper" not in _BUILT:
        _BUILT["paper"] = build_paper_store(tmp_path_factory.mktemp("paper-store") / "home", reference)
    return _BUILT["paper"]


def build_paper_store(home: Path, reference: Path) -> dict:
    """The store a user has after ``import-persobench`` of the paper's published data and ``score``
    with the metrics that need no model (the lexical ones, about 15 s for the 58 runs): what the
    ``import-persobench`` and ``score`` commands do, through the same library calls, with the app's
    first views prepared as those commands prepare them (``landing_kept_current``)."""
    from persobench.generation.importer import import_persobench, samples_for_run
    from persobench.metrics import metric_names
    from persobench.pipeline import landing_kept_current
    from persobench.scoring import score_run
    from persobench.store.run_store import RunStore

    store = RunStore(home)
    with landing_kept_current(home):
        report = import_persobench(store, reference)
        samples: dict[str, dict] = {}
        for run in store.runs():
            dataset = run.manifest.dataset
            if dataset not in samples:
                samples[dataset] = samples_for_run(run)
            score_run(run, samples[dataset], profile="offline", metrics=metric_names(needs="none"))
    runs = {(r.manifest.dataset, r.manifest.model_label, r.manifest.mode): r.run_id for r in store.runs()}
    return {"home": home, "runs": runs, "imported": len(report.runs)}
