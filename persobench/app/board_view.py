"""The Leaderboard page's panels: the finding in one sentence, the ranking table (direction and
meaning in every header, the paper's own rank beside the recomputed one, ties explained), the rank
metric with its CI, the radar, the time/failure bars, every metric's table and the downloads."""

from __future__ import annotations

import functools
from typing import Any, Mapping, Sequence

from persobench.app.text import cell_text, md_escape, model_kind
from persobench.aggregate import RADAR_ASPECTS
from persobench.store import RunStore
from persobench.aggregate import TIES_LEGEND, arrow, board_finding, export_board, higher_is_better, metric_help
from persobench.report import metric_bars_figure, radar_figure
from persobench.aggregate import model_ranking, radar_aspects, radar_metrics
from persobench.report import ranking_figure, report_html
from persobench.app.boards import unavailable_by_reason

#: The board's run-level columns shown beside every ranking, and their headers.
RUN_COLUMNS = {"failure_ratio": "failure ratio", "instructability": "instructability",
               "response_time": "response time (s)"}
#: The download buttons of a board: label, ``export_board`` format, file suffix, MIME type.
DOWNLOADS = (("CSV (long)", "csv", "csv", "text/csv"), ("JSON", "json", "json", "application/json"),
             ("Markdown", "markdown", "md", "text/markdown"), ("LaTeX", "latex", "tex", "application/x-tex"))


def header(metric: str, label: str | None = None) -> str:
    """A column header with the metric's direction: ``rougeL ↑``, ``failure ratio ↓``."""
    return f"{label or metric} {arrow(metric)}"


def number_column(metric: str, label: str | None = None, fmt: str = "%.3f") -> Any:
    import streamlit as st

    return st.column_config.NumberColumn(header(metric, label), format=fmt, help=metric_help(metric))


def ranking_table(board: Any, overall: Any, rank_by: str, models: Sequence[str], *, with_overall: bool,
                  paper_ranks: Mapping[str, int] | None = None) -> Any:
    """The board's ranking (``aggregate.model_ranking``) as a table: rank with ties (and the paper's
    own rank when given), kind, the ranking metric with its 95% CI, the overall scores, n, failures,
    time and CI overlaps; every number column's header says its direction and meaning.

    Returns the ranked frame (one row per model, in rank order) for what follows it.
    """
    import streamlit as st

    ranked = model_ranking(board, overall, rank_by, models)
    ranked["kind"] = ranked["model"].map(model_kind)
    ci = f"{rank_by} 95% CI"
    ranked[ci] = [cell_text(v, None, lo, hi, digits=2 if rank_by.startswith("overall") else 3)
                  for v, lo, hi in zip(ranked["value"], ranked["value_ci_low"], ranked["value_ci_high"])]
    columns = ["rank"]
    if paper_ranks:
        ranked["paper rank"] = ranked["model"].map(lambda m: paper_ranks.get(str(m))).astype("Int64")
        columns.append("paper rank")
    columns += ["model", "kind"]
    if rank_by not in RUN_COLUMNS and not (with_overall and rank_by in ("overall", "overall_paper")):
        ranked[rank_by] = ranked["value"]
        columns.append(rank_by)
    columns.append(ci)
    if with_overall:
        columns += ["overall", "overall_paper"]
    columns += ["n", *RUN_COLUMNS, "overlaps"]
    config = {metric: number_column(metric, label) for metric, label in RUN_COLUMNS.items()}
    config |= {"overall": number_column("overall", fmt="%.2f"),
               "overall_paper": number_column("overall_paper", "overall (paper)", fmt="%.2f"),
               rank_by: number_column(rank_by, fmt="%.2f" if rank_by.startswith("overall") else "%.3f"),
               ci: st.column_config.TextColumn(header(rank_by, ci), help=metric_help(rank_by)),
               "rank": st.column_config.TextColumn("rank", help=TIES_LEGEND),
               "n": st.column_config.NumberColumn("n", help="Samples compared (the board's common sample ids)."),
               "overlaps": st.column_config.TextColumn("CI overlaps with", width="medium",
                                                       help="The rows this one cannot be told apart from.")}
    if paper_ranks:
        config["paper rank"] = st.column_config.NumberColumn(
            "paper's rank", help="The paper's own ranking of these models on FoCus in this mode, by its overall "
                                 "score, as published (plots_and_ranking.ipynb); 'rank' is recomputed here.")
    st.dataframe(ranked[columns], hide_index=True, width="stretch", column_config=config, key="lb_ranking")
    st.caption(TIES_LEGEND + (" 'paper's rank' is the paper's published FoCus ranking (by its overall score) of the "
                              "same models." if paper_ranks else ""))
    return ranked


def finding(ranked: Any, rank_by: str, statuses: Mapping[str, Mapping[str, int]]) -> None:
    """The board's finding in one sentence (``aggregate.finding.board_finding``), labels escaped."""
    import streamlit as st

    sentence = board_finding(ranked, rank_by, statuses)
    if sentence:
        st.info(md_escape(sentence), icon=":material/lightbulb:")


def rank_chart(ranked: Any, rank_by: str) -> None:
    """The ranking metric of every row with its 95% CI, in rank order (the chart the page opens on)."""
    import streamlit as st

    if ranked["value"].notna().any():
        st.plotly_chart(ranking_figure(ranked, rank_by, higher_is_better=higher_is_better(rank_by)),
                        width="stretch", key="lb_rank_chart")
    else:
        st.info(f"No {md_escape(rank_by)} numbers for these models.")


def all_metrics_table(cells: Any, metrics: Sequence[str]) -> None:
    """Every metric's ``mean ± std [95% CI]`` per model, each header with its direction and meaning."""
    import streamlit as st

    config = {m: st.column_config.TextColumn(header(m), help=metric_help(m)) for m in metrics}
    st.dataframe(cells, hide_index=True, width="stretch", column_config=config)


def radar_panel(board: Any) -> None:
    """The paper's radar of six aspects, or (a profile with fewer than three of them, e.g. lexical
    scores only) a radar of the board's own bounded metrics; every axis from the metric's worst value
    to its best."""
    import streamlit as st

    radar = radar_aspects(board, normalize=True)
    aspects = [a for a in RADAR_ASPECTS if a in radar.columns and radar[a].notna().any()]
    missing = [a for a in RADAR_ASPECTS if a not in aspects]
    if len(aspects) >= 3:
        st.plotly_chart(radar_figure(radar, aspects), width="stretch", key="lb_radar")
        st.caption("The paper's aspects: " + ", ".join(f"{a} = {m}" for a, m in RADAR_ASPECTS.items()) + "."
                   + (f" Not available in this profile: {', '.join(missing)}." if missing else ""))
        return
    axes = radar_metrics(board)
    if len(axes) < 3:
        st.info("A radar needs at least three metrics with a number; this board has "
                f"{', '.join(axes) or 'none'}.")
        return
    st.plotly_chart(radar_figure(radar_aspects(board, normalize=True, aspects=axes), list(axes)), width="stretch",
                    key="lb_radar")
    st.caption(f"The paper's six aspects need models this profile lacks ({', '.join(missing)} missing), so the "
               "axes are the board's own metrics, on the same worst-to-best scale.")


def time_failures_panel(board: Any) -> None:
    """Bars of response time, failure ratio and engagingness with their CIs, and why engagingness is
    missing when it is."""
    import streamlit as st

    wanted = ["response_time", "failure_ratio", "unieval_engagingness"]
    bars = board[board["metric"].isin(wanted) & board["mean"].notna()][["model", "metric", "mean", "ci_low", "ci_high"]]
    if bars.empty:
        st.info("No response time, failure ratio or engagingness numbers for these runs.")
    else:
        st.plotly_chart(metric_bars_figure(bars, wanted), width="stretch", key="lb_bars")
        st.caption("response_time ↓ (seconds per reply), failure_ratio ↓, unieval_engagingness ↑; baselines "
                   "hatched.")
    if "unieval_engagingness" not in set(bars["metric"]):
        reason = next((why for why, names in unavailable_by_reason(board).items()
                       if "unieval_engagingness" in names), "not scored in this profile")
        st.caption(f"Engagingness: unavailable ({md_escape(reason, max_chars=300)}).")


def export_bytes(board: Any, fmt: str, overall: Any = None, rank_by: str | None = None) -> bytes:
    """``aggregate.export_board(board, fmt, overall=..., rank_by=...)`` as the bytes a download delivers."""
    return export_board(board, fmt, overall=overall, rank_by=rank_by).encode("utf-8")


def board_downloads(board: Any, stem: str, *, key_prefix: str, overall: Any = None, rank_by: str | None = None) -> None:
    """CSV, JSON, Markdown and LaTeX downloads of exactly the board shown (``aggregate.export_board``),
    ranked as the screen ranks it (``rank_by``; ``overall``: the overall scores with their CIs, when
    the profile has them), each made when clicked.

    A click does not rerun the page (``on_click="ignore"``): with the default rerun, a download clicked
    while the page was still rerunning (a filter just changed) was lost two times in three in Chromium
    (tests/test_browser_tasks.py clicks one during a rerun)."""
    import streamlit as st

    for column, (label, fmt, suffix, mime) in zip(st.columns(len(DOWNLOADS)), DOWNLOADS):
        column.download_button(label, functools.partial(export_bytes, board, fmt, overall, rank_by), file_name=f"{stem}.{suffix}",
                               mime=mime, key=f"{key_prefix}_{suffix}", on_click="ignore", width="stretch")


def report_download(home: str, options: Any, file_name: str, *, key: str) -> None:
    """The static HTML report (:func:`persobench.report.report_html` of ``options``): the same file
    as ``persobench report``, made when clicked (it takes a second or more), without a rerun."""
    import streamlit as st

    column = st.columns(len(DOWNLOADS))[0]
    column.download_button("HTML report", functools.partial(report_html, RunStore(home), options), file_name=file_name,
                           mime="text/html", key=key, width="stretch", on_click="ignore",
                           help="One self-contained HTML file (opens offline): this dataset and mode's leaderboards "
                                "with every protocol, charts, the failure taxonomy and a few dialogues with every reply.")
