"""The composed pipeline (episode -> uninformative -> SEPA -> GTPO -> HICRA) vs the per-token reference, and its
metrics vs plain computations."""

import math

import numpy as np
import pytest
import torch

from verl_ext.advantage import AdvantageConfig, AdvantageInputs, compute_advantages
from verl_ext.advantage import reference as ref


def make_batch(seed, bs=24, T=16, group=4):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (bs,), generator=g)
    lengths[0] = 0  # zero-length response
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    rewards = torch.zeros(bs, T)
    last = (lengths - 1).clamp(min=0)
    rewards[torch.arange(bs), last] = (torch.rand(bs, generator=g) < 0.5).float() * (lengths > 0)
    index = np.array([f"g{i // group}" for i in range(bs)], dtype=object)
    index[-1] = "singleton"
    index[4:8] = "g1"  # make sure one group is all-equal
    rewards[4:8] = 0.0
    rewards[4:8, 0] = 1.0
    mask[4:8, 0] = 1
    logp = -torch.empty(bs, T).exponential_(generator=g) * 2
    logp[5] = -1e-9  # surprisal mean below 1e-7 in that row
    ent = torch.empty(bs, T).exponential_(generator=g)
    plan = (torch.rand(bs, T, generator=g) < 0.3) & mask.bool()
    return dict(rewards=rewards, mask=mask, index=index, logp=logp, ent=ent, plan=plan)


def run_fast(b, estimator, metrics=None, **cfg):
    config = AdvantageConfig.from_algorithm(cfg, adv_estimator=estimator)
    inputs = AdvantageInputs(
        b["rewards"],
        b["mask"],
        b["index"],
        old_log_probs=b["logp"],
        entropys=b["ent"],
        planning_mask=b["plan"],
        sepa_lambda=cfg.pop("_lam", 0.4),
    )
    return compute_advantages(config, inputs, metrics=metrics)


def run_slow(b, advantage_mode, transform, kind="surprisal", beta=0.1, alpha=0.2, lam=0.4):
    return ref.pipeline(
        b["rewards"].tolist(),
        b["mask"].tolist(),
        list(b["index"]),
        advantage_mode=advantage_mode,
        transform=transform,
        kind=kind,
        logprobs=b["logp"].tolist(),
        entropys=b["ent"].tolist(),
        plan=b["plan"].int().tolist(),
        beta=beta,
        alpha=alpha,
        lam=lam,
    )


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("advantage_mode", ["grpo", "maxrl"])
@pytest.mark.parametrize("transform", ["none", "gtpo", "gtpo_hicra", "gtpo_sepa"])
@pytest.mark.parametrize("kind", ["surprisal", "predictive_variance", "shannon_entropy"])
def test_composable_matches_reference(seed, advantage_mode, transform, kind):
    b = make_batch(seed)
    cfg = dict(advantage_mode=advantage_mode, transform_mode=transform, uncertainty_kind=kind, gtpo_beta=0.3)
    got = run_fast(b, "composable", **cfg)
    expected = run_slow(b, advantage_mode, transform, kind=kind, beta=0.3)
    np.testing.assert_allclose(got.tolist(), expected, rtol=2e-5, atol=1e-6)
    assert got.dtype == b["rewards"].dtype and torch.isfinite(got).all()
    assert (got[b["mask"] == 0] == 0).all()


@pytest.mark.parametrize("lam", [0.0, 1.0])
@pytest.mark.parametrize("beta", [0.0, 1.5])
def test_gtpo_sepa_edges_match_reference(lam, beta):
    b = make_batch(11)
    got = run_fast(b, "gtpo_sepa", gtpo_beta=beta, _lam=lam)
    expected = run_slow(b, "maxrl", "gtpo_sepa", beta=beta, lam=lam)
    np.testing.assert_allclose(got.tolist(), expected, rtol=2e-5, atol=1e-6)


def test_maxrl_estimator_broadcasts_episode_advantages():
    b = make_batch(2)
    got = run_fast(b, "maxrl")
    np.testing.assert_allclose(got.tolist(), run_slow(b, "maxrl", "none"), rtol=1e-6, atol=1e-7)


def test_all_masked_batch_gives_zeros_not_nan():
    b = make_batch(3)
    b["mask"] = torch.zeros_like(b["mask"])
    b["rewards"] = torch.zeros_like(b["rewards"])
    b["plan"] = torch.zeros_like(b["plan"])
    metrics = {}
    got = run_fast(b, "gtpo_hicra", metrics=metrics)
    assert torch.equal(got, torch.zeros_like(got))
    assert all(math.isfinite(v) for v in metrics.values())


def plain_stats(u_rows, plan_rows):
    exec_vals = [x for row, p in zip(u_rows, plan_rows) for x, q in zip(row, p) if not q]
    plan_vals = [x for row, p in zip(u_rows, plan_rows) for x, q in zip(row, p) if q]

    def mean_var(v):
        if not v:
            return 0.0, 0.0
        m = sum(v) / len(v)
        return m, sum((x - m) ** 2 for x in v) / len(v)

    return mean_var(exec_vals), mean_var(plan_vals)


@pytest.mark.parametrize("transform", ["gtpo", "gtpo_hicra", "gtpo_sepa"])
def test_metrics_match_plain_computation(transform):
    b = make_batch(4, bs=32, T=40)
    metrics = {}
    run_fast(b, transform, metrics=metrics, _lam=0.7)
    mask = b["mask"].bool()
    u_rows = [[ref.uncertainty("surprisal", float(x), None) for x in row[m]] for row, m in zip(b["logp"], mask)]
    plan_rows = [row[m].int().tolist() for row, m in zip(b["plan"], mask)]
    (em, ev), (pm, pv) = plain_stats(u_rows, plan_rows)
    assert metrics["adv/exec_u_mean_before"] == pytest.approx(em, rel=1e-5)
    assert metrics["adv/exec_u_var_before"] == pytest.approx(ev, rel=1e-4)
    assert metrics["adv/plan_u_mean_before"] == pytest.approx(pm, rel=1e-5)
    assert metrics["adv/plan_u_var_before"] == pytest.approx(pv, rel=1e-4)
    after_rows = [ref.sepa(u, p, 0.7) for u, p in zip(u_rows, plan_rows)] if transform == "gtpo_sepa" else u_rows
    (em, ev), (pm, pv) = plain_stats(after_rows, plan_rows)
    assert metrics["adv/exec_u_mean_after"] == pytest.approx(em, rel=1e-5)
    assert metrics["adv/exec_u_var_after"] == pytest.approx(ev, rel=1e-4)
    assert metrics["adv/plan_u_var_after"] == pytest.approx(pv, rel=1e-4)
    n_plan = sum(map(sum, plan_rows))
    assert metrics["adv/planning_token_frac"] == pytest.approx(n_plan / int(mask.sum()))
    rewards = b["rewards"].sum(-1).tolist()
    _, correct, wrong = ref.uninformative(rewards, list(b["index"]))
    assert (metrics["adv/skipped_all_correct"], metrics["adv/skipped_all_wrong"]) == (correct, wrong)
    assert metrics["adv/correct_rate"] == pytest.approx(sum(r > 0.5 for r in rewards) / len(rewards))
    assert ("adv/sepa_lambda" in metrics) == (transform == "gtpo_sepa")
    if transform == "gtpo_sepa":
        assert metrics["adv/sepa_lambda"] == 0.7
        assert metrics["adv/exec_u_var_after"] < metrics["adv/exec_u_var_before"]
    # token advantages that moved from their response's episode advantage, counted by hand
    episode = [row[0] if any(m) else 0.0 for row, m in zip(run_slow(b, "maxrl", "none"), b["mask"].tolist())]
    tokens = run_fast(b, transform, _lam=0.7)
    moved = total = 0
    for a_i, row, m in zip(episode, tokens.tolist(), b["mask"].tolist()):
        for a_t, keep in zip(row, m):
            if keep and a_i != 0:
                total += 1
                moved += abs(a_t - a_i) > 1e-6 * abs(a_i)
    assert metrics["adv/token_moved_frac"] == pytest.approx(moved / total)
    assert 0 < metrics["adv/token_moved_frac"] <= 1


def test_gtpo_on_constant_uncertainty_moves_no_token_and_hicra_moves_the_planning_ones():
    b = make_batch(7, bs=16, T=20)
    b["logp"] = torch.full_like(b["logp"], -0.5)  # every token the same surprisal: GTPO's weights are all 1
    for estimator, want_moved_any in (("gtpo", False), ("gtpo_hicra", True)):
        metrics = {}
        run_fast(b, estimator, metrics=metrics)
        assert (metrics["adv/token_moved_frac"] > 0) == want_moved_any, (estimator, metrics["adv/token_moved_frac"])


def test_sepa_at_full_strength_differentiates_only_planning_tokens():
    b = make_batch(6, bs=16, T=30)
    b["rewards"][:, 0] += torch.arange(16) % 2  # every group informative
    got = run_fast(b, "gtpo_sepa", gtpo_beta=0.5, _lam=1.0)
    execution = b["mask"].bool() & ~b["plan"]
    for i in range(16):
        if execution[i].sum() > 1 and got[i].abs().sum() > 0:
            values = got[i][execution[i]]
            assert torch.allclose(values, values[0].expand_as(values), rtol=1e-5)
