"""Explore: one dialogue at a time, its personas, context and reference once, then every chosen run's
reply side by side with its per-sample metric values (the values the board averages) and the prompt its
run's own template produced; the dialogues where the models differ most on a metric.

Every choice is in the URL (``/explore?dataset=NAME&sample=SAMPLE_ID&q=...``, ``persobench.app.links``).
All dialogue text is untrusted and shown with ``st.text`` or escaped Markdown (``md_escape``).
"""

from __future__ import annotations

import streamlit as st

from persobench.app.page_cache import current_state
from persobench.app.boards import dialogue_metrics, dialogue_values
from persobench.app.chrome import empty_store_notice, page_setup
from persobench.app.dialogues import dialogue_label, matching_dialogues
from persobench.app.explore_view import context_panel, personas_panel, reply_grid
from persobench.app.links import copy_link, many, publish, seed, seed_many, seed_text
from persobench.app.loaders import dataset_error, dataset_samples, dialogue_data, profiles_in_store, runs_table
from persobench.app.text import md_escape
from persobench.aggregate import landing_dataset, widest_spread

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
wanted_sample = str(params.get("sample") or "")
from_sample = wanted_sample.rsplit(":", 1)[0]  # a link with a sample id alone names its dataset
default_dataset = from_sample if from_sample in datasets else landing_dataset(runs["dataset"].value_counts().to_dict())
profiles = profiles_in_store(home, sig)

top = st.columns([2, 2, 3, 1])
seed("explore_dataset", "dataset", datasets, default_dataset)
dataset = top[0].selectbox("Dataset", datasets, key="explore_dataset")
seed("explore_profile", "profile", profiles or ["(none)"], (profiles or ["(none)"])[0])
profile = top[1].selectbox("Score profile", profiles or ["(none)"], key="explore_profile",
                           help="Scores come from this metric profile (offline or standard), as on the Leaderboard.")
profile = None if profile == "(none)" else profile
seed_text("explore_query", "q")
query = top[2].text_input("Search text", key="explore_query",
                          help="Case-insensitive search in personas, context, reference and replies.")

data = dialogue_data(home, sig, dataset, profile)
replies = data["replies"]
metrics = dialogue_metrics(home, sig, profile, dataset)
models = sorted(replies["model"].unique())
modes = sorted(replies["mode"].unique(), key=lambda m: (m != "vanilla", m))
with st.expander("Filters", expanded=False):
    f1, f2, f3 = st.columns(3)
    seed_many("explore_models", "model", models, models)
    chosen_models = f1.multiselect("Models", models, key="explore_models")
    seed_many("explore_modes", "mode", modes, modes[:1])  # one mode side by side; add the other to compare
    chosen_modes = f2.multiselect("Modes", modes, key="explore_modes")
    statuses = sorted(replies["status"].dropna().astype(str).unique())
    seed_many("explore_status", "status", statuses, [])
    chosen_status = f3.multiselect("Some reply has status", statuses, key="explore_status",
                                   help="Keep dialogues where at least one shown reply has one of these statuses.")
    m1, m2, m3 = st.columns([1, 2, 1])
    seed("explore_metric", "metric", ["(none)", *metrics], "(none)")
    metric = m1.selectbox("Metric range", ["(none)", *metrics], key="explore_metric")
    metric_range, in_range = None, None
    if metric != "(none)":
        in_range = dialogue_values(home, sig, profile, dataset, None, metric)
        in_metric = in_range["value"].dropna()
        lo, hi = (float(in_metric.min()), float(in_metric.max())) if len(in_metric) else (0.0, 0.0)
        if lo == hi:
            m2.caption(f"Every reply scores {lo:.3f}." if len(in_metric) else "No values for this metric.")
        else:
            metric_range = m2.slider("Keep dialogues where some shown reply scores in", lo, hi, (lo, hi),
                                     key=f"explore_range_{metric}")
    seed("explore_differ", "differ", ["(no)", *metrics], "(no)")
    differ = m3.selectbox("Where models differ most on", ["(no)", *metrics], key="explore_differ",
                          help="Keep the dialogues where the shown replies disagree on this metric (as the board "
                               "scores them), the widest spread first.")

shown = replies[replies["model"].isin(chosen_models) & replies["mode"].isin(chosen_modes)]
ids = matching_dialogues(data, shown, in_range, query=query, statuses=chosen_status,
                         metric=None if metric == "(none)" else metric, metric_range=metric_range)
spread = None
if differ != "(no)":
    spread = widest_spread(dialogue_values(home, sig, profile, dataset, None, differ), list(shown["run_id"].unique()),
                           differ)
    spread = spread[(spread["spread"] > 0) & spread["sample_id"].isin(ids)]
    ids = [i for i in spread["sample_id"] if i in set(ids)]
state = {"dataset": dataset, "q": query or None, "profile": profile, "model": many(chosen_models, models),
         "mode": many(chosen_modes, modes[:1]), "status": chosen_status or None,
         "metric": None if metric == "(none)" else metric, "differ": None if differ == "(no)" else differ}
if not ids:
    publish(state)
    st.warning("No dialogue matches these filters. Clear the search or widen the filters.")
    st.stop()

spreads = dict(zip(spread["sample_id"], spread["spread"])) if spread is not None else {}
current = seed("explore_pick", "sample", ids, ids[0])
position = ids.index(current)


def go_to(sample_id: str) -> None:
    st.session_state["explore_pick"] = sample_id


nav = st.columns([1, 5, 1, 1.2])
nav[0].button("◀ Previous", disabled=position == 0, on_click=go_to, args=(ids[max(position - 1, 0)],),
              key="explore_prev", width="stretch")
nav[2].button("Next ▶", disabled=position == len(ids) - 1, on_click=go_to,
              args=(ids[min(position + 1, len(ids) - 1)],), key="explore_next", width="stretch")
samples = dataset_samples(dataset)
nav[1].selectbox(f"Dialogue ({position + 1} of {len(ids)} matching)", ids, key="explore_pick",
                 format_func=lambda i: (f"spread {spreads[i]:.3f} · " if i in spreads else "")
                 + dialogue_label(samples.get(i), i))
state["sample"] = current
publish(state)
copy_link(state, where=nav[3])

sample = samples.get(current)
st.subheader(f"Dialogue {md_escape(current)}")
if sample is None:
    reason = dataset_error(dataset)
    st.warning("The dataset's source is not available here, so personas and context cannot be shown"
               + (f": {md_escape(reason)}" if reason else "."))
else:
    topic = (sample.metadata or {}).get("topic")
    st.caption(f"Responder: {md_escape(sample.responder)}" + (f" · topic: {md_escape(topic)}" if topic else ""))

current_replies = shown[shown["sample_id"].astype(str) == current]
current_replies = current_replies.assign(cot=current_replies["mode"] != "vanilla").sort_values(["model", "cot", "mode"])
left, right = st.columns([5, 6])
with left:
    personas_panel(sample, current_replies, data["details"])
with right:
    context_panel(sample)

st.markdown(f"#### Replies side by side ({len(current_replies)})")
if current_replies.empty:
    st.info("No reply from the chosen models for this dialogue.")
elif profile is None:
    st.caption("No scores yet: run `python -m persobench score --profile offline`.")
else:
    st.caption("Each reply's values are the ones the Leaderboard averages (invalid replies scored worst, as the "
               "paper; marked); the best shown value of each metric in bold. ↑ higher is better, ↓ lower.")
reply_grid(current_replies, dialogue_values(home, sig, profile, dataset, (current,)), dataset, current)
