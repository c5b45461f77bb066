"""Seed statistics against slow references: scipy's Welch test, t distribution and incomplete beta; a per-draw
bootstrap loop."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special, stats

from verl_ext.campaign.stats import (
    bootstrap_diff_ci,
    regularized_incomplete_beta,
    student_t_two_sided_p,
    summarize,
    welch_t_test,
)


@pytest.mark.parametrize("x", [1e-6, 0.01, 0.3, 0.5, 0.77, 0.999, 1 - 1e-9])
@pytest.mark.parametrize("a,b", [(0.5, 0.5), (1.0, 0.5), (2.5, 0.5), (15.0, 0.5), (3.0, 7.0), (200.0, 0.5)])
def test_incomplete_beta_matches_scipy(x, a, b):
    assert regularized_incomplete_beta(x, a, b) == pytest.approx(special.betainc(a, b, x), rel=1e-10, abs=1e-14)


@pytest.mark.parametrize("df", [1.0, 1.7, 4.0, 30.0, 1000.0])
@pytest.mark.parametrize("t", [0.0, 0.3, -1.2, 2.5, 8.0, -40.0])
def test_t_two_sided_p_matches_scipy(t, df):
    assert student_t_two_sided_p(t, df) == pytest.approx(2 * stats.t.sf(abs(t), df), rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("na,nb", [(2, 2), (2, 5), (3, 3), (10, 4)])
def test_welch_matches_scipy(na, nb):
    rng = np.random.default_rng(na * 10 + nb)
    for _ in range(20):
        a = rng.normal(0.4, rng.uniform(0.01, 0.2), na)
        b = rng.normal(0.5, rng.uniform(0.01, 0.2), nb)
        ours, ref = welch_t_test(a, b), stats.ttest_ind(a, b, equal_var=False)
        assert ours.t == pytest.approx(ref.statistic, rel=1e-12)
        assert ours.p == pytest.approx(ref.pvalue, rel=1e-9)
        assert ours.df == pytest.approx(ref.df, rel=1e-12)


def test_undefined_cases_are_nan_not_errors():
    assert math.isnan(welch_t_test([0.5], [0.1, 0.2]).p)  # one seed: no variance
    assert math.isnan(welch_t_test([0.5, 0.5], [0.2, 0.2]).p)  # no spread in either group
    assert welch_t_test([0.5, 0.5], [0.2, 0.3]).p < 1.0  # spread in one group is enough
    s = summarize([0.25])
    assert (s.mean, s.n) == (0.25, 1) and math.isnan(s.std)
    assert summarize([]).n == 0
    assert summarize([1.0, 2.0, 4.0]).std == pytest.approx(np.std([1.0, 2.0, 4.0], ddof=1))


def test_bootstrap_matches_per_draw_loop():
    a, b = [0.31, 0.42, 0.38], [0.2, 0.25]
    n_boot, level = 2000, 0.9
    lo, hi = bootstrap_diff_ci(a, b, n_boot=n_boot, level=level, seed=7)
    # Reference: one draw at a time, same generator and draw order (all of a's index rows, then b's).
    rng = np.random.default_rng(7)
    ia = rng.integers(0, len(a), size=(n_boot, len(a)))
    ib = rng.integers(0, len(b), size=(n_boot, len(b)))
    diffs = sorted(sum(a[i] for i in ia[k]) / len(a) - sum(b[i] for i in ib[k]) / len(b) for k in range(n_boot))
    ref = np.quantile(diffs, [0.05, 0.95])
    assert (lo, hi) == pytest.approx(tuple(ref), abs=1e-12)
    # The interval lies between the extreme possible differences and contains the observed one.
    assert min(a) - max(b) <= lo <= np.mean(a) - np.mean(b) <= hi <= max(a) - min(b)


def test_bootstrap_rejects_bad_level():
    with pytest.raises(ValueError, match="level"):
        bootstrap_diff_ci([1.0], [2.0], level=95)
