"""Seed statistics for campaign reports (scipy.stats underneath): mean / std / n, Welch's t-test, a bootstrap CI of a
difference of means, and a paired bootstrap CI of a ratio of mean costs (a speed-up).

Campaigns compare conditions over a handful of seeds, so the table reports, per condition, the final value's mean,
its sample standard deviation (ddof = 1) and n, and against a baseline condition:

- Welch's unequal-variance t-test (Welch 1947): t = (mean_a - mean_b) / se, se^2 = s_a^2 / n_a + s_b^2 / n_b, with
  the Welch-Satterthwaite degrees of freedom; two-sided p from Student's t (``scipy.stats.t``).
- A percentile bootstrap CI of mean_a - mean_b (Efron & Tibshirani 1993, ch. 13): each group resampled with
  replacement, independently (``scipy.stats.bootstrap``). With 2-3 seeds its interval is only as wide as the seeds'
  spread: read it as descriptive.
- A paired difference: mean over seed pairs of a[i] - b[i] (same seed = same prompt order and initial model), with
  a BCa bootstrap CI that resamples pairs, as below: what a per-condition ablation reports against its baseline.
- A speed-up: the ratio mean(cost_a) / mean(cost_b) over seed pairs (same seed = same prompts and initial model in
  both conditions), with a BCa bootstrap CI that resamples pairs (``scipy.stats.bootstrap(paired=True)``; percentile
  when BCa is undefined, e.g. every resample alike). A CI that excludes 1 says the saving is not seed noise.
- Pairs to resolve a difference: the fewest seed pairs with which a two-sided paired t-test at the CI's level has
  80% power against a true difference of the observed size, the spread of the differences taken as the observed
  one (the noncentral t, ``scipy.stats.nct``; Cohen 1988, ch. 2). What a null result would take to see its effect,
  if that effect were real; a planning figure, as uncertain as the spread it reads from 2-5 seeds.

Undefined cases are nan, never an exception: n < 2 in either group, or both groups without spread (se = 0).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Summary:
    mean: float
    std: float  # sample standard deviation (ddof = 1); nan for n < 2
    n: int


def summarize(values: Sequence[float]) -> Summary:
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return Summary(math.nan, math.nan, 0)
    return Summary(float(x.mean()), float(x.std(ddof=1)) if x.size > 1 else math.nan, int(x.size))


@dataclass(frozen=True)
class WelchResult:
    t: float
    df: float
    p: float  # two-sided


def welch_t_test(a: Sequence[float], b: Sequence[float]) -> WelchResult:
    """Two-sided Welch t-test of mean(a) != mean(b); nan where undefined (see module docstring).

    Written out rather than ``scipy.stats.ttest_ind``: a group whose seeds all ended on the same value (three runs at
    the same held-out question count) is an ordinary case here, and scipy warns on it ("catastrophic cancellation")
    although the test is well defined from the other group's spread."""
    from scipy import stats

    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if xa.size < 2 or xb.size < 2:
        return WelchResult(math.nan, math.nan, math.nan)
    va, vb = xa.var(ddof=1) / xa.size, xb.var(ddof=1) / xb.size
    se2 = va + vb
    if se2 == 0.0:
        return WelchResult(math.nan, math.nan, math.nan)
    t = float((xa.mean() - xb.mean()) / math.sqrt(se2))
    df = float(se2**2 / (va**2 / (xa.size - 1) + vb**2 / (xb.size - 1)))
    return WelchResult(t, df, float(2.0 * stats.t.sf(abs(t), df)))


def bootstrap_diff_ci(
    a: Sequence[float], b: Sequence[float], n_boot: int = 10_000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap CI of mean(a) - mean(b), the groups resampled independently; (nan, nan) if either group
    has fewer than two runs (one run resampled is itself: no interval). Reproducible for a given seed."""
    from scipy import stats

    _check_bootstrap(n_boot, level)
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if xa.size < 2 or xb.size < 2:
        return math.nan, math.nan
    r = stats.bootstrap(
        (xa, xb),
        lambda x, y, axis: np.mean(x, axis=axis) - np.mean(y, axis=axis),
        n_resamples=n_boot,
        confidence_level=level,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return float(r.confidence_interval.low), float(r.confidence_interval.high)


@dataclass(frozen=True)
class PairedResult:
    """A statistic of paired samples (a ratio of means, a mean difference) with its bootstrap CI over the pairs."""

    value: float
    low: float
    high: float
    n: int  # pairs
    method: str  # "BCa" or "percentile" (when BCa is undefined), "" when n < 2


def paired_ratio_ci(
    a: Sequence[float], b: Sequence[float], n_boot: int = 10_000, level: float = 0.95, seed: int = 0
) -> PairedResult:
    """mean(a) / mean(b) for paired samples (a[i] and b[i] share seed i) with a bootstrap CI over the pairs."""
    xa, xb = _pairs(a, b, n_boot, level)
    if xa.size == 0 or xb.mean() <= 0:
        return PairedResult(math.nan, math.nan, math.nan, int(xa.size), "")
    ratio = float(xa.mean() / xb.mean())

    def statistic(x, y, axis):
        return np.mean(x, axis=axis) / np.mean(y, axis=axis)

    low, high, method = _paired_bootstrap(xa, xb, statistic, n_boot, level, seed)
    return PairedResult(ratio, low, high, int(xa.size), method)


def paired_diff_ci(
    a: Sequence[float], b: Sequence[float], n_boot: int = 10_000, level: float = 0.95, seed: int = 0
) -> PairedResult:
    """mean(a[i] - b[i]) for paired samples (a[i] and b[i] share seed i) with a BCa bootstrap CI that resamples the
    pairs (percentile when BCa is undefined): the seed's own luck (its prompt order) cancels in each difference."""
    xa, xb = _pairs(a, b, n_boot, level)
    if xa.size == 0:
        return PairedResult(math.nan, math.nan, math.nan, 0, "")

    def statistic(x, y, axis):
        return np.mean(x, axis=axis) - np.mean(y, axis=axis)

    low, high, method = _paired_bootstrap(xa, xb, statistic, n_boot, level, seed)
    return PairedResult(float((xa - xb).mean()), low, high, int(xa.size), method)


def pairs_to_resolve(
    differences: Sequence[float], effect: float | None = None, level: float = 0.95, power: float = 0.8
) -> float:
    """The fewest pairs n with which a two-sided paired t-test at ``level`` rejects "no difference" with probability
    ``power`` when the true mean difference is ``effect`` (default: the observed mean) and the differences' standard
    deviation is the observed one: the smallest n >= 2 with P(|T| > t_crit) >= power, T ~ nct(n - 1, effect / sd *
    sqrt(n)). nan with fewer than 2 differences; inf when the effect is 0; 2 when the differences have no spread."""
    from scipy import stats

    if not 0.0 < level < 1.0 or not 0.0 < power < 1.0:
        raise ValueError(f"level and power must be in (0, 1), got {level} and {power}")
    d = np.asarray(differences, dtype=float)
    if d.size < 2:
        return math.nan
    size = abs(float(d.mean()) if effect is None else float(effect))
    sd = float(d.std(ddof=1))
    if size == 0.0:
        return math.inf
    if sd <= 1e-9 * size:  # equal differences (float rounding leaves a spread of ~1e-17)
        return 2
    standardized = size / sd
    # the normal approximation undercounts the t-test's n: start there and walk up
    z = stats.norm.ppf(1 - (1 - level) / 2) + stats.norm.ppf(power)
    n = max(2, math.floor((z / standardized) ** 2))
    while n < 1_000_000:
        df = n - 1
        crit = stats.t.ppf(1 - (1 - level) / 2, df)
        nc = standardized * math.sqrt(n)
        if stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc) >= power:
            return n
        n += 1
    return math.inf


def _pairs(a: Sequence[float], b: Sequence[float], n_boot: int, level: float) -> tuple[np.ndarray, np.ndarray]:
    _check_bootstrap(n_boot, level)
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if xa.shape != xb.shape:
        raise ValueError(f"paired samples need equal lengths, got {xa.size} and {xb.size}")
    return xa, xb


def _paired_bootstrap(xa, xb, statistic, n_boot: int, level: float, seed: int) -> tuple[float, float, str]:
    """(low, high, method) of a bootstrap CI resampling pairs: BCa, else percentile, else nan (fewer than 2 pairs)."""
    from scipy import stats

    if xa.size < 2:
        return math.nan, math.nan, ""
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # BCa on a degenerate sample warns and returns nan: fall back
            r = stats.bootstrap(
                (xa, xb),
                statistic,
                paired=True,
                n_resamples=n_boot,
                confidence_level=level,
                method=method,
                rng=np.random.default_rng(seed),
            )
        low, high = float(r.confidence_interval.low), float(r.confidence_interval.high)
        if math.isfinite(low) and math.isfinite(high):
            return low, high, method
    return math.nan, math.nan, ""


def _check_bootstrap(n_boot: int, level: float) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must be in (0, 1), got {level}")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
