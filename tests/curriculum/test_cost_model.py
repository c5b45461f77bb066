"""Cost model against slow references: midpoint-rule integration and a Monte Carlo of the sampling process."""

import json
import math

import numpy as np
import pytest

from verl_ext.curriculum.cost_model import (
    DEFAULT_HISTOGRAM,
    dapo_cost,
    load_pass_histogram,
    memory_epoch_cost,
    oracle_cost,
    parse_pass_histogram,
    second_epoch,
    skip_all_wrong_at_cost,
    two_phase_cost,
)

SPEED_RL_HISTOGRAM = {  # Qwen2.5-Math-1.5B pass@32 of the SPEED-RL experiment log, as printed there
    "zeros": 0.34,
    "ones": 0.0,
    "0.0-0.1": 0.26,
    "0.1-0.2": 0.132,
    "0.2-0.3": 0.086,
    "0.3-0.4": 0.06,
    "0.4-0.5": 0.045,
    "0.5-0.6": 0.034,
    "0.6-0.7": 0.024,
    "0.7-0.8": 0.008,
    "0.8-0.9": 0.005,
    "0.9-1.0": 0.0,
}


def reference_keep(histogram: dict, k: int, steps: int = 2000) -> float:
    """E[1 - p^k - (1-p)^k] with point masses at 0/1 and each bin integrated by the midpoint rule."""
    total_mass = sum(histogram.values())
    acc = 0.0
    for key, mass in histogram.items():
        if key == "zeros" or key == "ones":
            p = 0.0 if key == "zeros" else 1.0
            acc += mass * (1 - p**k - (1 - p) ** k)
            continue
        a, b = (float(x) for x in key.split("-"))
        inner = 0.0
        for i in range(steps):
            p = a + (b - a) * (i + 0.5) / steps
            inner += 1 - p**k - (1 - p) ** k
        acc += mass * inner / steps
    return acc / total_mass


def random_histogram(rng: np.random.Generator) -> dict:
    cuts = sorted({0.0, 1.0, *np.round(rng.uniform(0, 1, size=int(rng.integers(1, 8))), 3).tolist()})
    masses = rng.dirichlet(np.ones(len(cuts) + 1))
    hist = {"zeros": float(masses[0]), "ones": float(masses[1])}
    for (a, b), m in zip(zip(cuts, cuts[1:], strict=False), masses[2:], strict=False):
        hist[f"{a}-{b}"] = float(m)
    return hist


@pytest.mark.parametrize("k", [1, 2, 3, 4, 8, 16, 32])
def test_expected_keep_matches_integration_on_speed_rl_histogram(k):
    expected = reference_keep(SPEED_RL_HISTOGRAM, k)
    assert parse_pass_histogram(SPEED_RL_HISTOGRAM).expected_keep(k) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("seed", range(10))
def test_costs_match_reference_on_random_histograms(seed):
    rng = np.random.default_rng(seed)
    hist = random_histogram(rng)
    dist = parse_pass_histogram(hist)
    N = int(rng.integers(2, 33))
    n = int(rng.integers(2, N + 1))
    assert dapo_cost(dist, N) == pytest.approx(N / reference_keep(hist, N), rel=1e-6)
    assert two_phase_cost(dist, n, N) == pytest.approx(n / reference_keep(hist, n) + (N - n), rel=1e-6)
    assert two_phase_cost(dist, N, N) == pytest.approx(dapo_cost(dist, N))  # n = N is DAPO
    assert oracle_cost(N) == N


def test_monte_carlo_of_the_sampling_process_agrees():
    """Simulate the definition (draw p, then k Bernoulli responses, keep iff mixed), plain loops."""
    dist = load_pass_histogram()
    rng = np.random.default_rng(0)
    for k in (4, 16):
        trials = 20000
        p = dist.sample(trials, rng)
        kept = 0
        for pi in p:
            draws = rng.random(k) < pi
            kept += bool(draws.any() and not draws.all())
        expected = dist.expected_keep(k)
        sigma = math.sqrt(expected * (1 - expected) / trials)
        assert abs(kept / trials - expected) < 4 * sigma


def test_shipped_file_is_the_speed_rl_histogram():
    with open(DEFAULT_HISTOGRAM) as f:
        assert json.load(f)["histogram"] == SPEED_RL_HISTOGRAM
    shipped = load_pass_histogram()
    assert shipped == parse_pass_histogram(SPEED_RL_HISTOGRAM)
    assert sum(w for _, w in shipped.points) + sum(w for *_, w in shipped.bins) == pytest.approx(1.0)


def test_zero_keep_gives_infinite_cost():
    only_zeros = parse_pass_histogram({"zeros": 1.0})
    assert dapo_cost(only_zeros, 16) == math.inf and two_phase_cost(only_zeros, 4, 16) == math.inf


@pytest.mark.parametrize(
    ("hist", "match"),
    [
        ({"zeros": 0.5, "halves": 0.5}, "not 'zeros', 'ones' or a range"),
        ({"zeros": 0.5, "0.5-0.2": 0.5}, "0 <= a < b <= 1"),
        ({"zeros": 0.5, "0.0-1.2": 0.5}, "0 <= a < b <= 1"),
        ({"zeros": -0.1, "0.0-1.0": 1.1}, "finite and >= 0"),
        ({"zeros": 0.5, "0.0-0.1": 0.2}, "sum to 0.7"),
        ({"0.0-0.6": 0.5, "0.5-1.0": 0.5}, "overlap"),
    ],
)
def test_parser_errors(hist, match):
    with pytest.raises(ValueError, match=match):
        parse_pass_histogram(hist)


def test_bad_cost_arguments():
    dist = load_pass_histogram()
    with pytest.raises(ValueError, match="1 <= n <= N"):
        two_phase_cost(dist, 17, 16)
    with pytest.raises(ValueError, match="k >= 1"):
        dist.expected_keep(0)


def test_expect_is_exact_for_polynomials():
    dist = parse_pass_histogram(SPEED_RL_HISTOGRAM)
    for k in (1, 4, 16):
        assert dist.expect(lambda p, k=k: 1 - p**k - (1 - p) ** k) == pytest.approx(dist.expected_keep(k), rel=1e-12)


def test_memory_epoch_cost_without_skipping_is_the_two_phase_cost():
    dist = parse_pass_histogram(SPEED_RL_HISTOGRAM)
    cost, share = memory_epoch_cost(dist, 4, 16, 0.0, 0.0)
    assert cost == pytest.approx(two_phase_cost(dist, 4, 16), rel=1e-12) and share == pytest.approx(1.0)


@pytest.mark.parametrize(("b_w", "b_c"), [(0.5, 0.8), (0.9, 0.0), (0.3, 0.3)])
def test_memory_epoch_cost_matches_a_monte_carlo_of_two_epochs(b_w, b_c):
    """Slow reference: draw prompts, screen each with n Bernoulli responses in epoch 1, skip by the outcome in
    epoch 2, count responses and kept prompts; informative = the N-response group of epoch 2 would be mixed."""
    n, N, m = 4, 16, 400_000
    rng = np.random.default_rng(0)
    p = parse_pass_histogram(SPEED_RL_HISTOGRAM).sample(m, rng)
    first = rng.binomial(n, p)
    skip_p = np.where(first == 0, b_w, np.where(first == n, b_c, 0.0))
    screened = rng.random(m) >= skip_p
    second = rng.binomial(n, p)
    kept = screened & (second > 0) & (second < n)
    cost = (n * screened.sum() + (N - n) * kept.sum()) / kept.sum()
    group = rng.binomial(N, p)
    informative = (group > 0) & (group < N)
    want_cost, want_share = memory_epoch_cost(parse_pass_histogram(SPEED_RL_HISTOGRAM), n, N, b_w, b_c)
    assert cost == pytest.approx(want_cost, rel=0.01)
    assert (screened & informative).sum() / informative.sum() == pytest.approx(want_share, abs=0.01)


@pytest.mark.parametrize(("b_w", "b_c", "probe_n"), [(0.4, 0.6, None), (0.3, 0.0, 1), (0.0, 0.6, 2)])
def test_second_epoch_matches_a_monte_carlo(b_w, b_c, probe_n):
    """Slow reference with the probe: a prompt remembered uniform and not skipped draws probe_n responses and is
    kept iff one contradicts the memory; the others are screened with n and kept iff mixed."""
    n, N, m = 4, 16, 400_000
    rng = np.random.default_rng(1)
    dist = parse_pass_histogram(SPEED_RL_HISTOGRAM)
    p = dist.sample(m, rng)
    first = rng.binomial(n, p)
    remembered_wrong, remembered_right = first == 0, first == n
    screened = rng.random(m) >= np.where(remembered_wrong, b_w, np.where(remembered_right, b_c, 0.0))
    width = np.full(m, n)
    if probe_n is not None:
        width[remembered_wrong | remembered_right] = probe_n
    second = rng.binomial(width, p)
    if probe_n is None:
        kept = screened & (second > 0) & (second < width)
    else:
        contradicts = np.where(remembered_wrong, second > 0, np.where(remembered_right, second < width, False))
        mixed = (second > 0) & (second < width) & ~(remembered_wrong | remembered_right)
        kept = screened & (contradicts | mixed)
    cost = ((width * screened).sum() + ((N - width) * kept).sum()) / kept.sum()
    group = rng.binomial(N, p)
    informative = (group > 0) & (group < N)
    want = second_epoch(dist, n, N, b_w, b_c, probe_n)
    assert cost == pytest.approx(want.cost, rel=0.01)
    assert (screened & informative).sum() / informative.sum() == pytest.approx(want.screened, abs=0.01)
    assert (kept & informative).sum() / informative.sum() == pytest.approx(want.trained, abs=0.01)


def test_a_one_response_probe_meets_the_screened_goal_but_trains_no_more_than_skipping():
    """docs/PASS_RATE_MEMORY.md: on the shipped histogram a one-response probe gives <= 20 responses per group with
    >= 0.8 of the informative prompts 'screened', while the share actually trained is that of the plain skip rule
    at the same cost (within 0.01): the screened share is a proxy the probe satisfies without buying anything."""
    dist = parse_pass_histogram(SPEED_RL_HISTOGRAM)
    probe = second_epoch(dist, 4, 16, 0.3, 0.6, probe_n=1)
    assert probe.cost <= 20 and probe.screened >= 0.8
    skip = second_epoch(dist, 4, 16, skip_all_wrong_at_cost(dist, 4, 16, 0.6, probe.cost), 0.6)
    assert skip.cost == pytest.approx(probe.cost, abs=1e-3)
    assert skip.screened < 0.7 and abs(skip.trained - probe.trained) < 0.01
    assert second_epoch(dist, 4, 16, 0.0, 0.0).trained < 0.6  # even screening everything trains < 0.6 of them
