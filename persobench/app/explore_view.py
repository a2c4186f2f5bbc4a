"""The Explore page's panels: one dialogue's personas (marked by a chosen reply), context and reference
shown once, then every shown run's reply side by side, each in a column with its per-sample metric
values in the same cell (promptfoo's output matrix, HELM's per-instance view). Values are the
board's (:func:`persobench.app.boards.dialogue_values`): an invalid reply shows the worst value the
board averaged, marked. Every untrusted text goes through ``st.text``/``st.code`` or :func:`md_escape`."""

from __future__ import annotations

from typing import Any, Sequence

from persobench.app.dialogues import coverage_threshold, persona_marks, prompt_text
from persobench.app.text import md_escape, status_badge
from persobench.metrics import METRICS

#: Replies per row of the side-by-side grid.
COLUMNS_PER_ROW = 4
#: A reply longer than this shows its start, the rest in an expander (one runaway reply must not make
#: the page thousands of pixels tall).
REPLY_PREVIEW_CHARS = 2_000


def personas_panel(sample: Any, replies: Any, details: Any) -> None:
    """The personas by speaker, each sentence marked used / contradicted / not engaged by the reply
    chosen in ``explore_mark_by`` (from its run's persona details)."""
    import pandas as pd
    import streamlit as st

    st.markdown("#### Personas")
    if sample is None or not sample.personas:
        st.caption("No personas for this dialogue.")
        return
    labels = list(replies["label"])
    with_details = set(details["run_id"]) if not details.empty else set()
    first_marked = next((i for i, r in enumerate(replies["run_id"]) if r in with_details), 0)
    mark_by = st.selectbox("Mark persona sentences by the reply of", labels, index=first_marked,
                           key="explore_mark_by") if labels else None
    marks = pd.DataFrame()
    if mark_by and not details.empty:
        run_id = replies.iloc[labels.index(mark_by)]["run_id"]
        marks = details[(details["run_id"] == run_id) & (details["sample_id"].astype(str) == str(sample.id))]
    for persona in sample.personas:
        role = " (responder)" if persona.speaker == sample.responder else ""
        st.markdown(f"**{md_escape(persona.speaker)}**{role}")
        st.dataframe(persona_marks(persona, marks), hide_index=True, width="stretch",
                     column_config={"sentence": st.column_config.TextColumn(width="medium"),
                                    "mark": st.column_config.TextColumn(width="small"),
                                    "similarity": st.column_config.NumberColumn(format="%.2f", width="small")})
    if mark_by and marks.empty:
        st.caption("No per-sentence marks for this reply: its run has not been scored with persona details "
                   "(`python -m persobench score`).")
    elif mark_by and not ("nli_label" in marks.columns and marks["nli_label"].notna().any()):
        st.caption(f"Without an NLI model (offline profile), a sentence counts as used when its embedding "
                   f"similarity to the reply is at least {coverage_threshold():.2f}; contradictions need the "
                   "standard profile.")


#: The context's height in pixels before it scrolls: a long dialogue must not push the replies, what the
#: page is for, below the fold.
CONTEXT_HEIGHT = 420


def context_panel(sample: Any) -> None:
    """The dialogue turn by turn (scrolling past :data:`CONTEXT_HEIGHT`, the last turn in view), then the
    reference reply."""
    import streamlit as st

    st.markdown("#### Context")
    if sample is None:
        st.caption("Context unavailable.")
        return
    turns = st.container(height=CONTEXT_HEIGHT if len(sample.context) > 3 else "content", autoscroll=True)
    for turn in sample.context:
        avatar = ":material/person:" if turn.speaker == sample.responder else ":material/person_outline:"
        with turns.chat_message("user", avatar=avatar):
            st.markdown(f"**{md_escape(turn.speaker)}**")
            st.text(turn.text)
    st.markdown(f"#### Reference reply ({md_escape(sample.responder)})")
    st.text(sample.reference)


def best_values(values: Any) -> dict[str, float]:
    """metric -> the best value among the shown replies (its direction's), for marking it."""
    best = {}
    for metric, rows in values.dropna(subset=["value"]).groupby("metric", sort=False):
        info = METRICS.get(str(metric))
        higher = True if info is None else info.higher_is_better
        best[str(metric)] = float(rows["value"].max() if higher else rows["value"].min())
    return best


def value_lines(values: Any, best: dict[str, float], *, several: bool) -> str:
    """One reply's metric values as Markdown (our own text: registry names and numbers): the metric
    and its direction, the value in bold when it is the best shown; a reply the board scored with each
    metric's worst value (an invalid one) says so once and marks those values "(worst)"."""
    order = {name: i for i, name in enumerate(METRICS)}
    lines = []
    for row in sorted(values.itertuples(), key=lambda r: order.get(str(r.metric), len(order))):
        info = METRICS.get(str(row.metric))
        arrow = "" if info is None else (" ↑" if info.higher_is_better else " ↓")
        if row.value != row.value:  # NaN: excluded or not computed
            text = "n/a"
        else:
            text = f"{row.value:.2f} s" if row.metric == "response_time" else f"{row.value:.3f}"
            if several and best.get(str(row.metric)) == row.value and not row.scored_worst:
                text = f"**{text}**"
        lines.append(f"{md_escape(row.metric)}{arrow}: {text}" + (" (worst)" if row.scored_worst else ""))
    head = ["*Invalid reply: scored with each metric's worst value, as on the board.*"] if values["scored_worst"].any() else []
    return "  \n".join(head + lines)


def reply_cell(reply: Any, values: Any, best: dict[str, float], dataset: str, sample_id: str, *,
               several: bool) -> None:
    """One run's reply in a bordered cell: label and status, the reply (or why there is none), its
    metric values, then reasoning, raw output and prompt in expanders."""
    import streamlit as st

    with st.container(border=True):
        st.markdown(f"**{md_escape(reply.label)}**  \n{status_badge(reply.status)}")
        if reply.status == "ok" and isinstance(reply.response, str):
            st.text(reply.response[:REPLY_PREVIEW_CHARS])
            if len(reply.response) > REPLY_PREVIEW_CHARS:
                with st.expander(f"The rest ({len(reply.response) - REPLY_PREVIEW_CHARS:,} more characters)"):
                    st.text(reply.response[REPLY_PREVIEW_CHARS:])
        else:
            st.caption("No valid reply" + (": " + md_escape(reply.error, max_chars=300) if reply.error else "."))
        if len(values):
            st.markdown(value_lines(values, best, several=several))
        else:
            st.caption("Not scored in this profile.")
        if isinstance(reply.reasoning, str) and reply.reasoning:
            with st.expander("Reasoning"):
                st.text(reply.reasoning)
        if isinstance(reply.raw_text, str) and reply.raw_text:
            with st.expander("Raw output"):
                st.code(reply.raw_text, language=None, wrap_lines=True)
        with st.expander("Prompt"):  # what this run's own template sent, as on the Failures page
            prompt, note = prompt_text(reply.prompt, dataset, sample_id, str(reply.mode),
                                       template=reply.template if isinstance(reply.template, str) else None)
            if note:
                st.caption(md_escape(note))
            if prompt:
                st.code(prompt, language=None, wrap_lines=True)


def reply_grid(replies: Any, values: Any, dataset: str, sample_id: str, *, metrics: Sequence[str] | None = None) -> None:
    """Every reply of one dialogue side by side, :data:`COLUMNS_PER_ROW` to a row, each with its values."""
    import streamlit as st

    if metrics is not None:
        values = values[values["metric"].isin(list(metrics))]
    best = best_values(values)
    rows = list(replies.itertuples())
    several = len(rows) > 1
    for start in range(0, len(rows), COLUMNS_PER_ROW):
        chunk = rows[start:start + COLUMNS_PER_ROW]
        for column, reply in zip(st.columns(COLUMNS_PER_ROW if several else 1), chunk):
            with column:
                reply_cell(reply, values[values["run_id"] == reply.run_id], best, dataset, sample_id,
                           several=several)
