"""The probe's pure part: histogram bins, the unbiased keep probability and the cost prediction, each checked
against a slow, obviously-correct form (enumerating response subsets, counting bins by hand)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from verl_ext.curriculum import cost_model
from verl_ext.curriculum.pass_rates import (
    BINS,
    keep_probability,
    pass_at,
    pass_at_grid,
    pass_histogram,
    predict_costs,
)


def _keep_by_enumeration(c: int, k: int, j: int) -> float:
    """Share of the j-subsets of the probe's k responses (c right) that are mixed."""
    responses = [1] * c + [0] * (k - c)
    subsets = list(itertools.combinations(range(k), j))
    mixed = sum(len({responses[i] for i in s}) > 1 for s in subsets)
    return mixed / len(subsets)


@pytest.mark.parametrize("k,j", [(8, 1), (8, 4), (8, 8), (10, 3), (12, 4)])
def test_keep_probability_equals_the_share_of_mixed_subsets(k, j):
    counts = np.arange(k + 1)
    got = keep_probability(counts, k, j)
    want = [_keep_by_enumeration(int(c), k, j) for c in counts]
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_keep_probability_is_unbiased_for_a_bernoulli_prompt():
    """E over probes of the estimate = 1 - p^j - (1-p)^j, the true keep probability (exact sum over Binomial(k, p))."""
    k, j, p = 16, 4, 0.23
    counts = np.arange(k + 1)
    weights = np.array([math.comb(k, int(c)) * p**c * (1 - p) ** (k - c) for c in counts])
    expected = float(np.sum(weights * keep_probability(counts, k, j)))
    assert expected == pytest.approx(1 - p**j - (1 - p) ** j, abs=1e-12)


@pytest.mark.parametrize("k,j", [(8, 1), (8, 3), (8, 8), (16, 4)])
def test_pass_at_equals_the_share_of_subsets_with_a_right_response(k, j):
    counts = np.arange(k + 1)
    want = []
    for c in counts:
        responses = [1] * int(c) + [0] * (k - int(c))
        subsets = list(itertools.combinations(range(k), j))
        want.append(sum(any(responses[i] for i in s) for s in subsets) / len(subsets))
    np.testing.assert_allclose(pass_at(counts, k, j), want, atol=1e-12)


def test_pass_at_is_unbiased_for_a_bernoulli_prompt():
    """E over Binomial(k, p) counts of the estimate = 1 - (1-p)^j, the true pass@j."""
    k, j, p = 16, 4, 0.23
    counts = np.arange(k + 1)
    weights = np.array([math.comb(k, int(c)) * p**c * (1 - p) ** (k - c) for c in counts])
    assert float(np.sum(weights * pass_at(counts, k, j))) == pytest.approx(1 - (1 - p) ** j, abs=1e-12)


def test_pass_at_refuses_j_beyond_k_and_the_grid_ends_at_k():
    with pytest.raises(ValueError, match="1 <= j <= k=4"):
        pass_at(np.array([1]), 4, 5)
    assert pass_at_grid(16) == [1, 2, 4, 8, 16]
    assert pass_at_grid(12) == [1, 2, 4, 8, 12]
    assert pass_at_grid(1) == [1]


def test_keep_probability_beyond_k_is_the_plug_in():
    counts = np.array([0, 3, 8])
    np.testing.assert_allclose(keep_probability(counts, 8, 24), 1 - (counts / 8) ** 24 - (1 - counts / 8) ** 24)


def test_histogram_bins_by_hand():
    k = 10
    counts = np.array([0, 0, 10, 1, 3, 3, 5, 9, 2, 7])
    hist = pass_histogram(counts, k)
    assert list(hist) == BINS
    by_hand = {"zeros": 2, "ones": 1, "0.1-0.2": 1, "0.3-0.4": 2, "0.5-0.6": 1, "0.9-1.0": 1, "0.2-0.3": 1,
               "0.7-0.8": 1}  # fmt: skip
    for b in BINS:
        assert hist[b] == pytest.approx(by_hand.get(b, 0) / len(counts)), b
    assert sum(hist.values()) == pytest.approx(1.0)
    # the histogram is the cost model's input format
    cost_model.parse_pass_histogram(hist)


def test_histogram_low_rates_go_to_the_first_bin():
    hist = pass_histogram(np.array([1, 2, 3, 31]), 32)
    assert hist["0.0-0.1"] == 0.75 and hist["0.9-1.0"] == 0.25


@pytest.mark.parametrize("bad", [np.array([-1, 2]), np.array([5]), np.array([])])
def test_bad_counts_are_refused(bad):
    with pytest.raises(ValueError):
        pass_histogram(bad, 4)


def _reference_prediction(counts, k, N, n, B, G):
    """Per-prompt keep probabilities by enumeration, then the cost formulas written out."""
    keep = {j: np.mean([_keep_by_enumeration(int(c), k, j) for c in counts]) for j in (n, N)}
    dapo = N / keep[N]
    fast = n / keep[n] + N - n
    return {"keep_n": keep[n], "keep_N": keep[N], "dapo": dapo, "fast": fast, "fast_calls": B / (G * keep[n])}


def test_prediction_matches_the_written_out_formulas_and_finds_the_best_n():
    rng = np.random.default_rng(0)
    k, N, n, B, G = 12, 12, 4, 8, 32
    # heavy tails: half never right, a fifth always, the rest low
    p = np.concatenate([np.zeros(50), np.ones(20), rng.uniform(0.02, 0.3, 30)])
    counts = rng.binomial(k, p)
    pred = predict_costs(counts, k, N=N, n=n, train_batch_size=B, gen_batch_size=G)
    ref = _reference_prediction(counts, k, N, n, B, G)
    assert pred.fast.keep_rate == pytest.approx(ref["keep_n"])
    assert pred.dapo.keep_rate == pytest.approx(ref["keep_N"])
    assert pred.dapo.responses_per_informative_group == pytest.approx(ref["dapo"])
    assert pred.fast.responses_per_informative_group == pytest.approx(ref["fast"])
    assert pred.fast.calls_per_step == pytest.approx(ref["fast_calls"])
    assert pred.plain.responses_per_step == N * B and pred.plain.calls_per_step == 1
    assert pred.fast_vs_dapo == pytest.approx(ref["fast"] / ref["dapo"])
    assert pred.fast_vs_plain == pred.fast_vs_dapo  # plain's cost per informative group is dapo's
    costs = {m: _reference_prediction(counts, k, N, m, B, G)["fast"] for m in range(2, N)}
    assert pred.best_n == min(costs, key=costs.get)
    assert pred.best_n_fast_vs_dapo == pytest.approx(min(costs.values()) / ref["dapo"])


def test_prediction_on_an_all_uniform_set_is_infinite_cost_not_a_crash():
    pred = predict_costs(np.array([0, 0, 8, 8]), 8, N=8, n=4, train_batch_size=2, gen_batch_size=4)
    assert math.isinf(pred.dapo.responses_per_informative_group) and math.isnan(pred.fast_vs_dapo)


def test_prediction_refuses_impossible_settings():
    with pytest.raises(ValueError, match="2 <= n < N"):
        predict_costs(np.array([1, 2]), 4, N=4, n=4, train_batch_size=2, gen_batch_size=2)
    with pytest.raises(ValueError, match="batch sizes"):
        predict_costs(np.array([1, 2]), 4, N=8, n=4, train_batch_size=0, gen_batch_size=2)
