"""The static report: one self-contained HTML file with the leaderboards of chosen datasets and modes
(their protocol headers and notes, as ``leaderboard`` prints them), the app's charts (interactive
Plotly, its JavaScript inlined: the file opens offline), the failure taxonomy and a few dialogues with
every run's reply side by side. Every number comes from :mod:`persobench.aggregate`; every piece of
untrusted text is HTML-escaped.

Modules: ``build`` (what a report holds, read from the store), ``page`` (rendering), ``charts`` (the
Plotly figures, shared with the app's pages; Plotly loads when a figure is built).

    html = report_html(RunStore(home), ReportOptions(datasets=("focus",), dialogues=3))
    write_report(RunStore(home), ReportOptions(datasets=("focus",)), "report.html")
"""

from __future__ import annotations

import os
from pathlib import Path

from persobench.report.build import Dialogue, Reply, Report, ReportOptions, build_report, failure_taxonomy
from persobench.report.charts import (distribution_figure, failure_bars_figure, metric_bars_figure, model_colour,
                                      modes_figure, plot_escape, radar_figure, ranking_figure, win_tie_loss_figure)
from persobench.report.page import render_report, render_report_bytes
from persobench.store.run_store import RunStore
from persobench.store.files import write_output


__all__ = ["Dialogue", "Reply", "Report", "ReportOptions", "build_report", "distribution_figure", "failure_bars_figure",
           "failure_taxonomy", "metric_bars_figure", "model_colour", "modes_figure", "plot_escape", "radar_figure",
           "ranking_figure", "render_report", "report_html", "win_tie_loss_figure", "write_report"]


def report_html(store: "RunStore", options: ReportOptions) -> str:
    """The report of ``store`` as one HTML document."""
    return render_report(build_report(store, options))


def write_report(store: "RunStore", options: ReportOptions, path: str | os.PathLike[str]) -> Report:
    """Write the report to ``path`` (:func:`persobench.store.files.write_output`: a file atomically, so a
    half-written file never replaces a good one; into a device or FIFO); returns what it holds."""

    report = build_report(store, options)
    write_output(Path(path), render_report_bytes(report))
    return report
