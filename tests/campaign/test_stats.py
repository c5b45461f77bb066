"""Seed statistics against slow references: Welch's t and degrees of freedom written out, the t distribution's tail
by numerical integration of its density, the paired t-interval against printed t tables, the sign-flip p against
every sign pattern enumerated by hand, intervals by their coverage on simulated seeds."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from scipy import integrate

from verl_ext.campaign.stats import (
    EXACT_SIGN_FLIP_MAX_PAIRS,
    MIN_BOOTSTRAP_PAIRS,
    bootstrap_diff_ci,
    paired_diff_ci,
    paired_difference,
    paired_ratio,
    paired_ratio_ci,
    pairs_to_resolve,
    sign_flip_p,
    summarize,
    t_interval,
    welch_t_test,
)


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


# Student's t quantiles t_{0.975, df} as printed in t tables (e.g. Fisher & Yates, Table III): an outside reference
T_975 = {1: 12.706, 2: 4.303, 4: 2.776, 9: 2.262}


def _hand_sign_flip_p(d) -> float:
    """Every one of the 2^n sign patterns written out: the share whose |mean| reaches the observed |mean|."""
    d = [float(x) for x in d]
    observed = abs(sum(d) / len(d))
    hits = [abs(sum(s * x for s, x in zip(signs, d)) / len(d)) >= observed * (1 - 1e-9) for signs in _signs(len(d))]
    return sum(hits) / len(hits)


def _signs(n: int):
    return itertools.product((1, -1), repeat=n)


@pytest.mark.parametrize(
    "d",
    [
        [0.03],  # n = 1: both patterns alike
        [0.03, -0.01],  # n = 2
        [0.028, 0.035, 0.028],  # n = 3, all above 0: the smallest p three pairs can give
        [0.02, -0.01, 0.05],  # n = 3, mixed signs
        [0.07, 0.12, -0.03, 0.05, 0.09],  # n = 5
        [0.1, 0.4, -0.2, 0.3, 0.05, 0.15, -0.1, 0.25, 0.2, 0.35],  # n = 10
        [0.0625, 0.0625, 0.0625],  # all equal
        [0.0, 0.0, 0.0],  # all equal, at 0
        [0.0, 0.0625, -0.0625, 0.125],  # ties: zeros, and equal magnitudes of both signs
        [-0.007, -0.021, 0.0],  # a tie at 0 (sdpo_answer against GRPO)
    ],
)
def test_sign_flip_p_is_the_share_of_sign_patterns_enumerated_by_hand(d):
    assert sign_flip_p(d) == pytest.approx(_hand_sign_flip_p(d), abs=1e-12)
    assert sign_flip_p([-x for x in d]) == pytest.approx(sign_flip_p(d), abs=1e-12)  # two-sided


def test_sign_flip_p_floor_is_two_over_two_to_the_n():
    for n in (2, 3, 4, 5, 6):
        assert sign_flip_p([0.01 * (i + 1) for i in range(n)]) == pytest.approx(2 / 2**n)
    assert sign_flip_p([0.03, 0.031, 0.029]) == 0.25  # three pairs, all above 0: p = 0.25, never less
    assert math.isnan(sign_flip_p([]))


def test_sign_flip_p_beyond_the_exact_limit_draws_random_patterns_close_to_the_exact_share():
    n = EXACT_SIGN_FLIP_MAX_PAIRS + 2
    d = np.random.default_rng(3).normal(0.15, 1.0, n)
    signs = np.array(list(_signs(n)), dtype=float)  # 2^18 patterns, vectorized: the exact share
    exact = float(np.mean(np.abs(signs @ d) >= abs(d.sum()) * (1 - 1e-9)))
    assert 0.05 < exact < 0.95
    assert sign_flip_p(d, seed=1) == pytest.approx(exact, abs=0.006)  # 100,000 draws: se ~0.0016
    assert sign_flip_p(d, seed=1) == sign_flip_p(d, seed=1)  # reproducible


@pytest.mark.parametrize("d", [[0.05, -0.01], [0.028, 0.035, 0.021], [0.07, 0.12, -0.03, 0.05, 0.09]])
def test_t_interval_is_the_mean_plus_minus_the_tabulated_t_times_the_standard_error(d):
    n = len(d)
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = T_975[n - 1] * sd / math.sqrt(n)
    low, high, h = t_interval(d)
    # the printed t has 3 decimals: ~1e-4 of it, so the endpoints agree to ~2e-4 of the half-width
    assert (low, high, h) == pytest.approx((mean - half, mean + half, half), abs=2e-4 * half)
    wide = t_interval(d, level=0.99)
    assert wide[0] < low and wide[1] > high  # a higher level, a wider interval


def test_t_interval_undefined_and_degenerate_cases():
    assert all(math.isnan(x) for x in t_interval([0.3]))  # one value: no spread to read
    assert all(math.isnan(x) for x in t_interval([]))
    assert t_interval([0.1, 0.1, 0.1]) == (pytest.approx(0.1), pytest.approx(0.1), 0.0)  # equal: zero width
    with pytest.raises(ValueError, match="level"):
        t_interval([0.1, 0.2], level=95)


def test_paired_difference_gathers_the_statistics_of_the_differences():
    a, b = [0.236, 0.243, 0.236], [0.208, 0.215, 0.201]  # Composer +replay against GRPO, step-16 greedy
    d = [x - y for x, y in zip(a, b)]
    r = paired_difference(a, b, n_boot=2000)
    assert r.value == pytest.approx(np.mean(d)) and r.n == 3
    assert (r.low, r.high, r.half_width) == pytest.approx(t_interval(d))
    assert r.half_width == pytest.approx(T_975[2] * np.std(d, ddof=1) / math.sqrt(3), rel=2e-4)
    assert r.p == pytest.approx(_hand_sign_flip_p(d)) == 0.25
    assert (r.above, r.below) == (3, 0) and r.to_resolve == pairs_to_resolve(d)
    assert math.isnan(r.boot_low) and r.boot_method == ""  # 3 pairs: no bootstrap interval, though draws were given

    ties = paired_difference([0.2, 0.3, 0.25, 0.4], [0.2, 0.25, 0.3, 0.4])
    assert (ties.above, ties.below, ties.n) == (1, 1, 4) and ties.value == pytest.approx(0.0)
    assert ties.p == pytest.approx(1.0) and ties.to_resolve == math.inf

    one = paired_difference([0.5], [0.2])
    assert one.value == pytest.approx(0.3) and one.n == 1 and one.p == 1.0 and one.above == 1
    assert math.isnan(one.low) and math.isnan(one.half_width) and math.isnan(one.to_resolve)
    none = paired_difference([], [])
    assert none.n == 0 and math.isnan(none.value) and math.isnan(none.p)

    same = paired_difference([31.0, 32.0, 33.0], [0.0, 1.0, 2.0])  # equal differences: a point, p at its floor
    assert (same.low, same.high, same.half_width) == (pytest.approx(31.0), pytest.approx(31.0), 0.0)
    assert same.p == 0.25 and same.to_resolve == 2
    with pytest.raises(ValueError, match="equal lengths"):
        paired_difference([1.0, 2.0], [1.0])


def test_paired_difference_has_a_bca_interval_from_ten_pairs():
    rng = np.random.default_rng(5)
    b = rng.normal(0.2, 0.05, MIN_BOOTSTRAP_PAIRS)
    a = b + rng.normal(0.03, 0.01, MIN_BOOTSTRAP_PAIRS)
    r = paired_difference(a, b, n_boot=2000)
    want = paired_diff_ci(a, b, n_boot=2000)
    assert r.boot_method == "BCa" and (r.boot_low, r.boot_high) == (want.low, want.high)
    assert r.boot_low < r.value < r.boot_high
    assert paired_difference(a, b).boot_method == ""  # no draws asked for: none
    fewer = paired_difference(a[:-1], b[:-1], n_boot=2000)
    assert fewer.boot_method == "" and math.isfinite(fewer.low)


def test_at_three_pairs_the_t_interval_covers_as_it_says_and_the_bootstrap_does_not():
    """Why the report shows the t-interval at 3 seeds: on simulated normal differences its 95% interval covers the
    true mean about 95% of the time; the BCa bootstrap over the same 3 pairs (10 distinct resamples) far less."""
    rng = np.random.default_rng(0)
    trials, t_hits, boot_hits = 400, 0, 0
    for i in range(trials):
        d = rng.normal(0.3, 1.0, 3)
        low, high, _ = t_interval(d)
        t_hits += low <= 0.3 <= high
        boot = paired_diff_ci(d, np.zeros(3), n_boot=300, seed=i)
        boot_hits += boot.low <= 0.3 <= boot.high
    assert 0.91 <= t_hits / trials <= 0.98
    assert boot_hits / trials < 0.85


def test_paired_ratio_reads_the_uncertainty_on_the_log_scale():
    a, b = [60.0, 80.0, 70.0, 90.0, 50.0], [100.0, 150.0, 120.0, 160.0, 110.0]
    r = paired_ratio(a, b, n_boot=2000)
    logs = [math.log(x / y) for x, y in zip(a, b)]
    mean = sum(logs) / 5
    half = T_975[4] * np.std(logs, ddof=1) / math.sqrt(5)
    assert r.value == pytest.approx(np.mean(a) / np.mean(b)) and r.n == 5
    assert r.geo_mean == pytest.approx(math.exp(mean))
    assert (r.low, r.high) == pytest.approx((math.exp(mean - half), math.exp(mean + half)), rel=2e-4 * half)
    assert r.low < r.geo_mean < r.high < 1.0  # every pair saves, and the interval says so
    assert r.log.p == pytest.approx(_hand_sign_flip_p(logs)) == 2 / 32 and r.cheaper == 5
    assert r.boot_method == ""  # 5 pairs: no bootstrap
    # from ten pairs the BCa interval of the ratio of means, as paired_ratio_ci gives it
    ten_a, ten_b = a + [x * 1.1 for x in a], b + [x * 1.05 for x in b]
    ten = paired_ratio(ten_a, ten_b, n_boot=1000)
    want = paired_ratio_ci(ten_a, ten_b, n_boot=1000)
    assert (ten.boot_low, ten.boot_high, ten.boot_method) == (want.low, want.high, want.method)


def test_paired_ratio_undefined_cases():
    at_zero = paired_ratio([0.0, 100.0, 80.0], [50.0, 120.0, 90.0])  # reached at step 0: cost 0, no log
    assert at_zero.value == pytest.approx(180.0 / 260.0) and at_zero.log is None and math.isnan(at_zero.low)
    assert at_zero.cheaper == 0
    one = paired_ratio([1.0], [2.0])
    assert one.value == 0.5 and one.geo_mean == pytest.approx(0.5) and math.isnan(one.low) and one.log.p == 1.0
    assert math.isnan(paired_ratio([], []).value) and paired_ratio([], []).log is None
    assert math.isnan(paired_ratio([1.0, 2.0], [0.0, 0.0]).value)


def test_pairs_for_a_half_width_against_a_walk_over_n():
    """The fewest pairs with t_{0.975, n-1} sd / sqrt(n) <= target, found by walking n up from 2 with scipy's t."""
    from scipy import stats as st

    from verl_ext.campaign.stats import pairs_for_half_width

    for sd, target in [(0.05, 0.02), (0.1, 0.02), (0.03, 0.02), (0.2, 0.01), (0.004, 0.02)]:
        n = 2
        while st.t.ppf(0.975, n - 1) * sd / n**0.5 > target:
            n += 1
        assert pairs_for_half_width(sd, target) == n, (sd, target)
    assert pairs_for_half_width(0.0, 0.02) == 2
    assert math.isnan(pairs_for_half_width(math.nan, 0.02))
    assert math.isinf(pairs_for_half_width(1.0, 1e-6, max_n=1000))
    with pytest.raises(ValueError, match="half-width to reach must be > 0"):
        pairs_for_half_width(0.1, 0.0)


def test_paired_statistics_carry_the_differences_spread():
    from verl_ext.campaign.stats import paired_difference

    a, b = [0.5, 0.7, 0.6], [0.4, 0.5, 0.45]
    d = np.subtract(a, b)
    assert paired_difference(a, b).sd == pytest.approx(float(np.std(d, ddof=1)))
    assert math.isnan(paired_difference([0.5], [0.4]).sd)
