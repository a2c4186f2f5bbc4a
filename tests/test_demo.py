"""``python -m persobench demo``: cached (a second call is a fast no-op), and the story it tells:
SmolLM2 as asked fails the format, SmolLM2 with structured output produces scored replies."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests import background_commands as background

ROOT = Path(__file__).resolve().parents[1]


def demo(home: Path, *args: str, timeout: float = 600, env: dict[str, str] | None = None,
         ) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "persobench", "--home", str(home), "demo", *args, "--no-progress"]
    return background.run(command, cwd=ROOT, timeout=timeout, env=env)


#: SmolLM2 on one torch thread while the suite runs beside it: on 2 cores, two threads waiting for each
#: other at every matrix product while other work holds a core made the same run 5 to 20 times slower
#: (tests/test_local_batching.py's ``one_torch_thread``).
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def test_demo_is_cached_second_call_is_a_fast_no_op(tmp_path):
    home = tmp_path / "demo"
    first = demo(home, "--no-local", "--limit", "3")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "demo ready" in first.stdout
    from persobench.store.run_store import RunStore

    runs = RunStore(home).runs()
    assert {(r.manifest.model_label, r.manifest.mode) for r in runs} == {
        ("baseline:reference", "vanilla"), ("baseline:reference", "cot"),
        ("baseline:persona-echo", "vanilla"), ("baseline:persona-echo", "cot")}
    assert all("offline" in r.manifest.extra["scores"] for r in runs)
    from persobench.generation.demo import read_demo_state

    state = read_demo_state(home)  # what the app reads while `make run` prepares the demo behind it
    assert state is not None and state.state == "ready" and not state.preparing
    assert set(state.runs) == {r.run_id for r in runs}
    assert state.labels[0] == "baseline:reference · vanilla"

    def snapshot() -> dict[str, int]:
        return {str(p.relative_to(home)): p.stat().st_mtime_ns for p in (home / "runs").rglob("*") if p.is_file()}

    before = snapshot()
    assert before
    second = demo(home, "--no-local", "--limit", "3", timeout=120)
    assert second.returncode == 0 and "demo ready (cached)" in second.stdout
    assert snapshot() == before  # a no-op: no run, table or manifest was rewritten


def test_demo_runs_smollm2_plain_and_structured_in_both_modes_on_one_template(tmp_path):
    from persobench.cli.demo_command import estimate_seconds
    from persobench.generation.demo import DEMO_TEMPLATE, demo_configs
    from persobench.generation import plan_generation
    from persobench.prompts.protocol import protocol_of
    from persobench.store.run_store import RunStore

    store = RunStore(tmp_path / "home")
    plans = [plan_generation(config, store=store) for config in demo_configs(limit=4)]
    assert [(p.manifest.model_label, p.template.mode) for p in plans] == [
        (model, mode) for model in ("baseline:reference", "baseline:persona-echo", "local:smollm2",
                                    "local:smollm2 +structured") for mode in ("vanilla", "cot")]
    assert {p.template.name for p in plans} == {DEMO_TEMPLATE}
    # Plain runs share a board with the baselines; the structured ones are their own configuration.
    boards = {p.manifest.model_label: protocol_of(p.manifest).label for p in plans if p.template.mode == "vanilla"}
    assert boards["local:smollm2"] == boards["baseline:reference"] == boards["baseline:persona-echo"]
    assert boards["local:smollm2 +structured"] == boards["local:smollm2"] + " · structured"
    seconds, tokens = estimate_seconds(plans)
    assert tokens == 2 * 4 * (110 + 220)  # every SmolLM2 reply at its token limit
    assert seconds > tokens / 100
    assert estimate_seconds(plans[:4])[1] == 0  # baselines decode nothing


def _whole_demo(folder: Path) -> tuple[subprocess.CompletedProcess, Path]:
    """``make run``'s demo command into a new store under ``folder``: its process and the store."""
    return demo(folder / "demo", timeout=3000, env={**os.environ, **ONE_THREAD}), folder / "demo"


background.register("demo", _whole_demo)  # minutes of SmolLM2: started when collection ends


@pytest.mark.slow
@pytest.mark.timeout(3000)
@pytest.mark.background("demo")
def test_demo_tells_the_story_plain_fails_the_format_structured_is_scored(tmp_path):
    """The real command (``make run``'s: 8 samples, SmolLM2's one batch per run; fewer samples would
    hardly be faster on a CPU, where a decoding step costs about the same for 1 or 8 rows): the
    leaderboard CSV has both SmolLM2 variants in both modes, the structured one with at most 20%
    invalid replies and a BERTScore above zero, and the plain one failing the format more. The
    demo's command starts when collection ends (tests/background_commands.py)."""
    first, home = background.result("demo", tmp_path)
    print(first.stdout)  # the estimate, the time it took and each SmolLM2 run's valid share (pytest -s)
    assert first.returncode == 0, first.stdout + first.stderr
    assert re.search(r"estimate: about \d+(\.\d)? (s|min) on 2 idle cores: 32 SmolLM2 replies", first.stdout)
    assert re.search(r"demo ready: 8 runs in .* in \d+(\.\d)? (s|min) \(estimate: ", first.stdout), first.stdout
    assert re.search(r"local:smollm2 \+structured\s+vanilla: \d/8 replies valid", first.stdout), first.stdout
    board = subprocess.run([sys.executable, "-m", "persobench", "--home", str(home), "leaderboard", "--dataset",
                            "sample", "--format", "csv"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert board.returncode == 0, board.stderr
    print(board.stdout)
    rows = pd.read_csv(io.StringIO(board.stdout)).set_index(["model", "mode", "metric"])["mean"].sort_index()
    for mode in ("vanilla", "cot"):
        plain, structured = rows["local:smollm2", mode], rows["local:smollm2 +structured", mode]
        assert structured["failure_ratio"] <= 0.2, (mode, structured["failure_ratio"])
        assert structured["bertscore_f1"] > 0, mode
        assert plain["failure_ratio"] > structured["failure_ratio"], mode  # the plain model fails the format
    assert "not measured for structured runs" in board.stderr
    second = demo(home, timeout=120)
    assert second.returncode == 0 and "demo ready (cached)" in second.stdout


def test_demo_runs_are_recognised_from_their_manifests_and_need_both_smollm2_runs(tmp_path):
    """The app finds the demo's runs from their provenance (dataset, model, template, structured,
    generated): other runs of the same models do not count, and no story without SmolLM2's two runs."""
    import dataclasses

    from persobench.generation.demo import demo_configs
    from persobench.generation import GenerationConfig, plan_generation
    from persobench.generation.demo import demo_runs
    from persobench.store.run_store import RunStore

    store = RunStore(tmp_path / "home")
    manifests = [dataclasses.replace(plan_generation(config, store=store).manifest, status="completed")
                 for config in demo_configs(limit=3)]
    found = demo_runs(manifests)
    assert len(found) == 8 and set(found.values()) == {m.run_id for m in manifests}
    assert found[("local:smollm2", True, "cot")] == manifests[-1].run_id

    assert demo_runs([m for m in manifests if not m.parameters.get("structured")]) == {}  # no structured run
    assert demo_runs([dataclasses.replace(m, status="running") for m in manifests]) == {}  # still generating
    assert demo_runs([dataclasses.replace(m, source="imported") for m in manifests]) == {}
    paper = plan_generation(GenerationConfig(dataset="sample", model="local:smollm2", limit=3, template="paper-open",
                                             structured=True), store=store).manifest
    others = [m for m in manifests if not m.parameters.get("structured")]
    assert demo_runs([*others, dataclasses.replace(paper, status="completed")]) == {}  # not the demo's template
    full = dataclasses.replace(plan_generation(demo_configs(limit=6)[-1], store=store).manifest, status="completed")
    assert demo_runs([*manifests, full])[("local:smollm2", True, "cot")] == full.run_id  # the larger run wins


# ---- the demo prepared behind the app (`make run`) ----------------------------------------------

APP = str(ROOT / "app.py")


@pytest.fixture()
def demo_process():
    """A live process whose command line is the demo command's, standing in for it (its pid goes into
    ``demo.json``); killed at the end."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "-m", "persobench", "demo"])
    yield process
    process.kill()
    process.wait()


def landing(home: Path, monkeypatch) -> Any:
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("PERSOBENCH_HOME", str(home))
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def state_of(home: Path, pid: int, stage: str) -> None:
    """``demo.json`` as the demo command writes it while it generates SmolLM2's first run, from ``pid``."""
    import json

    from persobench.generation import plan_generation
    from persobench.generation.demo import DEMO_STATE_FILE, demo_configs, write_demo_state
    from persobench.store import RunStore

    plans = [plan_generation(config, store=RunStore(home)) for config in demo_configs(limit=3)]
    write_demo_state(home, "preparing", stage, [p.run_id for p in plans],
                     labels=[f"{p.manifest.model_label} · {p.template.mode}" for p in plans])
    path = home / DEMO_STATE_FILE
    path.write_text(json.dumps({**json.loads(path.read_text()), "pid": pid}))


def test_landing_follows_the_demo_prepared_behind_the_app(tmp_path, monkeypatch, demo_process):
    """``make run`` starts the app and the demo together: the landing page shows the baselines' board as
    soon as they are scored, with the demo's progress above it (each run waiting, generating or scored),
    says so when the demo was interrupted, and shows neither once the demo is ready."""
    home = tmp_path / "demo"
    assert demo(home, "--no-local", "--limit", "3").returncode == 0  # the baselines, generated and scored
    state_of(home, demo_process.pid, "generating local:smollm2 · vanilla (SmolLM2 loads first)")
    at = landing(home, monkeypatch)
    panel = [shown(m.value) for m in at.markdown if "Preparing the offline demo" in str(m.value)]
    assert panel and "SmolLM2 loads first" in panel[0]
    bars = [(p.proto.value, shown(p.proto.text)) for p in at.get("progress")]
    assert len(bars) == 8
    assert bars[0] == (100, "baseline:reference · vanilla: 3 replies, scored")
    assert bars[-1] == (0, "local:smollm2 +structured · cot: waiting")
    assert {m for m in ranking_models(at)} == {"baseline:reference", "baseline:persona-echo"}  # their board

    demo_process.kill()
    demo_process.wait()
    text = " ".join(shown(i.value) for i in landing(home, monkeypatch).info)
    assert "The offline demo was interrupted while generating local:smollm2" in text and "resumes it" in text

    assert demo(home, "--no-local", "--limit", "3").returncode == 0  # cached: the demo (of 3 baselines) is ready
    at = landing(home, monkeypatch)
    assert not at.get("progress") and "offline demo" not in " ".join(str(i.value) for i in [*at.info, *at.warning])


def test_landing_of_an_empty_store_waits_for_the_demo_to_start(tmp_path, monkeypatch, demo_process):
    """The app may draw its first page before the demo command wrote anything: the empty store's notice,
    then the demo's progress without any reload (the page watches for it)."""
    home = tmp_path / "demo"
    home.mkdir()
    at = landing(home, monkeypatch)
    assert any("No runs in the store yet" in str(i.value) for i in at.info)
    state_of(home, demo_process.pid, "generating baseline:reference · vanilla")
    at.run()  # what the watcher's rerun does
    assert any("Preparing the offline demo" in str(m.value) for m in at.markdown)
    assert not any("No runs in the store yet" in str(i.value) for i in at.info)
    assert [shown(p.proto.text) for p in at.get("progress")][0] == "baseline:reference · vanilla: waiting"


def test_a_demo_that_cannot_finish_says_why_in_the_store_and_on_the_landing_page(tmp_path, monkeypatch):
    """Another process generating one of the demo's runs stops the demo with a one-line error: the
    command exits 2, ``demo.json`` keeps the reason, and the landing page shows it with how to resume."""
    from persobench.generation import plan_generation
    from persobench.generation.demo import demo_configs, read_demo_state
    from persobench.generation.lock import hold_run_lock
    from persobench.store import RunStore

    home = tmp_path / "demo"
    plan = plan_generation(demo_configs(limit=3, local=False)[0], store=RunStore(home))
    folder = RunStore(home).runs_dir / plan.run_id
    folder.mkdir(parents=True)
    with hold_run_lock(folder):
        done = demo(home, "--no-local", "--limit", "3")
    assert done.returncode == 2 and "is being generated by process" in done.stderr
    state = read_demo_state(home)
    assert state is not None and state.state == "failed" and not state.preparing
    assert f"run {plan.run_id} is being generated by process {os.getpid()}" in state.message
    warnings = " ".join(shown(w.value) for w in landing(home, monkeypatch).warning)
    assert "The offline demo stopped" in warnings and "is being generated by process" in warnings


def shown(markdown: object) -> str:
    """Markdown source as the page shows it (the app escapes punctuation in labels)."""
    return str(markdown).replace("\\", "")


def ranking_models(at) -> list[str]:
    for frame in at.dataframe:
        if {"model", "rank"} <= set(frame.value.columns):
            return list(frame.value["model"])
    raise AssertionError("no ranking table on the page")
