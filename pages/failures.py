"""Failures: invalid replies grouped by status per model, each with its raw output, the parse error
and the prompt that produced it (all shown as plain text)."""

from __future__ import annotations

import streamlit as st

from persobench.pipeline import failure_bars_figure
from persobench.app.page_cache import current_state
from persobench.app.chrome import empty_store_notice, page_setup
from persobench.app.dialogues import prompt_text
from persobench.app.loaders import failed_replies, FAILURE_STATUSES, status_counts
from persobench.app.text import md_escape, natural_key, status_badge
from persobench.pipeline import redact

page_setup()
st.title("Failures")

home, sig = current_state()
counts = status_counts(home, sig)
if counts.empty:
    empty_store_notice()
    st.stop()

f1, f2, f3 = st.columns(3)
datasets = sorted(counts["dataset"].unique())
dataset = f1.selectbox("Dataset", ["(all)", *datasets], key="fail_dataset")
modes = sorted(counts["mode"].unique())
chosen_modes = f2.multiselect("Modes", modes, default=modes, key="fail_modes")
models = sorted(counts["model"].unique())
chosen_models = f3.multiselect("Models", models, default=models, key="fail_models")

view = counts[counts["mode"].isin(chosen_modes) & counts["model"].isin(chosen_models)]
if dataset != "(all)":
    view = view[view["dataset"] == dataset]
if view.empty:
    st.warning("No run matches these filters.")
    st.stop()

summary = view.pivot_table(index=["dataset", "model", "mode"], columns="status", values="count", aggfunc="sum",
                           fill_value=0)
for status in ("ok", *FAILURE_STATUSES):
    if status not in summary.columns:
        summary[status] = 0
summary["total"] = summary.sum(axis=1)
summary["failed"] = summary["total"] - summary["ok"]
summary["failure ratio"] = summary["failed"] / summary["total"].where(summary["total"] > 0)
extra = [c for c in summary.columns if c not in ("ok", *FAILURE_STATUSES, "total", "failed", "failure ratio")]
summary = summary[["total", "ok", "failed", "failure ratio", *FAILURE_STATUSES, *extra]].reset_index()
st.subheader("Reply statuses per model")
st.dataframe(summary, hide_index=True, width="stretch",
             column_config={"failure ratio": st.column_config.ProgressColumn(
                 "failure ratio", min_value=0.0, max_value=1.0, format="percent")})

failed_counts = view[view["status"] != "ok"]
if failed_counts.empty:
    st.success("Every reply in this selection parsed as valid JSON with a response.")
    st.stop()
st.plotly_chart(failure_bars_figure(failed_counts), width="stretch", key="fail_chart")

st.subheader("Inspect invalid replies")
run_ids = tuple(sorted(view["run_id"].unique()))
failures = failed_replies(home, sig, run_ids)
g1, g2 = st.columns(2)
statuses = [s for s in (*FAILURE_STATUSES, *sorted(set(failures["status"]) - set(FAILURE_STATUSES)))
            if s in set(failures["status"])]
status = g1.selectbox("Status", statuses, format_func=lambda s: f"{s} ({(failures['status'] == s).sum()})",
                      key="fail_status")
of_status = failures[failures["status"] == status]
labels = sorted({f"{m} · {mode}" for m, mode in zip(of_status["model"], of_status["mode"])})
label = g2.selectbox("Model", labels, key="fail_model")
rows = of_status[[f"{m} · {mode}" == label for m, mode in zip(of_status["model"], of_status["mode"])]]
rows = rows.sort_values("sample_id", key=lambda c: c.map(natural_key)).reset_index(drop=True)
st.caption(f"{len(rows)} {md_escape(status)} repl{'y' if len(rows) == 1 else 'ies'}. Select a row to see "
           "its raw output and prompt.")
selection = st.dataframe(rows[["dataset", "sample_id", "error", "finish_reason"]], hide_index=True, width="stretch",
                         on_select="rerun", selection_mode="single-row", key=f"fail_table_{status}_{label}",
                         height=min(38 + 35 * len(rows), 300))
picked = selection.selection.rows[0] if selection and selection.selection.rows else 0
if rows.empty:
    st.stop()
row = rows.iloc[min(picked, len(rows) - 1)]
with st.container(border=True):
    st.markdown(f"**{md_escape(row['sample_id'])}** · {md_escape(row['model'])} · "
                f"{md_escape(row['mode'])} · {status_badge(row['status'])}")
    st.page_link("pages/explore.py", label="Open this dialogue in Explore", icon=":material/forum:",
                 query_params={"dataset": str(row["dataset"]), "sample": str(row["sample_id"])})
    st.markdown("**Parse error**")
    st.text(redact(row["error"]) if isinstance(row["error"], str) and row["error"] else "(none recorded)")
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
