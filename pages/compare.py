"""Compare: two models (or two modes of one model) on the same sample ids: paired differences per
metric with the t-test, Wilcoxon and a bootstrap CI, win/tie/loss counts, and the dialogues where
they differ most."""

from __future__ import annotations

import streamlit as st

from persobench.aggregate import structured_pairs
from persobench.app.boards import available_profiles, comparison_table, paired_sample_values, results_frame
from persobench.report import win_tie_loss_figure
from persobench.app.page_cache import current_state
from persobench.app.chrome import empty_store_notice, load_or_stop, page_setup
from persobench.app.loaders import run_replies, runs_table
from persobench.app.text import md_escape, status_badge
from persobench.app.links import copy_link, publish, seed
from persobench.app.text import LABEL_SUFFIX
from persobench.aggregate import compared_metrics, landing_dataset, run_row_labels

page_setup()
st.title("Compare two models")

home, sig = current_state()
profiles = load_or_stop(available_profiles, home, sig)
if runs_table(home, sig).empty:
    empty_store_notice()
    st.stop()
if not profiles:
    st.info("No scored runs yet: score them with `python -m persobench score --profile offline`.")
    st.stop()


f = st.columns([2, 1, 1, 1])
seed("cmp_profile", "profile", profiles, profiles[0])
profile = f[1].selectbox("Profile", profiles, key="cmp_profile")
INVALID = {"worst": "scored worst (paper)", "exclude": "excluded"}
seed("cmp_invalid", "invalid", list(INVALID), "worst")
invalid = f[2].selectbox("Invalid replies", list(INVALID), key="cmp_invalid", format_func=INVALID.get)
listed = runs_table(home, sig)
completed = listed.loc[listed["has_generations"] & (listed["status"] == "completed"), "dataset"].value_counts()
datasets = sorted(completed.index)
seed("cmp_dataset", "dataset", datasets, landing_dataset(completed.to_dict()))
dataset = f[0].selectbox("Dataset", datasets, key="cmp_dataset")
# One dataset's results (the landing page's, for its dataset): never every run of the store.
results = load_or_stop(results_frame, home, sig, profile, dataset)
runs = results.drop_duplicates("run_id")[["run_id", "dataset", "mode", "model", "protocol"]]
mine = runs[runs["dataset"] == dataset].sort_values(["model", "mode"])
labels = run_row_labels(mine)  # model · mode (and the protocol where two runs share those): never a hash
if len(labels) < 2:
    st.info("Comparing needs at least two runs of the same dataset. Launch another model from **New run**.")
    st.stop()
ids = list(labels)


def pick(plain: str, structured: str) -> None:
    st.session_state[f"cmp_a_{dataset}"] = plain
    st.session_state[f"cmp_b_{dataset}_{plain}"] = structured


pairs = structured_pairs(mine)  # the natural question about a +structured run: what did it change?
for column, (plain, structured) in zip(st.columns(len(pairs)) if pairs else [], pairs):
    column.button(f"Plain vs structured: {md_escape(labels[structured].replace(LABEL_SUFFIX, ''))}",
                  key=f"cmp_plain_structured_{plain}", on_click=pick, args=(plain, structured),
                  help="A = the model as asked in the prompt, B = the same model, dataset, mode and protocol "
                       "with structured output (+structured).")
c1, c2 = st.columns(2)
seed(f"cmp_a_{dataset}", "a", ids, ids[0])
run_a = c1.selectbox("Model A", ids, format_func=labels.get, key=f"cmp_a_{dataset}")
others = [i for i in ids if i != run_a]
mode_a = mine.set_index("run_id").loc[run_a, "mode"]
same_mode = [i for i in others if mine.set_index("run_id").loc[i, "mode"] == mode_a]
seed(f"cmp_b_{dataset}_{run_a}", "b", others, (same_mode or others)[0])
run_b = c2.selectbox("Model B", others, format_func=labels.get, key=f"cmp_b_{dataset}_{run_a}")
state = {"dataset": dataset, "profile": profile, "invalid": invalid, "a": run_a, "b": run_b}

metrics = compared_metrics(results, run_a, run_b)
table, skipped = comparison_table(home, sig, profile, run_a, run_b, invalid, metrics, dataset)
st.subheader("Paired differences (A − B)")
if table.empty:
    publish(state)
    st.warning("These two runs share no sample with values; nothing to compare.")
    st.stop()
st.dataframe(
    table, hide_index=True, width="stretch",
    column_config={c: st.column_config.NumberColumn(format="%.4f") for c in
                   ("mean A", "mean B", "A - B", "CI low", "CI high")}
    | {c: st.column_config.NumberColumn(format="%.3g") for c in ("t-test p", "Wilcoxon p", "bootstrap p")},
)
st.caption(f"A = {md_escape(labels[run_a])}; B = {md_escape(labels[run_b])}. Samples both runs answered "
           f"(n); 95% paired bootstrap CI of the mean difference; wins count samples where A is better in the "
           "metric's direction. Invalid replies "
           + ("get the worst value." if invalid == "worst" else "are left out (pairs need both valid)."))
for metric, why in skipped:
    st.caption(f"{md_escape(metric)} skipped: {md_escape(why, max_chars=200)}")

st.plotly_chart(win_tie_loss_figure(table), width="stretch", key="cmp_wtl")

st.subheader("Dialogues where they differ most")
seed("cmp_metric", "metric", list(table["metric"]), table["metric"].iloc[0])
metric = st.selectbox("Metric", list(table["metric"]), key="cmp_metric")
state["metric"] = metric
publish(state)
copy_link(state, where=f[3])
pairs = paired_sample_values(home, sig, profile, run_a, run_b, metric, invalid, dataset)
if pairs.empty:
    st.info("No per-sample values for this metric.")
    st.stop()
top = pairs.reindex(pairs["difference"].abs().sort_values(ascending=False).index).head(15).reset_index(drop=True)
picked = st.dataframe(top, hide_index=True, width="stretch", on_select="rerun", selection_mode="single-row",
                      key=f"cmp_top_{metric}_{run_a}_{run_b}")
row = top.iloc[picked.selection.rows[0] if picked and picked.selection.rows else 0]
sample_id = str(row["sample_id"])
st.page_link("pages/explore.py", label=f"Open {sample_id} in Explore", icon=":material/forum:",
             query_params={"dataset": dataset, "sample": sample_id})
left, right = st.columns(2)
for column, run_id, name in ((left, run_a, "A"), (right, run_b, "B")):
    with column, st.container(border=True):
        st.markdown(f"**{name}: {md_escape(labels[run_id])}** · {metric} = {row[name]:.3f}")
        replies = run_replies(home, sig, run_id)
        reply = replies[replies["sample_id"].astype(str) == sample_id]
        if reply.empty:
            st.caption("No reply stored.")
        else:
            r = reply.iloc[0]
            st.markdown(status_badge(r["status"]))
            st.text(r["response"] if r["status"] == "ok" and isinstance(r["response"], str) else "(no valid reply)")
