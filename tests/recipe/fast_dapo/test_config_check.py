"""Bad fast DAPO settings fail in the driver, before Ray starts, with a message naming the setting."""

from __future__ import annotations

import copy
import inspect
from dataclasses import MISSING, fields

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf, open_dict
from verl import DataProto

from recipe.fast_dapo import config_check
from recipe.fast_dapo.config_check import (
    CURRICULUM_KEYS,
    DEFAULTS,
    FAST_DAPO_YAML,
    AutoGenBatch,
    ConfigError,
    CurriculumSettings,
    curriculum_on,
    curriculum_settings,
    prepare_config,
)
from recipe.fast_dapo.fast_dapo_ray_trainer import GenerationBudgetExceeded, RayFastDAPOTrainer, data_controller
from verl_ext.config.compose import compose_config
from verl_ext.curriculum import DataController, MemorySettings
from verl_ext.toy.resolvers import register_resolvers

register_resolvers()


def _cfg(*overrides):
    return compose_config("fast_dapo", ["+preset=cpu_demo", *overrides], config_module="recipe.fast_dapo.config")


def test_demo_preset_is_valid_and_n_continue_moves_out_of_verls_rollout_config():
    cfg = _cfg()
    s = prepare_config(cfg)
    assert (s.mode, s.n, s.n_continue, s.N) == ("fast", 4, 4, 8)
    assert "n_continue" not in cfg.actor_rollout_ref.rollout  # verl's RolloutConfig rejects unknown fields
    from verl.utils.config import omega_conf_to_dataclass

    omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)  # would raise on the unknown key


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["curriculum.mode=fastest"], "curriculum.mode must be one of ['fast', 'dapo'], got 'fastest'"),
        (["actor_rollout_ref.rollout.n=1"], "n must be >= 2"),
        (["actor_rollout_ref.rollout.n_continue=-1"], "curriculum.n_continue must be >= 0, got -1"),
        (["+curriculum.typo_key=1"], "unknown curriculum keys"),
        (["curriculum.max_num_gen_batches=-2"], "max_num_gen_batches"),
        (["curriculum.max_screen_staleness=-1"], "curriculum.max_screen_staleness must be >= 0, got -1"),
        (["curriculum.max_screen_staleness=soon"], "max_screen_staleness must be an integer or null, got 'soon'"),
        (["data.gen_batch_size=0"], "gen_batch_size"),
        (["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=7"], "must divide the training batch"),
        (["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=5"], "must divide a mini-batch"),
        (["trainer.use_v1=true"], "use_v1=false"),
        (["curriculum.enable=maybe"], "curriculum.enable"),
        (["algorithm.adv_estimator=gtpo", "+algorithm.uncertainty_kind=telepathy"], "telepathy"),
        (
            ["trainer.plot_keys=[critic/score/mean]", "trainer.jsonl_metrics_path=null"],
            "needs trainer.jsonl_metrics_path",
        ),
        (["trainer.plot_keys=critic/score/mean"], "trainer.plot_keys must be a list, got 'critic/score/mean'"),
        (["curriculum.enable=false", "curriculum.memory.enable=true"], "memory.enable=true needs curriculum.enable"),
        (["curriculum.memory.decay=2"], "curriculum.memory.decay must be <= 1.0, got 2.0"),
        (["+curriculum.memory.typo=1"], "unknown curriculum.memory keys"),
        (["curriculum.enable=false", "curriculum.auto_gen_batch.enable=true"], "auto_gen_batch.enable=true needs"),
        (["curriculum.auto_gen_batch.confidence=1.0"], "auto_gen_batch.confidence must be < 1.0, got 1.0"),
        (["curriculum.auto_gen_batch.window=0"], "curriculum.auto_gen_batch.window must be >= 1, got 0"),
        (["curriculum.auto_gen_batch.enable=yes"], "auto_gen_batch.enable must be true or false"),
        (["+curriculum.auto_gen_batch.cap=64"], "unknown curriculum.auto_gen_batch keys"),
        (["+external_agent.command=python agent.py"], "default_agent_loop is 'single_turn_agent'"),
        (
            [
                "actor_rollout_ref.rollout.agent.default_agent_loop=external_agent",
                "+external_agent.command=python a.py",
            ],
            "needs a trainer that handles agent episodes",
        ),
    ],
)
def test_bad_settings_fail_before_ray(overrides, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        prepare_config(_cfg(*overrides))


def test_plain_and_dapo_modes_validate():
    assert prepare_config(_cfg("curriculum.max_screen_staleness=1")).mode == "fast"
    assert prepare_config(_cfg("curriculum.enable=false")).mode == "plain"
    assert prepare_config(_cfg("curriculum.mode=dapo")).mode == "dapo"


def test_agent_trainer_passes_the_agent_check():
    cfg = _cfg(
        "actor_rollout_ref.rollout.agent.default_agent_loop=external_agent",
        "+external_agent.command=python a.py",
        "trainer.trainer_cls=recipe.fast_dapo.fast_dapo_ray_trainer.AgentFastDAPOTrainer",
    )
    assert prepare_config(cfg).mode == "fast"


def test_pass_rate_memory_setting_reaches_the_controller():
    s = prepare_config(_cfg("curriculum.memory.enable=true", "curriculum.memory.skip_all_wrong=0.5"))
    assert s.memory.enable and s.memory.skip_all_wrong == 0.5
    assert not prepare_config(_cfg()).memory.enable  # off by default
    assert data_controller(s).state_dict()["memory"] is not None


def test_auto_gen_batch_setting_is_read_with_its_defaults():
    s = prepare_config(_cfg("curriculum.auto_gen_batch.enable=true", "curriculum.mode=dapo"))
    yaml = OmegaConf.load(FAST_DAPO_YAML).curriculum.auto_gen_batch  # the one place confidence and window are set
    assert (s.auto_gen_batch.enable, s.auto_gen_batch.confidence, s.auto_gen_batch.window) == (
        True,
        yaml.confidence,
        yaml.window,
    )
    assert not prepare_config(_cfg()).auto_gen_batch.enable  # off by default


# ------------------------------------------------------------------ each default has one source: fast_dapo.yaml


def _without_project_keys(cfg):
    """The driver's config with every key the recipe adds to verl's left out (as a config written by hand against
    verl's ppo_trainer would): the curriculum block, rollout.n_continue and data.gen_batch_size."""
    with open_dict(cfg):
        cfg.pop("curriculum")
        cfg.actor_rollout_ref.rollout.pop("n_continue")
        cfg.data.pop("gen_batch_size")
    return cfg


def _settings_from_the_yaml_alone(n: int, train_batch_size: int) -> CurriculumSettings:
    """CurriculumSettings built field by field from fast_dapo.yaml, nothing else (n and train_batch_size are verl's
    keys, which the preset sets)."""
    yaml = OmegaConf.to_container(OmegaConf.load(FAST_DAPO_YAML), resolve=False)
    cur = yaml["curriculum"]
    assert yaml["data"]["gen_batch_size"] == "${data.train_batch_size}"
    return CurriculumSettings(
        enable=cur["enable"],
        mode=cur["mode"],
        filter_metric=cur["filter_metric"],
        max_num_gen_batches=cur["max_num_gen_batches"],
        max_screen_staleness=cur["max_screen_staleness"],
        memory=MemorySettings(**cur["memory"]),
        auto_gen_batch=AutoGenBatch(**cur["auto_gen_batch"]),
        n_continue=yaml["actor_rollout_ref"]["rollout"]["n_continue"],
        n=n,
        train_batch_size=train_batch_size,
        gen_batch_size=train_batch_size,
    )


def test_left_out_keys_take_fast_dapo_yaml_values_in_the_driver_and_the_trainer():
    """The settings the driver checks and the trainer reads, from a config that sets none of the recipe's keys, are
    the settings built from fast_dapo.yaml alone: no second default in code. Two of them were wrong before this:
    curriculum.max_num_gen_batches fell back to 0 (no limit) and rollout.n_continue to 0, where the YAML users run
    says 10 and 12."""
    cfg = _without_project_keys(_cfg())
    driver = prepare_config(cfg)
    n, tbs = cfg.actor_rollout_ref.rollout.n, cfg.data.train_batch_size
    assert driver == _settings_from_the_yaml_alone(n=n, train_batch_size=tbs)
    assert curriculum_settings(cfg) == driver  # RayFastDAPOTrainer.__init__ reads them again from the same config
    assert (driver.max_num_gen_batches, driver.n_continue) == (10, 12)
    assert curriculum_on(OmegaConf.create({})) is DEFAULTS.value("curriculum.enable")
    # the driver writes the YAML's values into the config, so what reads it later needs no default of its own
    assert OmegaConf.to_container(cfg.curriculum) == {**DEFAULTS.value("curriculum"), "n_continue": 12}
    from verl_ext.trainer.probe import ProbeSettings

    assert ProbeSettings.from_config(cfg).metric == DEFAULTS.value("curriculum.filter_metric")


def test_the_settings_fields_are_the_yaml_keys_and_have_no_defaults():
    yaml = OmegaConf.load(FAST_DAPO_YAML)
    assert CURRICULUM_KEYS == set(yaml.curriculum) | {"n_continue"}  # n_continue: written under rollout, moved
    assert [f.name for f in fields(AutoGenBatch)] == list(yaml.curriculum.auto_gen_batch)
    assert [f.name for f in fields(MemorySettings)] == list(yaml.curriculum.memory)
    for cls in (CurriculumSettings, AutoGenBatch, MemorySettings):
        assert all(f.default is MISSING and f.default_factory is MISSING for f in fields(cls)), cls
    from verl_ext.curriculum.screen_size import screening_size

    for fn, names in ((screening_size, ["confidence"]), (DataController.screening_target, ["confidence", "window"])):
        params = inspect.signature(fn).parameters
        assert all(params[name].default is inspect.Parameter.empty for name in names), fn


@pytest.mark.parametrize(
    "key",
    ["curriculum.max_num_gen_batches", "curriculum.auto_gen_batch.window", "curriculum.memory.decay"],
)
def test_a_default_missing_from_the_yaml_fails_naming_the_key(monkeypatch, key):
    """No fallback in code: with the key gone from fast_dapo.yaml and left out of the config, the check names it."""
    yaml = copy.deepcopy(config_check.DEFAULTS.tree)
    *parents, last = key.split(".")
    node = yaml
    for part in parents:
        node = node[part]
    del node[last]
    monkeypatch.setattr(config_check.DEFAULTS, "tree", yaml)
    with pytest.raises(ConfigError, match=rf"{key} is not set, and fast_dapo.yaml has no default for it"):
        prepare_config(_without_project_keys(_cfg()))
    prepare_config(_cfg())  # the preset's config still sets every key the YAML does not


def _screened_all_wrong(ctrl: DataController, n_prompts: int):
    ids = [f"p{ctrl.counters['generation_calls']}-{i}" for i in range(n_prompts)]
    prompts = DataProto.from_dict(
        tensors={"x": torch.zeros(n_prompts, 1)}, non_tensors={"uid": np.array(ids, dtype=object)}
    )
    ctrl.add_fresh_prompts(prompts)
    rows = ctrl.get_generation_inputs()
    rows.non_tensor_batch["acc"] = np.zeros(len(rows))  # every screened prompt all wrong: nothing is kept
    ctrl.update(rows)


def test_generation_budget_error_reports_keep_rate_and_what_to_change():
    trainer = object.__new__(RayFastDAPOTrainer)  # only the budget check, on a real controller
    trainer.controller = DataController(train_batch_size=2, n=2, n_continue=2, mode="fast")
    trainer.max_num_gen_batches = 3
    for _ in range(3):
        trainer._check_generation_budget()
        _screened_all_wrong(trainer.controller, 4)
    with pytest.raises(
        GenerationBudgetExceeded, match=r"keep rate 0\.000 \(0 of 12 prompts; all-correct 0, all-wrong 12\)"
    ):
        trainer._check_generation_budget()
    trainer.max_num_gen_batches = 0  # 0 = no limit
    trainer._check_generation_budget()
