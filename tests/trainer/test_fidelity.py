"""Every verl feature the trainer base cannot run is rejected in the driver, naming its key; the ones it runs are
checked in the cheapest real way (the pure pieces here, the rest in test_e2e_parity.py)."""

from __future__ import annotations

import copy
import functools
import math

import numpy as np
import pytest
import torch
import yaml
from omegaconf import OmegaConf
from verl import DataProto

from recipe.composer.composer_ray_trainer import RayComposerTrainer
from recipe.composer.config_check import composer_settings
from recipe.fast_dapo.config_check import prepare_config
from recipe.fast_dapo.fast_dapo_ray_trainer import RayFastDAPOTrainer
from verl_ext.config.compose import compose_config
from verl_ext.config.errors import ConfigError
from verl_ext.trainer.clock import TrainClock
from verl_ext.trainer.fidelity import FEATURES, PARTIAL, REJECTED, check_fidelity, feature_table_markdown
from verl_ext.trainer.ppo_trainer import ExtRayPPOTrainer
from verl_ext.trainer.profiling import ProfileSchedule
from verl_ext.trainer.step import gdpo_metrics, images_seqlens


@functools.cache
def _ppo_base():
    return compose_config("ppo_trainer", ["algorithm.adv_estimator=grpo"], backend="cpu")


def _ppo(*overrides):
    """verl's ppo_trainer config (CPU backend) with `key=value` / `+key=value` overrides (YAML values), applied to
    one composed copy: composing once per case would make this file take minutes."""
    cfg = copy.deepcopy(_ppo_base())
    for override in overrides:
        key, value = override.removeprefix("+").split("=", 1)
        OmegaConf.update(cfg, key, yaml.safe_load(value), force_add=True)
    return cfg


def _fast_dapo(*overrides):
    from verl_ext.toy.resolvers import register_resolvers

    register_resolvers()
    return compose_config("fast_dapo", ["+preset=cpu_demo", *overrides], config_module="recipe.fast_dapo.config")


# what each trainer class declares it changes of verl's step (the checks read only this)
TRAINERS = {"ppo": ExtRayPPOTrainer, "fast_dapo": RayFastDAPOTrainer, "composer": RayComposerTrainer}


def _check(cfg, recipe):
    check_fidelity(cfg, TRAINERS[recipe].fidelity)


LOG_PROBS = "actor_rollout_ref.rollout.calculate_log_probs=true"

REJECTIONS = [
    (["algorithm.adv_estimator=remax"], "ppo", "algorithm.adv_estimator=remax"),
    (["reward.reward_model.enable=true"], "ppo", "reward.reward_model.enable"),
    (
        ["reward.reward_model.enable=true", "reward.reward_model.enable_resource_pool=false"],
        "fast_dapo",
        "colocated reward model",
    ),
    (["skip.rollout.enable=true"], "fast_dapo", "skip.rollout.enable"),
    (["skip.async_rollout.enable=true"], "ppo", "skip.async_rollout.enable"),
    (["skip.rollout_tq.enable=true"], "ppo", "skip.rollout_tq.enable"),
    (["skip.rollout.enable=true"], "composer", "skip.rollout.enable"),
    (["algorithm.filter_groups.enable=true"], "ppo", "algorithm.filter_groups"),
    (["data.train_max_samples=10"], "fast_dapo", "data.train_max_samples"),
    (["data.val_max_samples=10"], "ppo", "data.val_max_samples"),
    (["algorithm.use_pf_ppo=true", "algorithm.adv_estimator=gtpo"], "ppo", "algorithm.use_pf_ppo"),
    (["algorithm.use_pf_ppo=true"], "composer", "algorithm.use_pf_ppo"),
    (["distillation.enabled=true"], "composer", "distillation"),
    (
        ["algorithm.rollout_correction.rollout_is=token", "actor_rollout_ref.rollout.calculate_log_probs=false"],
        "ppo",
        "calculate_log_probs=true",
    ),
    (
        ["algorithm.rollout_correction.bypass_mode=true", "actor_rollout_ref.rollout.calculate_log_probs=false"],
        "ppo",
        "calculate_log_probs=true",
    ),
    (
        [
            "algorithm.rollout_correction.bypass_mode=true",
            LOG_PROBS,
            "algorithm.adv_estimator=gtpo",
            "+algorithm.uncertainty_kind=shannon_entropy",
        ],
        "ppo",
        "entropies",
    ),
    (
        [
            "algorithm.rollout_correction.bypass_mode=true",
            LOG_PROBS,
            "algorithm.adv_estimator=grpo_composer",
            "+algorithm.alpha_sdpo=0.1",
        ],
        "composer",
        "Composer's own actor loss",
    ),
]


@pytest.mark.parametrize("overrides, recipe, key", REJECTIONS)
def test_each_rejection_names_its_key(overrides, recipe, key):
    with pytest.raises(ConfigError, match=key):
        _check(_ppo(*overrides), recipe)


@pytest.mark.parametrize(
    "overrides, recipe",
    [
        ([], "ppo"),
        ([], "fast_dapo"),
        (["algorithm.use_pf_ppo=true"], "ppo"),  # verl's estimator: verl's compute_advantage applies it
        (["distillation.enabled=true"], "ppo"),  # the inherited actor update handles it
        (["skip.rollout.enable=true"], "ppo"),  # one generation call per step: verl's replay by step is right
        (["skip.rollout.enable=true", "+curriculum.enable=false"], "fast_dapo"),
        (["data.train_max_samples=10", "data.seed=3"], "ppo"),  # the same subset in every process
        (["data.train_max_samples=10", "data.shuffle=false"], "ppo"),  # the first rows
        (["reward.reward_model.enable=true", "reward.reward_model.enable_resource_pool=true"], "ppo"),  # standalone
        (
            [
                "algorithm.rollout_correction.rollout_is=token",
                "algorithm.rollout_correction.rollout_rs=token_k1",
                "algorithm.rollout_correction.bypass_mode=true",
                LOG_PROBS,
            ],
            "ppo",
        ),
        (["algorithm.rollout_correction.bypass_mode=true", LOG_PROBS, "algorithm.adv_estimator=gtpo"], "ppo"),
        (
            [
                "algorithm.rollout_correction.bypass_mode=true",
                LOG_PROBS,
                "algorithm.adv_estimator=grpo_composer",
                "+algorithm.alpha_sdpo=0.1",
                "+composer.sdpo.form=sampled_token",
                "+composer.beta_replay=0",  # left out, it takes composer.yaml's 0.05: replay's own loss
            ],
            "composer",
        ),  # verl's loss stays
        (
            [
                "trainer.val_only=true",
                "trainer.rollout_data_dir=/tmp/x",
                "global_profiler.steps=[1,2]",
                "trainer.esi_redundant_time=30",
            ],
            "ppo",
        ),
    ],
)
def test_supported_settings_pass(overrides, recipe):
    _check(_ppo(*overrides), recipe)


def test_both_recipe_checks_reject_before_ray():
    with pytest.raises(ConfigError, match="algorithm.adv_estimator=remax"):
        prepare_config(_fast_dapo("algorithm.adv_estimator=remax"))
    with pytest.raises(ConfigError, match="reward.reward_model.enable"):
        composer_settings(
            compose_config(
                "composer",
                ["+arm=baseline", "reward.reward_model.enable=true"],
                config_module="recipe.composer.config",
                backend="cpu",
            )
        )


def test_the_error_lists_every_problem_at_once():
    cfg = _ppo("algorithm.adv_estimator=remax", "algorithm.filter_groups.enable=true")
    with pytest.raises(ConfigError) as e:
        _check(cfg, "ppo")
    assert "remax" in str(e.value) and "filter_groups" in str(e.value)


def test_table_lists_every_feature_and_every_rejecting_row_has_a_check():
    table = feature_table_markdown(FEATURE_TESTS)
    assert len(table.splitlines()) == len(FEATURES) + 2
    for f in FEATURES:
        assert f"`{f.key}`" in table
        assert (f.check is not None) == (f.status in (REJECTED, PARTIAL)), f.key


def test_the_checks_take_a_trainers_declaration_not_a_recipe_name():
    with pytest.raises(TypeError, match="TrainerFidelity"):
        check_fidelity(_ppo(), "composer")


# ---------------------------------------------------------------- the profiler schedule, against verl's loop
def _verl_schedule(steps, continuous, first, last):
    """verl 0.9.1 fit's profiling decisions, transcribed loop-for-loop: {step: (start, stop, run_command)}."""
    out = {}
    prev, curr = False, first in steps
    for step in range(first, last + 1):
        start = (not prev and curr) if continuous else curr
        nxt = step + 1 in steps
        stop = (curr and not nxt) if continuous else curr
        run = bool(curr and steps and (step == max(steps) or step == last))
        out[step] = (start, stop, run)
        prev, curr = curr, nxt
    return out


@pytest.mark.parametrize("steps", [[], [1], [2, 3], [1, 2, 4, 5, 6], [3, 5], [2, 3, 9]])
@pytest.mark.parametrize("continuous", [False, True])
@pytest.mark.parametrize("first", [1, 3])
def test_profile_schedule_matches_verls_loop(steps, continuous, first):
    last = 8
    sched = ProfileSchedule.from_config({"steps": steps, "profile_continuous_steps": continuous})
    ours = {
        s: (sched.start(s, s == first), sched.stop(s, s == last), sched.run_finish_command(s, s == last))
        for s in range(first, last + 1)
    }
    assert ours == _verl_schedule(steps, continuous, first, last)


def test_profile_window_closes_on_the_last_step_even_if_the_next_is_listed():
    sched = ProfileSchedule(frozenset({4, 5}), continuous=True)
    assert sched.stop(4, is_last=True) and not sched.stop(4, is_last=False)


# ---------------------------------------------------------------- images_seqlens, GDPO metrics
def test_images_seqlens_collects_image_rows_only():
    mm = np.array(
        [
            {"image_grid_thw": 1, "images_seqlens": torch.tensor([4, 9])},
            {},
            {"image_grid_thw": 1, "images_seqlens": torch.tensor([16])},
        ],
        dtype=object,
    )
    batch = DataProto.from_dict(tensors={"x": torch.zeros(3, 1)}, non_tensors={"multi_modal_inputs": mm})
    assert images_seqlens(batch) == [4, 9, 16]
    assert images_seqlens(DataProto.from_dict(tensors={"x": torch.zeros(2, 1)})) == []


def test_gdpo_metrics_only_for_gdpo():
    batch = DataProto.from_dict(
        tensors={"x": torch.zeros(4, 1)},
        non_tensors={"fmt": np.array([1.0, 0.0, 1.0, 1.0]), "acc": np.array([0, 1, 1, 1])},
    )
    algo = OmegaConf.create({"adv_estimator": "gdpo", "gdpo_reward_keys": ["fmt", "acc", "absent"]})
    m = gdpo_metrics(batch, algo)
    assert m == pytest.approx(
        {
            "gdpo/fmt/mean": 0.75,
            "gdpo/fmt/std": np.std([1, 0, 1, 1]),
            "gdpo/fmt/max": 1.0,
            "gdpo/fmt/min": 0.0,
            "gdpo/acc/mean": 0.75,
            "gdpo/acc/std": np.std([0, 1, 1, 1]),
            "gdpo/acc/max": 1.0,
            "gdpo/acc/min": 0.0,
        }
    )
    algo.adv_estimator = "grpo"
    assert gdpo_metrics(batch, algo) == {}


# ---------------------------------------------------------------- ESI: verl's expiry check forces a save
class _SaveRecorder(ExtRayPPOTrainer):
    """The trainer's save decision only; the save itself (worker I/O) is recorded instead of written."""

    def __init__(self, config):  # noqa: D107 - no workers: only the attributes the decision reads
        self.config, self.saved, self.clock, self.max_steps_duration = config, [], TrainClock(), 0.0

    def _save_checkpoint(self):
        self.saved.append(self.global_steps)


def test_esi_expiry_forces_a_checkpoint(monkeypatch):
    import time

    t = _SaveRecorder(_ppo("trainer.save_freq=10", "trainer.esi_redundant_time=0"))
    t.max_steps_duration = 100.0  # seconds per step
    for step in (1, 10, 11):
        t.global_steps = step
        t._maybe_save_checkpoint(is_last=False, timing_raw={})
    assert t.saved == [10]  # save_freq only: no capacity block announced
    # vemlp announces the block's end: 120 s left < one step (100 s) + the save (60 s) -> save now
    monkeypatch.setenv("MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP", str(time.time() + 120))
    t.global_steps = 12
    t._maybe_save_checkpoint(is_last=False, timing_raw={})
    assert t.saved == [10, 12]


# The tests that show each feature of the table (docs/FIDELITY.md's last column): the library names no test.
FEATURE_TESTS: dict[str, tuple[str, ...]] = {
    "algorithm.rollout_correction": (
        "test_each_rejection_names_its_key",
        "test_supported_settings_pass",
        "test_decoupled_correction_truncates_token_is_weights_at_the_threshold",
        "test_decoupled_rejection_sampling_narrows_the_response_mask",
        "test_bypass_mode_trains_against_the_rollout_log_probs",
        "test_bypass_mode_reaches_the_workers_loss",
        "test_bypass_mode_trains_with_verls_bypass_loss",
        "test_grpo_matches_verls_trainer_with_rollout_correction_and_dumps",
    ),
    "trainer.val_only": ("test_fast_dapo_trains_crashes_and_resumes",),
    "trainer.rollout_data_dir": ("test_grpo_matches_verls_trainer_with_rollout_correction_and_dumps",),
    "global_profiler (steps, tool, profile_continuous_steps)": ("test_profile_schedule_matches_verls_loop",),
    "trainer.esi_redundant_time (expiring instances)": ("test_esi_expiry_forces_a_checkpoint",),
    "images_seqlens (multimodal)": ("test_images_seqlens_collects_image_rows_only",),
    "variance-proxy, spec-decode and GDPO metrics": (
        "test_gdpo_metrics_only_for_gdpo",
        "test_grpo_matches_verls_trainer_with_rollout_correction_and_dumps",
    ),
    "critic, use_kl_in_reward, critic_warmup, balance_batch, checkpoints": (
        "test_grpo_matches_verls_trainer_with_rollout_correction_and_dumps",
        "test_fast_dapo_trains_crashes_and_resumes",
    ),
    "distillation (teacher model)": (
        "test_each_rejection_names_its_key",
        "test_supported_settings_pass",
    ),
    "algorithm.adv_estimator=remax": (
        "test_each_rejection_names_its_key",
        "test_both_recipe_checks_reject_before_ray",
    ),
    "reward.reward_model (reward model)": (
        "test_each_rejection_names_its_key",
        "test_supported_settings_pass",
        "test_both_recipe_checks_reject_before_ray",
    ),
    "skip.rollout (rollout dump/replay)": (
        "test_each_rejection_names_its_key",
        "test_supported_settings_pass",
        "test_grpo_matches_verls_trainer_with_rollout_correction_and_dumps",
    ),
    "data.train_max_samples / data.val_max_samples": (
        "test_each_rejection_names_its_key",
        "test_supported_settings_pass",
        "test_fast_dapo_trains_crashes_and_resumes",
    ),
    "algorithm.filter_groups": ("test_each_rejection_names_its_key",),
    "algorithm.use_pf_ppo": (
        "test_each_rejection_names_its_key",
        "test_supported_settings_pass",
    ),
}


def test_every_test_the_table_names_exists():
    """The feature table (docs/FIDELITY.md) names the tests that show each row; a renamed test must not leave it
    pointing at nothing, nor a row name a feature the table does not have."""
    import re
    from pathlib import Path

    defined = set()
    for path in Path(__file__).parents[1].rglob("test_*.py"):
        defined.update(re.findall(r"^def (test_\w+)\(", path.read_text(), flags=re.M))
    named = {t for tests in FEATURE_TESTS.values() for t in tests}
    assert named and named <= defined, sorted(named - defined)
    assert set(FEATURE_TESTS) <= {f.key for f in FEATURES}, sorted(set(FEATURE_TESTS) - {f.key for f in FEATURES})


def test_docs_fidelity_page_holds_the_generated_table():
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "FIDELITY.md").read_text()
    assert feature_table_markdown(FEATURE_TESTS) in doc


# ---------------------------------------------------------------- rollout correction: the trainer's two modes
class _StepParts(ExtRayPPOTrainer):
    """The trainer's rollout-correction step parts only (no workers: bypass mode makes no actor call)."""

    def __init__(self, config):  # noqa: D107
        self.config, self.adv_config = config, None

    def _compute_old_log_prob(self, batch):
        raise AssertionError("bypass mode must not recompute the old log-probs")


def _corr_batch(seed: int = 0, rows: int = 6, length: int = 5) -> DataProto:
    g = torch.Generator().manual_seed(seed)
    mask = (torch.arange(length)[None, :] < torch.randint(1, length + 1, (rows,), generator=g)[:, None]).float()
    rollout = -torch.rand(rows, length, generator=g) * 2
    old = rollout + torch.randn(rows, length, generator=g)  # policies differ by up to a few nats per token
    return DataProto.from_dict(tensors={"rollout_log_probs": rollout, "old_log_probs": old, "response_mask": mask})


def test_decoupled_correction_truncates_token_is_weights_at_the_threshold():
    t = _StepParts(
        _ppo(
            "algorithm.rollout_correction.rollout_is=token",
            "algorithm.rollout_correction.rollout_is_threshold=2.0",
            LOG_PROBS,
        )
    )
    batch, metrics = _corr_batch(), {}
    old, rollout, mask = (batch.batch[k].clone() for k in ("old_log_probs", "rollout_log_probs", "response_mask"))
    out = t._rollout_correction(batch, metrics)
    w = out.batch["rollout_is_weights"]
    for i in range(mask.shape[0]):  # truncated IS, written out per token
        for j in range(mask.shape[1]):
            expected = min(math.exp(old[i, j] - rollout[i, j]), 2.0) if mask[i, j] else 0.0
            assert w[i, j].item() == pytest.approx(expected, rel=1e-5, abs=1e-7)
    assert (w > 1.99).any() and (w < 1.0).any()  # the draw exercises the truncation and down-weighting
    assert metrics["rollout_corr/rollout_is_max"] <= 2.0 + 1e-6 and "rollout_corr/kl" in metrics
    assert torch.equal(out.batch["response_mask"], mask)  # no rejection sampling configured


def test_decoupled_rejection_sampling_narrows_the_response_mask():
    """token_k1 with threshold 2: a token stays in training iff pi_old / pi_rollout is within [1/2, 2]."""
    t = _StepParts(
        _ppo(
            "algorithm.rollout_correction.rollout_rs=token_k1",
            "algorithm.rollout_correction.rollout_rs_threshold=2.0",
            LOG_PROBS,
        )
    )
    batch, metrics = _corr_batch(seed=1), {}
    old, rollout, mask = (batch.batch[k].clone() for k in ("old_log_probs", "rollout_log_probs", "response_mask"))
    kept = t._rollout_correction(batch, metrics).batch["response_mask"]
    ratio_ok = (old - rollout).abs() <= math.log(2.0)
    assert torch.equal(kept.bool(), mask.bool() & ratio_ok)
    assert 0 < kept.sum() < mask.sum()  # the draw rejects some tokens, not all
    assert "rollout_is_weights" not in batch.batch.keys()


def test_bypass_mode_trains_against_the_rollout_log_probs():
    t = _StepParts(
        _ppo(
            "algorithm.rollout_correction.bypass_mode=true", "algorithm.rollout_correction.rollout_is=token", LOG_PROBS
        )
    )
    batch, metrics = _corr_batch(seed=2), {}
    batch.batch.pop("old_log_probs")
    out = t._old_log_probs(batch, metrics)
    assert torch.equal(out.batch["old_log_probs"], out.batch["rollout_log_probs"])
    assert t.config.actor_rollout_ref.actor.policy_loss.loss_mode == "bypass_mode"  # verl's bypass loss
    assert t._rollout_correction(out, metrics) is out and not metrics  # the actor loss corrects, not the driver


def test_bypass_mode_reaches_the_workers_loss():
    """The actor workers build their loss from the actor config they receive at init_workers: the trainer sets the
    bypass loss there first, and the config converts, as the worker converts it, into one verl's bypass loss runs
    with (rejection sampling included)."""
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.utils.config import omega_conf_to_dataclass

    cfg = _ppo(
        "algorithm.rollout_correction.bypass_mode=true",
        "algorithm.rollout_correction.rollout_rs=token_k1",
        "algorithm.rollout_correction.rollout_rs_threshold=2.0",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",  # the worker's own conversion checks it
        LOG_PROBS,
    )
    t = _StepParts(cfg)
    t._bypass_loss_for_workers()
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)  # what the worker does with its copy
    assert actor.policy_loss.loss_mode == "bypass_mode"
    batch = _corr_batch(seed=3)
    rollout, mask = batch.batch["rollout_log_probs"], batch.batch["response_mask"]
    current = batch.batch["old_log_probs"]  # stands in for the policy being trained
    loss, metrics = get_policy_loss_fn(actor.policy_loss.loss_mode)(
        old_log_prob=rollout,
        log_prob=current,
        advantages=torch.ones_like(mask),
        response_mask=mask,
        loss_agg_mode="token-mean",
        config=actor,
    )
    assert torch.isfinite(loss) and any(k.startswith("rollout_corr/rollout_rs_token_k1") for k in metrics), metrics
    untouched = _ppo()  # without bypass mode the workers keep verl's loss
    _StepParts(untouched)._bypass_loss_for_workers()
    assert untouched.actor_rollout_ref.actor.policy_loss.loss_mode == "vanilla"
