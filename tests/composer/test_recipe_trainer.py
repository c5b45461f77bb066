"""The composer recipe's settings on composed configs (no Ray). The trainer's pure pieces are tested beside their
modules: composer_advantages in tests/advantage/test_grpo_composer.py, sdpo_kl_estimate in test_sdpo_plan.py,
update_batch in test_recipe_replay.py, answer_key in test_disagreement.py."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from verl_ext.advantage import register

register()

from recipe.composer.config_check import ConfigError, composer_settings  # noqa: E402


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
        ([TEACHER, "+composer.replay.teacher_pool.oops=1"], "unknown composer.replay.teacher_pool keys"),
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
