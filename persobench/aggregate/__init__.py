"""Leaderboards: per-sample scores of many runs turned into comparable numbers.

Pure functions over DataFrames plus thin loaders from the run store, shared by the CLI
(``python -m persobench leaderboard``) and the app. Four modules, all re-exported here:
``results`` (loading, the invalid-reply rule), ``board`` (the leaderboard), ``ranking`` (overall
score, radar, ranks with ties, paired comparisons) and ``exports`` (table, CSV, Markdown, LaTeX, JSON);
``disk_cache`` keeps the aggregated tables on disk in the store, keyed by its modification state.
``story`` is the demo's story for the app's landing page; ``landing`` prepares the app's first views
in the disk cache when a command changes the store; ``failures``, ``finding``, ``instances`` and
``published_ranking`` hold the app's failure taxonomy, a board's one-line finding, per-instance
values and the paper's own ranking.

Pipeline::

    results = load_results(store, profile="offline")     # Results: .frame long, one row per sample x metric
    board = leaderboard(results, invalid="worst")          # long, one row per run x metric
    overall = overall_table(board)                         # wide, one row per run: overall + rank
    text = export_board(board, "markdown")

Conventions, as the paper's tables:

- mean and population standard deviation (``ddof=0``) over the samples of a run, with n and a
  percentile-bootstrap 95% CI of the mean;
- invalid replies (status other than ``ok``) are scored with the metric's worst value (0, and -1
  for ``c_score``: policy ``"worst"``, the default and the paper's) or left out (``"exclude"``);
- ``failure_ratio`` is the share of invalid replies, ``response_time`` the mean latency over all
  samples (invalid ones included, whatever the policy), ``instructability`` is
  ``(max failure - failure) / max failure`` across the models compared on the same dataset and
  mode (1 for every model when none failed);
- ``overall`` is the mean of ``ue_score``, ``persona_distance``, ``unieval_groundedness``,
  ``c_score`` and ``instructability``, all x100. ``overall_paper`` reproduces the paper's ranking
  table, which added instructability unscaled (0-1) to the x100 values. When a component is
  unavailable (the offline profile has no NLI or UniEval model) both are NaN and ``reason`` says why.

Numbers never mix profiles: a board holds one profile, named in its ``profile`` column, and each
row carries the ``model_id`` its metric was computed with, so a display can warn when runs of the
same comparison used different models.

A board compares like with like: one dataset, one mode and one protocol
(:func:`persobench.prompts.protocol.protocol_of`: template family, max tokens, temperature, parse policy,
structured output). Runs under different protocols land on separate boards (the ``board`` column),
or on one board with the protocol in the row label when asked (``side_by_side=True``). Runs of one
board that answered different sample sets are compared on the sample ids common to all of them
(``n`` says how many; ``run_n`` is each run's own count) unless ``all_samples=True``.
"""

from __future__ import annotations

from persobench.aggregate.board import BOARD_COLUMNS, SIDE_BY_SIDE, leaderboard
from persobench.aggregate.disk_cache import CACHE_DIR, cached_table
from persobench.aggregate.exports import (CSV_COLUMNS, EXPORT_FORMATS, NO_SHARED_SAMPLES, PROTOCOL_FIELDS, export_board,
                                          protocol_heading, sample_notes, sample_set_note, structured_note)
from persobench.aggregate.failures import (FAILURE_STATUSES, failure_summary, latest_rows, run_row_labels, stated_error,
                                           truncation_cause)
from persobench.aggregate.finding import TIES_LEGEND, arrow, board_finding, higher_is_better, metric_help
from persobench.aggregate.instances import INSTANCE_COLUMNS, instance_values, widest_spread
from persobench.aggregate.landing import (cached_board, cached_comparison, cached_overall, compared_metrics,
                                          landing_dataset, metric_rules, warm_landing)
from persobench.aggregate.published_ranking import (PAPER_RANKED_DATASET, paper_figure_slips, paper_ranking,
                                                    published_ranks)
from persobench.aggregate.story import DemoStory, demo_story
from persobench.aggregate.ranking import (COMPARISON_COLUMNS, OVERALL_CI_COLUMNS, OVERALL_COMPONENTS, RADAR_ASPECTS,
                                          compare_models, comparison_table, model_ranking, overall_table,
                                          overall_with_ci, paired_values, radar_aspects, radar_metrics, rank_with_ties,
                                          sample_values, structured_pairs)
from persobench.aggregate.results import (INVALID_POLICIES, LABEL_COLUMNS, METRIC_STATUS_COLUMNS, OK,  # noqa: F401
                                          RESULT_COLUMNS, Results,
                                          available_profiles, load_metric_status, load_results, results_table,
                                          run_samples, score_invalid, worst_value)

__all__ = [
    "BOARD_COLUMNS", "COMPARISON_COLUMNS", "CSV_COLUMNS", "EXPORT_FORMATS", "INVALID_POLICIES", "LABEL_COLUMNS",
    "METRIC_STATUS_COLUMNS",
    "OVERALL_CI_COLUMNS", "OVERALL_COMPONENTS", "PROTOCOL_FIELDS", "RADAR_ASPECTS", "RESULT_COLUMNS", "Results",
    "SIDE_BY_SIDE", "available_profiles", "compare_models", "comparison_table", "export_board", "leaderboard",
    "load_metric_status", "load_results", "model_ranking", "overall_table", "overall_with_ci", "paired_values",
    "protocol_heading", "radar_aspects", "rank_with_ties", "results_table", "run_samples", "sample_notes",
    "sample_set_note", "sample_values", "score_invalid", "structured_note", "structured_pairs", "worst_value",
    "CACHE_DIR", "DemoStory", "FAILURE_STATUSES", "INSTANCE_COLUMNS", "NO_SHARED_SAMPLES", "PAPER_RANKED_DATASET",
    "TIES_LEGEND", "arrow", "board_finding", "cached_board", "cached_comparison", "cached_overall", "cached_table",
    "compared_metrics", "demo_story", "failure_summary", "higher_is_better", "instance_values", "landing_dataset",
    "latest_rows", "metric_help", "metric_rules", "paper_figure_slips", "paper_ranking", "published_ranks",
    "radar_metrics", "run_row_labels", "stated_error", "truncation_cause", "warm_landing", "widest_spread",
]
