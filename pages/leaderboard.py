"""Leaderboard: per dataset, mode and scoring profile, every metric's mean ± std with its 95% CI, n and
the failure ratio; the paper's overall score and rank with ties where CIs overlap; the radar of the
paper's six aspects; time, failures and engagingness; distributions; vanilla versus cot; exports."""

from __future__ import annotations

import streamlit as st

from persobench.pipeline import distribution_figure, landing_dataset, modes_figure
from persobench.app.boards import (available_profiles, board_choices, board_for, demo_story_for, metric_cells,
                                   mode_differences, overall_with_ci, sample_values, unavailable_by_reason)
from persobench.app.page_cache import current_state
from persobench.app.chrome import empty_store_notice, load_or_stop, page_setup
from persobench.app.loaders import runs_table
from persobench.app.text import md_escape
from persobench.app.widgets import (board_downloads, demo_story_panel, radar_panel, ranking_table, report_download,
                                    structured_board_notes, time_failures_panel)

page_setup()
st.title("Leaderboard")

home, sig = current_state()
runs = runs_table(home, sig)
profiles = load_or_stop(available_profiles, home, sig)
if runs.empty:
    empty_store_notice()
    st.stop()
if not profiles:
    st.info("The store has runs but none is scored yet. Score them with "
            "`python -m persobench score --profile offline` (packaged models, no network), then reload.")
    st.stop()

if story := load_or_stop(demo_story_for, home, sig):  # the demo's store: its story before any filter
    demo_story_panel(story)

from persobench.pipeline import OVERALL_COMPONENTS, protocol_heading, sample_notes, sample_set_note  # noqa: E402
from persobench.pipeline import NO_SHARED_SAMPLES  # noqa: E402
from persobench.pipeline import METRICS  # noqa: E402

scored = runs[runs["has_generations"] & (runs["status"] == "completed")]
datasets = sorted(scored["dataset"].unique())
f = st.columns([2, 1, 1, 1])
# The dataset the command that last changed the store prepared (aggregate.landing.warm_landing)
dataset = f[0].selectbox("Dataset", datasets, index=datasets.index(landing_dataset(datasets)), key="lb_dataset")
modes = sorted(scored.loc[scored["dataset"] == dataset, "mode"].unique())
modes = sorted(modes, key=lambda m: (m != "vanilla", m))
mode = f[1].selectbox("Mode", modes, key="lb_mode")
profile = f[2].selectbox("Profile", profiles, key="lb_profile",
                         help="Numbers of one scoring profile only: offline (packaged models) or standard (the "
                              "paper's models). Profiles are never mixed.")
invalid = f[3].selectbox("Invalid replies", ["worst", "exclude"], key="lb_invalid",
                         format_func={"worst": "scored worst (paper)", "exclude": "excluded"}.get,
                         help="The paper scores an invalid reply with the metric's worst value (0, or -1 for "
                              "c_score). 'excluded' averages valid replies only.")

p = st.columns([4, 1, 1])
side_by_side = p[1].toggle("Protocols side by side", key="lb_side_by_side",
                           help="One board with every protocol, each named in its row label. Default: one board "
                                "per protocol (template family, max tokens, temperature, parse policy, structured).")
all_samples = p[2].toggle("All samples", key="lb_all_samples",
                          help="Aggregate each run over all its samples. Default: runs of a board are compared on "
                               "the sample ids they all answered.")
board_all = load_or_stop(board_for, home, sig, profile, dataset, invalid, side_by_side, all_samples)
if board_all.empty:
    st.info(f"No completed run of {md_escape(dataset)} has scores in the {md_escape(profile)} profile yet.")
    st.stop()
overall_all = load_or_stop(overall_with_ci, home, sig, profile, dataset, invalid, side_by_side, all_samples)
protocols = board_choices(board_all, mode)
protocol = p[0].selectbox("Protocol", protocols, key=f"lb_protocol_{mode}",
                          help="A board compares like with like: one dataset, mode and protocol. The paper's "
                               "protocol (templates paper/paper-open, 110/220 tokens, T=0, paper parsing) holds "
                               "the published models.")
here = board_all[(board_all["mode"] == mode) & (board_all["board"] == protocol)]
models_here = sorted(here["model"].unique())
if not set(st.session_state.get(f"lb_models_{dataset}_{mode}") or models_here) & set(models_here):
    st.session_state[f"lb_models_{dataset}_{mode}"] = models_here  # another protocol's models were picked
chosen = st.multiselect("Models", models_here, default=models_here, key=f"lb_models_{dataset}_{mode}")
board = here[here["model"].isin(chosen)]
overall = overall_all[(overall_all["mode"] == mode) & (overall_all["board"] == protocol)
                      & overall_all["model"].isin(chosen)]
if board.empty:
    st.warning("No model selected.")
    st.stop()


available = board[(board["status"] != "unavailable") & (board["n"] > 0)]
metric_order = [m for m in METRICS if m in set(available["metric"])]
has_overall = overall["overall"].notna().any()
rank_choices = (["overall", "overall_paper"] if has_overall else []) + [
    m for m in metric_order if m not in ("instructability",)]
default_rank = "overall" if has_overall else next(
    (m for m in ("bertscore_f1", "rougeL", "dist2") if m in rank_choices), rank_choices[0])
rank_by = st.selectbox("Rank by", rank_choices, index=rank_choices.index(default_rank), key="lb_rank_by",
                       help="Models whose 95% confidence intervals overlap share a rank (shown with '=').")

# ---- ranking table -----------------------------------------------------------------------------
disjoint = sample_set_note(board)
st.subheader(f"{dataset} · {protocol_heading(protocol, mode)}" + (f" · {NO_SHARED_SAMPLES}" if disjoint else ""))
counts = board[board["metric"] == "failure_ratio"]
if disjoint:  # each row is over its own samples: say which runs answered the same ones
    st.warning(md_escape(disjoint.removeprefix("warning: ")))
else:
    for note in sample_notes({r.model: (int(r.n), int(r.run_n)) for r in counts.itertuples()}):
        st.info(md_escape(note.replace("--all-samples uses", "'All samples' uses")))
structured_board_notes(board, board_all, protocol)
ranked = ranking_table(board, overall, rank_by, chosen, with_overall=has_overall)
if not has_overall:
    lacking = [m for m in OVERALL_COMPONENTS if m not in set(available["metric"])]
    st.info("No overall score: it averages " + ", ".join(OVERALL_COMPONENTS) + " and the "
            f"{md_escape(profile)} profile has no number for " + md_escape(", ".join(lacking))
            + " (they need NLI and UniEval models; see below). Ranked by "
            f"{md_escape(rank_by)} instead; score with `--profile standard` for the paper's overall score.")
no_valid = list(ranked.loc[ranked["failure_ratio"] == 1.0, "model"])
if no_valid:
    st.warning(", ".join(md_escape(m) for m in no_valid) + " produced no valid reply (every reply failed to "
               "parse): " + ("every metric takes its worst value" if invalid == "worst" else
                             "with invalid replies excluded there is nothing left to average (n/a)")
               + ". See **Failures** for why.")
st.caption(f"Profile {md_escape(profile)}; invalid replies "
           f"{'scored with the worst value (paper)' if invalid == 'worst' else 'excluded'}; mean ± population "
           "std and 95% bootstrap CI over samples (Wilson interval for the failure ratio). Baselines are not "
           "models: reference = the gold reply (ceiling), persona-echo = a persona sentence (floor).")

# ---- all metrics -------------------------------------------------------------------------------
with st.expander("All metrics: mean ± std [95% CI]", expanded=True):
    wide = metric_cells(board, ranked["model"], metric_order).assign(n=ranked["n"].to_numpy())
    st.dataframe(wide, hide_index=True, width="stretch")
    degraded = board[board["status"] == "degraded"].drop_duplicates("metric")
    for row in degraded.itertuples():
        st.caption(f"{md_escape(row.metric)} is degraded: {md_escape(row.reason, max_chars=300)}")
    mixed = available.groupby("metric")["model_id"].agg(lambda ids: len({i for i in ids if i}))
    for metric in mixed[mixed > 1].index:
        st.warning(f"{md_escape(metric)} was computed with different models across these runs; "
                   "its numbers are not comparable.")
if by_reason := unavailable_by_reason(board):
    st.info("Unavailable in this profile (no number is shown rather than a fake one):  \n"
            + "  \n".join(f"**{md_escape(', '.join(metrics))}**: {md_escape(reason, max_chars=300)}"
                           for reason, metrics in by_reason.items()))

# ---- charts ------------------------------------------------------------------------------------
# Only the open tab runs (a click reruns the page): a first visit builds no figure it does not show.
tab_radar, tab_bars, tab_dist, tab_modes = st.tabs(
    ["Radar (paper's aspects)", "Time, failures, engagingness", "Distributions", "Vanilla vs CoT"],
    key="lb_chart_tab", on_change="rerun")

with tab_radar:
    if tab_radar.open:
        radar_panel(board)

with tab_bars:
    if tab_bars.open:
        time_failures_panel(board)

with tab_dist:
    if tab_dist.open:
        d1, d2 = st.columns([2, 1])
        dist_metric = d1.selectbox("Metric", [m for m in metric_order if METRICS[m].level == "sample"
                                              or m == "response_time"], key="lb_dist_metric")
        shape = d2.radio("Shape", ["box", "violin"], horizontal=True, key="lb_dist_shape")
        values = sample_values(home, sig, profile, dataset, mode, dist_metric, invalid, protocol, side_by_side,
                               all_samples)  # the board's runs and sample ids
        values = values[values["model"].isin(chosen)]
        if values.empty:
            st.info("No per-sample values for this metric.")
        else:
            st.plotly_chart(distribution_figure(values, shape), width="stretch", key="lb_dist")

with tab_modes:
    if tab_modes.open:
        both = board_all[board_all["model"].isin(chosen)]
        if both["mode"].nunique() < 2:
            st.info("Only one mode was run for this dataset. Launch the other from **New run** to compare "
                    "vanilla and chain-of-thought prompting.")
        else:
            mode_metric = st.selectbox("Metric", [m for m in METRICS if m in set(both["metric"])],
                                       index=0, key="lb_mode_metric")
            st.dataframe(mode_differences(both, mode_metric), hide_index=True, width="stretch")
            long = both[both["metric"] == mode_metric][["model", "mode", "mean"]]
            st.plotly_chart(modes_figure(long), width="stretch", key="lb_modes")

# ---- export ------------------------------------------------------------------------------------
st.subheader("Export")
board_downloads(board, f"persobench-{dataset}-{mode}-{profile}-{invalid}", key_prefix="lb")
from persobench.pipeline import ReportOptions  # noqa: E402

report_download(home, ReportOptions(datasets=(dataset,), modes=(mode,), profile=profile, invalid=invalid,
                                    side_by_side=side_by_side, all_samples=all_samples),
                f"persobench-report-{dataset}-{mode}-{profile}-{invalid}.html", key="lb_report")
