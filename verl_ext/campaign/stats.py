"""Seed statistics for campaign reports: mean / std / n, Welch's t-test and a bootstrap CI of a difference of means.

Campaigns compare conditions over a handful of seeds, so the table reports, per condition, the final value's mean,
its sample standard deviation (ddof = 1) and n, and against a baseline condition:

- Welch's unequal-variance t-test (Welch 1947): t = (mean_a - mean_b) / se, se^2 = s_a^2 / n_a + s_b^2 / n_b, with
  the Welch-Satterthwaite degrees of freedom df = se^4 / ((s_a^2 / n_a)^2 / (n_a - 1) + (s_b^2 / n_b)^2 / (n_b - 1)).
  The two-sided p-value is 2 * P(T_df > |t|) = I_{df / (df + t^2)}(df / 2, 1 / 2), the regularized incomplete beta
  function, evaluated here by its continued fraction (Lentz's method, as in Numerical Recipes 6.4), so the package
  needs no scipy at run time (scipy is the reference in tests/campaign/test_stats.py).
- A percentile bootstrap CI of mean_a - mean_b (Efron & Tibshirani 1993, ch. 13): resample each group with
  replacement, independently, n_boot times. It makes no normality assumption, but with 2-3 seeds its interval is
  only as wide as the seeds' spread: read it as descriptive.

Undefined cases are nan, never an exception: n < 2 in either group, or both groups without spread (se = 0).
"""

from __future__ import annotations

import math
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
    """Two-sided Welch t-test of mean(a) != mean(b); nan where undefined (see module docstring)."""
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if xa.size < 2 or xb.size < 2:
        return WelchResult(math.nan, math.nan, math.nan)
    va, vb = xa.var(ddof=1) / xa.size, xb.var(ddof=1) / xb.size
    se2 = va + vb
    if se2 == 0.0:
        return WelchResult(math.nan, math.nan, math.nan)
    t = float((xa.mean() - xb.mean()) / math.sqrt(se2))
    df = float(se2**2 / (va**2 / (xa.size - 1) + vb**2 / (xb.size - 1)))
    return WelchResult(t, df, student_t_two_sided_p(t, df))


def student_t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with df degrees of freedom (df > 0, real)."""
    if not df > 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if math.isinf(t):
        return 0.0
    return regularized_incomplete_beta(df / (df + t * t), df / 2.0, 0.5)


def regularized_incomplete_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b) for a, b > 0 and x in [0, 1]."""
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"x must be in [0, 1], got {x}")
    if x in (0.0, 1.0):
        return x
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    # The continued fraction converges fast for x < (a + 1) / (a + b + 2); use the symmetry
    # I_x(a, b) = 1 - I_{1-x}(b, a) on the other side.
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(x, a, b) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(1.0 - x, b, a) / b


def _beta_continued_fraction(x: float, a: float, b: float, max_iter: int = 500, eps: float = 1e-15) -> float:
    """The continued fraction of I_x(a, b), modified Lentz's method."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, max_iter + 1):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            return h
    raise ArithmeticError(f"incomplete beta continued fraction did not converge for x={x}, a={a}, b={b}")


def bootstrap_diff_ci(
    a: Sequence[float], b: Sequence[float], n_boot: int = 10_000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap CI of mean(a) - mean(b); (nan, nan) if either group is empty.

    Draws, in this order, an (n_boot, len(a)) then an (n_boot, len(b)) index matrix from numpy's default_rng(seed),
    so the result is reproducible."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must be in (0, 1), got {level}")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if xa.size == 0 or xb.size == 0:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, xa.size, size=(n_boot, xa.size))
    ib = rng.integers(0, xb.size, size=(n_boot, xb.size))
    diffs = xa[ia].mean(axis=1) - xb[ib].mean(axis=1)
    lo, hi = np.quantile(diffs, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return float(lo), float(hi)
