"""A :class:`~persobench.report.build.Report` as one self-contained HTML file.

Everything that comes from data (model labels, replies, personas, contexts, notes, protocol labels)
is untrusted and passes :func:`html.escape` as element text, exactly once: no tag, link or attribute is
ever built from it. Chart labels pass :func:`persobench.report.charts.plot_escape` and the figures' JSON is
Plotly's own, which escapes ``<``, ``>`` and ``/``. Plotly's JavaScript is inlined from the installed
package and a Content-Security-Policy forbids every request, so the file opens offline and cannot
call anywhere; no toolbar button can send a chart to a cloud host (:data:`PLOTLY_CONFIG`), and the PNG
download works under the policy (Plotly draws the image from a ``blob:`` URL the page itself made).
A text longer than :data:`SHOWN_CHARS` shows its start and folds the rest into ``<details>``.
Part of :mod:`persobench.report`.
"""

from __future__ import annotations

import html
import itertools
from typing import TYPE_CHECKING, Any, Iterator

from persobench.errors import ConfigurationError
from persobench.report.build import BoardSection, Dialogue, Report
from persobench import __version__
from persobench.report.charts import metric_bars_figure, radar_figure
from persobench.report.charts import failure_bars_figure

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

#: No request of any kind; inline scripts and styles only (Plotly's inlined library and its figures).
#: ``blob:`` images are those the page makes itself: Plotly's PNG download draws the chart through one.
CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data: blob:; "
       "font-src data:; connect-src 'none'; form-action 'none'; base-uri 'none'")
#: Every chart's Plotly config: no logo link and no "Share chart..." button (Plotly's cloud upload, which
#: opens a page on a cloud host: the policy blocks requests, not navigation; without it plotly.py also
#: leaves the cloud's URL out of the page); the PNG download kept (it stays on the machine).
PLOTLY_CONFIG: dict[str, Any] = {"displaylogo": False, "responsive": True, "showSendToCloud": False,
                 "modeBarButtonsToRemove": ["sendChartToCloud"],
                 "toImageButtonOptions": {"format": "png", "scale": 2}}
#: Characters of a reply, context turn or raw output shown before the rest is folded away.
SHOWN_CHARS = 700

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1400px; padding: 0 1em; color: #222; }
h1 { margin-bottom: .2em; } h2 { margin-top: 2em; border-bottom: 1px solid #ccc; } h3 { margin-top: 1.5em; }
table { border-collapse: collapse; margin: .6em 0; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 7px; text-align: right; vertical-align: top; }
td { white-space: nowrap; } .scroll { overflow-x: auto; }
th:first-child, td:first-child { text-align: left; white-space: normal; min-width: 12em; } th { background: #f4f4f4; }
table.board th:first-child, table.board td:first-child { min-width: 0; text-align: right; }
table.board th:nth-child(2), table.board td:nth-child(2) { text-align: left; white-space: normal; min-width: 12em; }
.notes { color: #555; font-size: 13px; } .muted { color: #777; font-size: 13px; }
.charts { display: flex; flex-wrap: wrap; gap: 1em; } .chart { flex: 1 1 560px; min-width: 420px; }
.dialogue { border: 1px solid #ccc; border-radius: 6px; padding: .8em 1em; margin: 1.2em 0; }
.columns { display: grid; grid-template-columns: minmax(260px, 1fr) 2fr; gap: 1em; }
.replies { display: grid; grid-template-columns: repeat(auto-fill, minmax(260px, 1fr)); gap: .6em;
           align-items: start; }
.raw { font-family: ui-monospace, monospace; font-size: 12px; color: #555; max-height: 14em; overflow: auto; }
.reply { border: 1px solid #e3e3e3; border-radius: 4px; padding: .4em .6em; background: #fafafa; }
.reply.invalid { background: #fff4f0; }
.text { white-space: pre-wrap; overflow-wrap: anywhere; font-size: 14px; margin: .2em 0; }
details.rest summary { cursor: pointer; color: #555; font-size: 13px; }
details.rest .text { max-height: 24em; overflow: auto; border-top: 1px dashed #ddd; }
.label { font-weight: 600; font-size: 13px; }
"""


def esc(value: object) -> str:
    """``value`` as inert HTML text (quotes escaped too)."""
    return html.escape("" if value is None else str(value), quote=True)


def render_report(report: Report, *, plotly_js: str | None = None) -> str:
    """The report as one HTML document (``plotly_js``: the library to inline; default the installed one)."""
    return "\n".join(report_parts(report, plotly_js=plotly_js)) + "\n"


def render_report_bytes(report: Report, *, plotly_js: str | None = None) -> bytes:
    """:func:`render_report` encoded as UTF-8, built from the encoded parts: one emoji in a reply makes
    Python hold the whole document as a string at 4 bytes a character (20 MB for the paper's runs),
    which the encoded parts never are."""
    return b"\n".join(part.encode("utf-8") for part in [*report_parts(report, plotly_js=plotly_js), ""])


def report_parts(report: Report, *, plotly_js: str | None = None) -> list[str]:
    """The pieces of the document, in order; joined by newlines they are :func:`render_report`."""

    try:
        import plotly  # noqa: F401 - the charts and their inlined library
    except ModuleNotFoundError:
        raise ConfigurationError("the HTML report draws its charts with plotly, which is not installed: "
                                 "pip install 'persobench[app]'") from None
    options = report.options
    chart_ids = itertools.count(1)
    datasets = sorted({s.layout["dataset"] for s in report.sections})
    policy = "scored with the worst value (paper)" if options.invalid == "worst" else "excluded"
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="referrer" content="no-referrer">',
        f"<title>PersoBench report: {esc(', '.join(datasets))}</title>",
        f"<style>{STYLE}</style>", f"<script>{_script_text(plotly_js or _plotly_js())}</script>",
        "</head><body>",
        f"<h1>PersoBench report</h1><p class=\"muted\">Datasets {esc(', '.join(datasets))} · profile "
        f"{esc(options.profile)} · invalid replies {esc(policy)} · mean ± population std over samples · "
        f"persobench {esc(__version__)}</p>",
    ]
    parts += [f"<p class=\"notes\">warning: skipped unreadable run {esc(path)}: {esc(reason)}</p>"
              for path, reason in report.skipped_runs]
    parts.append("<h2>Leaderboards</h2>")
    for section in report.sections:
        parts.extend(_section(section, chart_ids))
    parts.append("<h2>Failure taxonomy</h2>")
    parts.extend(_failures(report.failures, chart_ids))
    parts.append("<h2>Dialogues</h2>")
    if not report.dialogues:
        parts.append('<p class="muted">No dialogue chosen.</p>')
    for dialogue in report.dialogues:
        parts.extend(_dialogue(dialogue))
    parts.append("</body></html>")
    return parts


def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def _script_text(code: str) -> str:
    """Code safe inside a ``<script>`` element: a literal ``</script`` would end it early."""
    return code.replace("</script", "<\\/script").replace("</SCRIPT", "<\\/SCRIPT")


def _table(header: list[str], rows: list[list[object]], *, css: str = "board") -> Iterator[str]:
    from persobench.aggregate.exports import html_table

    yield html_table(header, rows, css=css)


def _long_text(text: str, css: str = "text") -> str:
    """``text`` escaped in a ``<div>``; past :data:`SHOWN_CHARS`, its start, then the rest folded in a
    ``<details>`` that scrolls when opened (a 200,000-character reply keeps the page short)."""
    if len(text) <= SHOWN_CHARS:
        return f'<div class="{css}">{esc(text)}</div>'
    cut = text.rfind(" ", SHOWN_CHARS - 200, SHOWN_CHARS) + 1 or SHOWN_CHARS  # at a space when there is one
    shown, rest = text[:cut], text[cut:]
    return (f'<div class="{css}">{esc(shown)}…</div><details class="rest"><summary>show the {len(rest):,} more '
            f'characters</summary><div class="{css}">{esc(rest)}</div></details>')


def _figure(figure: "go.Figure", chart_ids: Iterator[int]) -> str:
    import plotly.io as pio

    chart = next(chart_ids)
    config = {**PLOTLY_CONFIG, "toImageButtonOptions": {**PLOTLY_CONFIG["toImageButtonOptions"],
                                                        "filename": f"persobench-chart-{chart}"}}
    return '<div class="chart">' + pio.to_html(
        figure, full_html=False, include_plotlyjs=False, div_id=f"chart-{chart}",
        config=config) + "</div>"


def _section(section: BoardSection, chart_ids: Iterator[int]) -> Iterator[str]:
    layout = section.layout
    yield f"<h3>{esc(layout['title'])}</h3>"
    yield from _table(layout["header"], layout["rows"])
    if layout["notes"]:
        yield '<ul class="notes">' + "".join(f"<li>{esc(note)}</li>" for note in layout["notes"]) + "</ul>"
    charts = list(_board_charts(section.board, chart_ids))
    if charts:
        yield '<div class="charts">' + "".join(charts) + "</div>"


def _board_charts(board: "pd.DataFrame", chart_ids: Iterator[int]) -> Iterator[str]:
    """The app's Leaderboard charts of one board: the paper's radar (when three aspects have numbers)
    and response time, failure ratio and engagingness with their CIs."""
    from persobench.aggregate import RADAR_ASPECTS, radar_aspects

    radar = radar_aspects(board, normalize=True)
    aspects = [a for a in RADAR_ASPECTS if a in radar.columns and radar[a].notna().any()]
    if len(aspects) >= 3:
        figure = radar_figure(radar, aspects)
        figure.update_layout(title="The paper's aspects (each metric's mean on its range, 0 to 1)", margin={"t": 60})
        yield _figure(figure, chart_ids)
    wanted = ["response_time", "failure_ratio", "unieval_engagingness"]
    bars = board[board["metric"].isin(wanted) & board["mean"].notna()][["model", "metric", "mean", "ci_low", "ci_high"]]
    if len(bars):
        yield _figure(metric_bars_figure(bars, wanted), chart_ids)


def _failures(table: "pd.DataFrame", chart_ids: Iterator[int]) -> Iterator[str]:

    yield ('<p class="muted">How every reply of each run ended, over all of the run\'s samples: ok, or why it is '
           "invalid (truncated, invalid JSON, missing field, empty, refused, API error).</p>")
    if table.empty:
        yield '<p class="muted">No replies.</p>'
        return
    yield from _table(list(table.columns), table.astype(object).values.tolist(), css="failures")
    failed = [c for c in table.columns[5:] if c != "ok"]
    if not failed:
        return
    for dataset, group in table.groupby("dataset", sort=True):
        long = group.melt(id_vars=["model", "mode"], value_vars=failed, var_name="status", value_name="count")
        long = long[long["count"] > 0]
        if len(long):
            yield f'<p class="label">{esc(dataset)}</p>'
            yield '<div class="charts">' + _figure(failure_bars_figure(long), chart_ids) + "</div>"


def _dialogue(dialogue: Dialogue) -> Iterator[str]:
    yield '<div class="dialogue">'
    yield f"<h3>{esc(dialogue.sample_id)}</h3>"
    yield '<div class="columns"><div>'
    if dialogue.note:
        yield f'<p class="muted">{esc(dialogue.note)}</p>'
    for speaker, sentences in dialogue.personas:
        yield f'<p class="label">Persona of {esc(speaker)}</p>'
        yield _long_text("\n".join(f"• {s}" for s in sentences))
    yield "</div><div>"
    for speaker, text in dialogue.context:
        yield f'<p class="label">{esc(speaker)}</p>' + _long_text(text)
    if dialogue.reference:
        yield '<p class="label">Reference</p>' + _long_text(dialogue.reference)
    yield "</div></div>"
    yield '<div class="replies">'
    for reply in dialogue.replies:
        css = "reply" if reply.status == "ok" else "reply invalid"
        yield (f'<div class="{css}"><p class="label">{esc(reply.model)} · {esc(reply.mode)}</p>'
               f'<p class="muted">{esc(reply.protocol)} · {esc(reply.status)}</p>'
               + (_long_text(reply.text) if reply.text else '<div class="text"><em>(no reply)</em></div>')
               + ('<p class="muted">raw output (it did not parse):</p>' + _long_text(reply.raw, "text raw")
                  if reply.raw else "") + "</div>")
    yield "</div></div>"
