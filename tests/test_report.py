"""The static HTML report (``persobench report``, :mod:`persobench.report`): the boards' numbers are
the leaderboard's, every reported run is present, untrusted text is escaped, the file is written
atomically, and in headless Chromium the file opened from disk with no network draws its Plotly
charts while the hostile reply stays inert."""

from __future__ import annotations

import html
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.app_store import EVIL_REPLY, EVIL_SAMPLE, FAKE_MODEL, shared_app_store

CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def app_store(tmp_path_factory):
    return shared_app_store(tmp_path_factory)


@pytest.fixture(scope="module")
def report_file(app_store, tmp_path_factory) -> Path:
    """``persobench report`` of the sample dataset (both modes) and the untrusted CSV dataset."""
    from persobench.cli import main

    out = tmp_path_factory.mktemp("report") / "report.html"
    code = main(["--home", str(app_store["home"]), "report", "--dataset", "sample", "--dataset",
                 app_store["evil_dataset"], "--dialogues", "2", "--sample", EVIL_SAMPLE, "--sample", "sample:3",
                 "--sample", "evil:0", "-o", str(out)])
    assert code == 0
    return out


class Tables(HTMLParser):
    """Every ``<table>`` of a document as (class, rows of cell text), and every element's tag."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[tuple[str, list[list[str]]]] = []
        self.tags: list[tuple[str, dict]] = []
        self._cell: list[str] | None = None
        self._script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "table":
            self.tables.append((dict(attrs).get("class", ""), []))
        elif tag == "tr" and self.tables:
            self.tables[-1][1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        self._script = tag == "script"

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][1][-1].append("".join(self._cell))
            self._cell = None
        self._script = False

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def parsed(path: Path) -> Tables:
    parser = Tables()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def test_boards_hold_the_leaderboards_numbers(app_store, report_file):
    """Every board table is the CLI ``leaderboard`` of the same dataset and mode, cell for cell."""
    from persobench import pipeline
    from persobench.aggregate.exports import board_sections

    boards = [t for t in parsed(report_file).tables if t[0] == "board"]
    expected = []
    for dataset in ("sample", app_store["evil_dataset"]):
        for mode in ("vanilla", "cot"):
            try:
                board = pipeline.leaderboard(home=app_store["home"], dataset=dataset, mode=mode).table
            except Exception:  # noqa: BLE001 - the CSV dataset was answered in vanilla only
                continue
            expected += [[s["header"], *s["rows"]] for s in board_sections(board)]
    assert [rows for _, rows in boards] == expected
    assert len(boards) == 3
    # A number that can be checked by hand: the reference baseline reproduces the reference (BLEU 1).
    sample_vanilla = boards[0][1]
    bleu = sample_vanilla[0].index("bleu")
    model = sample_vanilla[0].index("model")
    reference = next(row for row in sample_vanilla if row[model] == "baseline:reference")
    assert reference[bleu].startswith("1.00")


def test_every_reported_run_and_its_header_are_present(app_store, report_file):
    from persobench.store.run_store import RunStore

    text = report_file.read_text(encoding="utf-8")
    store = RunStore(app_store["home"])
    for run_id in app_store["runs"].values():
        manifest = store.get(run_id).manifest
        label = html.escape(manifest.model_label, quote=True)
        # the run's row on its board and its reply card in the dialogues
        assert text.count(f"<td>{label}</td>") >= 1, run_id
        assert text.count(f'<p class="label">{label} · {manifest.mode}</p>') >= 1, run_id
    titles = re.findall(r"<h3>(sample · protocol [^<]+)</h3>", text)
    assert len(titles) == 2 and all("profile offline" in t for t in titles)
    assert "Failure taxonomy" in text


def test_failure_taxonomy_counts_every_status(app_store, report_file):
    from tests.app_store import FAILURES

    failures = next(rows for css, rows in parsed(report_file).tables if css == "failures")
    header, rows = failures[0], failures[1:]
    fake = [dict(zip(header, row)) for row in rows if row[header.index("model")] == FAKE_MODEL]
    assert {row["mode"] for row in fake} == {"vanilla", "cot"}
    for row in fake:
        assert row["n"] == "30"
        for status in set(FAILURES.values()):
            assert int(row[status]) == list(FAILURES.values()).count(status), status
        assert int(row["ok"]) == 30 - len(FAILURES)


def test_untrusted_text_is_escaped(app_store, report_file):
    document = parsed(report_file)
    text = report_file.read_text(encoding="utf-8")
    assert EVIL_REPLY not in text
    assert html.escape(EVIL_REPLY, quote=True) in text  # shown, character for character, as text
    assert "Tomatoes &lt;script&gt;window.__pwned=9&lt;/script&gt; and herbs." in text  # dataset text too
    scripts = [attrs for tag, attrs in document.tags if tag == "script"]
    charts = re.findall(r'<div id="chart-\d+"', text)
    assert len(scripts) == 1 + len(charts) and charts  # plotly itself, then one per chart: none from data
    assert not [t for t, _ in document.tags if t in ("img", "iframe", "a", "form", "object", "embed")]
    assert not [attrs for _, attrs in document.tags if any(name.startswith("on") for name in attrs)]
    body = text[text.index("</head>"):]
    for raw in ("<script>window", "<img src", '<a href="javascript', "<iframe"):
        assert raw not in body


def test_chosen_dialogues_show_persona_and_each_reply(app_store, report_file):
    text = report_file.read_text(encoding="utf-8")
    shown = re.findall(r'<div class="dialogue">\s*<h3>([^<]+)</h3>', text)
    assert shown == [EVIL_SAMPLE, "sample:3", "evil:0"]
    evil = text[text.index(f"<h3>{EVIL_SAMPLE}</h3>"):text.index("<h3>sample:3</h3>")]
    assert evil.count('class="reply') == 6  # two baselines and the fake model, both modes
    assert "Persona of" in evil and "Reference" in evil
    truncated = text[text.index("<h3>sample:3</h3>"):text.index("<h3>evil:0</h3>")]
    assert "truncated" in truncated and 'class="reply invalid"' in truncated
    # an invalid reply shows what the model wrote (escaped), as the app's Failures page does
    assert html.escape('{"response": "I was just about to tell you about my garden and', quote=True) in truncated


def test_default_dialogues_and_modes(app_store, tmp_path):
    from persobench.report import ReportOptions, build_report
    from persobench.store.run_store import RunStore

    report = build_report(RunStore(app_store["home"]), ReportOptions(datasets=("sample",), modes=("cot",),
                                                                     dialogues=2))
    assert [d.sample_id for d in report.dialogues] == ["sample:0", "sample:1"]
    assert {s.layout["mode"] for s in report.sections} == {"cot"}
    assert {r.mode for d in report.dialogues for r in d.replies} == {"cot"}
    assert {r.model for r in report.dialogues[0].replies} == {"baseline:reference", "baseline:persona-echo",
                                                               FAKE_MODEL}
    assert set(report.failures["mode"]) == {"cot"}


def test_bad_request_is_one_line_and_keeps_the_previous_file(app_store, tmp_path, capsys):
    from persobench.cli import main

    out = tmp_path / "report.html"
    out.write_text("good report", encoding="utf-8")
    for argv, message in ((["--dataset", "nope"], "dataset 'nope': no runs"),
                          (["--sample", "sample:999"], "sample id(s) sample:999: no reported run answered them"),
                          (["--dialogues", "-1"], "dialogues: expected a count >= 0")):
        code = main(["--home", str(app_store["home"]), "report", *argv, "-o", str(out)])
        err = capsys.readouterr().err
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
        assert out.read_text(encoding="utf-8") == "good report"
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]  # no temporary file left behind


def test_plotly_is_inlined_and_nothing_is_fetched(report_file):
    from plotly.offline import get_plotlyjs

    text = report_file.read_text(encoding="utf-8")
    assert get_plotlyjs()[:2000] in text
    head = text[:text.index("<script>")]
    assert "Content-Security-Policy" in head and "default-src 'none'" in head
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text.replace(get_plotlyjs(), ""))


@pytest.mark.browser
def test_report_renders_offline_in_chromium_and_stays_inert(report_file, tmp_path):
    """Opened from disk (file://) with the network off: the charts draw, the tables are there, the
    hostile reply and dataset text are visible as text and nothing in them runs or links."""
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium not installed (run `make browser`)")
    sync_api = pytest.importorskip("playwright.sync_api")
    requests: list[str] = []
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM),
                                             args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        try:
            context = browser.new_context(offline=True, viewport={"width": 1400, "height": 1600})
            context.route("**/*", lambda route: (requests.append(route.request.url),
                                                 route.continue_() if route.request.url.startswith("file:")
                                                 else route.abort()))
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(report_file.as_uri())
            page.wait_for_selector(".plotly svg.main-svg", timeout=30_000)
            assert page.locator(".js-plotly-plot").count() >= 4
            assert page.locator(".plotly .bars, .plotly .trace.bars").count() >= 1  # a bar trace was drawn
            assert page.locator("table.board").count() == 3
            assert page.locator("table.board tr").count() > 6
            assert page.evaluate("window.__pwned") is None
            assert page.evaluate("typeof window.__pwned") == "undefined"
            assert page.locator("img").count() == 0  # the only images would be from data
            assert page.locator("iframe").count() == 0
            # Plotly's modebar draws its own anchors without href; none from data, none with a URL
            assert page.locator("a[href]").count() == 0
            assert page.locator('a:text("link"), a:text("click me")').count() == 0
            body = page.inner_text("body")
            assert "<script>window.__pwned = 1</script>" in body
            assert '<img src=x onerror="window.__pwned = 2">' in body
            assert "[click me](javascript:window.__pwned=3)" in body
            assert '<a href="javascript:window.__pwned=4">link</a>' in body
            assert "Tomatoes <script>window.__pwned=9</script> and herbs." in body
            assert errors == []
            assert [url for url in requests if not url.startswith("file:")] == []
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        finally:
            browser.close()


# --- issue 37 item 9: the report, fixed --------------------------------------------------------------

BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                "--no-first-run"]
#: A label Plotly must show as typed: quotes, a tag and an ampersand, each escaped exactly once.
QUOTED = 'say "hi" <b>x</b> & it\'s'
LONG_REPLY = "word " * 40_000  # 200,000 characters


def _plotly_configs(text: str) -> list[dict]:
    """The config argument of every ``Plotly.newPlot`` call of a report (its last JSON object)."""
    import json

    return [json.loads(config) for config in re.findall(r'(\{"displaylogo".*?\})\s*\)\s*\};', text)]


def test_boards_lead_with_the_rank_and_show_cis_in_rank_order(report_file):
    boards = [rows for css, rows in parsed(report_file).tables if css == "board"]
    assert boards
    for header, *rows in boards:
        assert header[:3] == ["rank", "model", "n"]
        ranks = [int(row[0].rstrip("=")) for row in rows]
        assert ranks == sorted(ranks) and ranks[0] == 1  # no "–": the offline board ranks by rougeL
        rouge = header.index("rougeL")
        assert all(re.fullmatch(r"\d\.\d\d ± \d\.\d\d \[\d\.\d\d, \d\.\d\d\]", row[rouge]) for row in rows), rows
    assert "ranked by rougeL (higher is better)" in report_file.read_text(encoding="utf-8")


def test_no_chart_can_be_sent_off_the_machine_and_png_export_is_allowed(report_file):
    text = report_file.read_text(encoding="utf-8")
    configs = _plotly_configs(text)
    assert configs and len(configs) == len(re.findall(r'<div id="chart-\d+"', text))
    for config in configs:
        assert config["showSendToCloud"] is False and config["displaylogo"] is False
        assert "plotlyServerURL" not in config  # no destination either (plotly.py drops it with the button)
        assert "sendChartToCloud" in config["modeBarButtonsToRemove"]
        assert config["toImageButtonOptions"]["format"] == "png"
    # Plotly's PNG export draws the chart through a blob: image: the policy allows exactly that
    csp = re.search(r'Content-Security-Policy" content="([^"]+)"', text).group(1)
    assert "img-src data: blob:;" in csp and "connect-src 'none'" in csp and "default-src 'none'" in csp


def test_chart_titles_are_readable_with_units(report_file):
    text = report_file.read_text(encoding="utf-8")
    assert "metric=" not in text and "mode=vanilla" not in text
    assert "Response time (seconds, lower is better)" in text
    assert "Failure ratio (share of replies, lower is better)" in text


def test_the_apps_charts_have_the_reports_readable_titles():
    """The app draws the same figures as the report: its facets read ``metric=response_time`` while the
    report's read words with units (the report rewrote titles only on its own page)."""
    import pandas as pd

    from persobench.report.charts import failure_bars_figure, metric_bars_figure

    bars = pd.DataFrame({"model": ["a", "b"] * 2, "metric": ["response_time"] * 2 + ["bleu"] * 2,
                         "mean": [1.0, 2.0, 0.1, 0.2], "ci_low": [0.5, 1.5, 0.0, 0.1], "ci_high": [1.5, 2.5, 0.2, 0.3]})
    titles = [note.text for note in metric_bars_figure(bars, ["response_time", "bleu"]).layout.annotations]
    assert titles == ["Response time (seconds, lower is better)", "bleu"]
    counts = pd.DataFrame({"model": ["a"], "mode": ["cot"], "status": ["invalid_json"], "count": [3]})
    assert [n.text for n in failure_bars_figure(counts).layout.annotations][:1] == ["Chain-of-thought prompting"]


def _hostile_run(store, *, dataset, label, ids, replies, rouge):
    import pandas as pd

    from persobench.store.run_store import RunManifest, make_run_id

    spec = {"provider": "test", "model": label, "label": label}
    run_id = make_run_id(dataset=dataset, model=spec, mode="vanilla", template_hash="t", sample_ids=ids, parameters={})
    run = store.create(RunManifest(run_id=run_id, dataset=dataset, sample_ids=tuple(ids), model=spec, mode="vanilla",
                                   template="vanilla", template_hash="t", status="completed"))
    run.write_table("generations", pd.DataFrame({"sample_id": ids, "status": ["ok"] * len(ids), "response": replies,
                                                 "latency": [1.5] * len(ids)}))
    run.write_table("scores", pd.DataFrame({"sample_id": ids, "metric": "rougeL", "value": rouge,
                                            "profile": "offline"}))
    run.update(extra={"scores": {"offline": {"metrics": {"rougeL": {"status": "ok", "model_id": "lexical"}}}}})


@pytest.fixture(scope="module")
def hostile_report(tmp_path_factory):
    """A store in a temporary folder: a model label with quotes and a tag, a 200,000-character reply, a
    user CSV dataset (named by its path) and a paper dataset whose text cannot be read here (the
    reference folder points nowhere); its report, and the local paths that must not be in it."""
    from persobench.cli import main
    from persobench.store.run_store import RunStore
    from tests.app_store import write_evil_dataset

    root = tmp_path_factory.mktemp("hostile-report")
    store = RunStore(root / "home")
    ids = [f"sample:{i}" for i in range(4)]
    _hostile_run(store, dataset="sample", label=QUOTED, ids=ids, replies=[LONG_REPLY, "a", "b", "c"],
                 rouge=[0.5, 0.6, 0.5, 0.6])
    _hostile_run(store, dataset="sample", label="plain", ids=ids, replies=["d", "e", "f", "g"], rouge=[0.1] * 4)
    csv_path = write_evil_dataset(root)
    _hostile_run(store, dataset=str(csv_path), label="plain", ids=["evil:0", "evil:1"], replies=["h", "i"],
                 rouge=[0.2, 0.3])
    _hostile_run(store, dataset="focus", label="plain", ids=["focus:0"], replies=["j"], rouge=[0.4])
    gone = root / "gone" / "gone.csv"  # a user file deleted after its run: its dialogue cannot be read
    gone.parent.mkdir()
    _hostile_run(store, dataset=str(gone), label="plain", ids=["gone:0"], replies=["k"], rouge=[0.4])
    nowhere = root / "no-reference-here"
    out = root / "report.html"
    previous = os.environ.get("PERSOBENCH_REFERENCE")
    os.environ["PERSOBENCH_REFERENCE"] = str(nowhere)
    try:
        assert main(["--home", str(store.home), "report", "--dialogues", "1", "-o", str(out)]) == 0
    finally:
        if previous is None:
            os.environ.pop("PERSOBENCH_REFERENCE", None)
        else:
            os.environ["PERSOBENCH_REFERENCE"] = previous
    return {"file": out, "root": root, "csv": csv_path, "nowhere": nowhere, "gone": gone}


def test_the_report_names_no_local_path(hostile_report):
    text = hostile_report["file"].read_text(encoding="utf-8")
    for path in (hostile_report["root"], hostile_report["nowhere"], hostile_report["csv"], hostile_report["gone"]):
        assert str(path) not in text and str(Path(path).resolve()) not in text, path
    if str(Path.home()) not in ("/", ""):
        assert str(Path.home()) + "/" not in text.replace(_plotly_js_text(), "")
    assert "<h3>evil.csv · protocol " in text  # a user file is named by its file name
    gone = text[text.index("<h3>gone:0</h3>"):]
    assert "not available here" in gone[:2000]  # the dialogue says why its text is missing, without a path
    # The paper's FoCus without its reference folder (unless this process parsed it before): the same note
    focus = text[text.index("<h3>focus:0</h3>"):]
    assert "not available here" in focus[:2000] or "Persona of" in focus[:2000]


def _plotly_js_text() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def test_long_texts_are_cut_with_the_rest_behind_details(hostile_report):
    text = hostile_report["file"].read_text(encoding="utf-8")
    card = text[text.index(html.escape(QUOTED, quote=True) + " · vanilla"):]
    card = card[:card.index('<div class="reply')] if '<div class="reply' in card else card
    shown, _, rest = card.partition("<details")
    assert "word word" in shown and len(shown) < 5_000
    assert "<summary>" in rest and "more characters" in rest
    assert text.count("word ") >= 40_000  # nothing is lost: the rest is in the page, folded


@pytest.mark.browser
def test_hostile_report_in_chromium_offline(hostile_report, tmp_path):
    """No request, no share button, a PNG download that works under the policy, a bounded page with a
    200,000-character reply (folded and scrollable when unfolded), labels shown as typed."""
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium not installed (run `make browser`)")
    sync_api = pytest.importorskip("playwright.sync_api")
    requests: list[str] = []
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS)
        try:
            context = browser.new_context(offline=True, viewport={"width": 1400, "height": 1000},
                                          accept_downloads=True)
            context.on("request", lambda request: requests.append(request.url))
            page = context.new_page()
            messages: list[str] = []
            page.on("console", lambda message: messages.append(message.text))
            page.goto(hostile_report["file"].as_uri())
            page.wait_for_selector(".plotly svg.main-svg", timeout=30_000)
            height = page.evaluate("document.documentElement.scrollHeight")
            assert height < 12_000, height  # 149,000 px before the long reply was folded
            details = page.locator("details.rest").first
            details.locator("summary").click()
            assert page.evaluate("document.documentElement.scrollHeight") - height < 1_000  # the rest scrolls
            page.locator(".js-plotly-plot").first.hover()
            assert page.locator(".modebar-btn").count() > 0  # the toolbar is there ...
            titles = page.eval_on_selector_all(".modebar-btn", "els => els.map(e => e.getAttribute('data-title'))")
            assert not [t for t in titles if "share" in (t or "").lower() or "cloud" in (t or "").lower()], titles
            with page.expect_download(timeout=15_000) as download:
                page.locator(".js-plotly-plot").first.locator("[data-title='Download plot as a PNG']").click()
            saved = tmp_path / "chart.png"
            download.value.save_as(saved)
            assert saved.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and saved.stat().st_size > 1_000
            labels = page.eval_on_selector_all(".xtick text, .legendtext, .g-xtitle text",
                                               "els => els.map(e => e.textContent)")
            assert QUOTED in labels, labels  # quotes, tag and ampersand shown once, as typed
            assert not [label for label in labels if "&quot;" in label or "&amp;" in label or "&#" in label]
            # the PNG is drawn from a blob: the page made itself; nothing else is requested
            assert [url for url in requests if not url.startswith(("file:", "blob:null/"))] == []
            assert not [m for m in messages if "Content Security Policy" in m], messages
        finally:
            browser.close()


@pytest.mark.browser
def test_the_report_of_the_imported_paper_runs_offline_in_chromium(reference_dir, tmp_path):
    """The paper's FoCus runs imported and scored (lexical): its report opens offline with zero requests
    and zero share buttons, every board ranked with CIs, no path of this machine in it."""
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium not installed (run `make browser`)")
    sync_api = pytest.importorskip("playwright.sync_api")
    from persobench import pipeline
    from persobench.report import ReportOptions, write_report
    from persobench.store.run_store import RunStore

    home = tmp_path / "home"
    pipeline.import_published(reference_dir, home=home, datasets=["focus"])
    pipeline.score(None, home=home, profile="offline", metrics=["rougeL", "dist2"])
    out = tmp_path / "paper-report.html"
    write_report(RunStore(home), ReportOptions(datasets=("focus",)), out)
    text = out.read_text(encoding="utf-8")
    assert str(tmp_path) not in text and str(reference_dir) not in text
    boards = [rows for css, rows in parsed(out).tables if css == "board"]
    assert len(boards) == 2 and all(len(rows) == 9 for rows in boards)  # the paper's eight models, both modes
    for header, *rows in boards:
        assert "–" not in [row[0] for row in rows] and "[" in rows[0][header.index("rougeL")]
    requests: list[str] = []
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS)
        try:
            context = browser.new_context(offline=True, viewport={"width": 1400, "height": 1000})
            context.on("request", lambda request: requests.append(request.url))
            page = context.new_page()
            page.goto(out.as_uri())
            page.wait_for_selector(".plotly svg.main-svg", timeout=30_000)
            for index in range(page.locator(".js-plotly-plot").count()):
                page.locator(".js-plotly-plot").nth(index).hover()
            titles = page.eval_on_selector_all(".modebar-btn", "els => els.map(e => e.getAttribute('data-title'))")
            assert titles and not [t for t in titles if "share" in (t or "").lower()]
            assert [url for url in requests if not url.startswith("file:")] == []
        finally:
            browser.close()
