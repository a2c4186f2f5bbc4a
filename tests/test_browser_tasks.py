"""The user's tasks of issue 37 in Debian's headless Chromium, on the store a user has after importing the
paper's 58 published runs and scoring them with the lexical metrics: rank by each metric; open a shared
link in a new browser context and see the same view on every page; find the model that fails most and
open three of its failed replies; open one dialogue side by side; download CSV and JSON (what
``export_board`` gives for the board on screen, also when clicked during a rerun) and the HTML report,
and open the report offline with zero requests and zero share buttons.

Shares the server and browser set-up of ``tests/test_browser.py`` (one ``streamlit run`` for the module).
"""

from __future__ import annotations

import io
import json
import re
import time
from urllib.parse import parse_qs, urlsplit

import pandas as pd
import pytest

from tests.app_store import shared_paper_store
from tests.test_browser import SCREENSHOT_DIR, check_page, chromium_browser, streamlit_server

pytestmark = pytest.mark.browser

#: What a share button of a Plotly chart is called in its toolbar (it opens a page on a cloud host).
SHARE_BUTTONS = '.modebar-btn[data-title*="share" i], .modebar-btn[data-title*="chart studio" i]'


@pytest.fixture(scope="module")
def paper(tmp_path_factory, reference_dir):
    return shared_paper_store(tmp_path_factory, reference_dir)


@pytest.fixture(scope="module")
def server(tmp_path_factory, paper):
    with streamlit_server(tmp_path_factory, paper) as running:
        yield running


@pytest.fixture(scope="module")
def browser(server):
    with chromium_browser() as chromium:
        yield chromium


# ---- driving the page as a user does -------------------------------------------------------------


def settle(page, timeout: float = 90, *, started: float = 0.3) -> None:
    """Wait for the rerun an action started (within ``started`` seconds) to finish."""
    time.sleep(started)
    deadline = time.monotonic() + timeout
    while page.get_attribute('[data-testid="stApp"]', "data-test-script-state") != "notRunning":
        assert time.monotonic() < deadline, "the script did not finish"
        time.sleep(0.1)
    time.sleep(0.2)


def load(browser, url: str):
    """``url`` in a fresh browser context, once its script has finished (the widgets are then drawn;
    tests/test_browser.py's ``load`` also waits for charts to draw, for its screenshots)."""
    page = browser.new_page(viewport={"width": 1400, "height": 1800})
    page.goto(url)
    page.wait_for_selector('[data-testid="stMainBlockContainer"] h1', timeout=60_000)
    settle(page, started=0.2)
    return page


def combobox(page, label: str):
    """A selectbox, by its label (Streamlit draws it as a combobox input named after the label)."""
    return page.get_by_role("combobox", name=label, exact=True)


def shown(page, label: str) -> str:
    """The option a selectbox shows."""
    return combobox(page, label).input_value().strip()


def options(page, label: str) -> list[str]:
    combobox(page, label).click()
    found = [o.strip() for o in page.get_by_role("option").all_inner_texts()]
    page.keyboard.press("Escape")
    return found


def choose(page, label: str, option: str | re.Pattern, *, wait: bool = True) -> None:
    box = combobox(page, label)
    box.click()
    if not page.get_by_role("listbox").is_visible():
        box.press("ArrowDown")  # the click landed while the list was closing: open it from the keyboard
    page.get_by_role("option", name=option, exact=isinstance(option, str)).first.click()
    if wait:
        settle(page)


def open_tab(page, name: str) -> None:
    page.get_by_role("tab", name=name).click()
    settle(page)


def copied_link(page) -> str:
    """The address in the page's "Copy link" popover (what its copy button copies)."""
    page.get_by_role("button", name="Copy link").click()
    code = page.locator('[data-testid="stPopoverBody"] code').first
    code.wait_for()
    link = code.inner_text().strip()
    page.keyboard.press("Escape")
    return link


def query_of(url: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(url).query, keep_blank_values=True)


def finding(page) -> str:
    texts = page.locator('[data-testid="stAlertContentInfo"] [data-testid="stMarkdownContainer"]').all_inner_texts()
    return next(t.strip() for t in texts if t.strip().startswith("By "))


def no_exception(page, where: str) -> str:
    return check_page(page, where)


# ---- the tasks -----------------------------------------------------------------------------------------


def test_rank_by_each_metric(server, browser):
    page = load(browser, server["url"])
    try:
        assert shown(page, "Dataset") == "focus"  # the most runs; the paper's first dataset
        metrics = options(page, "Rank by")
        assert {"rougeL", "dist2", "failure_ratio", "response_time"} <= set(metrics)
        for metric in metrics:
            choose(page, "Rank by", metric)
            no_exception(page, f"rank by {metric}")
            lower = metric in ("failure_ratio", "response_time")
            assert finding(page).startswith(f"By {metric} ({'lower' if lower else 'higher'} is better), ")
            assert query_of(page.url)["rank"] == [metric]
            assert page.locator('[data-testid="stPlotlyChart"]').count() == 1  # the CI chart of that metric
    finally:
        page.close()


def test_a_shared_link_opens_the_same_view_on_every_page(server, browser):
    url = server["url"]
    views = []
    page = load(browser, url + "/leaderboard")  # the landing page's own path resolves
    try:
        assert "Page not found" not in page.inner_text("body")
        choose(page, "Mode", "cot")
        choose(page, "Rank by", "dist2")
        open_tab(page, "Radar")
        views.append(("/", copied_link(page), {"Mode": "cot", "Rank by": "dist2"}, "Radar"))
    finally:
        page.close()
    page = load(browser, url + "/compare")
    try:
        choose(page, "Model B", re.compile(r"^gpt-4o-mini · cot$"))
        choose(page, "Metric", "dist1")
        views.append(("/compare", copied_link(page),
                      {"Model A": shown(page, "Model A"), "Model B": "gpt-4o-mini · cot", "Metric": "dist1"}, None))
    finally:
        page.close()
    page = load(browser, url + "/failures")
    try:
        choose(page, "Status", "empty")
        views.append(("/failures", copied_link(page), {"Status": "empty", "Run": shown(page, "Run")}, None))
    finally:
        page.close()
    page = load(browser, url + "/explore")
    try:
        page.locator('[data-testid="stTextInput"] input').fill("garden")
        page.keyboard.press("Enter")
        settle(page)
        page.get_by_role("button", name="Next ▶").click()
        settle(page)
        dialogue = page.locator("h3").filter(has_text="Dialogue ").first.inner_text()
        views.append(("/explore", copied_link(page), {"Dataset": "focus"}, dialogue))
    finally:
        page.close()
    for path, link, expected, extra in views:
        assert urlsplit(link).path.rstrip("/") == path.rstrip("/"), link
        fresh = load(browser, link)  # a new browser context: nothing but the address
        try:
            no_exception(fresh, f"shared {path}")
            assert {label: shown(fresh, label) for label in expected} == expected, path
            assert query_of(fresh.url) == query_of(link), path
            if path == "/":
                assert fresh.get_by_role("tab", name=extra).get_attribute("aria-selected") == "true"
            if path == "/explore":
                assert fresh.locator('[data-testid="stTextInput"] input').input_value() == "garden"
                assert fresh.locator("h3").filter(has_text="Dialogue ").first.inner_text() == extra
        finally:
            fresh.close()


def test_find_the_model_that_fails_most_and_open_three_failed_replies_then_one_dialogue_side_by_side(server, browser):
    page = load(browser, server["url"])
    try:
        sentence = finding(page)
        model, how = re.search(r"\. (\S+) fails most: .*? invalid, (?:all|mostly) of them (\w+)", sentence).groups()
        page.get_by_role("link", name="Failures").click()
        settle(page)
        no_exception(page, "failures")
        # issue 37: after a filter change the Status box showed "truncated (2912)", its options 2126
        choose(page, "Dataset", "(all)")
        choose(page, "Dataset", "focus")
        assert shown(page, "Status") in options(page, "Status")
        choose(page, "Status", how)
        choose(page, "Run", re.compile(rf"^{re.escape(model)} · vanilla$"))
        grid = page.locator('[data-testid="stDataFrame"]').nth(1)  # the replies of that run and status
        grid.scroll_into_view_if_needed()
        box = grid.bounding_box()
        opened = []
        for row in range(3):
            page.mouse.click(box["x"] + 12, box["y"] + 35 + 35 * row + 17)  # the row's selection box
            settle(page)
            opened.append(page.locator("strong", has_text=re.compile(r"^focus:\d+$")).last.inner_text())
            main = page.inner_text('[data-testid="stMain"]')
            assert "Parse error" in main and "Raw output" in main and "Why it stopped: " in main
        assert len(set(opened)) == 3 and all(o.startswith("focus:") for o in opened), opened
        page.get_by_role("link", name="Open this dialogue side by side in Explore").click()
        settle(page)
        no_exception(page, "explore")
        assert page.locator("h3").filter(has_text="Dialogue ").first.inner_text() == f"Dialogue {opened[-1]}"
        replies = page.locator("h4").filter(has_text="Replies side by side").inner_text()
        assert replies == "Replies side by side (8)"
        text = page.inner_text('[data-testid="stMain"]')
        assert f"{model} · vanilla" in text and "(worst)" in text and "rougeL ↑:" in text
        SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOT_DIR / "explore-side-by-side.png"), full_page=True)
    finally:
        page.close()


def shown_board(home, mode: str = "vanilla"):
    from persobench.aggregate import leaderboard, load_results
    from persobench.prompts.protocol import paper_protocol
    from persobench.store.run_store import RunStore

    board = leaderboard(load_results(RunStore(home), dataset="focus"), dataset="focus", invalid="worst")
    return board[(board["mode"] == mode) & (board["board"] == paper_protocol(mode).label)]


def download(page, button: str, timeout: float = 60_000):
    with page.expect_download(timeout=timeout) as event:
        page.get_by_role("button", name=button).click()
    return event.value


def test_downloads_are_the_board_on_screen_even_during_a_rerun(server, browser, paper):
    from persobench.aggregate import export_board

    page = load(browser, server["url"])
    try:
        board = shown_board(paper["home"])
        csv = download(page, "CSV (long)")
        assert open(csv.path(), encoding="utf-8").read() == export_board(board, "csv")
        assert set(pd.read_csv(io.StringIO(export_board(board, "csv")))["model"]) == set(board["model"])
        data = download(page, "JSON")
        assert open(data.path(), encoding="utf-8").read() == export_board(board, "json")
        json.loads(open(data.path(), encoding="utf-8").read())
        # a click while the page reruns (a filter just changed) still downloads
        choose(page, "Invalid replies", "excluded", wait=False)
        late = download(page, "CSV (long)", timeout=30_000)
        assert late.suggested_filename.startswith("persobench-focus-vanilla-offline-")
        settle(page)
    finally:
        page.close()


def test_the_html_report_opens_offline_with_no_request_and_no_share_button(server, browser, tmp_path):
    """The report's share-button fix is the report's (issue 37 item 9): this test checks what a user gets."""
    page = load(browser, server["url"])
    try:
        report = download(page, "HTML report", timeout=180_000)
        path = tmp_path / "report.html"
        report.save_as(str(path))
    finally:
        page.close()
    context = browser.new_context(offline=True)
    requests: list[str] = []
    context.on("request", lambda request: requests.append(request.url))
    try:
        offline = context.new_page()
        offline.goto(path.as_uri())
        offline.wait_for_selector(".js-plotly-plot", timeout=60_000)
        time.sleep(1.0)
        offline.hover(".js-plotly-plot >> nth=0")  # a chart's toolbar shows on hover
        assert [r for r in requests if r != path.as_uri() and not r.startswith("data:")] == []
        assert "focus" in offline.inner_text("body")
        assert offline.locator(SHARE_BUTTONS).count() == 0, "a chart offers to send itself to a cloud host"
    finally:
        context.close()
