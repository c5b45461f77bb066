"""grpo_composer estimator: GRPO part against verl's own grpo and a loop, the SDPO term, and verl registration."""

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from verl_ext.composer import compute_grpo_composer_advantage, register, sdpo_advantage_term


def make_batch(seed, bsz=12, resp_len=7):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, resp_len + 1, (bsz,), generator=g)
    mask = (torch.arange(resp_len)[None, :] < lengths[:, None]).float()
    rewards = torch.zeros(bsz, resp_len)
    rewards[torch.arange(bsz), lengths - 1] = torch.randint(0, 3, (bsz,), generator=g).float()
    # groups of 4, 3, 3, 1 and 1 (singletons use verl's mean 0 / std 1), in shuffled order
    uids = np.array(["a"] * 4 + ["b"] * 3 + ["c"] * 3 + ["d", "e"], dtype=object)
    order = torch.randperm(bsz, generator=g).numpy()
    return rewards, mask, uids[order]


def loop_grpo(rewards, mask, uids, norm_by_std, eps=1e-6):
    scores = rewards.sum(-1).tolist()
    adv = []
    for i, s in enumerate(scores):
        group = [scores[j] for j in range(len(scores)) if uids[j] == uids[i]]
        if len(group) == 1:
            mean, std = 0.0, 1.0
        else:
            mean = sum(group) / len(group)
            std = (sum((x - mean) ** 2 for x in group) / (len(group) - 1)) ** 0.5
        adv.append((s - mean) / (std + eps) if norm_by_std else s - mean)
    return torch.tensor(adv).unsqueeze(-1) * mask


@pytest.mark.parametrize("norm_by_std", [True, False])
def test_grpo_part_matches_verl_and_loop(norm_by_std):
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    rewards, mask, uids = make_batch(seed=int(norm_by_std))
    config = OmegaConf.create({"norm_adv_by_std_in_grpo": norm_by_std})
    adv, ret = compute_grpo_composer_advantage(rewards, mask, uids, config=config)
    verl_adv, _ = compute_grpo_outcome_advantage(rewards, mask, uids, norm_adv_by_std_in_grpo=norm_by_std)
    torch.testing.assert_close(adv, verl_adv)
    torch.testing.assert_close(adv, loop_grpo(rewards, mask, uids, norm_by_std))
    assert torch.equal(adv, ret)


def test_sdpo_term_added_only_at_error_sites():
    rewards, mask, uids = make_batch(seed=3)
    g = torch.Generator().manual_seed(4)
    teacher_lp = -torch.rand(mask.shape, generator=g) * 3
    old_lp = -torch.rand(mask.shape, generator=g) * 3
    error_mask = torch.rand(mask.shape, generator=g) < 0.4
    old_lp[mask == 0] = float("-inf")  # padding may hold anything; it must not leak in
    config = {"alpha_sdpo": 0.25}
    base, _ = compute_grpo_composer_advantage(rewards, mask, uids, config={"alpha_sdpo": 0.0})
    adv, _ = compute_grpo_composer_advantage(
        rewards,
        mask,
        uids,
        config=config,
        sdpo_teacher_log_probs=teacher_lp,
        old_log_probs=old_lp,
        sdpo_error_mask=error_mask,
    )
    for i in range(mask.shape[0]):
        for t in range(mask.shape[1]):
            extra = 0.25 * (teacher_lp[i, t] - old_lp[i, t]) if (error_mask[i, t] and mask[i, t]) else 0.0
            assert adv[i, t].item() == pytest.approx(base[i, t].item() + float(extra), abs=1e-6)


def test_sdpo_term_standalone():
    t = torch.tensor([[-1.0, -2.0, -0.5]])
    s = torch.tensor([[-1.5, -1.0, float("-inf")]])
    m = torch.tensor([[True, True, False]])
    assert sdpo_advantage_term(t, s, m, alpha=0.5).tolist() == [[0.25, -0.5, 0.0]]
    with pytest.raises(ValueError, match="alpha"):
        sdpo_advantage_term(t, s, m, alpha=-1)
    with pytest.raises(ValueError, match="shape"):
        sdpo_advantage_term(t, s[:, :2], m, alpha=1)


def test_alpha_without_tensors_is_a_clear_error():
    rewards, mask, uids = make_batch(seed=5)
    with pytest.raises(ValueError, match="old_log_probs"):
        compute_grpo_composer_advantage(rewards, mask, uids, config={"alpha_sdpo": 0.1}, sdpo_teacher_log_probs=mask)
    with pytest.raises(ValueError, match="alpha_sdpo"):
        compute_grpo_composer_advantage(rewards, mask, uids, config={"alpha_sdpo": -0.1})
    with pytest.raises(TypeError, match="unexpected"):
        compute_grpo_composer_advantage(rewards, mask, uids, teacher_actions=[])


def test_register_is_idempotent_and_runs_through_verl_compute_advantage():
    from verl import DataProto
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn
    from verl.trainer.ppo.ray_trainer import compute_advantage

    register()
    register()
    assert get_adv_estimator_fn("grpo_composer") is compute_grpo_composer_advantage

    rewards, mask, uids = make_batch(seed=6)
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask}, non_tensors={"uid": uids}
    )
    algo = OmegaConf.create({"adv_estimator": "grpo_composer", "norm_adv_by_std_in_grpo": True, "alpha_sdpo": 0.0})
    out = compute_advantage(data, adv_estimator="grpo_composer", config=algo)
    torch.testing.assert_close(out.batch["advantages"], loop_grpo(rewards, mask, uids, True))

    # verl's legacy compute_advantage never passes the SDPO tensors: alpha > 0 must fail loudly there
    algo.alpha_sdpo = 0.1
    with pytest.raises(ValueError, match="compute_advantage does not pass them"):
        compute_advantage(data, adv_estimator="grpo_composer", config=algo)
