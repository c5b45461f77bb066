"""dpo_loss against a hand computation and a plain loop."""

import math

import pytest
import torch

from verl_ext.composer import dpo_loss, sequence_log_probs


def test_single_pair_by_hand():
    lp_c, lp_r, ref_c, ref_r, beta = -1.0, -3.0, -2.0, -2.0, 0.1
    # margin = beta * ((lp_c - ref_c) - (lp_r - ref_r)) = 0.1 * (1 - (-1)) = 0.2
    margin = beta * ((lp_c - ref_c) - (lp_r - ref_r))
    t = lambda x: torch.tensor([x], dtype=torch.float64, requires_grad=True)  # noqa: E731
    pc, pr = t(lp_c), t(lp_r)
    loss, metrics = dpo_loss(pc, pr, t(ref_c).detach(), t(ref_r).detach(), beta=beta)
    assert loss.item() == pytest.approx(math.log1p(math.exp(-margin)), rel=1e-12)
    loss.backward()
    sig_neg = 1 / (1 + math.exp(margin))  # d/dm of -log sigmoid(m) is -sigmoid(-m)
    assert pc.grad.item() == pytest.approx(-beta * sig_neg, rel=1e-12)
    assert pr.grad.item() == pytest.approx(beta * sig_neg, rel=1e-12)
    assert metrics["dpo/reward_margin"] == pytest.approx(margin)
    assert metrics["dpo/reward_accuracy"] == 1.0
    assert metrics["dpo/chosen_reward"] == pytest.approx(beta * (lp_c - ref_c))
    assert metrics["dpo/rejected_reward"] == pytest.approx(beta * (lp_r - ref_r))
    assert metrics["dpo/pairs"] == 1.0


def test_batch_matches_loop():
    g = torch.Generator().manual_seed(0)
    pc, pr, rc, rr = (torch.randn(9, generator=g, dtype=torch.float64) * 20 for _ in range(4))
    loss, metrics = dpo_loss(pc, pr, rc, rr, beta=0.25)
    losses, wins = [], 0
    for a, b, c, d in zip(pc.tolist(), pr.tolist(), rc.tolist(), rr.tolist()):
        m = 0.25 * ((a - c) - (b - d))
        losses.append(-math.log(1 / (1 + math.exp(-m))))
        wins += m > 0
    assert loss.item() == pytest.approx(sum(losses) / len(losses), rel=1e-10)
    assert metrics["dpo/reward_accuracy"] == pytest.approx(wins / 9)


def test_extreme_margins_stay_finite():
    big = torch.tensor([1e4, -1e4], dtype=torch.float32, requires_grad=True)
    zero = torch.zeros(2)
    loss, _ = dpo_loss(big, zero, zero, zero, beta=1.0)
    loss.backward()
    assert math.isfinite(loss.item()) and torch.isfinite(big.grad).all()
    assert loss.item() == pytest.approx(1e4 / 2, rel=1e-6)  # -log sigmoid(-1e4) = 1e4, averaged with ~0


def test_no_pairs_gives_zero_on_the_graph():
    empty = torch.zeros(0, requires_grad=True)
    loss, metrics = dpo_loss(empty, empty, torch.zeros(0), torch.zeros(0), beta=0.1)
    assert loss.item() == 0.0 and loss.requires_grad
    assert metrics == {"dpo/pairs": 0.0}


def test_sequence_log_probs_sums_masked_tokens():
    lp = torch.tensor([[-1.0, -2.0, -4.0], [-0.5, -0.25, -8.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    assert sequence_log_probs(lp, mask).tolist() == [-3.0, -8.75]


def test_bad_inputs():
    x = torch.zeros(3)
    with pytest.raises(ValueError, match="equal length"):
        dpo_loss(x, x, x, torch.zeros(2), beta=0.1)
    with pytest.raises(ValueError, match="beta"):
        dpo_loss(x, x, x, x, beta=0.0)
