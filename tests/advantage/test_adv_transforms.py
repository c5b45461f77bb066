"""Uncertainty kinds, SEPA pooling, GTPO weighting and HICRA vs the per-token reference, plus their properties."""

import math

import numpy as np
import pytest
import torch

from verl_ext.advantage import reference as ref
from verl_ext.advantage.gtpo import gtpo_weights, gtpo_weights_
from verl_ext.advantage.hicra import hicra, hicra_factor_
from verl_ext.advantage.sepa import sepa_pool, sepa_pool_
from verl_ext.advantage.uncertainty import builtin_uncertainty, canonical_kind


def random_rows(seed, bs=12, T=30):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, T + 1, (bs,), generator=g)
    lengths[0], lengths[1] = 0, T  # a zero-length response and a full one
    mask = torch.arange(T)[None, :] < lengths[:, None]
    u = torch.empty(bs, T, dtype=torch.float64).exponential_(generator=g) * 3
    plan = (torch.rand(bs, T, generator=g) < 0.25) & mask
    plan[2] = mask[2]  # a response with planning tokens only
    return u, mask, plan


def masked_lists(x, mask):
    return [row[m].tolist() for row, m in zip(x, mask)]


@pytest.mark.parametrize("kind", ["surprisal", "predictive_variance", "shannon_entropy"])
def test_uncertainty_kinds_match_reference(kind):
    g = torch.Generator().manual_seed(1)
    logp = torch.cat([-torch.empty(200).exponential_(generator=g) * 5, torch.tensor([0.0, -1e-9, -60.0, -math.inf])])
    ent = torch.cat([torch.empty(200).exponential_(generator=g) * 5, torch.tensor([0.0, 1e-9, 70.0, 49.0])])
    u = builtin_uncertainty(kind, logp, ent)
    expected = [ref.uncertainty(kind, float(lp), float(e)) for lp, e in zip(logp, ent)]
    np.testing.assert_allclose(u.tolist(), expected, rtol=1e-6, atol=1e-7)  # float32 inputs
    assert u.max() <= 50.0
    if kind == "predictive_variance":
        assert u.max() <= 0.25 and u.min() >= 0.0


def test_uncertainty_aliases_and_errors():
    assert canonical_kind("pred_var") == canonical_kind("bernoulli_variance") == "predictive_variance"
    assert canonical_kind("Shannon") == canonical_kind("entropy") == "shannon_entropy"
    assert canonical_kind("pkg.mod.fn") == "pkg.mod.fn"
    with pytest.raises(ValueError, match="unknown uncertainty_kind 'varentropy'"):
        canonical_kind("varentropy")
    with pytest.raises(ValueError, match="entropys"):
        builtin_uncertainty("shannon_entropy", torch.zeros(2, 3), None)


@pytest.mark.parametrize("lam", [0.0, 0.3, 1.0, 1.7, -0.5])
@pytest.mark.parametrize("seed", range(3))
def test_sepa_matches_reference(lam, seed):
    u, mask, plan = random_rows(seed)
    got = sepa_pool(u, plan, mask, lam)
    expected = [ref.sepa(row, p, lam) for row, p in zip(masked_lists(u, mask), masked_lists(plan.int(), mask))]
    for got_row, exp_row in zip(masked_lists(got, mask), expected):
        np.testing.assert_allclose(got_row, exp_row, rtol=1e-12, atol=1e-12)


def test_sepa_at_one_flattens_execution_and_keeps_planning_bit_for_bit():
    u, mask, plan = random_rows(5)
    u = u.float()
    got = sepa_pool(u, plan, mask, 1.0)
    execution = mask & ~plan
    for i in range(u.shape[0]):
        if execution[i].sum() > 1:
            assert got[i][execution[i]].var() < 1e-10
    assert torch.equal(got[plan], u[plan])  # exact, not approximately equal


def test_sepa_in_place_form_consumes_planning_and_matches():
    u, mask, plan = random_rows(6)
    u = u.float() * mask
    p = plan.float()
    out = sepa_pool_(u.clone(), p, mask.float(), 0.6)
    assert torch.equal(p, (mask & ~plan).float())  # documented: planning becomes the execution mask
    torch.testing.assert_close(out, sepa_pool(u, plan, mask, 0.6))


@pytest.mark.parametrize("beta", [0.0, 0.1, 0.5, 1.0, 2.5])
@pytest.mark.parametrize("seed", range(3))
def test_gtpo_matches_reference(beta, seed):
    u, mask, _ = random_rows(seed)
    u[3] = 1e-9  # mean_u below 1e-7: weights 1
    advantages = torch.linspace(-2, 3, u.shape[0], dtype=torch.float64)
    w = gtpo_weights(u, mask, beta)
    got = masked_lists(w * advantages[:, None], mask)
    expected = [ref.gtpo(a, row, beta) for a, row in zip(advantages.tolist(), masked_lists(u, mask))]
    for got_row, exp_row in zip(got, expected):
        np.testing.assert_allclose(got_row, exp_row, rtol=1e-12, atol=1e-12)
    assert torch.isfinite(w).all()


@pytest.mark.parametrize("beta", [0.05, 0.1, 0.7, 1.0])
def test_gtpo_weights_average_one_per_response(beta):
    u, mask, _ = random_rows(7)
    w = gtpo_weights(u, mask, beta)
    for i in range(u.shape[0]):
        if mask[i].any():
            assert w[i][mask[i]].mean().item() == pytest.approx(1.0, abs=1e-6)
            assert (w[i][mask[i]] >= 0).all()


def test_gtpo_clamps_at_zero_for_large_beta():
    u = torch.tensor([[0.0, 0.0, 3.0]], dtype=torch.float64)
    w = gtpo_weights(u, torch.ones(1, 3, dtype=torch.bool), 2.0)
    assert w[0].tolist() == pytest.approx([0.0, 0.0, 1.0 + 2.0 * (3.0 / (1.0 + 1e-8) - 1.0)], rel=1e-12)


def test_gtpo_in_place_form_matches():
    u, mask, _ = random_rows(8)
    u = u * mask
    torch.testing.assert_close(gtpo_weights_(u.clone(), mask.double(), 0.3), gtpo_weights(u, mask, 0.3))


@pytest.mark.parametrize("alpha", [0.0, 0.2, 1.0])
def test_hicra_matches_reference_and_keeps_signs(alpha):
    g = torch.Generator().manual_seed(3)
    adv = torch.randn(6, 20, generator=g, dtype=torch.float64)
    plan = torch.rand(6, 20, generator=g) < 0.4
    got = hicra(adv, plan, alpha)
    expected = [ref.hicra(a, p, alpha) for a, p in zip(adv.tolist(), plan.int().tolist())]
    np.testing.assert_allclose(got.tolist(), expected, rtol=1e-12)
    assert (got * adv >= 0).all()  # never flips a sign (alpha = 1 may zero a negative planning token)
    if alpha < 1:
        assert (torch.sign(got) == torch.sign(adv)).all()
    assert torch.equal(got[~plan], adv[~plan])
    assert torch.allclose(got[plan & (adv > 0)], (adv * (1 + alpha))[plan & (adv > 0)])
    assert torch.allclose(got[plan & (adv < 0)], (adv * (1 - alpha))[plan & (adv < 0)])


def test_hicra_factor_equals_hicra_after_gtpo():
    u, mask, plan = random_rows(9)
    episode = torch.linspace(-1, 1, u.shape[0], dtype=torch.float64)
    token_adv = gtpo_weights(u, mask, 0.4) * episode[:, None] * mask
    fused = token_adv * hicra_factor_(plan.double(), episode, 0.2)
    torch.testing.assert_close(fused, hicra(token_adv, plan, 0.2))


@pytest.mark.parametrize("beta", [0.0, 0.3, 1.0, 2.0])
@pytest.mark.parametrize("negative", [False, True])
def test_fused_gtpo_advantages_equal_weights_times_episode(beta, negative):
    from verl_ext.advantage.gtpo import gtpo_advantages_

    u, mask, _ = random_rows(10)
    if negative:  # a plugin's u may be negative: then the clamp must act
        u = u - 2.0
    u = u * mask
    episode = torch.linspace(-2, 2, u.shape[0], dtype=torch.float64)
    fused = gtpo_advantages_(u.clone(), mask.double(), beta, episode) * mask
    torch.testing.assert_close(fused, gtpo_weights(u, mask, beta) * episode[:, None] * mask)


def test_builtin_uncertainty_is_floored_at_zero():
    # rounding noise (log-prob slightly above 0, entropy slightly below 0) never makes u negative
    logp = torch.tensor([1e-6, 0.0, -0.5])
    assert builtin_uncertainty("surprisal", logp, None).tolist() == pytest.approx([0.0, 0.0, 0.5])
    assert builtin_uncertainty("predictive_variance", logp, None)[0].item() == 0.0
    assert builtin_uncertainty("shannon_entropy", None, torch.tensor([-1e-7, 2.0])).tolist() == pytest.approx(
        [0.0, 2.0]
    )
