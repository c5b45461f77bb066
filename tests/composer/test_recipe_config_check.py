"""The Composer's config check enforces what the replay channel's exactness rests on, and takes every default from
composer.yaml (no second copy in code). Composed configs, no Ray."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf, open_dict

from recipe.composer.config_check import COMPOSER_YAML, ConfigError, composer_settings

TEACHER = "composer.replay.teacher_pool.teachers=[{name: a, base_url: 'http://127.0.0.1:9/v1', model: m}]"


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


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["actor_rollout_ref.actor.shuffle=true"], "actor.shuffle=false"),
        (["actor_rollout_ref.actor.ppo_epochs=2"], "ppo_epochs=1"),
    ],
)
@pytest.mark.parametrize("arm", ["replay", "full"])
def test_replay_needs_the_rows_first_and_one_epoch(overrides, match, arm):
    """With shuffle the replay rows are no longer the first mini-batch of each rank (DPO gradient no longer taken
    where the pairs were scored; loss/grpo would leave out a rollout mini-batch instead); a second epoch trains on
    them again after the policy moved."""
    assert composer_settings(_cfg(TEACHER, arm=arm)).replay_on  # the same config without the override is fine
    with pytest.raises(ConfigError, match=match):
        composer_settings(_cfg(TEACHER, *overrides, arm=arm))


@pytest.mark.parametrize("arm", ["baseline", "sdpo"])
def test_without_replay_the_update_order_is_free(arm):
    s = composer_settings(_cfg("actor_rollout_ref.actor.shuffle=true", "actor_rollout_ref.actor.ppo_epochs=2", arm=arm))
    assert not s.replay_on


def test_left_out_keys_take_composer_yaml_values():
    """A config without the composer.sdpo / composer.replay blocks (e.g. written by hand against verl's own
    ppo_trainer) gets composer.yaml's documented values, not a second set of defaults in code."""
    cfg = _cfg(TEACHER)
    with open_dict(cfg):
        for key in ("hint_mode", "sibling_solution", "form", "teacher_topk", "jsd_beta", "token_clip"):
            cfg.composer.sdpo.pop(key)
        for key in ("beta_dpo", "max_pairs_per_step", "rule", "min_agree"):
            cfg.composer.replay.pop(key)
    s = composer_settings(cfg)
    yaml = OmegaConf.load(COMPOSER_YAML).composer
    assert (s.hint_mode, s.sibling_solution, s.sdpo_form, s.teacher_topk, s.jsd_beta, s.token_clip) == (
        yaml.sdpo.hint_mode,
        yaml.sdpo.sibling_solution,
        yaml.sdpo.form,
        yaml.sdpo.teacher_topk,
        yaml.sdpo.jsd_beta,
        yaml.sdpo.token_clip,
    )
    assert (s.beta_dpo, s.max_pairs_per_step, s.rule, s.min_agree) == (
        yaml.replay.beta_dpo,
        yaml.replay.max_pairs_per_step,
        yaml.replay.rule,
        yaml.replay.min_agree,
    )
