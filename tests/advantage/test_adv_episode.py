"""Episode-level advantages (GRPO reference style, MaxRL) and the uninformative-group rule vs the loop reference."""

import numpy as np
import pytest
import torch

from verl_ext.advantage import reference as ref
from verl_ext.advantage.groups import group_ids
from verl_ext.advantage.grpo import grpo_advantages
from verl_ext.advantage.maxrl import maxrl_advantages
from verl_ext.advantage.uninformative import uninformative_groups


def run(fn, rewards, index):
    gid, n = group_ids(np.array(index, dtype=object), len(rewards))
    return fn(torch.tensor(rewards, dtype=torch.float64), gid, n).tolist()


def random_case(seed, bs=40):
    rng = np.random.default_rng(seed)
    index = [f"uid{rng.integers(0, 9)}" for _ in range(bs)]  # uneven group sizes, some singletons likely
    kind = seed % 3
    if kind == 0:
        rewards = rng.integers(0, 2, bs).astype(float).tolist()
    elif kind == 1:
        rewards = rng.uniform(-1, 2, bs).tolist()
    else:
        rewards = (rng.integers(0, 3, bs) * 0.5).tolist()
    return rewards, index


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("fast,slow", [(grpo_advantages, ref.grpo), (maxrl_advantages, ref.maxrl)])
def test_matches_reference_on_random_groups(seed, fast, slow):
    rewards, index = random_case(seed)
    np.testing.assert_allclose(run(fast, rewards, index), slow(rewards, index), rtol=1e-12, atol=1e-12)


def test_maxrl_one_of_sixteen_correct():
    rewards = [1.0] + [0.0] * 15
    adv = run(maxrl_advantages, rewards, ["p"] * 16)
    mu = 1 / 16
    assert adv[0] == pytest.approx((1 - mu) / (mu + 1e-6), rel=1e-12)
    assert adv[1:] == pytest.approx([-mu / (mu + 1e-6)] * 15, rel=1e-12)
    assert adv[0] == pytest.approx(15.0, abs=1e-3) and adv[1] == pytest.approx(-1.0, abs=1e-4)


def test_maxrl_k_of_n_gives_n_over_k_minus_one():
    rewards = [1.0] * 4 + [0.0] * 12
    adv = run(maxrl_advantages, rewards, ["p"] * 16)
    assert adv[0] == pytest.approx(16 / 4 - 1, abs=1e-4)
    assert adv[-1] == pytest.approx(-1.0, abs=1e-4)


def test_maxrl_zero_mean_and_singletons_give_zero():
    assert run(maxrl_advantages, [0.0, 0.0, 0.0], ["a"] * 3) == [0.0, 0.0, 0.0]
    assert run(maxrl_advantages, [0.7, 1.0], ["a", "b"]) == [0.0, 0.0]  # each its own group: no contrast
    assert run(maxrl_advantages, [-1.0, 0.5], ["a", "a"]) == [0.0, 0.0]  # mean <= 1e-6


def test_grpo_singleton_is_zero_not_verls_convention():
    assert run(grpo_advantages, [1.0], ["a"]) == [0.0]


def test_grpo_hand_numbers_and_group_order_independence():
    rewards = [1.0, 0.0, 0.5, 0.0, 1.0, 1.0]
    index = ["a", "b", "a", "b", "c", "b"]
    assert run(grpo_advantages, rewards, index) == pytest.approx([0.25, -1 / 3, -0.25, -1 / 3, 0.0, 2 / 3])


def test_uninformative_groups_flags_and_counts():
    rewards = [1.0, 1.0 + 5e-7, 0.0, 0.0, 0.3, 0.3, 1.0, 0.0, 0.9]
    index = ["c", "c", "w", "w", "l", "l", "m", "m", "s"]
    gid, n = group_ids(np.array(index, dtype=object), len(rewards))
    flat, n_correct, n_wrong = uninformative_groups(torch.tensor(rewards, dtype=torch.float64), gid, n)
    assert flat.tolist() == [True, True, True, True, True, True, False, False, True]
    assert (n_correct, n_wrong) == (2, 2)  # "c" and the singleton 0.9; "w" and "l" (0.3 is not correct)
    expected_flat, exp_c, exp_w = ref.uninformative(rewards, index)
    assert flat.tolist() == expected_flat and (n_correct, n_wrong) == (exp_c, exp_w)


@pytest.mark.parametrize("seed", range(6))
def test_uninformative_matches_reference(seed):
    rewards, index = random_case(seed, bs=30)
    gid, n = group_ids(np.array(index, dtype=object), len(rewards))
    flat, c, w = uninformative_groups(torch.tensor(rewards, dtype=torch.float64), gid, n)
    assert (flat.tolist(), c, w) == ref.uninformative(rewards, index)


def test_group_ids_rejects_bad_index():
    with pytest.raises(ValueError, match="index"):
        group_ids(None, 3)
    with pytest.raises(ValueError, match="one uid per response"):
        group_ids(np.array(["a", "b"], dtype=object), 3)
