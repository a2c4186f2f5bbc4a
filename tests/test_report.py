"""The static HTML report (``persobench report``, :mod:`persobench.report`): the boards' numbers are
the leaderboard's, every reported run is present, untrusted text is escaped, the file is written
atomically, and in headless Chromium the file opened from disk with no network draws its Plotly
charts while the hostile reply stays inert."""

from __future__ import annotations

import html
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
    from persobench.store import RunStore

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
    from persobench.store import RunStore

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
