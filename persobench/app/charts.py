"""The Plotly figures of the pages. Model labels are untrusted: every label passes :func:`plot_escape`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from persobench.app.text import plot_escape

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go


def _escaped(frame: "pd.DataFrame", column: str = "model") -> "pd.DataFrame":
    return frame.assign(**{column: frame[column].map(plot_escape)})


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
    import plotly.express as px

    bars = _escaped(bars).assign(err_plus=(bars["ci_high"] - bars["mean"]).clip(lower=0),
                                 err_minus=(bars["mean"] - bars["ci_low"]).clip(lower=0))
    figure = px.bar(bars, x="model", y="mean", color="model", facet_col="metric", error_y="err_plus",
                    error_y_minus="err_minus", height=380,
                    category_orders={"metric": [m for m in metrics if m in set(bars["metric"])]})
    figure.update_yaxes(matches=None, showticklabels=True)
    figure.update_layout(showlegend=False, margin={"t": 40})
    return figure


def distribution_figure(values: "pd.DataFrame", shape: str) -> "go.Figure":
    """Per-sample values (model, value) as a box or violin per model."""
    import plotly.express as px

    plot = px.violin if shape == "violin" else px.box
    figure = plot(_escaped(values), x="model", y="value", color="model", points="outliers", height=420)
    figure.update_layout(showlegend=False, margin={"t": 30})
    return figure


def modes_figure(long: "pd.DataFrame") -> "go.Figure":
    """Grouped bars of one metric's mean per model and mode (``long``: model, mode, mean)."""
    import plotly.express as px

    figure = px.bar(_escaped(long), x="model", y="mean", color="mode", barmode="group", height=380)
    figure.update_layout(margin={"t": 30})
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
    import plotly.express as px

    chart = counts.groupby(["model", "mode", "status"], as_index=False)["count"].sum()
    figure = px.bar(_escaped(chart), x="model", y="count", color="status", facet_col="mode", barmode="stack",
                    title="Invalid replies by status", height=360)
    figure.update_layout(margin={"t": 60, "b": 10}, legend_title_text="status")
    return figure
