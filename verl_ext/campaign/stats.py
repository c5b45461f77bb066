"""Seed statistics for campaign reports (scipy.stats underneath): mean / std / n, Welch's t-test, the statistics of
a paired difference over seeds (paired t-interval, exact sign-flip p, pairs above 0, pairs for 80% power), the same on
the log scale for a ratio of costs (a speed-up), and bootstrap intervals where there are enough runs for them.

Campaigns compare conditions over 3-5 seeds, paired by seed (same seed = same prompt order and initial model in
both conditions). What holds at that n decides what a report shows. Per condition: the final value's mean, its
sample standard deviation (ddof = 1) and n; against a baseline condition:

- Welch's unequal-variance t-test (Welch 1947): t = (mean_a - mean_b) / se, se^2 = s_a^2 / n_a + s_b^2 / n_b, with
  the Welch-Satterthwaite degrees of freedom; two-sided p from Student's t (``scipy.stats.t``). Unpaired.
- A paired difference (``paired_difference``): the differences d_i = a_i - b_i over the seeds both ran, each seed's
  own luck (its prompt order) cancelled in its d_i, and of them
  - the mean difference d̄;
  - the paired t-interval (Student 1908): d̄ ± t_{(1+level)/2, n-1} s_d / sqrt(n),
    s_d the differences' sample std; its half-width t_{(1+level)/2, n-1} s_d / sqrt(n) is reported beside it (the
    resolution reached: a true difference smaller than it would not have been told apart from 0). Exact when the
    differences are normal; no resampling, so it is defined and calibrated at n = 2-5, where it is wide (t_{0.975, 2}
    = 4.30 at 3 pairs). Equal differences give a zero-width interval at their value;
  - the exact sign-flip permutation p (Fisher 1935, The Design of Experiments, sec. 21): under "no difference" each
    d_i is as likely -d_i, so p = the share of the 2^n sign patterns whose |mean| is at least the observed |d̄|
    (``scipy.stats.permutation_test``, ``permutation_type='samples'``, every pattern enumerated up to
    EXACT_SIGN_FLIP_MAX_PAIRS pairs, SIGN_FLIP_RANDOM_PATTERNS random ones beyond). Two-sided, and free of any normality
    assumption, but coarse at small n: the smallest p it can give is 2 / 2^n, **0.25 at 3 pairs**, 0.125 at 4,
    0.0625 at 5; "p < 0.05" needs at least 6 pairs, all of one sign. One pair gives p = 1;
  - how many of the n pairs lie above 0 (and below; the rest are tied at 0): "3 of 3 above" is what the sign-flip
    p of 0.25 is made of;
  - the fewest pairs for 80% power (``pairs_to_resolve``): those with which a two-sided paired t-test at the
    interval's level has 80% power against a true difference of the observed size, the spread of the differences
    taken as the observed one (the noncentral t, ``scipy.stats.nct``; Cohen 1988, ch. 2). What a null result would
    take to see its effect, if that effect were real; a planning figure, as uncertain as the spread it reads from 2-5
    seeds;
  - a BCa bootstrap interval that resamples pairs (Efron & Tibshirani 1993, ch. 14; ``scipy.stats.bootstrap(paired=
    True)``, percentile when BCa is undefined) only from MIN_BOOTSTRAP_PAIRS pairs up. Below that it is not
    computed: 3 pairs have 10 distinct resamples, and a "95%" bootstrap interval over them is about the min-max of
    the differences, narrower than the t-interval and covering the truth far less often than it says.
- A speed-up (``paired_ratio``): for the cost to a target (generated tokens, training time) of condition a over
  reference b, per pair the ratio r_i = a_i / b_i. The value shown first is the ratio of mean costs mean(a) / mean(b)
  (what the cost tables' means give); its uncertainty at a handful of pairs is read on the log scale, where a
  speed-up is a difference: the mean of log r_i with its paired t-interval and exact sign-flip p, as above, reported
  back on the ratio scale as the geometric mean of the per-pair ratios exp(mean log r_i) with the interval
  [exp(lo), exp(hi)] (a ratio's log is the scale on which seed noise is roughly symmetric; e.g. Fleming & Wallace
  1986 for means of ratios), and how many pairs were cheaper (r_i < 1). The geometric mean and the ratio of means
  differ when the pairs' ratios and sizes vary together; they agree when every pair saves alike. A pair with a zero
  or negative cost (reached at step 0) has no log: the log-scale statistics are then nan. The BCa bootstrap
  interval of the ratio of means, resampling pairs, only from MIN_BOOTSTRAP_PAIRS pairs up, as above.
- A percentile bootstrap CI of mean_a - mean_b, unpaired (Efron & Tibshirani 1993, ch. 13): each group resampled
  with replacement, independently (``scipy.stats.bootstrap``); the report shows it only when both groups have
  MIN_BOOTSTRAP_PAIRS runs, for the reason above.

Undefined cases are nan, never an exception: fewer than 2 values where a spread is needed (Welch's test, a
t-interval, the pairs for power), both groups without spread in Welch's test (se = 0), no pairs at all.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MIN_BOOTSTRAP_PAIRS = 10  # fewer pairs (or runs per group): no bootstrap interval (module docstring)
EXACT_SIGN_FLIP_MAX_PAIRS = 16  # up to this many pairs every one of the 2^n sign patterns is enumerated
SIGN_FLIP_RANDOM_PATTERNS = 100_000  # beyond it, this many random sign patterns (seeded)


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


def pairs_for_half_width(sd: float, target: float, level: float = 0.95, max_n: int = 1_000_000) -> float:
    """The fewest pairs whose paired t-interval at ``level`` is as narrow as ``target`` (its half-width at most that)
    when the differences' standard deviation is ``sd``: the smallest n >= 2 with t_{(1+level)/2, n-1} sd / sqrt(n)
    <= target. nan for an undefined sd; 2 when sd is 0; inf beyond ``max_n``."""
    from scipy import stats

    if not target > 0:
        raise ValueError(f"the half-width to reach must be > 0, got {target}")
    if not math.isfinite(sd):
        return math.nan
    z = stats.norm.ppf(1 - (1 - level) / 2)
    n = max(2, math.floor((z * sd / target) ** 2))  # the normal approximation undercounts: walk up from it
    while n <= max_n:
        if stats.t.ppf(1 - (1 - level) / 2, n - 1) * sd / math.sqrt(n) <= target:
            return n
        n += 1
    return math.inf


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """(low, high, half-width) of the t-interval of the mean of ``values`` (paired differences): mean ± h with
    h = t_{(1+level)/2, n-1} * s / sqrt(n), s the sample std (ddof 1). (nan, nan, nan) with fewer than 2 values;
    equal values give a zero-width interval at their value."""
    from scipy import stats

    _check_level(level)
    x = np.asarray(values, dtype=float)
    if x.size < 2:
        return math.nan, math.nan, math.nan
    mean, sd = float(x.mean()), float(x.std(ddof=1))
    if sd <= 1e-12 * max(abs(mean), 1e-300):  # equal values (float rounding leaves a spread of ~1e-17)
        sd = 0.0
    half = float(stats.t.ppf((1 + level) / 2, x.size - 1) * sd / math.sqrt(x.size))
    return mean - half, mean + half, half


def sign_flip_p(values: Sequence[float], seed: int = 0) -> float:
    """Two-sided sign-flip permutation p of "the values (paired differences) are symmetric about 0": the share of the
    2^n sign patterns whose |mean| is at least the observed |mean| (``scipy.stats.permutation_test``,
    ``permutation_type='samples'``; every pattern up to EXACT_SIGN_FLIP_MAX_PAIRS values, else
    SIGN_FLIP_RANDOM_PATTERNS random ones drawn with ``seed``). 1 for a single value (both patterns alike), nan for
    none. The smallest p it can give is 2 / 2^n (0.25 at n = 3)."""
    from scipy import stats

    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return math.nan
    if x.size == 1:
        return 1.0
    exact = x.size <= EXACT_SIGN_FLIP_MAX_PAIRS
    r = stats.permutation_test(
        (x,),
        lambda d, axis: np.mean(d, axis=axis),
        permutation_type="samples",
        vectorized=True,
        n_resamples=np.inf if exact else SIGN_FLIP_RANDOM_PATTERNS,
        batch=1 << 16,
        alternative="two-sided",
        rng=None if exact else np.random.default_rng(seed),
    )
    return float(min(r.pvalue, 1.0))


@dataclass(frozen=True)
class PairedStats:
    """The statistics of paired differences d_i = a_i - b_i (module docstring): what the report shows per paired
    difference. Fields that are undefined at this n are nan."""

    value: float  # mean difference
    n: int  # pairs
    low: float  # paired t-interval at `level`
    high: float
    half_width: float  # (high - low) / 2: t_{(1+level)/2, n-1} s_d / sqrt(n)
    p: float  # exact two-sided sign-flip permutation p
    above: int  # pairs with d_i > 0
    below: int  # pairs with d_i < 0; the rest are tied at 0
    to_resolve: float  # pairs for 80% power at the observed difference and spread (pairs_to_resolve)
    boot_low: float = math.nan  # BCa bootstrap over the pairs, only from MIN_BOOTSTRAP_PAIRS pairs with n_boot > 0
    boot_high: float = math.nan
    boot_method: str = ""  # "BCa" or "percentile" (when BCa is undefined); "" when not computed
    sd: float = math.nan  # the differences' standard deviation (ddof 1)


def paired_difference(
    a: Sequence[float], b: Sequence[float], level: float = 0.95, n_boot: int = 0, seed: int = 0
) -> PairedStats:
    """The paired statistics of a[i] - b[i] (a[i] and b[i] share seed i): mean, t-interval and its half-width,
    sign-flip p, pairs above and below 0, pairs for 80% power, and with n_boot > 0 and at least
    MIN_BOOTSTRAP_PAIRS pairs a BCa bootstrap interval resampling the pairs."""
    xa, xb = _pairs(a, b, max(n_boot, 1), level)
    return _paired_stats(xa - xb, level, n_boot, seed, bootstrap=(xa, xb, _mean_diff))


@dataclass(frozen=True)
class PairedRatio:
    """A speed-up: the ratio of mean costs mean(a) / mean(b) over pairs, with its uncertainty read on the log scale
    (module docstring): ``log`` holds the paired statistics of log(a_i / b_i), and ``geo_mean``, ``low`` and ``high``
    are their mean and t-interval back on the ratio scale."""

    value: float  # mean(a) / mean(b)
    n: int  # pairs
    geo_mean: float  # exp(mean log r_i): the geometric mean of the per-pair ratios
    low: float  # exp of the t-interval of mean log r_i
    high: float
    log: PairedStats | None  # of log r_i; None when a cost is <= 0 (no log) or there are no pairs
    boot_low: float = math.nan  # BCa bootstrap of the ratio of means, only from MIN_BOOTSTRAP_PAIRS pairs
    boot_high: float = math.nan
    boot_method: str = ""

    @property
    def cheaper(self) -> int:
        """Pairs where the condition cost less than the reference (r_i < 1)."""
        return 0 if self.log is None else self.log.below


def paired_ratio(
    a: Sequence[float], b: Sequence[float], level: float = 0.95, n_boot: int = 0, seed: int = 0
) -> PairedRatio:
    """mean(a) / mean(b) for paired costs, the geometric mean of a[i] / b[i] with the t-interval of their logs
    (exponentiated), and with n_boot > 0 and at least MIN_BOOTSTRAP_PAIRS pairs a BCa bootstrap interval of the
    ratio of means. nan where undefined: no pairs, mean(b) <= 0, or (for the log scale) a cost <= 0."""
    xa, xb = _pairs(a, b, max(n_boot, 1), level)
    if xa.size == 0 or xb.mean() <= 0:
        return PairedRatio(math.nan, int(xa.size), math.nan, math.nan, math.nan, None)
    value = float(xa.mean() / xb.mean())
    boot = (math.nan, math.nan, "")
    if n_boot and xa.size >= MIN_BOOTSTRAP_PAIRS:
        boot = _paired_bootstrap(xa, xb, _ratio_of_means, n_boot, level, seed)
    if (xa <= 0).any() or (xb <= 0).any():
        return PairedRatio(value, int(xa.size), math.nan, math.nan, math.nan, None, *boot)
    log = _paired_stats(np.log(xa) - np.log(xb), level, 0, seed, bootstrap=None)
    return PairedRatio(value, int(xa.size), math.exp(log.value), math.exp(log.low), math.exp(log.high), log, *boot)


def _paired_stats(d: np.ndarray, level: float, n_boot: int, seed: int, bootstrap) -> PairedStats:
    if d.size == 0:
        return PairedStats(math.nan, 0, math.nan, math.nan, math.nan, math.nan, 0, 0, math.nan)
    low, high, half = t_interval(d, level)
    boot = (math.nan, math.nan, "")
    if bootstrap is not None and n_boot and d.size >= MIN_BOOTSTRAP_PAIRS:
        xa, xb, statistic = bootstrap
        boot = _paired_bootstrap(xa, xb, statistic, n_boot, level, seed)
    return PairedStats(
        float(d.mean()),
        int(d.size),
        low,
        high,
        half,
        sign_flip_p(d, seed),
        int((d > 0).sum()),
        int((d < 0).sum()),
        pairs_to_resolve(d, level=level),
        *boot,
        sd=float(d.std(ddof=1)) if d.size >= 2 else math.nan,
    )


def _mean_diff(x, y, axis):
    return np.mean(x, axis=axis) - np.mean(y, axis=axis)


def _ratio_of_means(x, y, axis):
    return np.mean(x, axis=axis) / np.mean(y, axis=axis)


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


def _check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must be in (0, 1), got {level}")


def _check_bootstrap(n_boot: int, level: float) -> None:
    _check_level(level)
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
