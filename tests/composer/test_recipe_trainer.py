"""The composer trainer's pure pieces on real DataProtos and composed configs (no Ray)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl import DataProto

from verl_ext.composer import register

register()

from recipe.composer.composer_ray_trainer import (  # noqa: E402
    answer_key,
    composer_advantages,
    sdpo_kl_estimate,
    update_batch,
)
from recipe.composer.config_check import ConfigError, composer_settings  # noqa: E402


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


def test_sdpo_kl_estimate_masked_mean():
    s = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -0.5]])
    t = torch.tensor([[-1.5, -1.0, -9.0], [-0.1, -0.2, -0.3]])
    m = torch.tensor([[1, 1, 0], [0, 0, 1]])
    expected = ((-1.0 + 1.5) + (-2.0 + 1.0) + (-0.5 + 0.3)) / 3
    assert sdpo_kl_estimate(s, t, m) == pytest.approx(expected)
    assert sdpo_kl_estimate(s, t, torch.zeros_like(m)) == 0.0


@pytest.mark.parametrize("n_ranks", [1, 2])
def test_update_batch_puts_replay_rows_first_and_zero_fills_loss_columns(n_ranks):
    head = DataProto.from_dict(
        tensors={
            "input_ids": torch.arange(16).view(4, 4),
            "attention_mask": torch.ones(4, 4, dtype=torch.long),
            "advantages": torch.ones(4, 2),
            "token_level_scores": torch.ones(4, 2),
            "sdpo_weight": torch.full((4, 2), 0.5),
            "sdpo_topk_ids": torch.ones(4, 2, 3, dtype=torch.int32),
        },
        non_tensors={"uid": np.array(["a", "b", "c", "d"], dtype=object)},
        meta_info={"temperature": 1.0, "global_token_num": [4, 4, 4, 4]},
    )
    block = DataProto.from_dict(
        tensors={
            "input_ids": torch.full((2, 4), 7),
            "attention_mask": torch.tensor([[0, 1, 1, 1]] * 2),
            "advantages": torch.zeros(2, 2, dtype=torch.float64),
            "dpo_sign": torch.tensor([1.0, -1.0]),
        }
    )
    merged = update_batch(head, block, n_ranks)
    assert len(merged) == 6
    assert set(merged.batch.keys()) == {
        "input_ids",
        "attention_mask",
        "advantages",
        "dpo_sign",
        "sdpo_weight",
        "sdpo_topk_ids",
    }
    is_replay = merged.batch["input_ids"][:, 0] == 7
    chunk = 6 // n_ranks
    for r in range(n_ranks):  # each rank's chunk starts with its replay rows
        rows = is_replay[r * chunk : (r + 1) * chunk].tolist()
        assert rows == [True] * (2 // n_ranks) + [False] * (chunk - 2 // n_ranks)
    assert torch.equal(merged.batch["dpo_sign"][~is_replay], torch.zeros(4))  # the step's rows carry no DPO term
    assert torch.equal(merged.batch["sdpo_weight"][is_replay], torch.zeros(2, 2))  # the replay rows no SDPO term
    assert merged.batch["sdpo_topk_ids"].dtype == torch.int32
    assert merged.batch["advantages"].dtype == head.batch["advantages"].dtype
    assert sorted(merged.meta_info["global_token_num"]) == [3, 3, 4, 4, 4, 4]
    with pytest.raises(KeyError, match="lacks columns"):
        update_batch(head, DataProto.from_dict(tensors={"ref_log_prob": torch.zeros(2, 2)}), 1)


def test_answer_key_compares_boxed_answers():
    assert answer_key("so it is \\boxed{ 3 }") == answer_key("The answer is \\boxed{3}")
    assert answer_key("\\boxed{3}") != answer_key("\\boxed{4}")
    assert answer_key("no box  Here") == "no box here"


def _cfg(*overrides, arm="full"):
    from verl_ext.config.compose import compose_config

    cfg = compose_config(
        "composer",
        [f"+arm={arm}", "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=4", *overrides],
        config_module="recipe.composer.config",
        backend="cpu",
    )
    OmegaConf.resolve(cfg)
    return cfg


TEACHER = "composer.replay.teacher_pool.teachers=[{name: a, base_url: 'http://127.0.0.1:9/v1', model: m}]"


@pytest.mark.parametrize(
    "arm,alpha,beta", [("baseline", 0, 0), ("sdpo", 0.1, 0), ("replay", 0, 0.05), ("full", 0.1, 0.05)]
)
def test_arms_differ_only_in_channel_weights(arm, alpha, beta):
    s = composer_settings(_cfg(TEACHER, arm=arm))
    assert (s.alpha_sdpo, s.beta_replay) == (alpha, beta)
    assert (s.pool is not None) == (beta > 0)


@pytest.mark.parametrize(
    "overrides,match",
    [
        ([], "teacher pool needs at least one teacher"),
        ([TEACHER, "algorithm.adv_estimator=grpo"], "adv_estimator=grpo_composer"),
        ([TEACHER, "+composer.typo=1"], "unknown composer keys"),
        ([TEACHER, "+composer.replay.teacher_pool.oops=1"], "unknown teacher pool config keys"),
        ([TEACHER, "composer.replay.max_pairs_per_step=9"], r"max_pairs_per_step=9"),
        ([TEACHER, "composer.sdpo.hint_mode=inline"], "hint_mode"),
        ([TEACHER, "actor_rollout_ref.actor.use_kl_loss=false"], "reference model"),
        ([TEACHER, "composer.replay.rule=vote"], "rule must be one of"),
        ([TEACHER, "composer.beta_replay=-1"], ">= 0"),
        ([TEACHER, "composer.sdpo.form=dense"], "form must be one of"),
        ([TEACHER, "composer.sdpo.teacher_topk=-2"], "teacher_topk"),
        ([TEACHER, "composer.sdpo.jsd_beta=1.5"], "jsd_beta"),
        ([TEACHER, "composer.sdpo.token_clip=0"], "token_clip"),
        ([TEACHER, "actor_rollout_ref.model.use_fused_kernels=true"], "use_fused_kernels=false"),
        ([TEACHER, "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=2"], "Ulysses"),
    ],
)
def test_config_errors_name_the_key(overrides, match):
    with pytest.raises(ConfigError, match=match):
        composer_settings(_cfg(*overrides))


def test_baseline_needs_no_teachers_or_reference():
    s = composer_settings(_cfg("actor_rollout_ref.actor.use_kl_loss=false", arm="baseline"))
    assert s.pool is None and not s.sdpo_on and not s.replay_on


def test_sampled_token_form_runs_on_any_engine_setting():
    s = composer_settings(
        _cfg(TEACHER, "composer.sdpo.form=sampled_token", "actor_rollout_ref.model.use_fused_kernels=true")
    )
    assert s.sdpo_form == "sampled_token" and s.teacher_topk == 64 and s.jsd_beta == 0.5 and s.token_clip == 10.0
    assert composer_settings(_cfg(TEACHER, "composer.sdpo.teacher_topk=null")).teacher_topk == 0  # whole vocabulary


def test_cpu_demo_preset_composes_for_every_arm():
    from verl_ext.config.compose import compose_config
    from verl_ext.toy.resolvers import register_resolvers

    register_resolvers()  # what recipe/composer/main.py does: ${tiny_assets:...} in the preset
    for arm in ("baseline", "sdpo", "replay", "full"):
        cfg = compose_config("composer", ["+preset=cpu_demo", f"+arm={arm}"], config_module="recipe.composer.config")
        OmegaConf.resolve(cfg)
        s = composer_settings(cfg)
        assert (s.pool is not None) == (arm in ("replay", "full"))
        if s.pool is not None:
            assert [t.model for t in s.pool.teachers] == ["right", "right", "wrong"]
