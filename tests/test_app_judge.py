"""The LLM judge in the app (AppTest): New run's scoring step and the Metrics page offer it, show its
estimate before launch, and launch a real background `score --judge` job against the fake judge."""

from __future__ import annotations

import pytest

from persobench.metrics.judge.labeller import judge_of_profile
from tests.fakes.fixtures import openai_server  # noqa: F401 - fixture
from tests.fakes.judge import judge_script
from tests.test_app import open_page, rendered_text, wait_for
from tests.test_judge import _sample_run


def _judge_caption(at) -> str:
    found = [str(c.value) for c in at.caption if str(c.value).startswith("LLM judge:")]
    assert found, rendered_text(at)
    return found[0]


def test_new_run_offers_the_judge_with_its_estimate_and_launches_it(tmp_path, monkeypatch, openai_server):
    from persobench.datasets import load_dataset
    from persobench.jobs import JobManager
    from persobench.store.run_store import RunStore

    home = tmp_path / "home"
    monkeypatch.setenv("PERSOBENCH_HOME", str(home))
    monkeypatch.delenv("PERSOBENCH_MODELS", raising=False)
    openai_server.script = judge_script({}, default="entailment")
    at = open_page("pages/new_run.py")
    at.multiselect(key="new_models").set_value(["baseline:persona-echo"]).run()
    at.number_input(key="new_limit").set_value(3).run()
    at.toggle(key="new_judge_on").set_value(True).run()
    at.text_input(key="new_judge_model").input("openai:gpt-4o-mini").run()
    # By hand: the page's default template for the baseline is the paper's, so the notebook layout
    # (evaluation.ipynb): per sample, (reply, personas cell) for the C score, (personas cell, reply)
    # and (reference, reply) for the UE score, and each persona sentence against the reply (the
    # reference stands in for it), distinct pairs only.
    from persobench.datasets.paper_cells import paper_persona_text

    expected = 0
    for s in load_dataset("sample", limit=3, seed=0):
        sentences = [x for p in s.personas for x in p.sentences]
        cell = paper_persona_text(s)
        expected += len({(s.reference, cell), (cell, s.reference), (s.reference, s.reference),
                         *((x, s.reference) for x in sentences)})
    caption = _judge_caption(at)
    assert caption.startswith(f"LLM judge: {expected} pair(s) to label, 0 in the response cache, {expected} request(s)")
    assert "estimated cost at most 0.0" in caption and "reference stands in for its reply" in caption

    # Launch against the fake judge: the job generates, then runs score --judge on what it wrote.
    at.text_input(key="new_judge_model").input("openai:judge-model").run()
    at.text_input(key="new_judge_base_url").input(openai_server.base_url).run()
    assert "cost unknown (no prices for this judge)" in _judge_caption(at)
    at.selectbox(key="new_profile").set_value("(do not score)").run()
    at.button(key="new_launch").click().run()
    assert not at.exception
    jobs = JobManager(home)
    job = wait_for(lambda: (s := jobs.jobs()) and not s[0].active and s[0], timeout=180)
    assert job.state == "completed", job.message
    judge_step = job.steps[-1]
    assert judge_step.kind == "score"
    assert judge_step.request.config.metrics == ("c_score", "p_consistency", "ue_score", "persona_coverage")
    assert judge_step.request.judge.model == "openai:judge-model"
    assert judge_step.withhold_keys  # a typed URL gets no operator key
    run = RunStore(home).get(job.run_ids[0])
    scores = run.read_table("scores")
    assert len(set(scores["profile"])) == 1 and judge_of_profile(scores["profile"].iloc[0])
    assert (scores[scores["metric"] == "c_score"]["value"] == 1.0).all() and len(openai_server.requests) > 0


def test_metrics_page_estimates_then_launches_the_judge_on_stored_runs(tmp_path, monkeypatch, openai_server):
    from persobench.jobs import JobManager

    home = tmp_path / "home"
    monkeypatch.setenv("PERSOBENCH_HOME", str(home))
    store, samples = _sample_run(home)
    pairs = sum(2 + len(s.persona_sentences()) for s in samples)
    openai_server.script = judge_script({}, default="contradiction")
    at = open_page("pages/metrics.py")
    at.toggle(key="metrics_judge_on").set_value(True).run()
    at.text_input(key="metrics_judge_model").input("openai:judge-model").run()
    at.text_input(key="metrics_judge_base_url").input(openai_server.base_url).run()
    assert not [c for c in at.caption if str(c.value).startswith("LLM judge:")]  # nothing until asked
    at.toggle(key="metrics_judge_estimate").set_value(True).run()
    assert _judge_caption(at).startswith(f"LLM judge: {pairs} pair(s) to label, 0 in the response cache, "
                                         f"{pairs} request(s) to send")
    assert openai_server.requests == []  # estimating sends nothing
    at.button(key="metrics_judge_launch").click().run()
    assert not at.exception
    jobs = JobManager(home)
    job = wait_for(lambda: (s := jobs.jobs()) and not s[0].active and s[0], timeout=180)
    assert job.state == "completed", job.message
    scores = store.get("sample__judge_test__vanilla").read_table("scores")
    assert (scores[scores["metric"] == "c_score"]["value"] == -1.0).all()
    assert len(openai_server.requests) == pairs
    at.run()  # the store changed: estimated again, nothing left to judge
    assert _judge_caption(at).startswith("LLM judge: 0 pair(s) to label")
    assert at.button(key="metrics_judge_launch").disabled


@pytest.mark.parametrize("page, keys", [("pages/new_run.py", ["new_profile", "new_concurrency", "new_launch"]),
                                        ("pages/metrics.py", ["metrics_dimension"])])
def test_existing_widget_keys_stay(tmp_path, monkeypatch, page, keys):
    monkeypatch.setenv("PERSOBENCH_HOME", str(tmp_path / "home"))
    at = open_page(page)
    found = {w.key for kind in ("selectbox", "button", "segmented_control", "toggle")
             for w in getattr(at, kind, []) if getattr(w, "key", None)}
    judge_toggle = "new_judge_on" if page.endswith("new_run.py") else "metrics_judge_on"
    assert set(keys) <= found and judge_toggle in found
