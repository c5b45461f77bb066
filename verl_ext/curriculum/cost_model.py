"""Cost model of two-phase curriculum sampling (SPEED-RL, arXiv 2506.09016; docs/ALGORITHMS.md section 5).

Responses generated per training-ready group of N, for prompts whose pass rates p follow a distribution P and
whose responses are independent Bernoulli(p) draws:

    keep_k     = E[1 - p^k - (1-p)^k]       probability that k responses are mixed (std > 0)
    DAPO       = N / keep_N                 N per prompt, uniform groups dropped
    two-phase  = n / keep_n + (N - n)       n to screen every prompt, N - n more for each kept one
    oracle     = N                          only mixed prompts are ever sampled

With the pass-rate memory (``verl_ext.curriculum.memory``), in the epoch after every prompt was screened once and
with pass rates unchanged, a prompt is screened with probability s(p) = 1 - b_w (1-p)^n - b_c p^n (b_w, b_c: the
skip probabilities after one all-wrong / all-correct screening, each capped at max_skip), so

    two-phase + memory = n E[s] / E[s keep_n(p)] + (N - n)
    informative screened = E[s mixed_N(p)] / E[mixed_N(p)],  mixed_N(p) = 1 - p^N - (1-p)^N

    informative trained  = E[s keep_n(p) mixed_N(p)] / E[mixed_N(p)]

("informative": its group of N responses would be mixed, i.e. give a non-zero GRPO advantage; "trained": it reaches
a training group, which is what the responses buy).

Histogram interpretation (a pass@32 dict as in the SPEED-RL experiment log,
e.g. ``{'zeros': 0.34, 'ones': 0.0, '0.0-0.1': 0.26, ...}``): 'zeros' is a point mass at p = 0, 'ones' at p = 1,
and each 'a-b' bin's mass is spread uniformly over [a, b] (a continuous stand-in for the empirical k/32 values it
holds). Masses are normalised to sum to 1 (the shipped Qwen2.5-Math-1.5B masses sum to 0.994: rounding). Over
Uniform[a, b],
E[p^k] = (b^(k+1) - a^(k+1)) / ((k+1)(b - a)) and E[(1-p)^k] by the same formula on [1-b, 1-a].
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DEFAULT_HISTOGRAM = Path(__file__).parent / "data" / "qwen25_math_1p5b_pass32.json"
MASS_TOLERANCE = 0.02  # how far the histogram's total mass may be from 1 before it is an error, not rounding


@dataclass(frozen=True)
class PassRateDistribution:
    """Mixture of point masses ``points`` [(p, w)] and uniform bins ``bins`` [(a, b, w)]; weights sum to 1."""

    points: tuple[tuple[float, float], ...]
    bins: tuple[tuple[float, float, float], ...]

    def expected_keep(self, k: int) -> float:
        """E[1 - p^k - (1-p)^k]: probability that k Bernoulli(p) responses are not all equal."""
        if k < 1:
            raise ValueError(f"expected_keep needs k >= 1, got {k}")
        total = sum(w * (1.0 - p**k - (1.0 - p) ** k) for p, w in self.points)
        for a, b, w in self.bins:
            total += w * (1.0 - _uniform_power_mean(a, b, k) - _uniform_power_mean(1.0 - b, 1.0 - a, k))
        return total

    def expect(self, f) -> float:
        """E[f(p)] for a vectorised ``f``: exact for polynomials of degree < 64 (32-node Gauss-Legendre per bin)."""
        total = sum(w * float(f(np.array([p]))[0]) for p, w in self.points)
        nodes, weights = np.polynomial.legendre.leggauss(32)
        for a, b, w in self.bins:
            x = (a + b) / 2 + (b - a) / 2 * nodes
            total += w * float(np.sum(weights * f(x))) / 2
        return total

    def sample(self, size: int, rng: np.random.Generator) -> np.ndarray:
        """``size`` pass rates drawn from the mixture (uniform inside the chosen bin)."""
        lows = np.array([p for p, _ in self.points] + [a for a, _, _ in self.bins], dtype=np.float64)
        highs = np.array([p for p, _ in self.points] + [b for _, b, _ in self.bins], dtype=np.float64)
        weights = np.array([w for _, w in self.points] + [w for _, _, w in self.bins], dtype=np.float64)
        component = rng.choice(len(weights), size=size, p=weights / weights.sum())
        return lows[component] + (highs[component] - lows[component]) * rng.random(size)


def _uniform_power_mean(a: float, b: float, k: int) -> float:
    """E[x^k] for x ~ Uniform[a, b]."""
    return (b ** (k + 1) - a ** (k + 1)) / ((k + 1) * (b - a))


def parse_pass_histogram(histogram: dict[str, float]) -> PassRateDistribution:
    """Parse a pass@k histogram dict ('zeros', 'ones', 'a-b' keys) into a normalised distribution."""
    points, bins = [], []
    for key, mass in histogram.items():
        mass = float(mass)
        if not math.isfinite(mass) or mass < 0:
            raise ValueError(f"pass histogram: mass of '{key}' must be finite and >= 0, got {mass}")
        if key in ("zeros", "ones"):
            points.append((0.0 if key == "zeros" else 1.0, mass))
            continue
        try:
            a, b = (float(x) for x in key.split("-"))
        except ValueError:
            raise ValueError(f"pass histogram: key '{key}' is not 'zeros', 'ones' or a range 'a-b'") from None
        if not 0.0 <= a < b <= 1.0:
            raise ValueError(f"pass histogram: bin '{key}' must satisfy 0 <= a < b <= 1")
        bins.append((a, b, mass))
    edges = sorted((a, b) for a, b, _ in bins)
    for (_, b0), (a1, _) in zip(edges, edges[1:], strict=False):
        if a1 < b0:
            raise ValueError(f"pass histogram: bins overlap around {a1}")
    total = sum(w for _, w in points) + sum(w for _, _, w in bins)
    if abs(total - 1.0) > MASS_TOLERANCE:
        raise ValueError(f"pass histogram: masses sum to {total}, more than {MASS_TOLERANCE} away from 1")
    return PassRateDistribution(
        points=tuple((p, w / total) for p, w in points), bins=tuple((a, b, w / total) for a, b, w in bins)
    )


def load_pass_histogram(path: str | Path | None = None) -> PassRateDistribution:
    """Read a JSON file holding the histogram dict, either bare or under a "histogram" key.
    Default: the Qwen2.5-Math-1.5B pass@32 histogram of the SPEED-RL experiment log (``DEFAULT_HISTOGRAM``)."""
    with open(path or DEFAULT_HISTOGRAM) as f:
        obj = json.load(f)
    return parse_pass_histogram(obj.get("histogram", obj))


def dapo_cost(dist: PassRateDistribution, N: int) -> float:
    """Expected responses per training-ready group under DAPO dynamic sampling: N / keep_N."""
    keep = dist.expected_keep(N)
    return N / keep if keep > 0 else math.inf


def two_phase_cost(dist: PassRateDistribution, n: int, N: int) -> float:
    """Expected responses per training-ready group under two-phase sampling: n / keep_n + (N - n)."""
    if not 1 <= n <= N:
        raise ValueError(f"two_phase_cost needs 1 <= n <= N, got n={n}, N={N}")
    keep = dist.expected_keep(n)
    return n / keep + (N - n) if keep > 0 else math.inf


@dataclass(frozen=True)
class SecondEpoch:
    """Two-phase sampling in the epoch after every prompt was screened once (formulas in the module docstring).

    cost: responses per training group. screened: share of the informative prompts screened (any number of
    responses). trained: share of the informative prompts that reach a training group: what the responses buy."""

    cost: float
    screened: float
    trained: float


def second_epoch(
    dist: PassRateDistribution,
    n: int,
    N: int,
    skip_all_wrong: float,
    skip_all_correct: float,
    probe_n: int | None = None,
) -> SecondEpoch:
    """The pass-rate memory's second epoch (age 1, streak 1, pass rates unchanged). ``skip_all_wrong`` /
    ``skip_all_correct`` are the effective skip probabilities (already capped).

    ``probe_n`` (analysis only, not a controller setting): a prompt remembered uniform and not skipped is screened
    with ``probe_n`` responses instead of n and kept iff one of them contradicts the memory (its pooled pass rate is
    then mixed), then given N - probe_n more. With probe_n = 1 a remembered prompt costs one response, which counts
    as "screened", yet the share of informative prompts *trained* per response stays on the skip rule's curve
    (docs/PASS_RATE_MEMORY.md): one response finds a rarely-right prompt as seldom as skipping it does."""
    if not 1 <= n <= N:
        raise ValueError(f"second_epoch needs 1 <= n <= N, got n={n}, N={N}")
    if probe_n is not None and not 1 <= probe_n <= n:
        raise ValueError(f"second_epoch needs 1 <= probe_n <= n, got probe_n={probe_n}, n={n}")

    def mixed(p, k):
        return 1.0 - p**k - (1.0 - p) ** k

    def parts(p):  # (responses, kept, screened) per offered prompt of pass rate p
        wrong, right = (1.0 - p) ** n, p**n  # epoch 1's screening outcomes
        rest = 1.0 - wrong - right
        screened_w, screened_r = (1.0 - skip_all_wrong) * wrong, (1.0 - skip_all_correct) * right
        screened = rest + screened_w + screened_r
        if probe_n is None:
            kept = screened * mixed(p, n)
            return n * screened + (N - n) * kept, kept, screened
        kept_w, kept_r = screened_w * (1.0 - (1.0 - p) ** probe_n), screened_r * (1.0 - p**probe_n)
        kept_m = rest * mixed(p, n)
        responses = n * rest + (N - n) * kept_m
        responses += probe_n * (screened_w + screened_r) + (N - probe_n) * (kept_w + kept_r)
        return responses, kept_m + kept_w + kept_r, screened

    kept = dist.expect(lambda p: parts(p)[1])
    cost = dist.expect(lambda p: parts(p)[0]) / kept if kept > 0 else math.inf
    informative = dist.expect(lambda p: mixed(p, N))
    if informative <= 0:
        return SecondEpoch(cost, math.nan, math.nan)
    return SecondEpoch(
        cost,
        dist.expect(lambda p: parts(p)[2] * mixed(p, N)) / informative,
        dist.expect(lambda p: parts(p)[1] * mixed(p, N)) / informative,
    )


def skip_all_wrong_at_cost(dist: PassRateDistribution, n: int, N: int, skip_all_correct: float, cost: float) -> float:
    """The skip rule's ``skip_all_wrong`` in [0, 0.99] at which ``second_epoch`` costs ``cost`` responses per group
    (bisection: the cost falls as skip_all_wrong rises; an end of the interval when ``cost`` is out of its range)."""
    lo, hi = 0.0, 0.99
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if second_epoch(dist, n, N, mid, skip_all_correct).cost > cost else (lo, mid)
    return lo


def memory_epoch_cost(
    dist: PassRateDistribution, n: int, N: int, skip_all_wrong: float, skip_all_correct: float
) -> tuple[float, float]:
    """(responses per training group, informative share screened) of ``second_epoch`` with the memory's rule."""
    e = second_epoch(dist, n, N, skip_all_wrong, skip_all_correct)
    return e.cost, e.screened


def oracle_cost(N: int) -> float:
    """An oracle that samples only mixed prompts spends exactly N responses per group."""
    return float(N)
