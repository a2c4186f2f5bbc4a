"""Leaderboard: per dataset, mode and scoring profile, the finding in one sentence, every metric's
mean ± std with its 95% CI, n and the failure ratio, ranks with ties where CIs overlap, the rank
metric's CI chart, the radar, time and failures, distributions, vanilla versus cot, exports. Every
choice is in the URL (``persobench.app.links``): a copied address opens the same view."""

from __future__ import annotations

import streamlit as st

from persobench.report import ReportOptions, distribution_figure, modes_figure
from persobench.app.boards import (available_profiles, board_choices, board_for, board_statuses, demo_story_for,
                                   metric_cells, mode_differences, overall_with_ci, paper_ranks_for, sample_values,
                                   unavailable_by_reason)
from persobench.app.board_view import (all_metrics_table, board_downloads, finding, radar_panel, rank_chart,
                                       ranking_table, report_download, time_failures_panel)
from persobench.app.page_cache import current_state
from persobench.app.chrome import empty_store_notice, load_or_stop, page_setup
from persobench.app.links import copy_link, flag, many, publish, seed, seed_flag, seed_many
from persobench.app.loaders import runs_table
from persobench.app.text import md_escape
from persobench.app.widgets import demo_progress_panel, demo_story_panel, structured_board_notes

page_setup()
st.title("Leaderboard")

home, sig = current_state()
runs = runs_table(home, sig)
profiles = load_or_stop(available_profiles, home, sig)
demo = demo_progress_panel(home, empty=runs.empty)  # while `make run` prepares the demo behind the app
if runs.empty or not profiles:
    if demo is None:
        empty_store_notice(unscored=not runs.empty)
    st.stop()

if story := load_or_stop(demo_story_for, home, sig):  # the demo's store: its story before any filter
    demo_story_panel(story)

from persobench.aggregate import NO_SHARED_SAMPLES, OVERALL_COMPONENTS, landing_dataset, protocol_heading, sample_notes, sample_set_note  # noqa: E402,E501
from persobench.metrics import METRICS  # noqa: E402

scored = runs[runs["has_generations"] & (runs["status"] == "completed")]
run_counts = scored["dataset"].value_counts().to_dict()
datasets = sorted(run_counts)
INVALID = {"worst": "scored worst (paper)", "exclude": "excluded"}
f = st.columns([2, 1, 1, 1])
# The dataset with the most runs (aggregate.landing.landing_dataset): the board warm_landing prepared.
seed("lb_dataset", "dataset", datasets, landing_dataset(run_counts))
dataset = f[0].selectbox("Dataset", datasets, key="lb_dataset", help="Default: the dataset with the most runs.")
modes = sorted(scored.loc[scored["dataset"] == dataset, "mode"].unique(), key=lambda m: (m != "vanilla", m))
seed("lb_mode", "mode", modes, modes[0])
mode = f[1].selectbox("Mode", modes, key="lb_mode")
seed("lb_profile", "profile", profiles, profiles[0])
profile = f[2].selectbox("Profile", profiles, key="lb_profile",
                         help="Numbers of one scoring profile only: offline (packaged models) or standard (the "
                              "paper's models). Profiles are never mixed.")
seed("lb_invalid", "invalid", list(INVALID), "worst")
invalid = f[3].selectbox("Invalid replies", list(INVALID), key="lb_invalid", format_func=INVALID.get,
                         help="The paper scores an invalid reply with the metric's worst value (0, or -1 for "
                              "c_score). 'excluded' averages valid replies only.")

p = st.columns([3, 1.3, 1])
seed_flag("lb_side_by_side", "sides")
side_by_side = p[1].toggle("Protocols side by side", key="lb_side_by_side",
                           help="One board with every protocol, each named in its row label. Default: one board "
                                "per protocol (template family, max tokens, temperature, parse policy, structured).")
seed_flag("lb_all_samples", "all")
all_samples = p[2].toggle("All samples", key="lb_all_samples",
                          help="Aggregate each run over all its samples. Default: runs of a board are compared on "
                               "the sample ids they all answered.")
board_all = load_or_stop(board_for, home, sig, profile, dataset, invalid, side_by_side, all_samples)
if board_all.empty:
    st.info(f"No completed run of {md_escape(dataset)} has scores in the {md_escape(profile)} profile yet.")
    st.stop()
overall_all = load_or_stop(overall_with_ci, home, sig, profile, dataset, invalid, side_by_side, all_samples)
protocols = board_choices(board_all, mode) or ["(none)"]
seed(f"lb_protocol_{mode}", "protocol", protocols, protocols[0])
protocol = p[0].selectbox("Protocol", protocols, key=f"lb_protocol_{mode}",
                          help="A board compares like with like: one dataset, mode and protocol. The paper's "
                               "protocol (templates paper/paper-open, 110/220 tokens, T=0, paper parsing) holds "
                               "the published models.")
here = board_all[(board_all["mode"] == mode) & (board_all["board"] == protocol)]
models_here = sorted(here["model"].unique())
seed_many(f"lb_models_{dataset}_{mode}", "model", models_here, models_here)
chosen = st.multiselect("Models", models_here, key=f"lb_models_{dataset}_{mode}")
board = here[here["model"].isin(chosen)]
overall = overall_all[(overall_all["mode"] == mode) & (overall_all["board"] == protocol)
                      & overall_all["model"].isin(chosen)]
available = board[(board["status"] != "unavailable") & (board["n"] > 0)]
metric_order = [m for m in METRICS if m in set(available["metric"])]
has_overall = overall["overall"].notna().any()
rank_choices = (["overall", "overall_paper"] if has_overall else []) + metric_order
default_rank = "overall" if has_overall else next(
    (m for m in ("bertscore_f1", "rougeL", "dist2") if m in rank_choices), (rank_choices or ["failure_ratio"])[0])
r = st.columns([4, 1])
seed("lb_rank_by", "rank", rank_choices, default_rank)
rank_by = r[0].selectbox("Rank by", rank_choices or [default_rank], key="lb_rank_by",
                         help="Every metric of the board, each ranked in its own direction (↑ higher is better, "
                              "↓ lower). Models whose 95% confidence intervals overlap share a rank ('=').")
TABS = {"ranking": "Ranking (95% CI)", "radar": "Radar", "time": "Time, failures, engagingness",
        "distributions": "Distributions", "modes": "Vanilla vs CoT"}
tab = seed("lb_chart_tab", "tab", list(TABS.values()), TABS["ranking"], to_text={v: k for k, v in TABS.items()}.get)
state = {"dataset": dataset, "mode": mode, "profile": profile, "invalid": invalid, "sides": flag(side_by_side),
         "all": flag(all_samples), "protocol": protocol, "model": many(chosen, models_here), "rank": rank_by,
         "tab": {v: k for k, v in TABS.items()}[tab]}
publish(state)
copy_link(state, where=r[1])
if board.empty:
    st.warning("No model selected.")
    st.stop()

# ---- the finding and the ranking ---------------------------------------------------------------
disjoint = sample_set_note(board)
st.subheader(f"{dataset} · {protocol_heading(protocol, mode)}" + (f" · {NO_SHARED_SAMPLES}" if disjoint else ""))
headline = st.container()  # the finding above the table it is computed from
ranked = ranking_table(board, overall, rank_by, chosen, with_overall=has_overall,
                       paper_ranks=paper_ranks_for(board, dataset, mode, protocol))
with headline:
    finding(ranked, rank_by, board_statuses(home, sig, board))
counts = board[board["metric"] == "failure_ratio"]
if disjoint:  # each row is over its own samples: say which runs answered the same ones
    st.warning(md_escape(disjoint.removeprefix("warning: ")))
else:
    for note in sample_notes({r.model: (int(r.n), int(r.run_n)) for r in counts.itertuples()}):
        st.info(md_escape(note.replace("--all-samples uses", "'All samples' uses")))
structured_board_notes(board, board_all, protocol)
if not has_overall:
    lacking = [m for m in OVERALL_COMPONENTS if m not in set(available["metric"])]
    st.caption("No overall score: it averages " + ", ".join(OVERALL_COMPONENTS) + " and the "
               f"{md_escape(profile)} profile has no number for " + md_escape(", ".join(lacking))
               + " (they need NLI and UniEval models). Score with `--profile standard` for the paper's overall score.")
no_valid = list(ranked.loc[ranked["failure_ratio"] == 1.0, "model"])
if no_valid:
    st.warning(", ".join(md_escape(m) for m in no_valid) + " produced no valid reply (every reply failed to "
               "parse): " + ("every metric takes its worst value" if invalid == "worst" else
                             "with invalid replies excluded there is nothing left to average (n/a)")
               + ". See **Failures** for why.")
st.caption(f"Profile {md_escape(profile)}; invalid replies {md_escape(INVALID[invalid])}; mean ± population "
           "std and 95% bootstrap CI over samples (Wilson interval for the failure ratio). Baselines are not "
           "models: reference = the gold reply (ceiling), persona-echo = a persona sentence (floor).")

# ---- charts: only the open tab runs (a click reruns the page) ------------------------------------
tab_rank, tab_radar, tab_bars, tab_dist, tab_modes = st.tabs(list(TABS.values()), key="lb_chart_tab",
                                                              on_change="rerun")
with tab_rank:
    if tab_rank.open:
        rank_chart(ranked, rank_by)
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

# ---- every metric, what is missing, exports ------------------------------------------------------
with st.expander("All metrics: mean ± std [95% CI]", expanded=False):
    all_metrics_table(metric_cells(board, ranked["model"], metric_order).assign(n=ranked["n"].to_numpy()), metric_order)
    for row in board[board["status"] == "degraded"].drop_duplicates("metric").itertuples():
        st.caption(f"{md_escape(row.metric)} is degraded: {md_escape(row.reason, max_chars=300)}")
    mixed = available.groupby("metric")["model_id"].agg(lambda ids: len({i for i in ids if i}))
    for metric in mixed[mixed > 1].index:
        st.warning(f"{md_escape(metric)} was computed with different models across these runs; "
                   "its numbers are not comparable.")
if by_reason := unavailable_by_reason(board):
    st.info("Unavailable in this profile (no number is shown rather than a fake one):  \n"
            + "  \n".join(f"**{md_escape(', '.join(metrics))}**: {md_escape(reason, max_chars=300)}"
                           for reason, metrics in by_reason.items()))
st.subheader("Export this board")
board_downloads(board, f"persobench-{dataset}-{mode}-{profile}-{invalid}", key_prefix="lb",
                overall=overall if has_overall else None, rank_by=rank_by)
report_download(home, ReportOptions(datasets=(dataset,), modes=(mode,), profile=profile, invalid=invalid,
                                    side_by_side=side_by_side, all_samples=all_samples),
                f"persobench-report-{dataset}-{mode}-{profile}-{invalid}.html", key="lb_report")
