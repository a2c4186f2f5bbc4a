"""The Plotly figures of the app's pages and of the static report (:mod:`persobench.report`), in one
place below both front ends. Model labels are untrusted: every label passes :func:`plot_escape`.

Built with ``plotly.graph_objects`` only: ``plotly.express`` costs a third of a second to import and
as much again per figure, which a just-started app pays on its landing page.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go


def plot_escape(text: Any) -> str:
    """A label for Plotly, which interprets a subset of HTML (``<b>``, ``<br>``, ``<a href>``): ``&``, ``<``
    and ``>`` escaped, which Plotly shows as typed. Not quotes: no tag can form without ``<``, and Plotly
    decodes no ``&quot;`` (a label showed it literally)."""
    return html.escape(str(text), quote=False)


def _escaped(frame: "pd.DataFrame", column: str = "model") -> "pd.DataFrame":
    return frame.assign(**{column: frame[column].astype(str).map(plot_escape)})


def _colours(names: Sequence[str]) -> dict[str, str]:
    """One colour per name, in order (plotly's default qualitative palette, as plotly.express uses)."""
    from plotly.colors import qualitative

    palette = qualitative.Plotly
    return {name: palette[i % len(palette)] for i, name in enumerate(names)}


def _in_order(values: "pd.Series") -> list[str]:
    return list(dict.fromkeys(values))


def _facets(names: Sequence[str], facet: str) -> "go.Figure":
    """One subplot per name side by side, titled ``facet=name`` (plotly.express's facet titles)."""
    from plotly.subplots import make_subplots

    return make_subplots(rows=1, cols=max(1, len(names)), subplot_titles=[f"{facet}={n}" for n in names],
                         horizontal_spacing=min(0.08, 1 / max(1, len(names))))


def radar_figure(radar: "pd.DataFrame", aspects: Sequence[str]) -> "go.Figure":
    """One closed polygon per model over the given (normalised, 0-1) aspects of ``radar_aspects``."""
    import plotly.graph_objects as go

    aspects = list(aspects)
    figure = go.Figure()
    for row in radar.itertuples():
        values = [getattr(row, a) for a in aspects]
        figure.add_trace(go.Scatterpolar(r=values + values[:1], theta=aspects + aspects[:1], fill="toself",
                                         name=plot_escape(row.model)))
    figure.update_layout(polar={"radialaxis": {"range": [0, 1]}}, height=480, margin={"t": 30})
    return figure


def metric_bars_figure(bars: "pd.DataFrame", metrics: Sequence[str]) -> "go.Figure":
    """Mean with its CI as error bars, one facet per metric (``bars``: model, metric, mean, ci_low, ci_high)."""
    import plotly.graph_objects as go

    bars = _escaped(bars).assign(err_plus=(bars["ci_high"] - bars["mean"]).clip(lower=0),
                                 err_minus=(bars["mean"] - bars["ci_low"]).clip(lower=0))
    shown = [m for m in metrics if m in set(bars["metric"])]
    colours = _colours(_in_order(bars["model"]))
    figure = _facets(shown, "metric")
    for column, metric in enumerate(shown, start=1):
        rows = bars[bars["metric"] == metric]
        figure.add_trace(go.Bar(x=rows["model"], y=rows["mean"], name=metric, showlegend=False,
                                marker_color=[colours[m] for m in rows["model"]],
                                error_y={"type": "data", "array": rows["err_plus"], "arrayminus": rows["err_minus"]}),
                         row=1, col=column)
    figure.update_yaxes(matches=None, showticklabels=True)
    figure.update_layout(showlegend=False, margin={"t": 40}, height=380)
    return figure


def distribution_figure(values: "pd.DataFrame", shape: str) -> "go.Figure":
    """Per-sample values (model, value) as a box or violin per model."""
    import plotly.graph_objects as go

    values = _escaped(values)
    colours = _colours(_in_order(values["model"]))
    figure = go.Figure()
    for model, rows in values.groupby("model", sort=False):
        common = {"x": [model] * len(rows), "y": rows["value"].to_numpy(), "name": model,
                  "marker_color": colours[model]}
        figure.add_trace(go.Violin(**common, points="outliers") if shape == "violin"
                         else go.Box(**common, boxpoints="outliers"))
    figure.update_layout(showlegend=False, margin={"t": 30}, height=420, xaxis_title="model", yaxis_title="value")
    return figure


def modes_figure(long: "pd.DataFrame", *, metric: str = "mean", height: int = 380) -> "go.Figure":
    """Grouped bars of one metric's mean per model and mode (``long``: model, mode, mean), the y axis
    titled ``metric``."""
    import plotly.graph_objects as go

    long = _escaped(long)
    colours = _colours(_in_order(long["mode"]))
    figure = go.Figure()
    for mode, rows in long.groupby("mode", sort=False):
        figure.add_trace(go.Bar(x=rows["model"], y=rows["mean"], name=str(mode), marker_color=colours[mode]))
    figure.update_layout(barmode="group", margin={"t": 30}, height=height, xaxis_title="model",
                         yaxis_title=plot_escape(metric), legend_title_text="mode")
    return figure


def win_tie_loss_figure(table: "pd.DataFrame") -> "go.Figure":
    """Stacked horizontal bars of A wins / ties / B wins per metric (a comparison table)."""
    import plotly.graph_objects as go

    figure = go.Figure()
    for column, colour in (("A wins", "#2e7d32"), ("ties", "#9e9e9e"), ("B wins", "#c62828")):
        figure.add_trace(go.Bar(y=table["metric"], x=table[column], name=column, orientation="h",
                                marker_color=colour))
    figure.update_layout(barmode="stack", height=max(260, 24 * len(table) + 80), margin={"t": 30},
                         title="Win / tie / loss per sample")
    return figure


def failure_bars_figure(counts: "pd.DataFrame") -> "go.Figure":
    """Invalid replies by status per model, one facet per mode (``counts``: model, mode, status, count)."""
    import plotly.graph_objects as go

    chart = _escaped(counts.groupby(["model", "mode", "status"], as_index=False, sort=False)["count"].sum())
    modes = _in_order(chart["mode"])
    colours = _colours(_in_order(chart["status"]))
    figure = _facets(modes, "mode")
    for column, mode in enumerate(modes, start=1):
        for status, rows in chart[chart["mode"] == mode].groupby("status", sort=False):
            figure.add_trace(go.Bar(x=rows["model"], y=rows["count"], name=str(status), legendgroup=str(status),
                                    marker_color=colours[status], showlegend=column == 1), row=1, col=column)
    figure.update_layout(barmode="stack", title="Invalid replies by status", height=360,
                         margin={"t": 60, "b": 10}, legend_title_text="status")
    return figure
