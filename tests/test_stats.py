"""persobench.aggregate.stats against scipy/numpy on known data, and bootstrap coverage."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from persobench.aggregate import stats


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


@pytest.mark.parametrize("n, n_resamples, seed", [(2, 1000, 0), (980, 1000, 0), (1234, 999, 5), (5000, 1000, 0),
                                                   (131_073, 3, 0), (17, 10_000, 3), (1, 5, 0)])
def test_resample_counts_are_the_draws_of_one_call_whatever_the_blocks(n, n_resamples, seed):
    """The counts are drawn a block of resamples at a time; they are those of the one
    ``integers(0, n, size=(n_resamples, n))`` call every published CI was computed with."""
    draws = np.random.default_rng(seed).integers(0, n, size=(n_resamples, n))
    offsets = (np.arange(n_resamples, dtype=np.int64) * n)[:, None]
    expected = np.bincount((offsets + draws).ravel(), minlength=n_resamples * n).reshape(n_resamples, n)
    stats._resample_counts.cache_clear()
    assert np.array_equal(stats.resample_counts(n, n_resamples, seed), expected)


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


def _paired_cases() -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Paired samples covering each branch scipy's tests take: large and small n, ties, zero
    differences, one-sided data, lexical-like values on a grid (many ties)."""
    rng = np.random.default_rng(11)
    cases = []
    for n in (2, 3, 5, 9, 13, 14, 20, 50, 51, 120, 3000):
        a = rng.normal(0.5, 0.2, size=n)
        cases.append((f"continuous n={n}", a, a - rng.normal(0.03, 0.1, size=n)))
        grid_a = rng.integers(0, 6, size=n) / 5.0  # Distinct-n-like: few distinct values, ties and zeros
        cases.append((f"grid n={n}", grid_a, rng.integers(0, 6, size=n) / 5.0))
        cases.append((f"one-sided n={n}", a + 1.0, a))
    cases.append(("large t", np.linspace(0.0, 1.0, 400) + 0.3, np.linspace(0.0, 1.0, 400)
                  + rng.normal(0.0, 0.01, size=400)))
    return cases


@pytest.mark.parametrize("label,a,b", _paired_cases(), ids=[c[0] for c in _paired_cases()])
def test_paired_tests_match_scipy_without_importing_it(label, a, b):
    """The t-test and Wilcoxon test are computed without SciPy's stats module (its import was half
    the time of preparing the app's first views); every value matches it."""
    result = stats.paired_comparison(a, b, n_resamples=10)
    diff = a - b
    if np.any(diff != diff[0]):
        t = sps.ttest_rel(a, b)
        assert result.t_statistic == pytest.approx(float(t.statistic), rel=1e-9, abs=1e-12)
        assert result.t_pvalue == pytest.approx(float(t.pvalue), rel=1e-8, abs=1e-300)
    if np.any(diff != 0):
        w = sps.wilcoxon(a, b)
        assert result.wilcoxon_statistic == pytest.approx(float(w.statistic), rel=1e-12)
        assert result.wilcoxon_pvalue == pytest.approx(float(w.pvalue), rel=1e-9, abs=1e-300)


def test_student_t_tail_matches_scipy_over_degrees_and_statistics():
    from scipy import special

    for df in (1, 2, 3, 7, 30, 119, 1000, 56_074):
        for t in (0.0, 0.01, 0.5, 1.0, 1.7, 2.5, 4.0, 10.0, 40.0, 300.0):
            expected = 2.0 * float(special.stdtr(df, -t))
            assert stats.student_t_two_sided(t, df) == pytest.approx(expected, rel=1e-8, abs=1e-300), (df, t)


def test_paired_comparison_does_not_import_scipy_stats():
    code = ("import sys, numpy as np; from persobench.aggregate.stats import paired_comparison; "
            "r = paired_comparison(np.arange(200.0) % 7, np.arange(200.0) % 5); "
            "assert 'scipy.stats' not in sys.modules, 'scipy.stats imported'; print(r.wilcoxon_pvalue)")
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[1])
    assert done.returncode == 0, done.stderr
    assert 0.0 <= float(done.stdout) <= 1.0


def test_bootstrap_cis_are_the_same_bits_whatever_the_blas_thread_count():
    """The resampled means are one product on one BLAS thread: OpenBLAS splits a product between
    threads by their number, which moves the last bits of the sums (2 threads against 1 did), so a
    CI was not the same number on machines with other core counts. It is the product of the float64
    counts, and the process's BLAS keeps its own thread count afterwards."""
    from threadpoolctl import threadpool_info, threadpool_limits

    before = [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]
    rng = np.random.default_rng(7)
    matrix = rng.random((980, 9))
    diff = rng.normal(size=300)
    cis, paired = [], []
    for threads in (2, 1, 4):
        with threadpool_limits(limits=threads, user_api="blas"):
            cis.append(stats.bootstrap_mean_cis(matrix))
            result = stats.paired_comparison(diff, np.zeros(300), metric="m", run_a="a", run_b="b")
            paired.append((result.ci_low, result.ci_high))
    with threadpool_limits(limits=1, user_api="blas"):
        means = stats.resample_counts(980) @ matrix / 980
        boot = stats.resample_counts(300) @ diff / 300
    alpha = (1.0 - stats.DEFAULT_LEVEL) / 2.0
    expected = np.quantile(means, [alpha, 1.0 - alpha], axis=0)
    for low, high in cis:
        assert np.array_equal(low, expected[0]) and np.array_equal(high, expected[1])
    assert set(paired) == {tuple(float(v) for v in np.quantile(boot, [alpha, 1.0 - alpha]))}
    assert [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"] == before
