"""Explore: one dialogue at a time: personas, context, reference and every model's reply with scores
and the prompt its run's own template produced.

Direct link: ``/explore?dataset=NAME&sample=SAMPLE_ID``. All dialogue text is untrusted and shown
with ``st.text`` or escaped Markdown (``persobench.app.text.md_escape``).
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from persobench.app.page_cache import current_state
from persobench.app.chrome import empty_store_notice, page_setup
from persobench.app.dialogues import (coverage_threshold, dialogue_label, matching_dialogues, persona_marks,
                                      prompt_text)
from persobench.app.loaders import dataset_error, dataset_samples, dialogue_data, profiles_in_store, runs_table
from persobench.app.text import md_escape, status_badge

page_setup()

st.title("Explore dialogues")

home, sig = current_state()
runs = runs_table(home, sig)
runs = runs[runs["has_generations"]]
if runs.empty:
    empty_store_notice()
    st.stop()

params = st.query_params
datasets = sorted(runs["dataset"].unique())
wanted_dataset = params.get("dataset")
wanted_sample = params.get("sample")
if wanted_dataset not in datasets and wanted_sample:
    prefix = str(wanted_sample).rsplit(":", 1)[0]
    wanted_dataset = prefix if prefix in datasets else None

profiles = profiles_in_store(home, sig)

top = st.columns([2, 2, 3, 2])
default_dataset = wanted_dataset if wanted_dataset in datasets else ("sample" if "sample" in datasets else datasets[0])
dataset = top[0].selectbox("Dataset", datasets, index=datasets.index(default_dataset), key="explore_dataset")
profile = top[1].selectbox("Score profile", profiles or ["(none)"], key="explore_profile",
                           help="Scores come from this metric profile (offline or standard).")
profile = None if profile == "(none)" else profile
query = top[2].text_input("Search text", key="explore_query",
                          help="Case-insensitive search in personas, context, reference and replies.")

data = dialogue_data(home, sig, dataset, profile)
replies: pd.DataFrame = data["replies"]
scores: pd.DataFrame = data["scores"]

models = sorted(replies["model"].unique())
modes = sorted(replies["mode"].unique())
with st.expander("Filters", expanded=False):
    f1, f2, f3 = st.columns(3)
    chosen_models = f1.multiselect("Models", models, default=models, key="explore_models")
    chosen_modes = f2.multiselect("Modes", modes, default=modes, key="explore_modes")
    statuses = sorted(replies["status"].dropna().astype(str).unique())
    chosen_status = f3.multiselect("Some reply has status", statuses, key="explore_status",
                                   help="Keep dialogues where at least one shown reply has one of these statuses.")
    metric_columns = [c for c in scores.columns if c not in ("sample_id", "run_id")]
    m1, m2 = st.columns([1, 2])
    metric = m1.selectbox("Metric range", ["(none)", *metric_columns], key="explore_metric")
    metric_range = None
    if metric != "(none)":
        values = pd.to_numeric(scores[metric], errors="coerce").dropna()
        if values.empty:
            m2.info("No values for this metric in the chosen profile.")
        else:
            lo, hi = float(values.min()), float(values.max())
            if lo == hi:
                m2.caption(f"Every reply scores {lo:.3f}.")
            else:
                metric_range = m2.slider("Keep dialogues where some shown reply scores in", lo, hi, (lo, hi),
                                         key=f"explore_range_{metric}")

shown = replies[replies["model"].isin(chosen_models) & replies["mode"].isin(chosen_modes)]
ids = matching_dialogues(data, shown, query=query, statuses=chosen_status,
                        metric=None if metric == "(none)" else metric, metric_range=metric_range)
if not ids:
    st.warning("No dialogue matches these filters. Clear the search or widen the filters.")
    st.stop()

current = str(wanted_sample) if wanted_sample in ids else ids[0]
position = ids.index(current)


def go_to(sample_id: str) -> None:
    st.query_params["dataset"] = dataset
    st.query_params["sample"] = sample_id


def on_pick() -> None:
    go_to(st.session_state["explore_pick"])


nav = st.columns([1, 6, 1])
nav[0].button("◀ Previous", disabled=position == 0, on_click=go_to, args=(ids[max(position - 1, 0)],),
              key="explore_prev", width="stretch")
nav[2].button("Next ▶", disabled=position == len(ids) - 1, on_click=go_to,
              args=(ids[min(position + 1, len(ids) - 1)],), key="explore_next", width="stretch")
if st.session_state.get("explore_pick") != current:
    st.session_state["explore_pick"] = current
samples = dataset_samples(dataset)


nav[1].selectbox(f"Dialogue ({position + 1} of {len(ids)} matching)", ids, key="explore_pick",
                 on_change=on_pick, format_func=lambda i: dialogue_label(samples.get(i), i))

sample = samples.get(current)
st.subheader(f"Dialogue {md_escape(current)}")
if sample is None:
    reason = dataset_error(dataset)
    st.warning("The dataset's source is not available here, so personas and context cannot be shown"
               + (f": {md_escape(reason)}" if reason else "."))
else:
    topic = (sample.metadata or {}).get("topic")
    st.caption(f"Responder: {md_escape(sample.responder)}" + (f" · topic: {md_escape(topic)}" if topic else ""))

current_replies = shown[shown["sample_id"].astype(str) == current].sort_values(["model", "mode"])
labels = [f"{r.model} · {r.mode}" for r in current_replies.itertuples()]
details = data["details"]
left, right = st.columns([5, 6])
with left:
    st.markdown("#### Personas")
    if sample is None or not sample.personas:
        st.caption("No personas for this dialogue.")
    else:
        with_details = set(details["run_id"]) if not details.empty else set()
        first_marked = next((i for i, r in enumerate(current_replies["run_id"]) if r in with_details), 0)
        mark_by = st.selectbox("Mark persona sentences by the reply of", labels, index=first_marked,
                               key="explore_mark_by") if labels else None
        marks = pd.DataFrame()
        if mark_by and not details.empty:
            run_id = current_replies.iloc[labels.index(mark_by)]["run_id"]
            marks = details[(details["run_id"] == run_id) & (details["sample_id"].astype(str) == current)]
        for persona in sample.personas:
            role = " (responder)" if persona.speaker == sample.responder else ""
            st.markdown(f"**{md_escape(persona.speaker)}**{role}")
            st.dataframe(persona_marks(persona, marks), hide_index=True, width="stretch",
                         column_config={"sentence": st.column_config.TextColumn(width="medium"),
                                        "mark": st.column_config.TextColumn(width="small"),
                                        "similarity": st.column_config.NumberColumn(format="%.2f", width="small")})
        if mark_by and marks.empty:
            st.caption("No per-sentence marks for this reply: its run has not been scored with "
                       "persona details (`python -m persobench score`).")
        elif mark_by and not ("nli_label" in marks.columns and marks["nli_label"].notna().any()):
            st.caption(f"Without an NLI model (offline profile), a sentence counts as used when its embedding "
                       f"similarity to the reply is at least {coverage_threshold():.2f}; contradictions need "
                       "the standard profile.")
with right:
    st.markdown("#### Context")
    if sample is None:
        st.caption("Context unavailable.")
    else:
        for turn in sample.context:
            avatar = ":material/person:" if turn.speaker == sample.responder else ":material/person_outline:"
            with st.chat_message("user", avatar=avatar):
                st.markdown(f"**{md_escape(turn.speaker)}**")
                st.text(turn.text)
        st.markdown(f"#### Reference reply ({md_escape(sample.responder)})")
        st.text(sample.reference)

st.markdown("#### Replies")
if current_replies.empty:
    st.info("No reply from the chosen models for this dialogue.")
score_rows = scores[(scores["sample_id"].astype(str) == current)] if not scores.empty else scores
if not score_rows.empty:
    table = current_replies[["run_id", "model", "mode", "status"]].merge(score_rows, on="run_id", how="left")
    table = table.drop(columns=[c for c in ("run_id", "sample_id") if c in table.columns])
    st.dataframe(table, hide_index=True, width="stretch")
elif profile is None:
    st.caption("No scores yet: run `python -m persobench score --profile offline`.")
for reply in current_replies.itertuples():
    with st.container(border=True):
        st.markdown(f"**{md_escape(reply.model)}** · {md_escape(reply.mode)} · "
                    f"status: {status_badge(reply.status)}")
        if reply.status == "ok" and isinstance(reply.response, str):
            st.text(reply.response)
        else:
            st.caption("No valid reply" + (": " + md_escape(reply.error, max_chars=300) if reply.error else "."))
        if isinstance(reply.reasoning, str) and reply.reasoning:
            with st.expander("Reasoning"):
                st.text(reply.reasoning)
        if isinstance(reply.raw_text, str) and reply.raw_text:
            with st.expander("Raw output"):
                st.code(reply.raw_text, language=None, wrap_lines=True)
        with st.expander("Prompt"):  # what this run's own template sent, as on the Failures page
            prompt, note = prompt_text(reply.prompt, dataset, current, str(reply.mode),
                                       template=reply.template if isinstance(reply.template, str) else None)
            if note:
                st.caption(md_escape(note))
            if prompt:
                st.code(prompt, language=None, wrap_lines=True)

st.caption("Link to this dialogue: add `?dataset=…&sample=…` to the Explore page URL (the address bar "
           "already shows it after you pick a dialogue).")
