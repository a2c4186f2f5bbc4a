"""Metrics: what each number means, its range and direction, and which backend produced it."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from persobench.app.boards import backend_counts, profile_slots, unavailable_metrics
from persobench.app.page_cache import current_state
from persobench.app.chrome import app_environment, page_setup
from persobench.app.judge_form import judge_form, show_estimate
from persobench.app.text import md_escape
from persobench.errors import PersoBenchError
from persobench.jobs import JobManager
from persobench.jobs import judge_step
from persobench.metrics import METRICS

page_setup()
st.title("Metrics")


st.markdown(
    "Every reply is scored on the paper's dimensions. Invalid replies (failed to parse, empty, refused, "
    "API errors) have no per-sample score; the leaderboard either gives them the paper's worst value "
    "(0, and -1 for c_score) or excludes them. Run-level metrics are computed from the generations."
)


def fmt_range(lo: float, hi: float | None) -> str:
    return f"[{lo:g}, {'∞' if hi is None else f'{hi:g}'}]"


rows = [{
    "metric": info.name, "dimension": info.dimension, "what it says": info.description,
    "range": fmt_range(*info.range), "better": "higher" if info.higher_is_better else "lower",
    "invalid reply scores": "" if info.worst_value is None else f"{info.worst_value:g}",
    "needs": info.needs, "level": info.level, "in the paper": info.paper,
} for info in METRICS.values()]
dimension = st.segmented_control("Dimension", ["all", *sorted({r["dimension"] for r in rows})], default="all",
                                 key="metrics_dimension")
table = pd.DataFrame(rows)
if dimension and dimension != "all":
    table = table[table["dimension"] == dimension]
st.dataframe(table, hide_index=True, width="stretch", height=36 * (len(table) + 1) + 3,
             column_config={"what it says": st.column_config.TextColumn(width="large")})

st.subheader("Backends that produced the stored numbers")
home, sig = current_state()
provenance = backend_counts(home, sig)
if provenance.empty:
    st.info("No scored runs in the store yet. Score runs with `python -m persobench score --profile offline` "
            "(packaged models, no network) or `--profile standard` (the paper's models from the hub).")
else:
    profiles = sorted(provenance["profile"].unique(), key=lambda p: (p != "offline", p))
    profile = st.selectbox("Profile", profiles, key="metrics_profile")
    mine = provenance[provenance["profile"] == profile].drop(columns=["profile"])
    order = {name: i for i, name in enumerate(METRICS)}
    mine = mine.sort_values(["metric", "status"], key=lambda c: c.map(order) if c.name == "metric" else c)
    mine = mine[["metric", "status", "reason", "backend", "model_id", "revision", "metric_version", "runs"]]
    st.dataframe(mine, hide_index=True, width="stretch",
                 column_config={"runs": st.column_config.NumberColumn("runs", help="Runs scored with this backend"),
                                "reason": st.column_config.TextColumn(width="large")})
    unavailable = unavailable_metrics(provenance, profile)
    if unavailable:
        st.warning(f"{len(unavailable)} metric(s) have no number under the {md_escape(profile)} profile: "
                   + ", ".join(md_escape(m) for m in unavailable)
                   + ". The reason column says which model they need; the standard profile downloads it.")
    mixed = mine.groupby("metric")["model_id"].nunique()
    if (mixed > 1).any():
        st.warning("Some metrics were computed with different models in different runs: "
                   + ", ".join(md_escape(m) for m in mixed[mixed > 1].index)
                   + ". Their leaderboard numbers are not comparable across those runs.")

st.subheader("The paper's ranking: published and recomputed from its tables")
st.markdown(
    "The paper ranks the models on FoCus by the mean of coherence (UE score), persona coverage (persona "
    "distance), groundedness (UniEval), persona consistency (C score), all x100, and instructability "
    "(0-1, from the failure ratios). `plots_and_ranking.ipynb` types those inputs by hand, and some differ "
    "from the published table's cells: most failure ratios are typed x10 (0.435 as 4.35, harmless) but Gemini "
    "1.5 Pro's and CoT Gemma 7B's are not (their instructability is inflated), and the CoT coherence of the three "
    "GPT models differs. Recomputed from the cells, the CoT order changes at ranks 2-4. The *differs* column "
    "lists each typed input next to its cell and what differs; *changes rank* those that move a rank on their own."
)
ranking_mode = st.segmented_control("Mode", ["vanilla", "cot"], default="cot", key="metrics_ranking_mode") or "cot"
try:
    from persobench.aggregate import paper_figure_slips, paper_ranking
    from persobench.datasets import reference_dir

    ranking = paper_ranking(str(reference_dir()), ranking_mode)
except PersoBenchError as exc:
    st.info(f"The paper's tables are not here ({md_escape(str(exc))}): fetch them on the Data page.")
else:
    moved = ranking[ranking["published rank"] != ranking["recomputed rank"]]
    st.caption(f"{len(moved)} of {len(ranking)} models change rank when ranked from the cells ({ranking_mode}).")
    st.dataframe(ranking, hide_index=True, width="stretch",
                 column_config={"differs": st.column_config.TextColumn(width="large")})
    st.caption("The pinned figures' slips (values drawn that are not the published cells):")
    st.dataframe(paper_figure_slips(), hide_index=True, width="stretch", key="metrics_figure_slips")

st.subheader("Score the stored runs with an LLM judge")


def launch_judge(choice) -> None:

    env = app_environment()
    JobManager(home).launch(f"LLM judge {choice.model}", [judge_step(choice, home=home, env=env, runs=())], env=env)
    st.toast("Launched in the background; follow it on the New run page.")



judge, judge_ok = judge_form("metrics")
if not judge_ok:  # a bad field (said under it) or a judge that cannot be resolved: nothing to launch yet
    st.button("Launch the judge", type="primary", key="metrics_judge_launch", disabled=True)
elif judge is not None:
    from persobench.jobs import estimate_for_store

    # Estimating reads every stored run's pairs: only when asked, and then kept for this choice.
    if st.toggle("Show the judge's estimate for the stored runs", key="metrics_judge_estimate"):
        plan = st.session_state.get("metrics_judge_plan")
        if plan is None or plan[0] != (judge, sig):
            plan = st.session_state["metrics_judge_plan"] = ((judge, sig), *estimate_for_store(home, judge))
        if show_estimate(plan[1], plan[2], judge=judge):
            st.button("Launch the judge", type="primary", key="metrics_judge_launch",
                      disabled=plan[1].requests == 0, on_click=launch_judge, args=(judge,))

st.subheader("Profiles")
cols = st.columns(2)
for column, name in zip(cols, ("offline", "standard")):
    with column:
        st.markdown(f"**{name}**")
        st.dataframe(profile_slots(name), hide_index=True, width="stretch")
st.caption("Override any slot's model with a hub id or a local path: "
           "`python -m persobench score --profile standard --model nli=/models/my-nli`.")
