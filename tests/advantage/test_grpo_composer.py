"""grpo_composer estimator: GRPO part against verl's own grpo and a loop, the SDPO term, verl registration, and
composer_advantages on real DataProtos."""

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl import DataProto

from verl_ext.advantage import register
from verl_ext.advantage.grpo_composer import composer_advantages, compute_grpo_composer_advantage, sdpo_advantage_term


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


def _batch(seed: int, groups: int = 3, n: int = 4, length: int = 6) -> DataProto:
    g = torch.Generator().manual_seed(seed)
    b = groups * n
    lengths = torch.randint(1, length + 1, (b,), generator=g)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
    rewards = torch.zeros(b, length)
    rewards[torch.arange(b), lengths - 1] = torch.randint(0, 2, (b,), generator=g).float()
    return DataProto.from_dict(
        tensors={
            "token_level_rewards": rewards,
            "response_mask": mask,
            "old_log_probs": -torch.rand(b, length, generator=g) * 3,
        },
        non_tensors={"uid": np.array([f"u{i // n}" for i in range(b)], dtype=object)},
    )


def _algo(alpha: float):
    return OmegaConf.create(
        {
            "adv_estimator": "grpo_composer",
            "alpha_sdpo": alpha,
            "norm_adv_by_std_in_grpo": False,
            "gamma": 1.0,
            "lam": 1.0,
        }
    )


@pytest.mark.parametrize("seed", range(4))
def test_alpha_zero_is_plain_grpo(seed):
    """With alpha = 0 (and no replay rows: beta = 0) the advantages are exactly verl's own grpo's on the batch."""
    from verl.trainer.ppo.ray_trainer import compute_advantage

    batch = _batch(seed)
    ours, _ = composer_advantages(batch, _algo(0.0))
    plain = compute_advantage(
        batch,
        adv_estimator="grpo",
        num_repeat=4,
        norm_adv_by_std_in_grpo=False,
        config=OmegaConf.create({"adv_estimator": "grpo"}),
    )
    torch.testing.assert_close(ours, plain.batch["advantages"])
    # SDPO inputs present but alpha = 0: still plain GRPO.
    sdpo = {
        "sdpo_teacher_log_probs": torch.zeros_like(ours),
        "sdpo_error_mask": torch.ones_like(ours, dtype=torch.bool),
    }
    torch.testing.assert_close(composer_advantages(batch, _algo(0.0), sdpo)[0], plain.batch["advantages"])


def test_sdpo_term_added_only_at_error_tokens():
    batch = _batch(7)
    base, _ = composer_advantages(batch, _algo(0.0))
    teacher = batch.batch["old_log_probs"] + 0.5
    error = torch.zeros_like(teacher, dtype=torch.bool)
    error[[1, 5]] = batch.batch["response_mask"][[1, 5]].bool()
    shaped, _ = composer_advantages(batch, _algo(0.2), {"sdpo_teacher_log_probs": teacher, "sdpo_error_mask": error})
    for i in range(shaped.shape[0]):
        for t in range(shaped.shape[1]):
            want = base[i, t] + (0.2 * 0.5 if error[i, t] else 0.0)
            assert shaped[i, t].item() == pytest.approx(want.item(), abs=1e-6)
