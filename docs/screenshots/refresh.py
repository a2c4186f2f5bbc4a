"""Refresh the docs' screenshots: ``python docs/screenshots/refresh.py [HOME [PAPER_HOME]]``.

Starts ``streamlit run app.py`` over the demo's store (HOME, default ``$PERSOBENCH_HOME`` or
``./cache``; run ``python -m persobench demo`` first) on a free 127.0.0.1 port and saves, with
Debian's headless Chromium driven by Playwright (as tests/test_browser.py does), one screenshot per
page of the app (README.md and docs/app.md show them):

- ``leaderboard.png``: the landing page as ``make run`` opens it, no click: the demo's story
  (SmolLM2 as asked and with structured output beside both baselines, valid shares, one chart)
  above the sample dataset's vanilla board;
- ``new-run.png``: launching a run;
- ``explore.png``: one dialogue with every model's reply;
- ``failures.png``: why the plain replies fail;
- ``compare.png``: SmolLM2 plain vs structured (the Compare page's one-click button);
- ``data.png`` and ``metrics.png``: the datasets and runs, and what each metric means.

With PAPER_HOME, a store holding the paper's published runs (``import-persobench`` of the paper's
data, then ``score --metrics`` of the lexical metrics), three more from a second server over it:

- ``leaderboard-paper.png``: the landing page's finding, ranking (with the paper's own rank) and
  CI chart on FoCus;
- ``explore-paper.png``: one FoCus dialogue with the eight models' replies side by side;
- ``failures-paper.png``: the replies of the model that fails most, one of them opened.
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
from typing import Iterator

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent
CHROMIUM = "/usr/bin/chromium"
WIDTH = 1400


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _settle(page) -> None:
    page.wait_for_selector('[data-testid="stMainBlockContainer"] h1', timeout=120_000)
    deadline = time.monotonic() + 120
    while page.get_attribute('[data-testid="stApp"]', "data-test-script-state") != "notRunning":
        if time.monotonic() > deadline:
            raise RuntimeError("the page script did not finish")
        time.sleep(0.2)
    page.wait_for_load_state("networkidle")
    time.sleep(1.5)  # charts and data grids draw after the script ends


def _save(page, name: str, max_height: int) -> None:
    page.mouse.move(WIDTH - 5, 5)  # no tooltip over the page
    height = page.evaluate("document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
    page.set_viewport_size({"width": WIDTH, "height": min(max(int(height) + 40, 900), max_height)})
    time.sleep(1.0)
    page.screenshot(path=str(OUT / f"{name}.png"))
    print(f"saved {OUT / f'{name}.png'}")


@contextlib.contextmanager
def _server(home: str) -> Iterator[str]:
    """``streamlit run app.py`` over ``home`` on a free port; yields its URL."""
    port = _free_port()
    env = {**os.environ, "PERSOBENCH_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    server = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.port", str(port),
         "--server.headless", "true", "--browser.gatherUsageStats", "false"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.3)
        yield url
    finally:
        server.terminate()
        server.wait(10)


#: (path, screenshot, its maximum height) of each store's pages, in order.
DEMO_PAGES = (("/", "leaderboard", 1500), ("/new-run", "new-run", 1300),
              ("/explore?dataset=sample&sample=sample:15&mode=vanilla&mode=cot", "explore", 1700),
              ("/failures", "failures", 1300), ("/compare", "compare", 1500), ("/data", "data", 1300),
              ("/metrics", "metrics", 1300))
PAPER_PAGES = (("/", "leaderboard-paper", 1500), ("/explore?dataset=focus&sample=focus:12", "explore-paper", 2600),
               ("/failures?dataset=focus&mode=vanilla&status=truncated", "failures-paper", 1500))


def _pages(page, url: str, pages: tuple[tuple[str, str, int], ...]) -> None:
    for path, name, height in pages:
        page.goto(url + path)
        _settle(page)
        if name == "compare":  # SmolLM2 plain vs structured, the Compare page's one-click button
            page.get_by_role("button", name="Plain vs structured").first.click()
            _settle(page)
        _save(page, name, height)


def main() -> int:
    # As given (the app runs from the repository root): `cache`, what `make run` shows, reads as such in the sidebar.
    home = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("PERSOBENCH_HOME") or "cache"
    paper = sys.argv[2] if len(sys.argv) > 2 else None
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--no-first-run"])
        try:
            for store, pages in ((home, DEMO_PAGES), (paper, PAPER_PAGES)):
                if store is None:
                    continue
                with _server(store) as url:
                    page = browser.new_page(viewport={"width": WIDTH, "height": 1200})
                    _pages(page, url, pages)
                    page.close()
        finally:
            browser.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
