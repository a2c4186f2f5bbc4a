"""AppTest for every page of the Streamlit app, against a store built with the library
(``tests/app_store.py``): no exception, empty states, filters that change the tables, export
content, deep links, failures, comparisons, launching/cancelling/resuming background runs."""

from __future__ import annotations

import html
import io
import time
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from persobench.app.chrome import PAGES as NAVIGATION
from tests.app_store import (
    EVIL_REPLY,
    EVIL_SAMPLE,
    FAILURES,
    FAKE_MODEL,
    LEXICAL,
    build_demo_store,
    shared_app_store,
)
from tests.fakes.fixtures import OPENAI_SECRET

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
#: Every page of the navigation (persobench.app.chrome.PAGES), the landing page first: a new page is tested
#: here without touching this file.
PAGES = [path for path, _title, _icon, _url in NAVIGATION]
TIMEOUT = 120


@pytest.fixture(scope="session")
def app_store(tmp_path_factory):
    return shared_app_store(tmp_path_factory)


@pytest.fixture()
def env(app_store, monkeypatch):
    """The test store as PERSOBENCH_HOME, and an API key in the environment that must never show."""
    monkeypatch.setenv("PERSOBENCH_HOME", str(app_store["home"]))
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_SECRET)
    monkeypatch.delenv("PERSOBENCH_MODELS", raising=False)
    return app_store


def open_page(page: str, query: dict | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    if query:
        at.query_params.update(query)
    at.run()
    if page != PAGES[0]:
        at.switch_page(page)
        if query:
            at.query_params.update(query)
        at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def rendered_text(at: AppTest) -> str:
    """Every string the page shows (Markdown sources, text, code, alerts, tables)."""
    parts = []
    for kind in ("title", "header", "subheader", "markdown", "caption", "text", "code", "info", "warning",
                 "error", "success"):
        parts.extend(str(el.value) for el in getattr(at, kind))
    for frame in at.dataframe:
        parts.append(frame.value.to_csv())
    for kind in ("selectbox", "multiselect"):
        for widget in getattr(at, kind):
            parts.extend(str(o) for o in widget.options)
    return "\n".join(parts)


def frame_by_columns(at: AppTest, *columns: str) -> pd.DataFrame:
    for frame in at.dataframe:
        if set(columns) <= set(frame.value.columns):
            return frame.value
    raise AssertionError(f"no dataframe with columns {columns}: {[list(f.value.columns) for f in at.dataframe]}")


# ---- every page --------------------------------------------------------------------------------


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_without_exception_or_secret(env, page):
    at = open_page(page)
    assert at.title, "every page has a title"
    text = rendered_text(at)
    assert OPENAI_SECRET not in text
    assert "Traceback" not in text


def test_first_render_skips_streamlits_stack_inspection(env, monkeypatch):
    """Streamlit's "not run with streamlit run?" check reads the source of every frame on the stack
    (inspect.stack(), 0.1 s of a cold landing page); the app marks it done before drawing."""
    import streamlit.delta_generator as delta_generator
    import streamlit.env_util as env_util

    monkeypatch.setattr(delta_generator, "_use_warning_has_been_displayed", False)  # a new process
    asked: list[str] = []
    monkeypatch.setattr(env_util, "is_repl", lambda: asked.append("is_repl") or False)
    at = open_page(PAGES[0])
    assert at.title and asked == []


@pytest.mark.parametrize("page", PAGES)
def test_empty_store_pages_explain_what_to_do(tmp_path, monkeypatch, page):
    monkeypatch.setenv("PERSOBENCH_HOME", str(tmp_path / "empty"))
    at = open_page(page)
    text = rendered_text(at)
    if page in ("pages/leaderboard.py", "pages/explore.py", "pages/failures.py", "pages/compare.py"):
        assert "No runs in the store yet" in text
        assert "python -m persobench demo" in text


def test_scored_store_without_scores_explains_how_to_score(tmp_path, monkeypatch):
    from persobench.generation import run_generation

    run_generation(dataset="sample", model="baseline:reference", mode="vanilla", limit=3, home=tmp_path / "h")
    monkeypatch.setenv("PERSOBENCH_HOME", str(tmp_path / "h"))
    at = open_page("pages/leaderboard.py")
    assert "python -m persobench score --profile offline" in rendered_text(at)


@pytest.mark.parametrize("page", PAGES)
def test_corrupt_tables_and_manifests_do_not_break_pages(broken_store, monkeypatch, page):
    monkeypatch.setenv("PERSOBENCH_HOME", str(broken_store))
    at = open_page(page)
    text = rendered_text(at)
    # the broken runs are skipped with a warning on every page; the readable one still shows
    assert "2 unreadable run folder(s)" in " ".join(str(e.label) for e in at.sidebar.expander)
    if page == "pages/leaderboard.py":
        assert "Could not load the results" not in text and "baseline:reference" in text


@pytest.fixture(scope="module")
def broken_store(tmp_path_factory):
    """Two scored runs; then one run's scores table is overwritten with garbage and another run
    folder gets an unreadable manifest."""
    from persobench.datasets import samples_by_id
    from persobench.generation import run_generation
    from persobench.scoring import score_run

    home = tmp_path_factory.mktemp("broken") / "home"
    for model in ("baseline:reference", "baseline:persona-echo"):
        run = run_generation(dataset="sample", model=model, mode="vanilla", limit=4, home=home)
        score_run(run, samples_by_id("sample"), profile="offline", metrics=["bleu", "dist1"])
    run.table_path("scores").write_bytes(b"not a parquet file")
    bad = home / "runs" / "broken-run"
    bad.mkdir()
    (bad / "manifest.json").write_text("{not json")
    return home


# ---- leaderboard -------------------------------------------------------------------------------


def ranking(at: AppTest) -> pd.DataFrame:
    return frame_by_columns(at, "rank", "model", "kind")


def test_leaderboard_filters_change_the_table(env):
    at = open_page("pages/leaderboard.py")
    vanilla = ranking(at)
    assert set(vanilla["model"]) == {"baseline:reference", "baseline:persona-echo", FAKE_MODEL}
    assert vanilla.iloc[0]["model"] == "baseline:reference", "the ceiling ranks first on bertscore/rouge"
    assert vanilla.set_index("model").loc[FAKE_MODEL, "failure_ratio"] == pytest.approx(len(FAILURES) / 30)

    at.selectbox(key="lb_mode").set_value("cot").run()
    assert not at.exception
    cot = ranking(at)
    assert at.subheader[0].value.startswith("sample · protocol ") and " · cot · " in at.subheader[0].value
    assert not cot.equals(vanilla)

    at.selectbox(key="lb_invalid").set_value("exclude").run()
    excluded = ranking(at)
    worst_rank = cot.set_index("model")
    excl_rank = excluded.set_index("model")
    metric = [c for c in cot.columns if c.endswith("95% CI")][0].replace(" 95% CI", "")
    assert excl_rank.loc[FAKE_MODEL, metric] > worst_rank.loc[FAKE_MODEL, metric], \
        "excluding invalid replies raises the fake model's mean"

    at.selectbox(key="lb_dataset").set_value(env["evil_dataset"]).run()
    assert not at.exception
    assert set(ranking(at)["model"]) == {"baseline:reference"}
    text = rendered_text(at)
    assert "Unavailable in this profile" in text and "c\\_score" in text and "needs" in text


def test_leaderboard_model_filter_and_rank_by(env):
    at = open_page("pages/leaderboard.py")
    at.multiselect(key="lb_models_sample_vanilla").set_value(["baseline:persona-echo", FAKE_MODEL]).run()
    assert set(ranking(at)["model"]) == {"baseline:persona-echo", FAKE_MODEL}
    at.selectbox(key="lb_rank_by").set_value("dist1").run()
    table = ranking(at)
    assert "dist1" in table.columns and "overlaps" in table.columns
    assert "overall" not in table.columns, "no overall score offline: the column is not faked"


def test_leaderboard_exports_match_the_board(env, monkeypatch):
    from streamlit.delta_generator import DeltaGenerator

    captured: dict[str, object] = {}
    original = DeltaGenerator.download_button

    def spy(self, label, data, *args, **kwargs):
        data = data() if callable(data) else data  # the report is deferred: made when the button is clicked
        captured[label] = data.decode("utf-8") if isinstance(data, bytes) else data
        return original(self, label, data, *args, **kwargs)

    monkeypatch.setattr(DeltaGenerator, "download_button", spy)
    open_page("pages/leaderboard.py")
    assert set(captured) == {"CSV (long)", "JSON", "Markdown", "LaTeX", "HTML report"}

    csv = pd.read_csv(io.StringIO(captured["CSV (long)"]))
    assert list(csv.columns[:8]) == ["dataset", "mode", "protocol", "model", "metric", "mean", "std", "n"]
    assert {"ci_low", "ci_high", "rank", "profile"} <= set(csv.columns)  # what the screen shows (issue 37)
    assert set(csv["dataset"]) == {"sample"} and set(csv["mode"]) == {"vanilla"}
    assert set(csv["model"]) == {"baseline:reference", "baseline:persona-echo", FAKE_MODEL}
    ref = csv[(csv["model"] == "baseline:reference") & (csv["metric"] == "bleu")].iloc[0]
    assert ref["mean"] == pytest.approx(1.0) and ref["n"] == 30
    fake_fail = csv[(csv["model"] == FAKE_MODEL) & (csv["metric"] == "failure_ratio")].iloc[0]
    assert fake_fail["mean"] == pytest.approx(len(FAILURES) / 30)

    # The same numbers the library computes from the store.
    from persobench.aggregate import leaderboard, load_results
    from persobench.store.run_store import RunStore

    board = leaderboard(load_results(RunStore(env["home"])), dataset="sample", mode="vanilla")
    lib = board[(board["model"] == FAKE_MODEL) & (board["metric"] == "rougeL")].iloc[0]
    page = csv[(csv["model"] == FAKE_MODEL) & (csv["metric"] == "rougeL")].iloc[0]
    assert page["mean"] == pytest.approx(lib["mean"]) and page["std"] == pytest.approx(lib["std"])

    markdown = captured["Markdown"]
    assert "| model |" in markdown and FAKE_MODEL in markdown and "±" in markdown
    latex = captured["LaTeX"]
    assert "\\begin{tabular}" in latex and "\\end{table}" in latex
    for content in captured.values():
        assert OPENAI_SECRET not in content

    # The HTML report button makes the file `persobench report` writes for this dataset and mode.
    from persobench.report import ReportOptions, report_html

    report = captured["HTML report"]
    assert report == report_html(RunStore(env["home"]), ReportOptions(datasets=("sample",), modes=("vanilla",)))
    assert "<h3>sample · protocol paper · vanilla" in report and html.escape(FAKE_MODEL) in report


# ---- explore -----------------------------------------------------------------------------------


def test_explore_direct_link_and_stepping(env):
    at = open_page("pages/explore.py", {"dataset": "sample", "sample": "sample:5"})
    assert "sample\\:5" in at.subheader[0].value
    at.button(key="explore_next").click().run()
    assert not at.exception
    assert at.query_params.get("sample") == "sample:6"
    assert "sample\\:6" in at.subheader[0].value
    at.button(key="explore_prev").click().run()
    assert at.query_params.get("sample") == "sample:5"


def test_explore_shows_the_prompt_each_runs_own_template_produced(env):
    """As on the Failures page: the fake API model's run used the paper template, so its prompt is
    the paper's system message and the stored user message for this very sample."""
    from persobench.datasets import samples_by_id
    from persobench.prompts.templates import build_messages, get_template

    at = open_page("pages/explore.py", {"dataset": "sample", "sample": "sample:5"})
    assert "Prompt" in [e.label for e in at.expander]
    codes = [str(c.value).rstrip() for c in at.code]
    sample = samples_by_id("sample", ["sample:5"])["sample:5"]
    user = build_messages(sample, get_template("paper", "vanilla"))[-1]["content"]
    expected = f"[SYSTEM]\nYou are a helpful response generator to output JSON.\n\n[USER]\n{user}".rstrip()
    assert expected in codes
    other = samples_by_id("sample", ["sample:6"])["sample:6"]
    assert not any(build_messages(other, get_template("paper", "vanilla"))[-1]["content"] in c for c in codes)


def test_explore_search_and_status_filters(env):
    at = open_page("pages/explore.py")
    at.text_input(key="explore_query").input("basil").run()
    assert not at.exception
    options = at.selectbox(key="explore_pick").options
    assert len(options) == 1 and options[0].startswith("sample:0")
    at.text_input(key="explore_query").input("").run()
    at.multiselect(key="explore_status").set_value(["truncated"]).run()
    options = at.selectbox(key="explore_pick").options
    assert sorted(o.split(":")[0] + ":" + o.split(":")[1] for o in options) == ["sample:3", "sample:4"]


def test_explore_metric_range_filter(env):
    at = open_page("pages/explore.py")
    all_options = len(at.selectbox(key="explore_pick").options)
    at.selectbox(key="explore_metric").set_value("bleu").run()
    at.slider(key="explore_range_bleu").set_value((0.99, 1.0)).run()
    assert not at.exception
    kept = len(at.selectbox(key="explore_pick").options)
    assert 0 < kept <= all_options


def test_explore_shows_untrusted_reply_as_text_only(env):
    at = open_page("pages/explore.py", {"dataset": "sample", "sample": EVIL_SAMPLE})
    texts = [str(t.value) for t in at.text]
    assert EVIL_REPLY in texts, "the reply is shown verbatim with st.text"
    for element in [*at.markdown, *at.caption, *at.subheader]:
        value = str(element.value)
        assert "<script" not in value and "](javascript" not in value and "![" not in value
    codes = [str(c.value) for c in at.code]
    assert any("<script>" in c for c in codes), "the raw output is shown as code"
    # Persona sentences are marked from the fake model's persona details (offline: similarity).
    at.selectbox(key="explore_mark_by").set_value(f"{FAKE_MODEL} · vanilla").run()
    marks = frame_by_columns(at, "sentence", "mark")
    assert marks["mark"].str.len().gt(0).all() and "similarity" in marks.columns


def test_explore_untrusted_dataset_personas_and_context(env):
    at = open_page("pages/explore.py", {"dataset": env["evil_dataset"], "sample": "evil:0"})
    texts = "\n".join(str(t.value) for t in at.text)
    assert "onerror" in texts and "javascript:" in texts
    persona = frame_by_columns(at, "sentence")
    assert persona["sentence"].str.contains("<script>").any()


# ---- failures ----------------------------------------------------------------------------------


def test_failures_counts_and_detail(env):
    at = open_page("pages/failures.py")
    summary = frame_by_columns(at, "model", "mode", "truncated", "failure ratio")
    fake = summary[(summary["model"] == FAKE_MODEL) & (summary["mode"] == "vanilla")].iloc[0]
    assert fake["truncated"] == 2 and fake["invalid_json"] == 1 and fake["missing_field"] == 1
    assert fake["refused"] == 1 and fake["api_error"] == 1 and fake["ok"] == 24
    at.selectbox(key="fail_status").set_value("invalid_json").run()
    assert not at.exception
    codes = [str(c.value) for c in at.code]
    assert any("single quotes are not JSON" in c for c in codes), "raw output as plain text"
    assert any("Conversation" in c or "persona" in c.lower() for c in codes), "the prompt is shown"
    # The run's own template: the paper's system message, then the stored user message.
    assert any(c.startswith("[SYSTEM]\nYou are a helpful response generator to output JSON.\n\n[USER]\n"
                            "I will provide you") for c in codes)
    at.selectbox(key="fail_status").set_value("api_error").run()
    assert "context too long" in rendered_text(at)
    assert OPENAI_SECRET not in rendered_text(at)


def test_failures_filters(env):
    at = open_page("pages/failures.py")
    at.multiselect(key="fail_models").set_value(["baseline:reference"]).run()
    assert "Every reply in this selection parsed" in rendered_text(at)


# ---- compare -----------------------------------------------------------------------------------


def test_compare_paired_tests_and_top_differences(env):
    at = open_page("pages/compare.py")
    at.selectbox(key="cmp_dataset").set_value("sample").run()
    at.selectbox(key="cmp_a_sample").set_value(env["runs"][("baseline:reference", "vanilla")]).run()
    assert not at.exception
    assert at.selectbox(key=f"cmp_b_sample_{env['runs'][('baseline:reference', 'vanilla')]}").value.split("__")[2] == "vanilla"
    table = frame_by_columns(at, "metric", "A wins", "ties", "B wins", "t-test p", "Wilcoxon p")
    assert set(LEXICAL) <= set(table["metric"])
    assert (table["A wins"] + table["ties"] + table["B wins"] == table["n"]).all()
    bleu = table.set_index("metric").loc["bleu"]
    assert bleu["CI low"] <= bleu["A - B"] <= bleu["CI high"]
    top = frame_by_columns(at, "sample_id", "A", "B", "difference")
    assert len(top) > 0 and top["difference"].abs().is_monotonic_decreasing


def test_compare_plain_vs_structured_is_one_click(tmp_path, monkeypatch):
    from persobench.aggregate import load_results, structured_pairs
    from persobench.store.run_store import RunStore
    from tests.test_aggregate import ALL, make_protocol_run

    store = RunStore(tmp_path / "home")
    plain = make_protocol_run(store, model="local:smollm2", ids=ALL, template="persobench", policy="robust",
                              status="truncated").run_id
    structured = make_protocol_run(store, model="local:smollm2", ids=ALL, template="persobench", policy="robust",
                                   structured=True, dist1=0.8).run_id
    make_protocol_run(store, model="baseline:reference", ids=ALL, template="persobench", policy="robust", dist1=0.9)
    make_protocol_run(store, model="local:smollm2", ids=ALL, template="persobench", policy="robust", temperature=0.7)
    runs = load_results(store).frame.drop_duplicates("run_id")
    assert structured_pairs(runs) == [(plain, structured)]  # same protocol but for structured output only
    monkeypatch.setenv("PERSOBENCH_HOME", str(store.home))
    at = open_page("pages/compare.py")
    assert at.selectbox(key="cmp_a_focus").value != plain or at.selectbox(key=f"cmp_b_focus_{plain}").value != structured
    button = at.button(key=f"cmp_plain_structured_{plain}")
    assert button.label == "Plain vs structured: local\\:smollm2 · vanilla"  # Markdown-escaped model name
    button.click().run()
    assert not at.exception
    assert at.selectbox(key="cmp_a_focus").value == plain
    assert at.selectbox(key=f"cmp_b_focus_{plain}").value == structured
    table = frame_by_columns(at, "metric", "mean A", "mean B").set_index("metric")
    assert table.loc["dist1", "mean A"] == 0.0 and table.loc["dist1", "mean B"] == pytest.approx(0.8)
    assert table.loc["failure_ratio", "mean A"] == 1.0 and table.loc["failure_ratio", "mean B"] == 0.0

def test_leaderboard_says_when_runs_share_no_sample_and_which_share_which(tmp_path, monkeypatch):
    from persobench.store.run_store import RunStore
    from tests.test_aggregate import ALL, PAPER_LABEL, make_protocol_run

    store = RunStore(tmp_path / "home")
    make_protocol_run(store, model="twenty", ids=ALL[:3])
    make_protocol_run(store, model="also", ids=ALL[:3])
    make_protocol_run(store, model="seeded", ids=ALL[3:])
    monkeypatch.setenv("PERSOBENCH_HOME", str(store.home))
    at = open_page("pages/leaderboard.py")
    assert at.subheader[0].value == f"focus · protocol {PAPER_LABEL} · runs share no sample id"
    warnings = " ".join(str(w.value).replace("\\", "") for w in at.warning)  # shown escaped, as plain text
    assert "the 3 runs share no sample id" in warnings
    assert "S1 = 7 samples: seeded; S2 = 3 samples: also, twenty" in warnings


def test_leaderboard_boards_are_one_protocol_and_compare_common_samples(tmp_path, monkeypatch):
    from persobench.store.run_store import RunStore
    from tests.test_aggregate import ALL, PAPER_LABEL, make_protocol_run

    store = RunStore(tmp_path / "home")
    make_protocol_run(store, model="gpt-4o-mini", ids=ALL, source="imported", template="paper-vanilla")
    make_protocol_run(store, model="small", ids=ALL[:3], template="paper-open", chat_template=False)  # raw text
    make_protocol_run(store, model="hot", ids=ALL, temperature=0.7)
    monkeypatch.setenv("PERSOBENCH_HOME", str(store.home))
    at = open_page("pages/leaderboard.py")
    assert at.selectbox(key="lb_protocol_vanilla").options[0] == PAPER_LABEL
    assert len(at.selectbox(key="lb_protocol_vanilla").options) == 2
    assert at.subheader[0].value == f"focus · protocol {PAPER_LABEL}"
    table = ranking(at).set_index("model")
    assert set(table.index) == {"gpt-4o-mini", "small"} and set(table["n"]) == {3}
    assert any("compared on the 3 sample ids common to all 2 runs" in str(i.value) for i in at.info)

    at.toggle(key="lb_all_samples").set_value(True).run()
    assert ranking(at).set_index("model").loc["gpt-4o-mini", "n"] == 10
    assert not any("common to all" in str(i.value) for i in at.info)

    protocol = at.selectbox(key="lb_protocol_vanilla")
    protocol.set_value(protocol.options[1]).run()
    assert set(ranking(at)["model"]) == {"hot"} and "T=0.7" in at.subheader[0].value

    at.toggle(key="lb_side_by_side").set_value(True).run()
    assert not at.exception
    labels = set(ranking(at)["model"])
    assert len(labels) == 3 and all(" (paper · vanilla · 110 tokens · T=" in label for label in labels)
    assert "protocols side by side" in at.subheader[0].value


def test_leaderboard_labels_structured_runs_and_says_instructability_is_not_measured(tmp_path, monkeypatch):
    from persobench.store.run_store import RunStore
    from persobench.core.structured import BOARD_NOTE
    from tests.test_aggregate import ALL, make_protocol_run

    store = RunStore(tmp_path / "home")
    make_protocol_run(store, model="local:smollm2", ids=ALL, template="persobench", policy="robust", status="truncated")
    make_protocol_run(store, model="baseline:reference", ids=ALL, template="persobench", policy="robust")
    make_protocol_run(store, model="local:smollm2", ids=ALL, template="persobench", policy="robust", structured=True)
    monkeypatch.setenv("PERSOBENCH_HOME", str(store.home))
    at = open_page("pages/leaderboard.py")
    protocol = at.selectbox(key="lb_protocol_vanilla")
    plain_label = "persobench · vanilla · 110 tokens · T=0 · policy robust"
    assert protocol.value == plain_label and protocol.options == [plain_label, plain_label + " · structured"]
    assert set(ranking(at)["model"]) == {"local:smollm2", "baseline:reference"}
    assert not any("not measured" in str(i.value) for i in at.info)
    assert any("on their own board" in str(c.value) for c in at.caption)  # where the structured runs went

    protocol.set_value(plain_label + " · structured").run()
    assert not at.exception
    assert list(ranking(at)["model"]) == ["local:smollm2 +structured"]
    assert any(str(i.value) == BOARD_NOTE[0].upper() + BOARD_NOTE[1:] + "." for i in at.info)

    at.toggle(key="lb_side_by_side").set_value(True).run()
    labels = set(ranking(at)["model"])
    assert any(label.startswith("local:smollm2 +structured (") for label in labels) and len(labels) == 3
    assert any("not measured for structured runs" in str(i.value) for i in at.info)

@pytest.fixture(scope="module")
def demo_store(tmp_path_factory):
    return build_demo_store(tmp_path_factory.mktemp("demo") / "home")


def test_landing_page_of_the_demo_store_tells_the_story_on_first_render(demo_store, monkeypatch):
    """After `make run` the first screen shows SmolLM2 plain and structured beside both baselines, across
    their protocols, with each run's valid share, one chart and the one-sentence note: no click needed."""
    monkeypatch.setenv("PERSOBENCH_HOME", str(demo_store["home"]))
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()  # the landing page, first render
    assert not at.exception, [e.message for e in at.exception]
    story = frame_by_columns(at, "model", "kind", "valid (vanilla)", "valid (cot)").set_index("model")
    assert list(story.index) == ["local:smollm2", "local:smollm2 +structured", "baseline:persona-echo",
                                 "baseline:reference"]
    assert story.loc["local:smollm2", "valid (vanilla)"] == 0.0 and story.loc["local:smollm2", "valid (cot)"] == 0.0
    assert story.loc["local:smollm2 +structured", "valid (vanilla)"] == 1.0
    assert story.loc["baseline:reference", "rougeL (cot)"] == pytest.approx(1.0)  # lexical only: ROUGE-L shown
    assert story.loc["local:smollm2", "rougeL (vanilla)"] == 0.0  # invalid replies scored worst
    assert story.loc["local:smollm2 +structured", "rougeL (vanilla)"] > 0
    n = 2 * demo_store["limit"]
    assert any(f"as asked, 0 of its {n} replies are valid" in str(i.value)
               and f"structured output, which guarantees the reply's JSON shape, {n} of its {n}" in str(i.value)
               for i in at.info)
    # the story's chart above the board, the rank metric's CI chart below it (the open tab)
    assert [c.key for c in at.get("plotly_chart")] == ["lb_demo_chart", "lb_rank_chart"]
    # The regular board is still there below, with its widgets; its default protocol is the plain one.
    assert "structured" not in at.selectbox(key="lb_protocol_vanilla").value
    assert set(ranking(at)["model"]) == {"local:smollm2", "baseline:persona-echo", "baseline:reference"}


def test_landing_page_of_another_store_has_no_demo_story(env):
    at = open_page("pages/leaderboard.py")
    assert "The demo at a glance" not in rendered_text(at)
    assert [c.key for c in at.get("plotly_chart")] == ["lb_rank_chart"]


# ---- data and metrics --------------------------------------------------------------------------


def test_data_page_fetches_the_paper_data_in_the_background(tmp_path, monkeypatch, reference_dir):
    """Clicking the Data page's fetch button (mirror URL typed, no scoring) launches the background
    download from a slow local mirror; the page shows the job with the download's progress, then
    the job completed and the data fetched."""
    import hashlib

    from persobench.jobs import JobManager
    from persobench.store.run_store import RunStore
    from tests.test_fetch_paper import ArchiveServer, build_archive

    home = tmp_path / "home"
    monkeypatch.setenv("PERSOBENCH_HOME", str(home))
    monkeypatch.delenv("PERSOBENCH_REFERENCE", raising=False)
    body = build_archive(reference_dir, "zip")
    at = open_page("pages/data.py")
    assert "The paper's data in one step" in rendered_text(at) and "Already fetched" not in rendered_text(at)
    with ArchiveServer(body) as server:
        server.chunk_delay = 4.0 / (len(body) // 65536 + 1)  # about 4 s for the whole archive
        at.radio(key="data_import_score").set_value("none")
        at.text_input(key="data_fetch_url").input(server.url()).run()
        at.button(key="data_fetch_go").click().run()
        assert not at.exception
        jobs = JobManager(home)
        [job] = jobs.jobs()  # launched by the click
        assert job.steps[0].kind == "fetch" and job.steps[0].request.url == server.url()
        assert len(job.steps) == 1  # "do not score"

        def progress_shown():
            at.run()
            bars = [str(p.proto.text) for p in at.get("progress")]
            return [b for b in bars if b.startswith("downloaded ") and " of " in b]

        shown = wait_for(progress_shown, timeout=60, interval=0.2)
        assert shown[0].endswith(f"of {len(body) / 2**20:.1f} MiB")
        assert "fetch the paper\\'s data** · running" in rendered_text(at)  # the job card (Markdown-escaped)
        job = wait_for(lambda: (s := jobs.jobs()) and not s[0].active and s[0])
    assert job.state == "completed", job.message
    marker = (home / "reference" / "FETCHED.json").read_text()
    assert hashlib.sha256(body).hexdigest() in marker
    assert {r.manifest.model_label for r in RunStore(home).runs()} == {"gpt-4o-mini", "Gemma-7B-Instruct"}
    at.run()
    text = rendered_text(at)
    assert "Already fetched" in text and "fetch the paper\\'s data** · completed" in text


def test_data_page_lists_datasets_and_previews_imports(env, tmp_path):
    at = open_page("pages/data.py")
    datasets = frame_by_columns(at, "dataset", "kind", "samples")
    assert int(datasets.set_index("dataset").loc["sample", "samples"]) == 30
    assert any("I grow tomatoes" in str(t.value) for t in at.text)
    at.text_input(key="data_import_folder").input(str(tmp_path / "nowhere")).run()
    assert not at.exception
    assert any("no such folder" in str(w.value) for w in at.warning)


def test_data_page_import_preview_of_the_paper_layout(env, reference_dir):
    at = open_page("pages/data.py")
    at.text_input(key="data_import_folder").input(str(reference_dir)).run()
    preview = frame_by_columns(at, "folder", "dataset", "model", "mode")
    assert len(preview) >= 40 and {"vanilla", "cot"} <= set(preview["mode"])


def test_metrics_page_shows_the_papers_ranking_published_and_recomputed(env, reference_dir, monkeypatch):
    """The published CoT order (from plots_and_ranking.ipynb's typed inputs) beside the order the
    published cells give: ranks 2-4 differ, each with the typed inputs that are not the cell's."""
    monkeypatch.setenv("PERSOBENCH_REFERENCE", str(reference_dir))
    at = open_page("pages/metrics.py")
    ranking = frame_by_columns(at, "published rank", "recomputed rank", "differs")
    by_model = ranking.set_index("model")
    assert list(ranking["model"][:4]) == ["Llama3-1-8B-Instruct", "gpt-4o-mini", "gpt-3.5-turbo", "Mistral-7B-Instruct"]
    assert [by_model.loc[m, "recomputed rank"] for m in ("gpt-3.5-turbo", "Mistral-7B-Instruct", "gpt-4o-mini")] == [
        2, 3, 4]
    assert by_model.loc["gpt-4o-mini", "published score"] == 43.4  # the notebook's printed table
    assert "coherence 45 (cell 37)" in by_model.loc["gpt-4o-mini", "differs"]
    # the one typed input that moves ranks on its own, and the unscaled failure ratio that does not
    assert by_model.loc["gpt-4o-mini", "changes rank"].startswith("coherence: ")
    assert "instructability 0.94 instead of 0.45" in by_model.loc["Gemma-7B-Instruct", "differs"]
    assert by_model.loc["Gemma-7B-Instruct", "changes rank"] == ""
    assert any("3 of 8 models change rank" in c.value for c in at.caption)
    slips = frame_by_columns(at, "figure", "drawn", "cell")
    assert {"engagingness", "coherence"} <= set(slips["quantity"])
    at.segmented_control(key="metrics_ranking_mode").set_value("vanilla").run()
    vanilla = frame_by_columns(at, "published rank", "recomputed rank")
    assert (vanilla["published rank"] == vanilla["recomputed rank"]).all()
    differs = vanilla.set_index("model")["differs"]
    assert differs["Mistral-7B-Instruct"] == "failure ratio 4.35 (cell 0.435, typed x10, as the other failure ratios: harmless)"
    assert "instructability 0.95 instead of 0.51" in differs["gemini-1.5-pro"]
    monkeypatch.setenv("PERSOBENCH_REFERENCE", str(reference_dir.parent / "nowhere"))
    at = open_page("pages/metrics.py")
    assert not at.exception and any("fetch them on the Data page" in i.value for i in at.info)


def test_metrics_page_explains_metrics_and_backends(env):
    from persobench.metrics import METRICS

    at = open_page("pages/metrics.py")
    table = frame_by_columns(at, "metric", "dimension", "range", "better")
    assert list(table["metric"]) == list(METRICS)
    provenance = frame_by_columns(at, "metric", "status", "model_id", "reason")
    assert set(LEXICAL) <= set(provenance["metric"])
    unavailable = provenance[provenance["status"] == "unavailable"]
    assert {"c_score", "unieval_groundedness"} <= set(unavailable["metric"])
    assert unavailable["reason"].str.contains("needs").all()


# ---- new run: estimate, launch, cancel, resume -------------------------------------------------


def wait_for(predicate, timeout: float = 90.0, interval: float = 0.3):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("timed out waiting")


def test_new_run_estimate_then_launch_in_the_background(tmp_path, monkeypatch):
    from persobench.jobs import JobManager

    home = tmp_path / "home"
    monkeypatch.setenv("PERSOBENCH_HOME", str(home))
    at = open_page("pages/new_run.py")
    at.multiselect(key="new_models").set_value(["baseline:persona-echo"]).run()
    at.number_input(key="new_limit").set_value(4).run()
    estimate = frame_by_columns(at, "dataset", "model", "mode", "requests", "cached")
    assert estimate.iloc[0]["requests"] == 4 and estimate.iloc[0]["cached"] == 0
    at.selectbox(key="new_profile").set_value("(do not score)").run()
    at.selectbox(key="new_concurrency").set_value("auto").run()
    at.button(key="new_launch").click().run()
    assert not at.exception
    jobs = JobManager(home)
    job = wait_for(lambda: (s := jobs.jobs()) and not s[0].active and s[0])
    assert job.state == "completed", job.message
    assert len(job.run_ids) == 1
    assert job.steps[0].request.config.concurrency == "auto"
    # The same estimate now comes from the cache.
    at.run()
    estimate = frame_by_columns(at, "dataset", "model", "mode", "requests", "cached")
    assert estimate.iloc[0]["requests"] == 0 and estimate.iloc[0]["cached"] == 4
    assert "completed" in rendered_text(at)


def test_new_run_reports_missing_key_without_launching(tmp_path, monkeypatch):
    monkeypatch.setenv("PERSOBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    at = open_page("pages/new_run.py")
    at.text_input(key="new_model_name").input("gpt-4o-mini").run()
    at.button(key="new_add_model").click().run()
    assert "openai:gpt-4o-mini" in at.multiselect(key="new_models").value
    estimate = frame_by_columns(at, "model", "problem")
    row = estimate[estimate["model"] == "openai:gpt-4o-mini"].iloc[0]
    assert "OPENAI_API_KEY" in row["problem"]
    assert row["max_cost_usd"] > 0


def test_new_run_offers_the_paper_presets_and_a_template_choice(tmp_path, monkeypatch):
    from persobench.jobs import launch_steps

    monkeypatch.setenv("PERSOBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    at = open_page("pages/new_run.py")
    options = at.multiselect(key="new_models").options
    for preset in ("gpt-3.5-turbo", "gpt-4-turbo", "gpt-4o-mini", "gemini-1.5-pro", "mistral-7b-instruct",
                   "qwen2-7b-instruct", "gemma-7b-it", "llama-3.1-8b-instruct", "gemma-7b-it-vllm"):
        assert preset in options
    at.multiselect(key="new_models").set_value(["gemini-1.5-pro", "gemma-7b-it"]).run()
    estimate = frame_by_columns(at, "model", "template", "problem").set_index("model")
    assert estimate.loc["gemini-1.5-pro", "template"] == "paper" and estimate.loc["gemma-7b-it", "template"] == "paper-open"
    assert "GEMINI_API_KEY" in estimate.loc["gemini-1.5-pro", "problem"]
    assert estimate.loc["gemini-1.5-pro", "max_cost_usd"] > 0
    at.selectbox(key="new_template").set_value("persobench").run()
    assert not at.exception
    estimate = frame_by_columns(at, "model", "template").set_index("model")
    assert set(estimate["template"]) == {"persobench"}
    from persobench.jobs import LaunchChoice, plan_launch

    plans = plan_launch(tmp_path / "home", [LaunchChoice("sample", "gemma-7b-it", "cot", None, "persobench")], limit=2)
    config = launch_steps(plans, limit=2, profile=None)[0].request.config
    assert config.template == "persobench"


def test_new_run_structured_output_checkbox_launches_a_structured_run(tmp_path, monkeypatch):
    """The checkbox reaches the estimate and the run step (`run --structured`): the run launched from the
    page asks the server for the reply schema and its manifest, protocol and label say structured."""
    from persobench.jobs import JobManager, RunRequest
    from persobench.prompts.protocol import protocol_of
    from persobench.store.run_store import RunStore
    from tests.fakes import FakeLLMServer

    home = tmp_path / "home"
    monkeypatch.setenv("PERSOBENCH_HOME", str(home))
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_SECRET)
    with FakeLLMServer("openai") as server:
        monkeypatch.setenv("PERSOBENCH_KEY_HOSTS", server.base_url)
        at = open_page("pages/new_run.py")
        at.text_input(key="new_model_name").input("fake-json").run()
        at.text_input(key="new_base_url").input(server.base_url).run()
        at.button(key="new_add_model").click().run()
        at.multiselect(key="new_models").set_value(["openai:fake-json", "baseline:reference"]).run()
        at.number_input(key="new_limit").set_value(3).run()
        at.selectbox(key="new_profile").set_value("(do not score)").run()
        estimate = frame_by_columns(at, "model", "structured").set_index("model")
        assert not estimate["structured"].any()
        at.checkbox(key="new_structured").check().run()
        assert not at.exception
        estimate = frame_by_columns(at, "model", "structured").set_index("model")
        assert bool(estimate.loc["openai:fake-json", "structured"]) is True
        assert bool(estimate.loc["baseline:reference", "structured"]) is False  # baselines ignore it
        assert any("Structured output on for 1 run(s)" in str(c.value) for c in at.caption)
        at.button(key="new_launch").click().run()
        assert not at.exception
        jobs = JobManager(home)
        job = wait_for(lambda: (s := jobs.jobs()) and not s[0].active and s[0])
        assert job.state == "completed", job.message
        configs = [step.request.config for step in job.steps if isinstance(step.request, RunRequest)]
        assert any(c.model == "openai:fake-json" and c.structured for c in configs)
        assert not any(c.model == "baseline:reference" and c.structured for c in configs)
        assert {(r.body.get("response_format") or {}).get("type") for r in server.requests} == {"json_schema"}
    runs = {r.manifest.model_label: r for r in RunStore(home).runs()}
    assert set(runs) == {"openai:fake-json +structured", "baseline:reference"}
    structured = runs["openai:fake-json +structured"]
    assert structured.manifest.parameters["structured"] is True and protocol_of(structured).structured
    assert not protocol_of(runs["baseline:reference"]).structured

def test_new_run_takes_the_key_from_streamlit_secrets_and_never_shows_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PERSOBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    secret = "sk-from-streamlit-secrets-0123456789"
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.secrets["OPENAI_API_KEY"] = secret
    at.run()
    at.switch_page("pages/new_run.py")
    at.run()
    at.text_input(key="new_model_name").input("gpt-4o-mini").run()
    at.button(key="new_add_model").click().run()
    assert not at.exception
    estimate = frame_by_columns(at, "model", "problem")
    row = estimate[estimate["model"] == "openai:gpt-4o-mini"].iloc[0]
    assert row["problem"] == ""  # the secret satisfies the key check
    assert secret not in rendered_text(at)


def test_job_runs_once_cancels_and_resumes_without_repeating_requests(tmp_path, monkeypatch):
    """A second launch while running starts nothing; cancel stops it; resume finishes it and the
    server never sees a prompt twice (the replies received before the cancel come from the cache)."""
    from persobench.jobs import JobManager, plan_launch, LaunchChoice, launch_steps
    from tests.fakes import FakeLLMServer

    home = tmp_path / "home"
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_SECRET)
    with FakeLLMServer("openai", latency=0.4) as server:
        plans = plan_launch(home, [LaunchChoice("sample", "openai:slow-model", "vanilla", server.base_url)], limit=12)
        steps = launch_steps(plans, limit=12, profile=None, concurrency=1)
        jobs = JobManager(home)
        job_id, started = jobs.launch("slow", steps)
        assert started
        again_id, again = jobs.launch("slow", steps)
        assert again_id == job_id and not again, "a second click does not start it twice"
        other_id, other = jobs.launch("another job writing the same run", steps)
        assert other_id == job_id and not other, "no second writer for a run in progress"
        wait_for(lambda: len(server.requests) >= 3)
        jobs.cancel(job_id)
        status = wait_for(lambda: (s := jobs.status(job_id)) and not s.active and s)
        assert status.state == "cancelled"
        before = len(server.requests)
        assert 3 <= before < 12
        _, started = jobs.resume(job_id)
        assert started
        status = wait_for(lambda: (s := jobs.status(job_id)) and not s.active and s)
        assert status.state == "completed", status.message
        # A cancel abandons the request in flight at once (issue 9 item 11): that one prompt, never
        # answered, is the only one sent again; every reply received before the cancel is cached.
        repeated = [prompt for prompt, n in server.counts.items() if n > 1]
        assert len(repeated) <= 1 and max(server.counts.values()) <= 2, "no received reply was requested again"
        assert len(server.counts) == 12 and len(server.requests) == 12 + len(repeated)
    progress = jobs.progress(status)
    assert progress[0]["done"] == 12 and progress[0]["total"] == 12


def test_killed_job_shows_interrupted_and_resumes(tmp_path, monkeypatch):
    """SIGKILL of the job's runner: the job is interrupted. Its ``run`` child goes on alone, so while
    that child holds the run, the job says so and Resume is not offered (a resumed run would stop
    at the run's lock, exit status 2: how this test once failed in CI); once it ends, Resume
    completes the job without requesting any reply twice."""
    import os
    import signal
    import threading

    from persobench.errors import ConfigurationError
    from persobench.generation import GenerationConfig, plan_generation
    from persobench.store.locks import lock_holder
    from persobench.jobs import JobManager, JobStep, RunRequest
    from persobench.store.run_store import RunStore
    from tests.fakes import FakeLLMServer

    home = tmp_path / "home"
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_SECRET)
    gate = threading.Event()
    arrivals = iter(range(1, 10_000))

    def hold_from_the_third(info):
        if next(arrivals) >= 3:
            gate.wait(60)  # the orphaned child stays on its third request until the test lets it go
        return None

    with FakeLLMServer("openai", latency=0.2, script=hold_from_the_third) as server:
        plan = plan_generation(GenerationConfig(dataset="sample", model="openai:slow-model", base_url=server.base_url,
                                                limit=8, concurrency=1), store=RunStore(home))
        step = JobStep("slow run", RunRequest(config=plan.config),
                       {"dataset": "sample", "model": "openai:slow-model", "mode": "vanilla"}, run_id=plan.run_id)
        jobs = JobManager(home)
        job_id, _ = jobs.launch("killed", [step])
        wait_for(lambda: len(server.requests) >= 3)
        pid = int((jobs.job_dir(job_id) / "lock").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)  # the runner we started, by its id (its child keeps going)
        status = wait_for(lambda: (s := jobs.status(job_id)) and s.state == "interrupted" and s)
        run_dir = home / "runs" / plan.run_id
        orphan = lock_holder(run_dir)
        assert orphan and orphan != pid, "the run's own process still holds the run"
        assert status.busy and status.busy_run == plan.run_id and not status.resumable
        assert f"still being generated by process {orphan}" in status.message
        with pytest.raises(ConfigurationError, match="still being generated"):
            jobs.resume(job_id)
        monkeypatch.setenv("PERSOBENCH_HOME", str(home))
        at = open_page("pages/new_run.py")
        keys = {b.key for b in at.button}
        assert f"cancel-{job_id}" in keys and f"resume-{job_id}" not in keys  # Cancel stops the orphan
        assert f"still being generated by process {orphan}" in rendered_text(at)
        gate.set()
        status = wait_for(lambda: (s := jobs.status(job_id)) and s.resumable and s)
        assert lock_holder(run_dir) is None and len(server.requests) == 8 and not status.busy
        _, started = jobs.resume(job_id)
        assert started
        status = wait_for(lambda: (s := jobs.status(job_id)) and not s.active and s)
        assert status.state == "completed", status.message
        assert max(server.counts.values()) == 1


def test_leaderboard_distributions_use_the_boards_common_samples(tmp_path, monkeypatch):
    """A 10-sample run beside a 4-sample run: the distribution of each has the 4 common samples, as
    the board's n; with "All samples", each run's own."""
    import json

    from persobench.store.run_store import RunStore
    from tests.test_aggregate import ALL, make_protocol_run

    store = RunStore(tmp_path / "home")
    make_protocol_run(store, model="big", ids=ALL, dist1=[i / 10 for i in range(10)])
    make_protocol_run(store, model="small", ids=ALL[:4])
    make_protocol_run(store, model="other", ids=ALL, temperature=0.7)  # another protocol: not on this board
    monkeypatch.setenv("PERSOBENCH_HOME", str(store.home))

    def points(at: AppTest) -> dict[str, int]:
        [chart] = [c for c in at.get("plotly_chart") if "lb_dist" in c.proto.id]
        spec = json.loads(chart.proto.spec)
        sizes = {}
        for trace in spec["data"]:
            y = trace["y"]
            if isinstance(y, dict):  # plotly's typed array: {"dtype", "bdata" (base64)}
                import base64

                import numpy as np

                y = np.frombuffer(base64.b64decode(y["bdata"]), dtype=y["dtype"])
            sizes[trace["name"]] = len(y)
        return sizes

    at = open_page("pages/leaderboard.py")
    assert ranking(at).set_index("model")["n"].to_dict() == {"big": 4, "small": 4}
    assert not [c for c in at.get("plotly_chart") if "lb_dist" in c.proto.id]  # a closed tab runs nothing
    at.session_state["lb_chart_tab"] = "Distributions"  # what a click on the tab does
    at.run()
    assert points(at) == {"big": 4, "small": 4}
    at.toggle(key="lb_all_samples").set_value(True).run()
    assert not at.exception
    assert points(at) == {"big": 10, "small": 4}


def test_job_card_buttons_on_a_stale_status_show_one_line_errors(tmp_path):
    """The card drawn from a status read just before the job changed (resumed in another tab, or
    its run taken by an orphaned process): Remove and Resume then fail in the manager, and the card
    says why in one line instead of raising."""
    import json
    import os

    from persobench.generation import GenerationConfig
    from persobench.generation.lock import hold_run_lock
    from persobench.jobs import JobManager, JobStep, RunRequest

    home = tmp_path / "home"
    jobs = JobManager(home)

    def make_job(job_id: str, run_id: str, **state) -> None:
        step = JobStep("echo run", RunRequest(config=GenerationConfig(dataset="sample", model="baseline:persona-echo")),
                       {"dataset": "sample", "model": "baseline:persona-echo", "mode": "vanilla"}, run_id=run_id)
        folder = jobs.job_dir(job_id)
        folder.mkdir(parents=True)
        (folder / "job.json").write_text(json.dumps({"title": job_id, "steps": [step.to_dict()],
                                                     "created_at": "2026-12-03T00:00:00Z"}))
        (folder / "state.json").write_text(json.dumps(state))

    def card(home: str, job_id: str, state: str) -> None:
        from persobench.app.widgets import job_card
        from persobench.jobs import JobManager, JobStatus

        manager = JobManager(home)
        stale = JobStatus(job_id=job_id, title=job_id, state=state, steps=manager.status(job_id).steps)
        job_card(manager, stale)

    # Remove: the job runs again (its runner, a live pid just launched, holds the job's lock).
    make_job("again", "r-again", state="running", step=0)
    (jobs.job_dir("again") / "lock").write_text(f"{os.getpid()}\n")
    at = AppTest.from_function(card, args=(str(home), "again", "completed"), default_timeout=30).run()
    at.button(key="forget-again").click().run()
    assert not at.exception and len(at.error) == 1
    assert "still running" in at.error[0].value and "cancel it first" in at.error[0].value
    assert (jobs.job_dir("again") / "job.json").exists()
    # Resume: interrupted, but its run is held by a live process (here, this one).
    make_job("orphaned", "r-orphaned", state="running", step=0)
    run_dir = home / "runs" / "r-orphaned"
    run_dir.mkdir(parents=True)
    with hold_run_lock(run_dir):
        at = AppTest.from_function(card, args=(str(home), "orphaned", "failed"), default_timeout=30).run()
        at.button(key="resume-orphaned").click().run()
    assert not at.exception and len(at.error) == 1
    assert "r-orphaned is still being generated by process" in at.error[0].value.replace("\\", "")
    assert set(jobs.job_ids()) == {"orphaned", "again"}  # nothing removed, nothing launched


def test_data_page_fetch_needs_no_consent_with_the_complete_manifest(tmp_path, monkeypatch):
    """The packaged content manifest pins every file of the commit: the default download verifies
    everything, so the page offers no checkbox to accept unpinned files and the step does not trust them."""
    from persobench.jobs import FetchRequest, JobManager

    home = tmp_path / "home"
    monkeypatch.setenv("PERSOBENCH_HOME", str(home))
    at = open_page("pages/data.py")
    assert not [box for box in at.checkbox if box.key == "data_fetch_trust"]
    at.radio(key="data_import_score").set_value("none")
    at.button(key="data_fetch_go").click().run()
    assert not at.exception
    [job] = JobManager(home).jobs()
    assert job.steps[0].request == FetchRequest(url=None, trust_unpinned=False)
    JobManager(home).cancel(job.job_id)
