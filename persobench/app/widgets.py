"""Reusable widgets: a dataset sample, the card of a background job (New run and Data pages), the
leaderboard's ranking table, radar and time/failures panels, and its download buttons."""

from __future__ import annotations

from typing import Any, Sequence

from persobench.app.chrome import app_environment
from persobench.app.text import cell_text, format_seconds, md_escape, model_kind, safe_message
from persobench.errors import PersoBenchError
from persobench.jobs import JobManager, JobStatus, local_time, seconds_between
from persobench.pipeline import STARTING
import functools
from persobench.pipeline import export_board
from persobench.pipeline import report_html
from persobench.pipeline import RunStore
from persobench.pipeline import model_ranking
from persobench.pipeline import structured_note
from persobench.pipeline import RADAR_ASPECTS, radar_aspects
from persobench.pipeline import radar_figure
from persobench.app.boards import unavailable_by_reason
from persobench.pipeline import metric_bars_figure
from persobench.pipeline import modes_figure


def show_sample(sample: Any) -> None:
    """A sample as personas by speaker, context turn by turn and the reference (all plain text)."""
    import streamlit as st

    st.markdown(f"**{md_escape(sample.id)}** · responder {md_escape(sample.responder)}"
                + (" · single question" if sample.is_single_query else f" · {len(sample.context)} turns"))
    left, right = st.columns([2, 3])
    with left:
        if not sample.personas:
            st.caption("No personas.")
        for persona in sample.personas:
            st.markdown(f"*Persona of {md_escape(persona.speaker)}*")
            st.text("\n".join(f"• {s}" for s in persona.sentences))
    with right:
        for turn in sample.context:
            st.markdown(f"**{md_escape(turn.speaker)}**")
            st.text(turn.text)
        st.markdown(f"*Reference ({md_escape(sample.responder)})*")
        st.text(sample.reference)


def step_label(row: dict[str, Any]) -> str:
    """One progress row of :meth:`JobManager.progress` as text: the step, its state, counts and, while
    it runs and once a few replies came back, the ETA."""
    total, done = int(row.get("total") or 0), int(row.get("done") or 0)
    failed, cached = int(row.get("failed") or 0), int(row.get("cached") or 0)
    state = str(row.get("state", ""))
    label = f"{row['step']}: {state}" + (f" · {done}/{total} replies, {failed} failed, {cached} cached" if total else "")
    if row.get("every_reply_failed"):
        label += f" · every reply failed ({failed} of {done})"
    if state == "running":
        if done == cached and done < total:
            label += " · waiting for the first reply"
        eta = row.get("eta")
        if isinstance(eta, (int, float)) and eta > 0:
            label += f" · ETA {format_seconds(eta)}"
        if row.get("note"):
            label += f" · {row['note']}"  # e.g. waiting 590 s before retrying: the server asked for it
    return label


def _times(status: JobStatus, zone: str | None) -> str:
    """``started <local time> · finished <local time> (took 1 min 05 s)``."""
    text = f"started {local_time(status.created_at, zone)}" if status.created_at else ""
    if status.finished_at:
        took = seconds_between(status.created_at, status.finished_at)
        text += f" · finished {local_time(status.finished_at, zone)}" + (
            f" (took {format_seconds(took)})" if took is not None and took >= 0 else "")
    return text


def _result_links(status: JobStatus, rows: list[dict[str, Any]]) -> None:
    """Links to the Leaderboard of each dataset a finished job's runs wrote replies for."""
    import streamlit as st

    datasets = {}
    for step, row in zip(status.steps, rows):
        if row["kind"] == "run" and row["state"] == "done" and step.expect.get("dataset"):
            datasets.setdefault(str(step.expect["dataset"]), str(step.expect.get("mode") or "vanilla"))
        elif row["kind"] in ("import", "fetch") and row["state"] == "done":
            datasets.setdefault("", "")
    from streamlit.errors import StreamlitAPIException

    for dataset, mode in sorted(datasets.items()):
        label = "Results on the Leaderboard" + (f" · {md_escape(dataset)}" if dataset else "")
        try:
            st.page_link("pages/leaderboard.py", label=label, icon=":material/leaderboard:",
                         query_params={"dataset": dataset, "mode": mode} if dataset else None)
        except StreamlitAPIException:  # a card drawn outside the app's navigation (no Leaderboard page)
            st.caption(label + ": open the Leaderboard page.")


def job_card(manager: JobManager, status: JobStatus) -> None:
    """A job in a bordered box: title, state and local times, cancel / resume / remove buttons, a
    progress bar per run step while it runs, then each step's outcome (done, cancelled, a warning when
    every reply failed, ``failed: <its error line>``), links to the results and, for failed or
    interrupted jobs, the end of its log. No Resume for a job that failed for its configuration.

    Call it inside an ``st.fragment``; a button reruns that fragment.
    """
    import streamlit as st

    zone = getattr(st.context, "timezone", None)  # the browser's, when Streamlit knows it
    rows = manager.progress(status)
    with st.container(border=True):
        head = st.columns([5, 1, 1])
        head[0].markdown(f"**{md_escape(status.title)}** · {md_escape(status.state)} · "
                         f"{md_escape(_times(status, zone))}")
        if status.active or status.busy:
            if head[1].button("Cancel", key=f"cancel-{status.job_id}"):
                manager.cancel(status.job_id)
                st.rerun(scope="fragment")
        elif status.resumable:
            if head[1].button("Resume", key=f"resume-{status.job_id}",
                              help="Start it again: replies already received come from the cache."):
                try:
                    manager.resume(status.job_id, env=app_environment())
                except PersoBenchError as exc:  # its run got busy between the render and the click
                    st.error(safe_message(str(exc)))
                else:
                    st.rerun(scope="fragment")
        if not status.active and head[2].button("Remove", key=f"forget-{status.job_id}",
                                                help="Forget this entry; its runs stay in the store."):
            try:
                manager.forget(status.job_id)
            except PersoBenchError as exc:  # resumed elsewhere between the render and the click
                st.error(safe_message(str(exc)))
            else:
                st.rerun(scope="fragment")
        for row in rows:
            total, done = int(row.get("total") or 0), int(row.get("done") or 0)
            label = md_escape(step_label(row))
            if row["state"].startswith("failed"):
                st.error(label)
            elif row.get("every_reply_failed"):  # finished, but nothing to show for it: not a full bar
                st.warning(label + md_escape(": see the Failures page for why."))
            elif row["kind"] == "run" and row["state"] in (STARTING, "running"):
                st.progress(min(done / total, 1.0) if total else 0.0, text=label)
            else:
                st.caption(label)
        if status.message and status.state != "completed" and not status.step_errors:
            st.caption(md_escape(status.message))  # a cancel note, a run still held by another process
        if status.state == "failed" and status.configuration_error:
            st.caption("It failed for its configuration, so Resume would fail the same way: change the "
                       "configuration, then launch it again.")
        if not status.active:
            _result_links(status, rows)
        if status.log_tail:
            with st.expander("Log (last lines)"):
                st.code(status.log_tail, language=None)


def board_downloads(board: Any, stem: str, *, key_prefix: str) -> None:
    """CSV (long), Markdown and LaTeX download buttons of a leaderboard (``aggregate.export_board``).

    Each file is made when its button is clicked (Streamlit's deferred download), not on every render.
    """

    import streamlit as st


    columns = st.columns(3)
    for column, (label, fmt, suffix, mime) in zip(columns, (
            ("CSV (long)", "csv", "csv", "text/csv"), ("Markdown", "markdown", "md", "text/markdown"),
            ("LaTeX", "latex", "tex", "application/x-tex"))):
        column.download_button(label, functools.partial(export_board, board, fmt), file_name=f"{stem}.{suffix}",
                               mime=mime, key=f"{key_prefix}_{suffix}")


def report_download(home: str, options: Any, file_name: str, *, key: str) -> None:
    """A download button for the static HTML report (:func:`persobench.report.report_html` of ``options``,
    a :class:`persobench.report.ReportOptions`): the same file as ``persobench report``, made when
    clicked."""

    import streamlit as st


    column = st.columns(3)[0]  # under the CSV button, as wide
    column.download_button("HTML report", functools.partial(report_html, RunStore(home), options), file_name=file_name,
                           mime="text/html", key=key,
                           help="One self-contained HTML file (opens offline): this dataset and mode's leaderboards "
                                "with every protocol, charts, the failure taxonomy and a few dialogues with every reply.")


def ranking_table(board: Any, overall: Any, rank_by: str, models: Sequence[str], *, with_overall: bool) -> Any:
    """The leaderboard's ranking (``aggregate.model_ranking``) as a table: rank with ties, kind, the
    ranking metric and overall score with their 95% CIs, n, failures, time and CI overlaps.

    Returns the ranked frame (one row per model, in rank order) for the tables that follow it.
    """
    import streamlit as st


    ranked = model_ranking(board, overall, rank_by, models)
    ranked["kind"] = ranked["model"].map(model_kind)
    by_metric = rank_by not in ("overall", "overall_paper")
    if by_metric:
        ranked[rank_by] = ranked["value"]
        ranked[f"{rank_by} 95% CI"] = [cell_text(v, None, lo, hi) for v, lo, hi in
                                       zip(ranked["value"], ranked["value_ci_low"], ranked["value_ci_high"])]
    ranked["overall 95% CI"] = [cell_text(v, None, lo, hi, digits=2) for v, lo, hi in
                                zip(ranked["overall"], ranked["overall_ci_low"], ranked["overall_ci_high"])]
    columns = ["rank", "model", "kind"]
    if by_metric:
        columns += [rank_by, f"{rank_by} 95% CI"]
    if with_overall:
        columns += ["overall", "overall 95% CI", "overall_paper"]
    columns += ["n", "failure_ratio", "instructability", "response_time", "overlaps"]
    st.dataframe(
        ranked[columns], hide_index=True, width="stretch",
        column_config={
            "overall": st.column_config.NumberColumn("overall", format="%.2f",
                                                     help="Mean of ue_score, persona_distance, unieval_groundedness, "
                                                          "c_score and instructability, all x100."),
            "overall_paper": st.column_config.NumberColumn("overall (paper)", format="%.2f",
                                                           help="As the paper's ranking table: instructability added "
                                                                "unscaled (0-1), so it barely counts."),
            "failure_ratio": st.column_config.NumberColumn("failure ratio", format="%.3f"),
            "instructability": st.column_config.NumberColumn(format="%.3f"),
            "response_time": st.column_config.NumberColumn("response time (s)", format="%.2f"),
            rank_by: st.column_config.NumberColumn(format="%.3f"),
            "overlaps": st.column_config.TextColumn("CI overlaps with", width="medium"),
        },
    )
    return ranked


def structured_board_notes(board: Any, board_all: Any, protocol: str) -> None:
    """On a board with structured runs: that their instructability is not measured. On another
    board of the same dataset and mode: where the structured runs are."""
    import streamlit as st


    if note := structured_note(board):
        st.info(note[0].upper() + note[1:] + ".")  # our own text: no escaping needed
        return
    same_mode = board_all[board_all["mode"].isin(set(board["mode"]))]
    elsewhere = [name for name, group in same_mode.groupby("board") if name != protocol and structured_note(group)]
    if elsewhere:
        st.caption("Structured-output runs (+structured) of this dataset and mode are on their own board: pick "
                   + " or ".join(f"'{md_escape(name)}'" for name in elsewhere)
                   + " under Protocol, or turn on 'Protocols side by side'.")


def radar_panel(board: Any) -> None:
    """The paper's radar of six aspects (each mean mapped onto [0, 1] by its metric's range), or why
    it cannot be drawn (fewer than three aspects in this profile)."""
    import streamlit as st


    radar = radar_aspects(board, normalize=True)
    aspects = [a for a in RADAR_ASPECTS if a in radar.columns and radar[a].notna().any()]
    missing = [a for a in RADAR_ASPECTS if a not in aspects]
    if len(aspects) < 3:
        st.info("The radar needs at least three of the six aspects; this profile has "
                f"{', '.join(aspects) or 'none'}. Missing: "
                + ", ".join(f"{a} ({RADAR_ASPECTS[a]})" for a in missing) + ".")
        return
    st.plotly_chart(radar_figure(radar, aspects), width="stretch", key="lb_radar")
    st.caption("Each aspect's mean mapped onto [0, 1] by the metric's range: "
               + ", ".join(f"{a} = {m}" for a, m in RADAR_ASPECTS.items()) + "."
               + (f" Not available in this profile: {', '.join(missing)}." if missing else ""))


def time_failures_panel(board: Any) -> None:
    """Bars of response time, failure ratio and engagingness with their CIs, and why engagingness
    is missing when it is."""
    import streamlit as st


    wanted = ["response_time", "failure_ratio", "unieval_engagingness"]
    bars = board[board["metric"].isin(wanted) & board["mean"].notna()][["model", "metric", "mean", "ci_low", "ci_high"]]
    if bars.empty:
        st.info("No response time, failure ratio or engagingness numbers for these runs.")
    else:
        st.plotly_chart(metric_bars_figure(bars, wanted), width="stretch", key="lb_bars")
    if "unieval_engagingness" not in set(bars["metric"]):
        reason = next((why for why, names in unavailable_by_reason(board).items()
                       if "unieval_engagingness" in names), "not scored in this profile")
        st.caption(f"Engagingness: unavailable ({md_escape(reason, max_chars=300)}).")


def demo_story_panel(story: Any) -> None:
    """The demo's story above the landing page's board (a :class:`persobench.aggregate.story.DemoStory`):
    the one-sentence note, SmolLM2 plain and structured beside both baselines with each run's valid
    share and metric mean across their protocols, and the metric as grouped bars, all on first render."""
    import streamlit as st


    table, metric = story.table, story.metric
    models = list(dict.fromkeys(table["model"]))
    wide = {"model": models, "kind": [model_kind(m) for m in models]}
    for column, label in (("valid_share", "valid"), ("mean", metric)):
        for mode in dict.fromkeys(table["mode"]):
            values = table[table["mode"] == mode].set_index("model")[column]
            wide[f"{label} ({mode})"] = [float(values[m]) if m in values.index else None for m in models]
    config = {c: st.column_config.NumberColumn(c, format="percent" if c.startswith("valid") else "%.3f")
              for c in wide if c not in ("model", "kind")}
    with st.container(border=True):
        # The note and the chart side by side, the table under them at full width: all above the fold.
        left, right = st.columns([1, 1])
        left.markdown("**The demo at a glance**")
        left.info(story.sentence)  # composed by the library from counts: no untrusted text
        left.caption(f"Valid: share of replies that parse (see **Failures** for the others). {md_escape(metric)}: "
                     "mean over the samples, an invalid reply scored worst (0), as the paper. The structured runs "
                     "sit on a board of their own below (pick their protocol): they are a different "
                     "configuration, and their instructability is not measured.")
        with right:
            st.plotly_chart(modes_figure(table[["model", "mode", "mean"]], metric=metric, height=300),
                            width="stretch", key="lb_demo_chart")
        st.dataframe(wide, hide_index=True, width="stretch", column_config=config)
