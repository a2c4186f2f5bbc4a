"""The Plotly figures of the app's pages and of the static report (:mod:`persobench.report`), in one
place below both front ends. Model labels are untrusted: every label passes :func:`plot_escape`.

Built with ``plotly.graph_objects`` only: ``plotly.express`` costs a third of a second to import and
as much again per figure, which a just-started app pays on its landing page.
"""

from __future__ import annotations

import html
import zlib
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
    """One colour per name, in order (plotly's default qualitative palette, as plotly.express uses):
    for what is not a model (modes, statuses)."""
    from plotly.colors import qualitative

    palette = qualitative.Plotly
    return {name: palette[i % len(palette)] for i, name in enumerate(names)}


#: The paper's eight models and the demo's SmolLM2, each with its own colour on every chart and page.
KNOWN_MODEL_COLOURS = {
    "gpt-4o-mini": "#636EFA", "gpt-4-turbo": "#EF553B", "gpt-3.5-turbo": "#00CC96", "gemini-1.5-pro": "#AB63FA",
    "Llama3-1-8B-Instruct": "#FFA15A", "Mistral-7B-Instruct": "#19D3F3", "Qwen2-7B-Instruct": "#FF6692",
    "Gemma-7B-Instruct": "#B6E880", "smollm2": "#FECB52",
}
#: The baselines are not models: greys, the ceiling dark and the floor light, drawn hatched in bars
#: and dashed in the radar.
BASELINE_COLOURS = {"baseline:reference": "#4d4d4d", "baseline:persona-echo": "#a6a6a6"}
BASELINE_PATTERN = "/"


def model_key(label: Any) -> str:
    """What a model's colour depends on: its label without a board's additions (`` (protocol)`` of a
    side-by-side board, `` [run]`` of two runs sharing a label) and without a provider prefix."""
    text = str(label).split(" (", 1)[0].split(" [", 1)[0]
    if text.startswith("baseline:"):
        return text
    return text.removesuffix(" +structured").rsplit(":", 1)[-1]


def is_baseline(label: Any) -> bool:
    return str(label).startswith("baseline:")


def model_colour(label: Any) -> str:
    """The colour of a model on every chart of the app and the report, whatever else is shown: the
    paper's models and the baselines have fixed ones, any other model one picked from its name."""
    from plotly.colors import qualitative

    key = model_key(html.unescape(str(label)))  # the same colour for a label and its escaped form
    if key in BASELINE_COLOURS:
        return BASELINE_COLOURS[key]
    if is_baseline(key):
        return "#bfbfbf"
    if key in KNOWN_MODEL_COLOURS:
        return KNOWN_MODEL_COLOURS[key]
    palette = qualitative.Dark24
    return palette[zlib.crc32(key.encode("utf-8")) % len(palette)]


def _model_colours(labels: Sequence[Any]) -> dict[Any, str]:
    return {label: model_colour(label) for label in labels}


def _in_order(values: "pd.Series") -> list[str]:
    return list(dict.fromkeys(values))


#: A metric facet's title where the name alone hides its unit or which way is better.
METRIC_TITLES = {"response_time": "Response time (seconds, lower is better)",
                 "failure_ratio": "Failure ratio (share of replies, lower is better)",
                 "unieval_engagingness": "Engagingness (UniEval score, higher is better)"}
MODE_TITLES = {"vanilla": "Vanilla prompting", "cot": "Chain-of-thought prompting"}


def facet_title(facet: str, name: str) -> str:
    """A facet's title as words (``response_time`` with its unit, ``cot`` spelt out), the same in the
    app and the report; other names as they are."""
    titles = METRIC_TITLES if facet == "metric" else MODE_TITLES if facet == "mode" else {}
    return titles.get(name, name)


def _facets(names: Sequence[str], facet: str) -> "go.Figure":
    """One subplot per name side by side, titled by :func:`facet_title`."""
    from plotly.subplots import make_subplots

    return make_subplots(rows=1, cols=max(1, len(names)), subplot_titles=[facet_title(facet, n) for n in names],
                         horizontal_spacing=min(0.08, 1 / max(1, len(names))))


#: What the radar's scale is, on the figure itself (the app and the report show the same).
RADAR_SCALE_NOTE = ("Each axis runs from the metric's worst value (0: what an invalid reply scores) to its best (1); "
                    "baselines dashed.")


def radar_figure(radar: "pd.DataFrame", aspects: Sequence[str]) -> "go.Figure":
    """One closed polygon per model over the given (normalised, 0-1) aspects of ``radar_aspects``:
    models filled in their colours (:func:`model_colour`), the baselines dashed grey outlines after
    them, the scale stated under the chart."""
    import plotly.graph_objects as go

    aspects = list(aspects)
    figure = go.Figure()
    rows = sorted(radar.itertuples(), key=lambda row: is_baseline(row.model))  # baselines drawn last, on top
    for row in rows:
        values = [getattr(row, a) for a in aspects]
        baseline = is_baseline(row.model)
        figure.add_trace(go.Scatterpolar(
            r=values + values[:1], theta=aspects + aspects[:1], name=plot_escape(row.model),
            fill="none" if baseline else "toself", opacity=1.0 if baseline else 0.75,
            line={"color": model_colour(row.model), "dash": "dash" if baseline else "solid",
                  "width": 2.5 if baseline else 2},
            legendgroup="baselines" if baseline else "models",
            legendgrouptitle_text="baselines" if baseline else "models"))
    figure.update_layout(polar={"radialaxis": {"range": [0, 1], "tickvals": [0, 0.25, 0.5, 0.75, 1]}}, height=500,
                         margin={"t": 30, "b": 60},
                         annotations=[{"text": RADAR_SCALE_NOTE, "showarrow": False, "xref": "paper", "yref": "paper",
                                       "x": 0, "y": -0.12, "xanchor": "left", "font": {"size": 11}}])
    return figure


def ranking_figure(ranked: "pd.DataFrame", metric: str, *, higher_is_better: bool = True) -> "go.Figure":
    """The ranking metric of a board with its 95% CI, one horizontal bar per row of ``ranked`` (best
    on top; columns model, value, value_ci_low, value_ci_high, rank): models in their colours, the
    baselines hatched grey below them, each bar labelled with its rank."""
    import plotly.graph_objects as go

    rows = ranked[ranked["value"].notna()].copy()
    rows["baseline"] = rows["model"].map(is_baseline)
    rows = rows.sort_values("baseline", kind="stable")  # models first in rank order, then the baselines
    labels = [plot_escape(m) for m in rows["model"]]
    plus = (rows["value_ci_high"] - rows["value"]).clip(lower=0).fillna(0)
    minus = (rows["value"] - rows["value_ci_low"]).clip(lower=0).fillna(0)
    figure = go.Figure(go.Bar(
        x=rows["value"], y=labels, orientation="h",
        marker={"color": [model_colour(m) for m in rows["model"]],
                "pattern": {"shape": [BASELINE_PATTERN if b else "" for b in rows["baseline"]]}},
        error_x={"type": "data", "array": plus, "arrayminus": minus, "color": "#333333"},
        text=[f"rank {r}" for r in rows["rank"]], textposition="inside", insidetextanchor="start",
        hovertemplate="%{y}: %{x:.4f}<extra></extra>", showlegend=False))
    direction = "higher is better" if higher_is_better else "lower is better"
    arrow = "↑" if higher_is_better else "↓"
    figure.update_layout(height=max(220, 34 * len(rows) + 90), margin={"t": 40, "l": 10},
                         title={"text": plot_escape(f"{metric} {arrow} ({direction}), mean with 95% CI"),
                                "font": {"size": 14}},
                         xaxis_title=plot_escape(metric), yaxis={"autorange": "reversed"})
    return figure


def metric_bars_figure(bars: "pd.DataFrame", metrics: Sequence[str]) -> "go.Figure":
    """Mean with its CI as error bars, one facet per metric (``bars``: model, metric, mean, ci_low, ci_high)."""
    import plotly.graph_objects as go

    bars = _escaped(bars).assign(err_plus=(bars["ci_high"] - bars["mean"]).clip(lower=0),
                                 err_minus=(bars["mean"] - bars["ci_low"]).clip(lower=0))
    shown = [m for m in metrics if m in set(bars["metric"])]
    colours = _model_colours(_in_order(bars["model"]))
    figure = _facets(shown, "metric")
    for column, metric in enumerate(shown, start=1):
        rows = bars[bars["metric"] == metric]
        figure.add_trace(go.Bar(x=rows["model"], y=rows["mean"], name=metric, showlegend=False,
                                marker={"color": [colours[m] for m in rows["model"]],
                                        "pattern": {"shape": [BASELINE_PATTERN if is_baseline(m) else ""
                                                              for m in rows["model"]]}},
                                error_y={"type": "data", "array": rows["err_plus"], "arrayminus": rows["err_minus"]}),
                         row=1, col=column)
    figure.update_yaxes(matches=None, showticklabels=True)
    figure.update_layout(showlegend=False, margin={"t": 40}, height=380)
    return figure


def distribution_figure(values: "pd.DataFrame", shape: str) -> "go.Figure":
    """Per-sample values (model, value) as a box or violin per model."""
    import plotly.graph_objects as go

    values = _escaped(values)
    colours = _model_colours(_in_order(values["model"]))
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
        figure.add_trace(go.Bar(x=rows["model"], y=rows["mean"], name=str(mode), marker_color=colours[str(mode)]))
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

    # pandas-stubs type the sum as a Series; with as_index=False it is a frame
    chart = _escaped(counts.groupby(["model", "mode", "status"], as_index=False, sort=False)["count"].sum())  # type: ignore[arg-type]
    modes = _in_order(chart["mode"])
    colours = _colours(_in_order(chart["status"]))
    figure = _facets(modes, "mode")
    for column, mode in enumerate(modes, start=1):
        for status, rows in chart[chart["mode"] == mode].groupby("status", sort=False):
            figure.add_trace(go.Bar(x=rows["model"], y=rows["count"], name=str(status), legendgroup=str(status),
                                    marker_color=colours[str(status)], showlegend=column == 1), row=1, col=column)
    figure.update_layout(barmode="stack", title="Invalid replies by status", height=360,
                         margin={"t": 60, "b": 10}, legend_title_text="status")
    return figure
