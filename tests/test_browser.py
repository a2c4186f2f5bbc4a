"""The real app in Debian's headless Chromium (driven by Playwright): every page renders without an
exception, untrusted text stays inert, and a screenshot of each page is saved.

Starts ``streamlit run app.py`` on a free 127.0.0.1 port with PERSOBENCH_HOME pointing at the test
store (``tests/app_store.py``). Screenshots go to ``$PERSOBENCH_SCREENSHOT_DIR`` or
``cache/screenshots/browser-test`` (the test prints the folder). Skips when /usr/bin/chromium or
Playwright is missing (``make browser`` installs Chromium).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

import pytest

from persobench.app.chrome import PAGES as NAVIGATION
from tests.app_store import EVIL_SAMPLE, shared_app_store
from tests.fakes.fixtures import OPENAI_SECRET

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run"]
SCREENSHOT_DIR = Path(os.environ.get("PERSOBENCH_SCREENSHOT_DIR") or ROOT / "cache" / "screenshots" / "browser-test")

#: DOM queries that must find nothing in the app's main area: what the injected strings would
#: have produced had they been rendered as HTML or Markdown.
FORBIDDEN = {
    "script element from a reply": 'script:not([src])',
    "image from untrusted text": 'img[src*="example.invalid"], img[src="x"], img[onerror]',
    "javascript: link": 'a[href^="javascript"], a[href*="javascript:"]',
    "iframe": "iframe",
    "bold or red markup from a reply": '[data-testid="stMainBlockContainer"] strong:text("bold")',
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def streamlit_server(tmp_path_factory, store: dict | Path | None = None):
    """``streamlit run app.py`` on a free port over ``store`` (a store dict of ``tests/app_store.py``
    or a store folder; default: the test store of ``tests/app_store.py``); yields url and store."""
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium not installed (run `make browser`)")
    pytest.importorskip("playwright.sync_api")
    if isinstance(store, Path):
        store = {"home": store}
    store = store or shared_app_store(tmp_path_factory)
    env = {**os.environ, "PERSOBENCH_HOME": str(store["home"]), "OPENAI_API_KEY": OPENAI_SECRET,
           "PYTHONUNBUFFERED": "1"}
    folder = tmp_path_factory.mktemp("streamlit")
    for attempt in range(3):
        # The port is free when asked for, but not held: another process (a pytest-xdist worker's server, any
        # outgoing connection) may take it before Streamlit binds it, and Streamlit then exits at once.
        port = free_port()
        log = open(folder / f"server-{attempt}.log", "wb")
        proc = subprocess.Popen(
            # No --server.address: the repo's .streamlit/config.toml must bind 127.0.0.1 on its own.
            [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.port", str(port),
             "--server.headless", "true", "--browser.gatherUsageStats", "false"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        deadline, started = time.monotonic() + 60, False
        while not started and proc.poll() is None and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                    started = response.status == 200
            except OSError:
                pass
            if not started:
                time.sleep(0.3)
        if proc.poll() is None or f"Port {port} is not available" not in Path(log.name).read_text(errors="replace"):
            break
        log.close()
    try:
        if not started:
            raise RuntimeError(f"streamlit did not start (exit {proc.poll()}); see {log.name}")
        yield {"url": url, "store": store, "port": port, "log": Path(log.name)}
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with streamlit_server(tmp_path_factory) as running:
        yield running


@contextlib.contextmanager
def chromium_browser():
    """Debian's headless Chromium driven by Playwright, closed after the block."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="module")
def browser(server):
    with chromium_browser() as chromium:
        yield chromium


#: Every request a page made to somewhere other than this machine (issue 9 item 12: there must be none).
OFF_MACHINE: list[str] = []
#: Every URL :func:`load` opened, its requests recorded in OFF_MACHINE from its first one.
LOADED: set[str] = set()


def _record_off_machine(request) -> None:
    from urllib.parse import urlsplit

    parts = urlsplit(request.url)
    if parts.scheme in ("http", "https", "ws", "wss") and parts.hostname not in ("127.0.0.1", "localhost"):
        OFF_MACHINE.append(request.url)


def load(browser, url: str, *, height: int = 1800):
    """Open ``url`` in a fresh page and wait until the script has finished and the DOM settled."""
    page = browser.new_page(viewport={"width": 1400, "height": height})
    page.on("request", _record_off_machine)
    LOADED.add(url)
    page.goto(url)
    page.wait_for_selector('[data-testid="stMainBlockContainer"] h1', timeout=60_000)
    deadline = time.monotonic() + 60
    while page.get_attribute('[data-testid="stApp"]', "data-test-script-state") != "notRunning":
        if time.monotonic() > deadline:
            raise AssertionError(f"{url}: the script did not finish")
        time.sleep(0.2)
    page.wait_for_load_state("networkidle")
    time.sleep(1.0)  # charts and data grids draw after the script ends
    return page


def screenshot(page, path: Path) -> None:
    """The whole page: Streamlit scrolls inside its main area, so grow the viewport to fit it."""
    height = page.evaluate("document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
    page.set_viewport_size({"width": 1400, "height": min(max(int(height) + 40, 900), 9000)})
    time.sleep(1.0)
    page.screenshot(path=str(path), full_page=True)


def check_page(page, name: str) -> str:
    """No exception box, no secret, no traceback; returns the visible text."""
    assert page.locator('[data-testid="stException"]').count() == 0, f"{name}: exception shown"
    text = page.inner_text('[data-testid="stMain"]')
    assert "Traceback" not in text, name
    html = page.content()
    assert OPENAI_SECRET not in html, f"{name}: API key in the page"
    assert page.evaluate("window.__pwned") is None, f"{name}: injected code ran"
    return text


def assert_inert(page, name: str) -> None:
    main = page.locator('[data-testid="stMain"]')
    for what, selector in FORBIDDEN.items():
        assert main.locator(selector).count() == 0, f"{name}: {what} was created ({selector})"


#: (name, URL path) of every page of the navigation (persobench.app.chrome.PAGES) but Explore, which has its
#: own test below; the landing page is served at "/".
PAGES = [(url, "/" if index == 0 else f"/{url}") for index, (_path, _title, _icon, url) in enumerate(NAVIGATION)
         if url != "explore"]


def test_every_page_renders_and_is_saved(server, browser):
    """Every page but Explore (its own test below, on the injected reply)."""
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    print(f"\nscreenshots in {SCREENSHOT_DIR}")
    for name, path in PAGES:
        page = load(browser, server["url"] + path)
        try:
            text = check_page(page, name)
            assert len(text) > 100, f"{name}: page is (nearly) empty"
            assert "Page not found" not in page.inner_text("body"), f"{path} does not resolve"
            assert_inert(page, name)
            if name == "failures":
                assert "Raw output" in text and "Prompt" in text
            screenshot(page, SCREENSHOT_DIR / f"{name}.png")
        finally:
            page.close()
        assert (SCREENSHOT_DIR / f"{name}.png").stat().st_size > 10_000


def test_no_request_leaves_this_machine(server, browser):
    """Issue 9 item 12: page icon, fonts and scripts all come from the app itself. Every page is loaded
    once (a page an earlier test of the module loaded had its requests recorded then, screenshots and
    clicks included: 30 s of loading every page twice saved), and no request of any left this machine."""
    for _name, path in [*PAGES, ("explore", "/explore")]:
        if server["url"] + path not in LOADED:
            load(browser, server["url"] + path).close()
    assert {server["url"] + path for _name, path in PAGES} <= LOADED
    assert OFF_MACHINE == [], f"requests left 127.0.0.1: {sorted(set(OFF_MACHINE))}"


def test_app_listens_on_this_machine_only(server):
    """Bound to 127.0.0.1 by .streamlit/config.toml: not reachable on the machine's network address."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))  # picks the outgoing interface; sends nothing
            address = probe.getsockname()[0]
        except OSError:
            address = "127.0.0.1"
    if address.startswith("127."):
        pytest.skip("this machine has no network address besides loopback")
    with pytest.raises(OSError):
        socket.create_connection((address, server["port"]), timeout=3).close()
    assert "Network URL" not in server["log"].read_text(errors="replace")


def test_explore_shows_the_injected_reply_as_inert_text(server, browser):
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    page = load(browser, server["url"] + f"/explore?dataset=sample&sample={quote(EVIL_SAMPLE)}")
    try:
        text = check_page(page, "explore")
        assert_inert(page, "explore")
        # The reply is visible, character for character, as text.
        assert "<script>window.__pwned = 1</script>" in text
        assert '<img src=x onerror="window.__pwned = 2">' in text
        assert "[click me](javascript:window.__pwned=3)" in text
        assert "![tracker](https://example.invalid/pixel.png)" in text
        assert ":red[red] $x^2$ **bold**" in text
        # The raw outputs (expanders) are plain code text too.
        for expander in page.get_by_text("Raw output").all():
            expander.click()
        time.sleep(0.5)
        assert_inert(page, "explore raw output")
        assert page.evaluate("window.__pwned") is None
        screenshot(page, SCREENSHOT_DIR / "explore.png")
    finally:
        page.close()


def test_injected_persona_and_context_stay_inert(server, browser):
    dataset = quote(server["store"]["evil_dataset"], safe="")
    page = load(browser, server["url"] + f"/explore?dataset={dataset}&sample=evil:0")
    try:
        text = check_page(page, "explore (untrusted dataset)")
        assert_inert(page, "explore (untrusted dataset)")
        assert '<img src=x onerror="window.__pwned=7">' in text
        assert "[this](javascript:window.__pwned=8)" in text
        assert "Tomatoes <script>window.__pwned=9</script> and herbs." in text
        screenshot(page, SCREENSHOT_DIR / "explore-untrusted-dataset.png")
    finally:
        page.close()


def test_deep_link_as_the_first_request_gets_the_app_layout(tmp_path_factory, browser):
    """A fresh server whose very first request is a deep link still shows the page inside app.py's
    navigation (sidebar with every page and the store summary), with its query parameters kept."""
    with streamlit_server(tmp_path_factory) as fresh:
        page = load(browser, fresh["url"] + "/explore?dataset=sample&sample=sample:3")
        try:
            check_page(page, "explore (first request)")
            sidebar = page.inner_text('[data-testid="stSidebar"]')
            for title in ("Leaderboard", "New run", "Explore", "Failures", "Compare", "Data", "Metrics"):
                assert title in sidebar, f"{title} missing from the navigation: {sidebar!r}"
            assert "Run store:" in sidebar
            assert "Dialogue sample:3" in page.inner_text('[data-testid="stMain"]')
            assert "sample=sample" in page.url
        finally:
            page.close()
