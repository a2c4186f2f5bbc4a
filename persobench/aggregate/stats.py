"""Statistics for leaderboards and model comparisons: pure functions over numbers.

- :func:`describe`: mean, population standard deviation (``ddof=0``, as the paper's tables) and n.
- :func:`bootstrap_ci` / :func:`bootstrap_mean_cis`: percentile bootstrap confidence interval of a
  mean (deterministic for a given seed); the second resamples many metrics of the same samples at
  once with one matrix product.
- :func:`wilson_interval`: confidence interval of a proportion (failure ratio).
- :func:`paired_comparison`: two models on the same samples: paired t-test, Wilcoxon signed-rank
  test, paired bootstrap CI of the mean difference, win/tie/loss counts.

The two tests give SciPy's values, to 1e-8 relative (``scipy.stats.ttest_rel``; ``scipy.stats.wilcoxon``
with its defaults), but are computed here: importing ``scipy.stats`` took 0.5 s, half of preparing the app's
first views after a ``score``. SciPy is still used for the one case it settles by permutation
(at most 13 pairs with tied or zero differences).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any, Sequence

import numpy as np
from statistics import NormalDist
from threadpoolctl import ThreadpoolController

__all__ = [
    "DEFAULT_LEVEL", "DEFAULT_RESAMPLES", "PairedComparison", "bootstrap_ci", "bootstrap_mean_cis",
    "describe", "paired_comparison", "resample_counts", "student_t_two_sided", "wilson_interval",
]

DEFAULT_LEVEL = 0.95
DEFAULT_RESAMPLES = 1000


def _array(values: Sequence[float] | np.ndarray) -> np.ndarray:
    array = np.asarray(values, dtype="float64").ravel()
    return array[~np.isnan(array)]


def describe(values: Sequence[float] | np.ndarray) -> tuple[float, float, int]:
    """``(mean, population std, n)`` of the non-NaN values; ``(nan, nan, 0)`` when there are none."""
    array = _array(values)
    if not array.size:
        return math.nan, math.nan, 0
    return float(array.mean()), float(array.std(ddof=0)), int(array.size)


def bootstrap_ci(
    values: Sequence[float] | np.ndarray, *, level: float = DEFAULT_LEVEL,
    n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of the non-NaN ``values``.

    ``(nan, nan)`` for fewer than two values. The same values and seed always give the same interval.
    """
    array = _array(values)
    low, high = bootstrap_mean_cis(array.reshape(-1, 1), level=level, n_resamples=n_resamples, seed=seed)
    return float(low[0]), float(high[0])


def resample_counts(n: int, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> np.ndarray:
    """How often each of ``n`` samples is drawn in each of ``n_resamples`` bootstrap resamples
    (``n_resamples x n`` float64, rows sum to ``n``); deterministic for ``seed``."""
    return _resample_counts(n, n_resamples, seed).astype("float64")


@lru_cache(maxsize=32)
def _resample_counts(n: int, n_resamples: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    small = np.empty((n_resamples, n), dtype=np.uint16)  # compact cache entry (1000 x 1000 -> 2 MB)
    # Drawn and counted a block of resamples at a time: the same draws as one (n_resamples, n)
    # call (the generator's stream does not depend on how it is cut), without its three arrays of
    # n_resamples x n int64 (24 MB for 1,000 samples, a tenth of a second to map on a fresh process).
    block = max(1, min(n_resamples, (1 << 17) // max(n, 1)))
    offsets = (np.arange(block, dtype=np.int64) * n)[:, None]
    for start in range(0, n_resamples, block):
        rows = min(block, n_resamples - start)
        draws = rng.integers(0, n, size=(rows, n))
        draws += offsets[:rows]
        small[start:start + rows] = np.bincount(draws.ravel(), minlength=rows * n).reshape(rows, n)
    small.setflags(write=False)
    return small


def _resampled_means(values: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    """The mean of ``values`` (n samples, or n x k) in each bootstrap resample: one matrix product with
    the draw counts, on one BLAS thread. A board's product (1,000 x 1,000 by 1,000 x 8) is too small to
    share: with two threads on two cores it used 8 times the CPU (the threads' hand-off and spinning),
    and a report of the paper's 58 runs spent a fifth of its time there. One thread also makes a CI the
    same bits on every machine: OpenBLAS splits a product by its thread count, which moves the last
    bits of the sums. The compact counts go into the product as they are: numpy converts them exactly
    (the same bits as float64 counts kept beside them, which held 8 MB per sample count to save a
    millisecond per product)."""
    n = values.shape[0]
    with _blas().limit(limits=1, user_api="blas"):
        return _resample_counts(n, n_resamples, seed) @ values / n


@lru_cache(maxsize=1)
def _blas() -> ThreadpoolController:
    """The process's BLAS libraries (numpy's OpenBLAS), found once."""
    return ThreadpoolController()


def bootstrap_mean_cis(
    matrix: np.ndarray, *, level: float = DEFAULT_LEVEL, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap CIs of the column means of ``matrix`` (samples x metrics, no NaN).

    All columns are resampled with the same resampled rows (the samples are shared), held as
    per-sample draw counts so one matrix product gives every resampled mean.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    matrix = np.asarray(matrix, dtype="float64")
    if matrix.ndim != 2:
        raise ValueError("matrix must be 2-dimensional (samples x metrics)")
    n, k = matrix.shape
    if n < 2 or k == 0:
        return np.full(k, math.nan), np.full(k, math.nan)
    if np.isnan(matrix).any():
        raise ValueError("matrix has NaN values; resample columns with the same missing rows together")
    means = _resampled_means(matrix, n_resamples, seed)  # n_resamples x k
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha], axis=0)
    return low, high


def wilson_interval(successes: int, n: int, *, level: float = DEFAULT_LEVEL) -> tuple[float, float]:
    """Wilson score interval of a proportion ``successes / n``; ``(nan, nan)`` when ``n == 0``."""
    if n <= 0:
        return math.nan, math.nan

    z = NormalDist().inv_cdf(1.0 - (1.0 - level) / 2.0)
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class PairedComparison:
    """Two models scored on the same samples (``a`` minus ``b``)."""

    metric: str
    run_a: str
    run_b: str
    n: int
    """Samples both runs have a value for."""
    mean_a: float
    mean_b: float
    mean_diff: float
    """``mean_a - mean_b``."""
    t_statistic: float
    t_pvalue: float
    """Paired t-test (``scipy.stats.ttest_rel``), two-sided."""
    wilcoxon_statistic: float
    wilcoxon_pvalue: float
    """Wilcoxon signed-rank test (``scipy.stats.wilcoxon``, zero differences dropped), two-sided;
    p = 1 when every difference is zero."""
    ci_low: float
    ci_high: float
    """Paired bootstrap percentile CI of ``mean_diff`` (samples resampled as pairs)."""
    bootstrap_pvalue: float
    """Two-sided bootstrap p-value: 2 x the share of resampled differences on the other side of 0."""
    wins: int
    """Samples where ``a`` is better (per the metric's direction)."""
    ties: int
    losses: int
    level: float
    n_resamples: int
    higher_is_better: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def paired_comparison(
    a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, *, metric: str = "", run_a: str = "",
    run_b: str = "", higher_is_better: bool = True, level: float = DEFAULT_LEVEL,
    n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
) -> PairedComparison:
    """Compare paired values (position ``i`` of ``a`` and ``b`` is the same sample).

    Pairs where either value is NaN are dropped. Raises ``ValueError`` when the lengths differ or no
    pair is left.
    """
    x = np.asarray(a, dtype="float64").ravel()
    y = np.asarray(b, dtype="float64").ravel()
    if x.shape != y.shape:
        raise ValueError(f"paired values must have the same length, got {x.size} and {y.size}")
    keep = ~(np.isnan(x) | np.isnan(y))
    x, y = x[keep], y[keep]
    n = int(x.size)
    if n == 0:
        raise ValueError("no sample has a value in both runs")
    diff = x - y
    if n >= 2 and np.any(diff != diff[0]):
        t_stat = float(diff.mean() / math.sqrt(diff.var(ddof=1) / n))
        t_p = student_t_two_sided(t_stat, n - 1)
    else:  # constant differences: the t statistic is undefined (zero variance)
        t_stat, t_p = math.nan, (1.0 if n >= 2 and diff[0] == 0 else math.nan)
    if np.any(diff != 0):
        w_stat, w_p = _wilcoxon(diff)
    else:
        w_stat, w_p = 0.0, 1.0
    if n >= 2:
        boot = _resampled_means(diff, n_resamples, seed)
        alpha = (1.0 - level) / 2.0
        ci_low, ci_high = (float(v) for v in np.quantile(boot, [alpha, 1.0 - alpha]))
        boot_p = min(1.0, 2.0 * min(float(np.mean(boot <= 0)), float(np.mean(boot >= 0))))
    else:
        ci_low = ci_high = boot_p = math.nan
    better = diff > 0 if higher_is_better else diff < 0
    worse = diff < 0 if higher_is_better else diff > 0
    return PairedComparison(
        metric=metric, run_a=run_a, run_b=run_b, n=n, mean_a=float(x.mean()), mean_b=float(y.mean()),
        mean_diff=float(diff.mean()), t_statistic=t_stat, t_pvalue=t_p, wilcoxon_statistic=w_stat,
        wilcoxon_pvalue=w_p, ci_low=ci_low, ci_high=ci_high, bootstrap_pvalue=boot_p,
        wins=int(better.sum()), ties=int((diff == 0).sum()), losses=int(worse.sum()), level=level,
        n_resamples=n_resamples, higher_is_better=higher_is_better,
    )


# --- The tests' distributions, without scipy.stats ---------------------------------------------------

def student_t_two_sided(t: float, df: float) -> float:
    """Two-sided p-value of Student's t statistic ``t`` with ``df`` degrees of freedom:
    ``P(|T| >= |t|) = I_x(df/2, 1/2)`` with ``x = df / (df + t**2)`` (the regularized incomplete beta)."""
    if math.isnan(t) or df <= 0:
        return math.nan
    if math.isinf(t):
        return 0.0
    x = df / (df + t * t)
    return min(1.0, _regularized_beta(x, df / 2.0, 0.5))


def _regularized_beta(x: float, a: float, b: float) -> float:
    """``I_x(a, b)`` by its continued fraction (modified Lentz), on the side where it converges fast."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(x, a, b) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(1.0 - x, b, a) / b


def _beta_fraction(x: float, a: float, b: float) -> float:
    tiny, eps = 1e-300, 1e-16
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 100_000):
        m2 = 2 * m
        for numerator in (m * (b - m) * x / ((a + m2 - 1.0) * (a + m2)),
                          -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def _normal_two_sided(z: float) -> float:
    return min(1.0, math.erfc(abs(z) / math.sqrt(2.0)))


def _wilcoxon(diff: np.ndarray) -> tuple[float, float]:
    """(statistic, two-sided p) of the Wilcoxon signed-rank test of paired differences, as
    ``scipy.stats.wilcoxon`` computes them by default (zero differences dropped, no continuity
    correction): the exact null distribution for at most 50 pairs without ties or zeros, the
    normal approximation with tie correction otherwise."""
    nonzero = diff[diff != 0]
    count = int(nonzero.size)
    ranks, tie_sizes = _average_ranks(np.abs(nonzero))
    r_plus = float(ranks[nonzero > 0].sum())
    r_minus = float(ranks[nonzero < 0].sum())
    statistic = min(r_plus, r_minus)
    has_ties, has_zeros = bool((tie_sizes > 1).any()), count < diff.size
    if diff.size <= 50 and not (has_ties or has_zeros):
        counts = _signed_rank_counts(count)
        total = float(2 ** count)
        low, high = math.floor(r_plus), math.ceil(r_plus)
        mean = count * (count + 1) / 4.0
        # SciPy's WilcoxonDistribution: the smaller tail summed directly, the larger as 1 - the other.
        sf = _counts_tail(counts, low, total, upper=True) if low <= mean else 1.0 - _counts_tail(counts, low - 1, total)
        cdf = _counts_tail(counts, high, total) if high <= mean else 1.0 - _counts_tail(counts, high + 1, total, upper=True)
        return statistic, float(min(1.0, max(0.0, 2.0 * min(sf, cdf))))
    if diff.size <= 13:  # ties or zeros in a tiny sample: SciPy settles it by exact permutation
        from scipy import stats as sps

        result = sps.wilcoxon(diff, zero_method="wilcox", alternative="two-sided")
        return float(result.statistic), float(result.pvalue)
    mean = count * (count + 1.0) * 0.25
    variance = count * (count + 1.0) * (2.0 * count + 1.0)
    se = math.sqrt((variance - float((tie_sizes ** 3 - tie_sizes).sum()) / 2.0) / 24.0)
    return statistic, _normal_two_sided((r_plus - mean) / se)


def _counts_tail(counts: list[int], k: int, total: float, *, upper: bool = False) -> float:
    """Probability of a signed-rank sum ``<= k`` (``>= k`` when ``upper``) from its null counts."""
    if upper:
        return sum(counts[max(k, 0):]) / total
    return sum(counts[:k + 1]) / total if k >= 0 else 0.0


@lru_cache(maxsize=64)
def _signed_rank_counts(n: int) -> list[int]:
    """How many of the ``2**n`` sign patterns of ranks 1..n give each positive-rank sum 0..n(n+1)/2."""
    counts = [1]
    for rank in range(1, n + 1):
        grown = counts + [0] * rank
        for total, ways in enumerate(counts):
            grown[total + rank] += ways
        counts = grown
    return counts


def _average_ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ranks 1..n of ``values`` (ties get their average rank) and the size of each group of equal
    values, one per distinct value (what the tie correction sums over)."""
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    sizes = np.diff(np.r_[starts, ordered.size])
    group_ranks = starts + (sizes + 1) / 2.0
    ranks = np.empty(values.size, dtype="float64")
    ranks[order] = np.repeat(group_ranks, sizes)
    return ranks, sizes
