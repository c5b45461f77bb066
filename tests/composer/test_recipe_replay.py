"""Replay rows: per-row DPO losses give each pair's DPO gradient whatever micro-batch each row lands in; fill_slots
keeps the per-pair sum; the update order puts each rank's replay share first."""

import pytest
import torch

from verl_ext.composer.dpo import dpo_loss, dpo_row_losses
from verl_ext.composer.replay import fill_slots, replay_columns, rows_first_per_rank


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("n_pairs,n_slots", [(1, 1), (2, 4), (3, 4)])
def test_replay_rows_give_the_mean_dpo_loss_and_its_gradient(seed, n_pairs, n_slots):
    """sum over rows of weight * (L_row - L_row.detach() / 2), as actor_loss.py forms it, has the value and the
    gradient (w.r.t. every scored row's log-prob) of the mean DPO loss over the pairs, at the scoring point."""
    g = torch.Generator().manual_seed(seed)
    seq_pol = (torch.randn(2 * n_pairs, generator=g, dtype=torch.float64) * 5).requires_grad_()
    seq_ref = torch.randn(2 * n_pairs, generator=g, dtype=torch.float64) * 5
    beta = 0.3

    ref_loss, _ = dpo_loss(seq_pol[0::2], seq_pol[1::2], seq_ref[0::2], seq_ref[1::2], beta=beta)
    (want,) = torch.autograd.grad(ref_loss, seq_pol)

    cols = replay_columns(seq_pol.detach(), seq_ref, n_slots)
    rows = seq_pol[cols["row_index"]]  # copies of the scored rows, as the update batch holds them
    per_row = dpo_row_losses(
        rows, cols["dpo_ref_logp"].double(), cols["dpo_partner_logratio"].double(), cols["dpo_sign"], beta=beta
    )
    w = cols["dpo_weight"].double()
    surrogate = (w * (per_row - 0.5 * per_row.detach())).sum()
    (got,) = torch.autograd.grad(surrogate, seq_pol)
    # the columns are stored in float32, as in the update batch
    assert surrogate.item() == pytest.approx(ref_loss.item(), rel=1e-5)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
    assert (w.sum() / 2).item() == pytest.approx(1.0)  # the dpo_pairs metric counts each pair once
    assert cols["dpo_sign"].tolist() == [1.0, -1.0] * n_slots


def test_dpo_row_losses_zero_where_no_pair_and_bad_input():
    x = torch.tensor([-3.0, -2.0, -1.0])
    out = dpo_row_losses(x, x, torch.zeros(3), torch.tensor([1.0, 0.0, -1.0]), beta=0.1)
    assert out[1] == 0 and out[0] > 0 and out[2] > 0
    with pytest.raises(ValueError):
        dpo_row_losses(x, x[:2], x, x, beta=0.1)
    with pytest.raises(ValueError):
        dpo_row_losses(x, x, x, x, beta=0.0)


@pytest.mark.parametrize("n_head,n_rest,n_ranks", [(4, 12, 1), (4, 12, 2), (6, 18, 3)])
def test_rows_first_per_rank(n_head, n_rest, n_ranks):
    order = rows_first_per_rank(n_head, n_rest, n_ranks)
    assert sorted(order.tolist()) == list(range(n_head + n_rest))
    chunk = (n_head + n_rest) // n_ranks
    for r in range(n_ranks):  # what verl's dispatch gives rank r: its head share first, then its rollout rows
        mine = order[r * chunk : (r + 1) * chunk].tolist()
        share = n_head // n_ranks
        assert all(i < n_head for i in mine[:share]) and all(i >= n_head for i in mine[share:])
    with pytest.raises(ValueError, match="split evenly"):
        rows_first_per_rank(3, 12, 2)


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
