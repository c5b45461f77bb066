"""DPO-as-advantage equals minus the autograd gradient of beta_replay * DPO loss; fill_slots keeps the sum."""

from __future__ import annotations

import pytest
import torch

from verl_ext.composer.dpo import dpo_loss
from verl_ext.composer.replay import dpo_advantages, fill_slots


@pytest.mark.parametrize("seed", range(4))
def test_dpo_advantages_are_the_dpo_gradient(seed):
    g = torch.Generator().manual_seed(seed)
    p = 1 + seed
    pol_c, pol_r = (torch.randn(p, generator=g, dtype=torch.float64) * 20 for _ in range(2))
    ref_c, ref_r = (torch.randn(p, generator=g, dtype=torch.float64) * 20 for _ in range(2))
    beta_dpo, beta_replay = 0.1 + 0.2 * seed, 0.05
    pc, pr = pol_c.clone().requires_grad_(True), pol_r.clone().requires_grad_(True)
    loss, _ = dpo_loss(pc, pr, ref_c, ref_r, beta=beta_dpo)
    (beta_replay * loss * p).backward()  # dpo_loss is a mean over pairs; the advantages are per pair
    a_c, a_r = dpo_advantages(pol_c, pol_r, ref_c, ref_r, beta_dpo, beta_replay)
    torch.testing.assert_close(a_c.double(), -pc.grad, rtol=1e-5, atol=1e-9)
    torch.testing.assert_close(a_r.double(), -pr.grad, rtol=1e-5, atol=1e-9)
    assert (a_c >= 0).all() and (a_r <= 0).all()


def test_dpo_advantages_zero_weight_and_bad_input():
    x = torch.randn(3)
    a_c, a_r = dpo_advantages(x, x, x, x, 0.1, 0.0)
    assert a_c.abs().sum() == 0 and a_r.abs().sum() == 0
    with pytest.raises(ValueError):
        dpo_advantages(x, x[:2], x, x, 0.1, 0.1)
    with pytest.raises(ValueError):
        dpo_advantages(x, x, x, x, 0.0, 0.1)


@pytest.mark.parametrize("n_items,n_slots", [(1, 1), (1, 8), (3, 8), (5, 5), (7, 8)])
def test_fill_slots_weights_sum_to_one_per_item(n_items, n_slots):
    index, weight = fill_slots(n_items, n_slots)
    assert index.shape == weight.shape == (n_slots,)
    for item in range(n_items):
        copies = [w for i, w in zip(index.tolist(), weight.tolist()) if i == item]
        assert copies and sum(copies) == pytest.approx(1.0)
    assert set(index.tolist()) == set(range(n_items))


def test_fill_slots_rejects_too_many_items():
    with pytest.raises(ValueError):
        fill_slots(5, 4)
    with pytest.raises(ValueError):
        fill_slots(0, 4)
