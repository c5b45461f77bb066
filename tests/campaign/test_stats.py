"""Seed statistics against slow references: Welch's t and degrees of freedom written out, the t distribution's tail
by numerical integration of its density, bootstrap intervals by their coverage on simulated seeds."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import integrate

from verl_ext.campaign.stats import bootstrap_diff_ci, paired_ratio_ci, pairs_to_resolve, summarize, welch_t_test


def _t_tail_by_integration(t: float, df: float) -> float:
    """2 P(T > |t|) from the Student t density, integrated numerically."""
    c = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))
    tail, _ = integrate.quad(lambda x: c * (1 + x * x / df) ** (-(df + 1) / 2), abs(t), math.inf)
    return 2 * tail


@pytest.mark.parametrize("na,nb", [(2, 2), (2, 5), (3, 3), (10, 4)])
def test_welch_matches_the_written_out_formula(na, nb):
    rng = np.random.default_rng(na * 10 + nb)
    for _ in range(10):
        a = rng.normal(0.4, rng.uniform(0.01, 0.2), na)
        b = rng.normal(0.5, rng.uniform(0.01, 0.2), nb)
        va, vb = a.var(ddof=1) / na, b.var(ddof=1) / nb
        t = (a.mean() - b.mean()) / math.sqrt(va + vb)
        df = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
        ours = welch_t_test(a, b)
        assert ours.t == pytest.approx(t, rel=1e-10)
        assert ours.df == pytest.approx(df, rel=1e-10)
        assert ours.p == pytest.approx(_t_tail_by_integration(t, df), rel=1e-6, abs=1e-12)


def test_undefined_cases_are_nan_not_errors():
    assert math.isnan(welch_t_test([0.5], [0.1, 0.2]).p)  # one seed: no variance
    assert math.isnan(welch_t_test([0.5, 0.5], [0.2, 0.2]).p)  # no spread in either group
    assert welch_t_test([0.5, 0.5], [0.2, 0.3]).p < 1.0  # spread in one group is enough


def test_a_group_without_spread_is_tested_quietly_from_the_others():
    # three seeds ending on the same held-out count, as GRPO's did in the real-model ablation
    a, b = [0.078125, 0.078125, 0.09375], [0.0625, 0.0625, 0.0625]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = welch_t_test(a, b)
    va = np.var(a, ddof=1) / 3
    assert r.t == pytest.approx((np.mean(a) - 0.0625) / math.sqrt(va), rel=1e-12)
    assert r.df == pytest.approx(2.0, rel=1e-12)  # all the spread is a's: df = n_a - 1
    assert r.p == pytest.approx(_t_tail_by_integration(r.t, r.df), rel=1e-6)
    s = summarize([0.25])
    assert (s.mean, s.n) == (0.25, 1) and math.isnan(s.std)
    assert summarize([]).n == 0
    assert summarize([1.0, 2.0, 4.0]).std == pytest.approx(np.std([1.0, 2.0, 4.0], ddof=1))


def test_bootstrap_diff_interval_is_reproducible_and_bounded():
    a, b = [0.31, 0.42, 0.38], [0.2, 0.25]
    lo, hi = bootstrap_diff_ci(a, b, n_boot=2000, level=0.9, seed=7)
    assert (lo, hi) == bootstrap_diff_ci(a, b, n_boot=2000, level=0.9, seed=7)
    # between the extreme possible differences, around the observed one
    assert min(a) - max(b) <= lo <= np.mean(a) - np.mean(b) <= hi <= max(a) - min(b)
    assert math.isnan(bootstrap_diff_ci([], b)[0])
    assert math.isnan(bootstrap_diff_ci([0.3], b)[1]), "one run: no interval (scipy needs two)"


def test_bootstrap_diff_interval_covers_the_true_difference_about_as_often_as_it_says():
    rng = np.random.default_rng(1)
    hits = 0
    trials = 100
    for _ in range(trials):
        a, b = rng.normal(1.0, 1.0, 30), rng.normal(0.5, 1.0, 30)
        lo, hi = bootstrap_diff_ci(a, b, n_boot=300, level=0.9, seed=int(rng.integers(1 << 30)))
        hits += lo <= 0.5 <= hi
    assert 0.8 <= hits / trials <= 0.97  # nominal 0.9; percentile intervals run a little narrow at n = 30


def test_paired_ratio_is_the_ratio_of_means_and_its_interval_covers_the_truth():
    a, b = [60.0, 80.0, 70.0, 90.0, 50.0], [100.0, 150.0, 120.0, 160.0, 110.0]
    r = paired_ratio_ci(a, b, n_boot=2000)
    assert r.value == pytest.approx(np.mean(a) / np.mean(b)) and r.n == 5 and r.method == "BCa"
    assert r.low < r.value < r.high < 1.0  # every pair saves: the interval excludes 1
    # coverage: paired costs with a true ratio of 0.6 and seed effects shared within a pair
    rng = np.random.default_rng(2)
    hits = 0
    for _ in range(60):
        base = rng.lognormal(5.0, 0.4, 12)
        fast = 0.6 * base * rng.lognormal(0.0, 0.1, 12)
        ci = paired_ratio_ci(fast, base, n_boot=300, seed=int(rng.integers(1 << 30)))
        hits += ci.low <= 0.6 * math.exp(0.005) <= ci.high  # E[lognormal(0, 0.1)] = e^0.005
    assert 0.78 <= hits / 60 <= 1.0


def test_paired_ratio_degenerate_cases():
    same = paired_ratio_ci([2.0, 2.0, 2.0], [4.0, 4.0, 4.0], n_boot=200)
    assert same.value == 0.5 and same.low == pytest.approx(0.5) and same.high == pytest.approx(0.5)
    assert math.isnan(paired_ratio_ci([1.0], [2.0]).low) and paired_ratio_ci([1.0], [2.0]).value == 0.5
    assert math.isnan(paired_ratio_ci([], []).value)
    with pytest.raises(ValueError, match="equal lengths"):
        paired_ratio_ci([1.0, 2.0], [1.0])


def test_bootstrap_rejects_bad_level():
    with pytest.raises(ValueError, match="level"):
        bootstrap_diff_ci([1.0], [2.0], level=95)
    with pytest.raises(ValueError, match="level"):
        paired_ratio_ci([1.0], [2.0], level=0)


@pytest.mark.parametrize("standardized, want", [(0.2, 199), (0.5, 34), (0.8, 15), (1.0, 10)])
def test_pairs_to_resolve_matches_the_published_paired_t_table(standardized, want):
    """Cohen's (1988) sample sizes for a two-sided one-sample / paired t-test at alpha 0.05 and power 0.8 (as G*Power
    gives them): d = 0.2 -> 199, 0.5 -> 34, 0.8 -> 15, 1.0 -> 10."""
    diffs = [standardized * math.sqrt(2) + 1, standardized * math.sqrt(2) - 1]  # sd sqrt(2), mean d * sqrt(2)
    assert pairs_to_resolve(diffs) == want
    assert pairs_to_resolve([-x for x in diffs]) == want  # the sign of the difference does not matter


def test_pairs_to_resolve_is_the_n_at_which_simulated_t_tests_reach_the_power():
    """The slow reference: simulate paired t-tests on normal differences of the observed mean and spread; at the
    returned n they reject at >= 80% (within simulation noise), one pair fewer they do not."""
    from scipy import stats

    diffs = [0.03, -0.01, 0.05, 0.0]  # a campaign's four seed differences: mean 0.0175, sd 0.0263
    n = pairs_to_resolve(diffs)
    mean, sd = np.mean(diffs), np.std(diffs, ddof=1)
    rng = np.random.default_rng(0)

    def simulated_power(k: int) -> float:
        x = rng.normal(mean, sd, size=(40_000, k))
        return float((stats.ttest_1samp(x, 0.0, axis=1).pvalue < 0.05).mean())

    assert simulated_power(n) >= 0.8 - 0.006 and simulated_power(n - 1) < 0.8 + 0.006
    # a smaller effect than the one seen, asked for: more pairs
    assert pairs_to_resolve(diffs, effect=mean / 2) > 3 * n


def test_pairs_to_resolve_degenerate_cases():
    assert math.isnan(pairs_to_resolve([0.1]))  # one pair: no spread to read
    assert pairs_to_resolve([0.1, -0.1]) == math.inf  # no difference seen: none resolves it
    assert pairs_to_resolve([0.1, 0.1, 0.1]) == 2  # no spread: the fewest a t-test can take
    with pytest.raises(ValueError, match="power"):
        pairs_to_resolve([0.1, 0.2], power=1.0)
