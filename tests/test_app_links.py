"""Every view is a link (issue 37 item 2): each page's state is in the query string, and a new session
opened on that query string shows the same view (AppTest; tests/test_browser_tasks.py does it in
Chromium with a fresh browser context)."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.app_store import FAKE_MODEL, shared_app_store

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")


@pytest.fixture()
def env(tmp_path_factory, monkeypatch):
    store = shared_app_store(tmp_path_factory)
    monkeypatch.setenv("PERSOBENCH_HOME", str(store["home"]))
    monkeypatch.delenv("PERSOBENCH_MODELS", raising=False)
    return store


def session(page: str | None = None, query: dict | None = None) -> AppTest:
    """A new browser session opened on ``page`` with ``query`` (what opening a shared link does)."""
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params.update(query or {})
    at.run()
    if page:
        at.switch_page(page)
        at.query_params.clear()
        at.query_params.update(query or {})
        at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def reopened(at: AppTest, page: str | None = None) -> AppTest:
    """A new session on the query string ``at`` ended with."""
    return session(page, dict(at.query_params))


def values(at: AppTest, keys: list[str]) -> dict:
    found = {}
    for key in keys:
        for kind in ("selectbox", "multiselect", "toggle", "text_input"):
            widget = next((w for w in getattr(at, kind) if w.key == key), None)
            if widget is not None:
                found[key] = widget.value
    return found


def test_the_leaderboard_view_is_in_the_url_and_a_new_session_shows_it(env):
    at = session()
    assert at.query_params["dataset"] == "sample" and at.query_params["rank"] and at.query_params["tab"] == "ranking"
    at.selectbox(key="lb_mode").set_value("cot").run()
    at.selectbox(key="lb_invalid").set_value("exclude").run()
    at.toggle(key="lb_all_samples").set_value(True).run()
    at.multiselect(key="lb_models_sample_cot").set_value(["baseline:persona-echo", FAKE_MODEL]).run()
    at.selectbox(key="lb_rank_by").set_value("dist2").run()
    at.session_state["lb_chart_tab"] = "Radar"
    at.run()
    assert not at.exception
    query = dict(at.query_params)
    assert query["mode"] == "cot" and query["invalid"] == "exclude" and query["all"] == "1"
    assert sorted(query["model"]) == sorted(["baseline:persona-echo", FAKE_MODEL]) and query["rank"] == "dist2"
    assert query["tab"] == "radar"
    keys = ["lb_dataset", "lb_mode", "lb_invalid", "lb_all_samples", "lb_side_by_side", "lb_rank_by",
            "lb_models_sample_cot", f"lb_protocol_{'cot'}"]
    shared = reopened(at)
    assert values(shared, keys) == values(at, keys)
    assert shared.session_state["lb_chart_tab"] == "Radar" and shared.get("plotly_chart")[0].key == "lb_radar"
    assert dict(shared.query_params) == query


def test_a_link_with_values_that_no_longer_fit_falls_back_to_the_defaults(env):
    at = session(None, {"dataset": "nope", "rank": "not-a-metric", "model": ["ghost"], "tab": "x", "sides": "maybe"})
    assert at.selectbox(key="lb_dataset").value == "sample"
    assert set(at.multiselect(key="lb_models_sample_vanilla").value) == {"baseline:reference", "baseline:persona-echo",
                                                                          FAKE_MODEL}
    assert at.query_params["tab"] == "ranking" and at.query_params["sides"] == "0"
    empty = session(None, {"model": [""]})  # a link to an empty selection says so
    assert empty.multiselect(key="lb_models_sample_vanilla").value == []
    assert any("No model selected" in str(w.value) for w in empty.warning)


def test_compare_keeps_the_dataset_both_runs_and_the_metric(env):
    runs = env["runs"]
    a, b = runs[("baseline:persona-echo", "vanilla")], runs[(FAKE_MODEL, "vanilla")]
    at = session("pages/compare.py", {"dataset": "sample", "a": a, "b": b, "metric": "dist1", "invalid": "exclude"})
    assert at.selectbox(key="cmp_a_sample").value == a and at.selectbox(key=f"cmp_b_sample_{a}").value == b
    assert at.selectbox(key="cmp_metric").value == "dist1" and at.selectbox(key="cmp_invalid").value == "exclude"
    assert dict(at.query_params) == {"dataset": "sample", "profile": "offline", "invalid": "exclude", "a": a, "b": b,
                                     "metric": "dist1"}
    # the runs are named by model and mode, never by their hash
    assert at.selectbox(key="cmp_a_sample").options[0].count("·") == 1
    at.selectbox(key="cmp_metric").set_value("rouge1").run()
    assert reopened(at, "pages/compare.py").selectbox(key="cmp_metric").value == "rouge1"


def test_failures_keeps_its_filters_the_status_and_the_run(env):
    run = env["runs"][(FAKE_MODEL, "cot")]
    at = session("pages/failures.py", {"dataset": "sample", "mode": "cot", "model": FAKE_MODEL,
                                       "status": "refused", "run": run})
    assert at.multiselect(key="fail_modes").value == ["cot"] and at.multiselect(key="fail_models").value == [FAKE_MODEL]
    assert at.selectbox(key="fail_status").value == "refused" and at.selectbox(key="fail_model").value == run
    at.selectbox(key="fail_status").set_value("truncated").run()
    shared = reopened(at, "pages/failures.py")
    assert shared.selectbox(key="fail_status").value == "truncated"
    assert dict(shared.query_params) == dict(at.query_params)


def test_explore_keeps_the_dialogue_the_search_and_the_filters(env):
    at = session("pages/explore.py", {"dataset": "sample", "q": "i", "mode": ["vanilla", "cot"],
                                      "model": [FAKE_MODEL, "baseline:persona-echo"], "differ": "dist1"})
    assert at.text_input(key="explore_query").value == "i"
    assert at.multiselect(key="explore_models").value == [FAKE_MODEL, "baseline:persona-echo"]
    assert at.multiselect(key="explore_modes").value == ["vanilla", "cot"]
    assert at.selectbox(key="explore_differ").value == "dist1"
    at.button(key="explore_next").click().run()
    second = at.query_params["sample"]
    shared = reopened(at, "pages/explore.py")
    assert shared.selectbox(key="explore_pick").value == second
    assert values(shared, ["explore_query", "explore_models", "explore_modes", "explore_differ"]) == \
        values(at, ["explore_query", "explore_models", "explore_modes", "explore_differ"])
    assert dict(shared.query_params) == dict(at.query_params)


def test_a_control_that_first_appears_starts_at_its_default_not_at_another_views_url_value(env):
    """Compare's B is keyed on A: after picking another A, B is the next run of A's mode, not the B the
    URL held for the previous A."""
    runs = env["runs"]
    at = session("pages/compare.py", {"dataset": "sample"})
    a = runs[("baseline:reference", "cot")]
    at.selectbox(key="cmp_a_sample").set_value(a).run()
    assert at.selectbox(key=f"cmp_b_sample_{a}").value.split("__")[2] == "cot"
