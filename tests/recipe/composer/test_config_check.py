"""The Composer's config check on composed configs (no Ray): it enforces what the replay channel's exactness rests
on, takes every default from composer.yaml (no second copy in code), and gives each arm its channels. The trainer's
pure pieces are tested beside their modules: composer_advantages in tests/advantage/test_grpo_composer.py,
sdpo_kl_estimate in tests/composer/test_sdpo_plan.py, update_batch in tests/composer/test_replay.py, answer_key in
tests/composer/test_disagreement.py."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf, open_dict

from verl_ext.advantage import register

register()

from recipe.composer.config_check import COMPOSER_YAML, ConfigError, composer_settings  # noqa: E402

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
    sdpo, replay = s.sdpo, s.replay
    assert (sdpo.hint_mode, sdpo.sibling_solution, sdpo.form, sdpo.teacher_topk, sdpo.jsd_beta, sdpo.token_clip) == (
        yaml.sdpo.hint_mode,
        yaml.sdpo.sibling_solution,
        yaml.sdpo.form,
        yaml.sdpo.teacher_topk,
        yaml.sdpo.jsd_beta,
        yaml.sdpo.token_clip,
    )
    assert (replay.beta_dpo, replay.max_pairs_per_step, replay.rule, replay.min_agree) == (
        yaml.replay.beta_dpo,
        yaml.replay.max_pairs_per_step,
        yaml.replay.rule,
        yaml.replay.min_agree,
    )


def test_teacher_pool_keys_left_out_take_composer_yaml_values():
    """TeacherPoolConfig has no defaults (a spend cap left out would be "no cap", a trap for a paid API): a config
    that gives only the teachers gets composer.yaml's caps, cache (in the run's directory), retries and workers, the
    pool built from the YAML alone; the driver's fully composed config gets the same."""
    from dataclasses import MISSING, fields

    from verl_ext.composer.teacher_pool import TeacherPoolConfig

    yaml = OmegaConf.to_container(OmegaConf.load(COMPOSER_YAML).composer.replay.teacher_pool, resolve=False)
    assert [f.name for f in fields(TeacherPoolConfig)] == list(yaml)
    assert all(f.default is MISSING and f.default_factory is MISSING for f in fields(TeacherPoolConfig))
    assert isinstance(yaml["max_calls"], int)  # the recipe's spend cap is finite
    composed = _cfg(TEACHER)
    cfg = _cfg(TEACHER)
    with open_dict(cfg):
        for key in [k for k in cfg.composer.replay.teacher_pool if k != "teachers"]:
            cfg.composer.replay.teacher_pool.pop(key)
    run_dir = cfg.trainer.default_local_dir
    assert yaml["cache_path"] == "${trainer.default_local_dir}/teacher_cache.jsonl"
    teachers = OmegaConf.to_container(cfg.composer.replay.teacher_pool.teachers)
    from_yaml = TeacherPoolConfig.from_dict(
        {**yaml, "cache_path": f"{run_dir}/teacher_cache.jsonl", "teachers": teachers}
    )
    assert composer_settings(cfg).pool == from_yaml
    assert composer_settings(composed).pool == from_yaml


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
        ([TEACHER, "composer.sdpo.sites=tokens"], "composer.sdpo.sites must be one of"),
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


def test_sdpo_sites_default_to_the_whole_response():
    assert composer_settings(_cfg(TEACHER)).sdpo.sites == "response"
    assert composer_settings(_cfg(TEACHER, "composer.sdpo.sites=answer")).sdpo.sites == "answer"


def test_baseline_needs_no_teachers_or_reference():
    s = composer_settings(_cfg("actor_rollout_ref.actor.use_kl_loss=false", arm="baseline"))
    assert s.pool is None and not s.sdpo_on and not s.replay_on


def test_sampled_token_form_runs_on_any_engine_setting():
    s = composer_settings(
        _cfg(TEACHER, "composer.sdpo.form=sampled_token", "actor_rollout_ref.model.use_fused_kernels=true")
    )
    sdpo = s.sdpo
    assert sdpo.form == "sampled_token" and sdpo.teacher_topk == 64 and sdpo.jsd_beta == 0.5 and sdpo.token_clip == 10.0
    whole_vocabulary = composer_settings(_cfg(TEACHER, "composer.sdpo.teacher_topk=null"))
    assert whole_vocabulary.sdpo.teacher_topk == 0


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
