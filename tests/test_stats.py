"""persobench.stats against scipy/numpy on known data, and bootstrap coverage."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from persobench import stats


def test_describe_is_population_std_like_the_paper():
    values = [0.0, 1.0, 1.0, 2.0, np.nan]
    mean, std, n = stats.describe(values)
    assert n == 4
    assert mean == pytest.approx(1.0)
    # ddof=0, as the notebooks' metrics_df.std(ddof=0); the sample std (ddof=1) would be 0.8165.
    assert std == pytest.approx(math.sqrt(0.5))
    assert std == pytest.approx(pd.Series(values).std(ddof=0))
    assert std != pytest.approx(pd.Series(values).std(ddof=1))
    assert stats.describe([np.nan])[2] == 0 and math.isnan(stats.describe([])[0])


def test_bootstrap_ci_is_deterministic_and_brackets_the_mean():
    rng = np.random.default_rng(1)
    values = rng.normal(3.0, 1.0, size=300)
    low, high = stats.bootstrap_ci(values, seed=7)
    assert (low, high) == stats.bootstrap_ci(values, seed=7)
    assert low < values.mean() < high
    # Width close to the normal-theory interval 2 * 1.96 * sd / sqrt(n).
    expected = 2 * 1.96 * values.std(ddof=1) / math.sqrt(values.size)
    assert (high - low) == pytest.approx(expected, rel=0.15)
    assert all(math.isnan(v) for v in stats.bootstrap_ci([1.0]))


def test_bootstrap_matrix_matches_single_column_intervals():
    rng = np.random.default_rng(2)
    matrix = rng.random((200, 3))
    low, high = stats.bootstrap_mean_cis(matrix, seed=3)
    for j in range(3):
        assert (low[j], high[j]) == pytest.approx(stats.bootstrap_ci(matrix[:, j], seed=3))
    with pytest.raises(ValueError):
        stats.bootstrap_mean_cis(np.array([[1.0], [np.nan]]))


def test_bootstrap_ci_coverage_is_close_to_nominal():
    rng = np.random.default_rng(11)
    covered = 0
    trials = 300
    for t in range(trials):
        sample = rng.exponential(1.0, size=60)  # skewed, true mean 1
        low, high = stats.bootstrap_ci(sample, n_resamples=500, seed=t)
        covered += low <= 1.0 <= high
    # Percentile bootstrap on n=60 from an exponential: roughly 91-95% coverage.
    assert 0.86 <= covered / trials <= 0.99


def test_resample_counts_rows_sum_to_n():
    counts = stats.resample_counts(50, 20, 0)
    assert counts.shape == (20, 50)
    assert (counts.sum(axis=1) == 50).all()
    assert not np.array_equal(counts, stats.resample_counts(50, 20, 1))


def test_wilson_interval_known_values():
    low, high = stats.wilson_interval(10, 100)
    assert (low, high) == pytest.approx((0.0552, 0.1744), abs=1e-4)
    assert stats.wilson_interval(0, 50)[0] == 0.0
    assert all(math.isnan(v) for v in stats.wilson_interval(0, 0))


def test_paired_comparison_matches_scipy():
    rng = np.random.default_rng(5)
    a = rng.normal(0.6, 0.2, size=120)
    b = a - rng.normal(0.05, 0.1, size=120)
    result = stats.paired_comparison(a, b, metric="dist2", run_a="A", run_b="B", seed=0)
    t = sps.ttest_rel(a, b)
    w = sps.wilcoxon(a, b)
    assert result.n == 120
    assert result.t_statistic == pytest.approx(t.statistic)
    assert result.t_pvalue == pytest.approx(t.pvalue)
    assert result.wilcoxon_statistic == pytest.approx(w.statistic)
    assert result.wilcoxon_pvalue == pytest.approx(w.pvalue)
    assert result.mean_diff == pytest.approx((a - b).mean())
    assert result.ci_low < result.mean_diff < result.ci_high
    assert result.wins == int(((a - b) > 0).sum()) and result.losses == int(((a - b) < 0).sum())
    assert result.wins + result.ties + result.losses == 120
    assert result.to_dict()["metric"] == "dist2"


def test_paired_comparison_direction_nan_and_degenerate_cases():
    a = [1.0, 2.0, 3.0, np.nan]
    b = [2.0, 2.0, 4.0, 1.0]
    lower_better = stats.paired_comparison(a, b, higher_is_better=False)
    assert lower_better.n == 3  # the NaN pair is dropped
    assert (lower_better.wins, lower_better.ties, lower_better.losses) == (2, 1, 0)
    same = stats.paired_comparison([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert same.wilcoxon_pvalue == 1.0 and same.t_pvalue == 1.0 and same.mean_diff == 0.0
    with pytest.raises(ValueError, match="same length"):
        stats.paired_comparison([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="no sample"):
        stats.paired_comparison([np.nan], [1.0])
