"""Reusable widgets: a dataset sample, the card of a background job (New run and Data pages), the
leaderboard's notes on structured runs, the demo's story and its progress while ``make run`` prepares
it (the leaderboard's own panels are in :mod:`persobench.app.board_view`)."""

from __future__ import annotations

from typing import Any

from persobench.app.chrome import app_environment
from persobench.app.text import format_seconds, md_escape, model_kind, safe_message
from persobench.errors import PersoBenchError
from persobench.jobs import JobManager, JobStatus, local_time, seconds_between
from persobench.generation import DEMO_PROFILE, STARTING, DemoState, read_demo_state, read_progress
from persobench.store import RunStore
from persobench.errors import StoreError
from persobench.aggregate import structured_note
from persobench.report import modes_figure


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

    datasets: dict[str, str] = {}
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


def demo_progress_panel(home: str, *, empty: bool = False) -> DemoState | None:
    """While ``make run`` prepares the demo behind the app (``<home>/demo.json`` of a live ``demo``
    command): what it does now and each of its runs' replies, redrawn every 2 s, and the whole page
    drawn again when the demo reaches its next stage (the baselines scored: their board appears; a
    SmolLM2 run done; ready: the story appears). A demo that stopped says why and how to resume it.
    Returns the state it showed, or None when there is nothing to show (no demo command ran here, or
    the demo is ready). On an ``empty`` store it watches for a demo starting (``make run`` starts the
    app and the demo together, and the app may draw its first page first)."""
    import streamlit as st

    state = read_demo_state(home)
    if state is None and empty:
        _watch_for_demo(home)
    if state is None or state.state == "ready":
        return None
    if state.state == "failed":
        st.warning(f"The offline demo stopped: {safe_message(state.message)}. `python -m persobench demo` "
                   "(or `make run`) finishes it: replies already made are reused.")
    elif not state.alive:
        st.info(f"The offline demo was interrupted while {md_escape(state.stage)}. `python -m persobench demo` "
                "(or `make run`) resumes it: replies already made are reused.")
    else:
        _demo_progress(home, state.stage)
    return state


def _watch_for_demo(home: str) -> None:
    import streamlit as st

    @st.fragment(run_every=2.0)
    def watch() -> None:
        if read_demo_state(home) is not None:
            st.rerun()

    watch()


def _demo_progress(home: str, drawn_stage: str) -> None:
    import streamlit as st

    @st.fragment(run_every=2.0)
    def progress() -> None:
        state = read_demo_state(home)
        if state is None or not state.preparing or state.stage != drawn_stage:
            st.rerun()  # the next stage: new runs on the board, or the demo ready (its story) or stopped
        store = RunStore(home)
        with st.container(border=True):
            st.markdown(f"**Preparing the offline demo** · {md_escape(state.stage)}")
            st.caption("`make run` prepares it behind the app: the baselines first (their board appears below as "
                       "soon as they are scored), then SmolLM2 as asked and with structured output, a few minutes "
                       "on 2 cores. This panel follows it; the page redraws itself at each step.")
            for run_id, label in zip(state.runs, state.labels or state.runs):
                st.progress(*_run_progress(store, run_id, md_escape(label)))

    progress()


def _run_progress(store: "RunStore", run_id: str, label: str) -> tuple[float, str]:
    """(share done, label) of one demo run: its replies so far, or done and scored."""
    try:
        run = store.get(run_id)
    except StoreError:  # not started yet: the demo plans every run, makes them one by one
        return 0.0, f"{label}: waiting"
    if run.manifest.status == "completed":
        scored = bool(run.manifest.details.profile_scores(DEMO_PROFILE).metrics)
        return 1.0, f"{label}: {len(run.manifest.sample_ids)} replies" + (", scored" if scored else ", scoring next")
    progress = read_progress(run.path) or {}
    total, done = int(progress.get("total") or len(run.manifest.sample_ids)), int(progress.get("done") or 0)
    return (min(done / total, 1.0) if total else 0.0), f"{label}: {done}/{total} replies"
