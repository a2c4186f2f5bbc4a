"""Failures: invalid replies per run, grouped by board (dataset, mode, protocol) as the leaderboards
are, runs of different protocols never added together; each invalid reply with its raw output, the
parse error, why a truncated reply stopped (from the stored token count, or "unknown") and the prompt
that produced it (all shown as plain text). Every choice is in the URL."""

from __future__ import annotations

import streamlit as st

from persobench.report import failure_bars_figure
from persobench.app.page_cache import current_state
from persobench.app.chrome import empty_store_notice, page_setup
from persobench.app.dialogues import prompt_text
from persobench.app.links import copy_link, many, publish, seed, seed_many
from persobench.app.loaders import failed_replies, status_counts
from persobench.app.text import md_escape, natural_key, status_badge
from persobench.aggregate import FAILURE_STATUSES, failure_summary, landing_dataset, run_row_labels
from persobench.app.text import redact

page_setup()
st.title("Failures")

home, sig = current_state()
counts = status_counts(home, sig)
if counts.empty:
    empty_store_notice()
    st.stop()

f1, f2, f4 = st.columns([3, 3, 1])
datasets = sorted(counts["dataset"].unique())
runs_per_dataset = counts.drop_duplicates("run_id")["dataset"].value_counts().to_dict()
seed("fail_dataset", "dataset", ["(all)", *datasets], landing_dataset(runs_per_dataset))
dataset = f1.selectbox("Dataset", ["(all)", *datasets], key="fail_dataset")
modes = sorted(counts["mode"].unique(), key=lambda m: (m != "vanilla", m))
seed_many("fail_modes", "mode", modes, modes)
chosen_modes = f2.multiselect("Modes", modes, key="fail_modes")
models = sorted(counts["model"].unique())
seed_many("fail_models", "model", models, models)
chosen_models = st.multiselect("Models", models, key="fail_models")

view = counts[counts["mode"].isin(chosen_modes) & counts["model"].isin(chosen_models)]
if dataset != "(all)":
    view = view[view["dataset"] == dataset]
state = {"dataset": dataset, "mode": many(chosen_modes, modes), "model": many(chosen_models, models)}
if view.empty:
    publish(state)
    st.warning("No run matches these filters.")
    st.stop()

summary = failure_summary(view)
st.subheader("Reply statuses per run")
st.caption("One row per run, grouped by board (dataset, mode, protocol) as the leaderboards are: runs of different "
           "protocols are never added together. A run's last reply per sample counts, as on its board.")
st.dataframe(summary, hide_index=True, width="stretch",
             column_config={"failure ratio": st.column_config.ProgressColumn(
                 "failure ratio ↓", min_value=0.0, max_value=1.0, format="percent")})

labels = run_row_labels(view)
failed_counts = view[view["status"] != "ok"]
failed_counts = failed_counts.assign(failed=failed_counts.groupby("run_id")["count"].transform("sum")).sort_values(
    ["failed", "run_id"], ascending=[False, True])  # the most failing run first, as in the table
if failed_counts.empty:
    publish(state)
    st.success("Every reply in this selection parsed as valid JSON with a response.")
    st.stop()
st.plotly_chart(failure_bars_figure(failed_counts.assign(model=failed_counts["run_id"].map(labels))), width="stretch",
                key="fail_chart")

st.subheader("Inspect invalid replies")
failures = failed_replies(home, sig, tuple(sorted(view["run_id"].unique())))
by_status = failures["status"].value_counts()
statuses = [s for s in (*FAILURE_STATUSES, *sorted(set(by_status.index) - set(FAILURE_STATUSES))) if s in by_status]
st.caption("Invalid replies in this selection: " + " · ".join(f"{md_escape(s)} {int(by_status[s]):,}" for s in statuses)
           + " (the status columns above, summed).")
g1, g2 = st.columns(2)
seed("fail_status", "status", statuses, statuses[0])
status = g1.selectbox("Status", statuses, key="fail_status")
of_status = failures[failures["status"] == status]
per_run = of_status["run_id"].value_counts()  # the run with the most replies of this status first
run_ids = sorted(per_run.index, key=lambda r: (-per_run[r], labels.get(r, r)))
seed("fail_model", "run", run_ids, run_ids[0])
run_id = g2.selectbox("Run", run_ids, key="fail_model", format_func=lambda r: labels.get(r, r),
                      help="The runs with replies of this status, the one with the most first.")
state |= {"status": status, "run": run_id}
publish(state)
copy_link(state, where=f4)
rows = of_status[of_status["run_id"] == run_id]
rows = rows.sort_values("sample_id", key=lambda c: c.map(natural_key)).reset_index(drop=True)
st.caption(f"{len(rows)} {md_escape(status)} repl{'y' if len(rows) == 1 else 'ies'} of {md_escape(labels[run_id])} "
           f"(protocol {md_escape(rows['protocol'].iloc[0])}). Select a row to see its raw output and prompt.")
shown_columns = ["sample_id", "error", *(["cause"] if status == "truncated" else []), "finish_reason"]
selection = st.dataframe(rows[shown_columns], hide_index=True, width="stretch", on_select="rerun",
                         selection_mode="single-row", key=f"fail_table_{status}_{run_id}",
                         height=min(38 + 35 * len(rows), 300))
picked = selection.selection.rows[0] if selection and selection.selection.rows else 0
row = rows.iloc[min(picked, len(rows) - 1)]
with st.container(border=True):
    st.markdown(f"**{md_escape(row['sample_id'])}** · {md_escape(labels[run_id])} · {status_badge(row['status'])}")
    st.page_link("pages/explore.py", label="Open this dialogue side by side in Explore", icon=":material/forum:",
                 query_params={"dataset": str(row["dataset"]), "sample": str(row["sample_id"])})
    st.markdown("**Parse error**")
    st.text(redact(row["error"]) if isinstance(row["error"], str) and row["error"] else "(none recorded)")
    if row["status"] == "truncated":
        st.caption(f"Why it stopped: {md_escape(row['cause'])}")
    if isinstance(row["finish_reason"], str) and row["finish_reason"]:
        st.caption(f"Finish reason: {md_escape(row['finish_reason'])}")
    st.markdown("**Raw output**")
    raw = row["raw_text"]
    st.code(raw if isinstance(raw, str) and raw else "(empty)", language=None, wrap_lines=True)
    st.markdown("**Prompt**")
    prompt, note = prompt_text(row["prompt"], str(row["dataset"]), str(row["sample_id"]), str(row["mode"]),
                               template=row.get("template") or None)
    if note:
        st.caption(md_escape(note))
    if prompt:
        st.code(prompt, language=None, wrap_lines=True)
