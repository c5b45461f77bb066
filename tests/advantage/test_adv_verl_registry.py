"""The estimators inside verl: registration, verl's own compute_advantage on a DataProto, the registry call with
the project trainer's keyword arguments, and the errors a stock trainer gets."""

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.config import AlgoConfig
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, get_adv_estimator_fn
from verl.trainer.ppo.ray_trainer import compute_advantage
from verl.utils.config import omega_conf_to_dataclass

from verl_ext.advantage import DEFAULT_STRATEGIC_GRAMS, register, validate_algorithm_config
from verl_ext.advantage import reference as ref

NAMES = ["maxrl", "gtpo", "gtpo_hicra", "gtpo_sepa", "composable"]


@pytest.fixture(scope="module", autouse=True)
def registered():
    register()
    register()  # idempotent


def batch(seed=0, bs=8, T=6):
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(bs, T, dtype=torch.long)
    mask[1, 3:] = 0
    mask[2] = 0
    rewards = torch.zeros(bs, T)
    rewards[:, 0] = torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 1])
    index = np.array(["a", "a", "a", "a", "b", "b", "c", "d"], dtype=object)
    logp = -torch.empty(bs, T).exponential_(generator=g)
    plan = torch.zeros(bs, T, dtype=torch.bool)
    plan[0, 1:3] = True
    return rewards, mask, index, logp, plan


def dataproto(rewards, mask, index):
    tensors = {"token_level_rewards": rewards, "response_mask": mask}
    return DataProto.from_dict(tensors=tensors, non_tensors={"uid": index})


def algorithm_section(**extra):
    """verl's algorithm section as the trainer holds it: an OmegaConf DictConfig, `+` keys merged in."""
    base = OmegaConf.create(
        {
            "_target_": "verl.trainer.config.AlgoConfig",
            "gamma": 1.0,
            "lam": 1.0,
            "adv_estimator": "gae",
            "norm_adv_by_std_in_grpo": False,
        }
    )
    return OmegaConf.merge(base, OmegaConf.create(extra))


def test_all_names_registered_and_grpo_untouched():
    from verl.trainer.ppo import core_algos

    for name in NAMES:
        assert get_adv_estimator_fn(name).__module__ == "verl_ext.advantage.estimators"
    assert ADV_ESTIMATOR_REGISTRY["grpo"] is core_algos.compute_grpo_outcome_advantage


def test_verls_compute_advantage_runs_maxrl_on_a_dataproto():
    rewards, mask, index, _, _ = batch()
    data = dataproto(rewards, mask, index)
    config = algorithm_section(adv_estimator="maxrl")
    out = compute_advantage(data, adv_estimator="maxrl", config=config)
    expected = ref.pipeline(rewards.tolist(), mask.tolist(), list(index), advantage_mode="maxrl")
    np.testing.assert_allclose(out.batch["advantages"].tolist(), expected, rtol=1e-6, atol=1e-7)
    assert torch.equal(out.batch["returns"], out.batch["advantages"])


@pytest.mark.parametrize("name", ["gtpo", "gtpo_hicra", "gtpo_sepa"])
def test_stock_trainer_call_fails_naming_the_project_trainer(name):
    rewards, mask, index, _, _ = batch()
    data = dataproto(rewards, mask, index)
    with pytest.raises(ValueError, match=r"old_log_probs.*verl_ext\.trainer\.ExtRayPPOTrainer"):
        compute_advantage(data, adv_estimator=name, config=algorithm_section(adv_estimator=name))


@pytest.mark.parametrize("config_form", ["dictconfig", "algoconfig", "none"])
def test_token_level_call_as_the_project_trainer_makes_it(config_form):
    rewards, mask, index, logp, plan = batch()
    cfg = algorithm_section(adv_estimator="gtpo_hicra", gtpo_beta=0.1, hicra_alpha=0.2)
    config = {
        "dictconfig": cfg,
        "algoconfig": omega_conf_to_dataclass(algorithm_section(adv_estimator="gtpo_hicra")),
        "none": None,
    }[config_form]
    metrics = {}
    adv, ret = get_adv_estimator_fn("gtpo_hicra")(
        token_level_rewards=rewards,
        response_mask=mask,
        index=index,
        config=config,
        old_log_probs=logp,
        planning_mask=plan,
        step=3,
        metrics=metrics,
        reward_baselines=None,
    )
    expected = ref.pipeline(
        rewards.tolist(),
        mask.tolist(),
        list(index),
        transform="gtpo_hicra",
        logprobs=logp.tolist(),
        plan=plan.int().tolist(),
    )
    np.testing.assert_allclose(adv.tolist(), expected, rtol=2e-5, atol=1e-6)
    assert ret is adv
    assert metrics["adv/skipped_all_correct"] == 3.0 and metrics["adv/skipped_all_wrong"] == 0.0
    assert metrics["adv/planning_token_frac"] == pytest.approx(2 / int(mask.sum()))


def test_algoconfig_dataclass_is_read_with_defaults():
    config = omega_conf_to_dataclass(algorithm_section(adv_estimator="maxrl"))
    assert isinstance(config, AlgoConfig)
    rewards, mask, index, _, _ = batch()
    adv, _ = get_adv_estimator_fn("maxrl")(rewards, mask, index, config=config)
    assert adv[0, 0] == pytest.approx((1 - 0.25) / (0.25 + 1e-6))


def test_plus_keys_from_the_command_line_reach_the_estimator():
    from hydra import compose, initialize_config_module

    overrides = [
        "algorithm.adv_estimator=composable",
        "+algorithm.transform_mode=gtpo",
        "+algorithm.gtpo_beta=0.0",
        "+algorithm.sepa.steps=10",
        "+algorithm.strategic_grams=[wait let me,notice that]",
    ]
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        algorithm = compose("ppo_trainer", overrides=overrides).algorithm  # verl's real config, as main_ppo builds it
    config = validate_algorithm_config(algorithm)
    assert (config.effective_transform, config.gtpo_beta, config.sepa.steps) == ("gtpo", 0.0, 10)
    assert config.strategic_grams == ("wait let me", "notice that")
    rewards, mask, index, logp, _ = batch()
    adv, _ = get_adv_estimator_fn("composable")(rewards, mask, index, config=algorithm, old_log_probs=logp)
    expected = ref.pipeline(
        rewards.tolist(), mask.tolist(), list(index), transform="gtpo", logprobs=logp.tolist(), beta=0.0
    )
    np.testing.assert_allclose(adv.tolist(), expected, rtol=1e-6, atol=1e-7)


def test_missing_inputs_have_clear_errors():
    rewards, mask, index, logp, plan = batch()
    fn = get_adv_estimator_fn("gtpo_sepa")
    with pytest.raises(ValueError, match="sepa_lambda.*SepaController"):
        fn(rewards, mask, index, config=None, old_log_probs=logp, planning_mask=plan)
    with pytest.raises(ValueError, match="planning_mask"):
        fn(rewards, mask, index, config=None, old_log_probs=logp, sepa_lambda=0.5)
    cfg = algorithm_section(adv_estimator="gtpo", uncertainty_kind="shannon_entropy")
    with pytest.raises(ValueError, match="entropys.*never replaced by surprisal"):
        get_adv_estimator_fn("gtpo")(rewards, mask, index, config=cfg, old_log_probs=logp)
    with pytest.raises(ValueError, match="index"):
        get_adv_estimator_fn("maxrl")(rewards, mask, config=None)


def test_planning_mask_is_detected_from_responses_with_a_tokenizer(tiny_tokenizer):
    texts = ["Wait, let me check it", "so the answer is 4", "Notice that x is 2", "plain"]
    ids = [tiny_tokenizer(t)["input_ids"] for t in texts]
    T = max(map(len, ids))
    responses = torch.full((4, T), tiny_tokenizer.pad_token_id)
    mask = torch.zeros(4, T, dtype=torch.long)
    for i, row in enumerate(ids):
        responses[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    rewards = torch.zeros(4, T)
    rewards[:2, 0] = 1.0
    index = np.array(["a", "a", "b", "b"], dtype=object)
    logp = torch.full((4, T), -0.5)
    metrics = {}
    get_adv_estimator_fn("gtpo_hicra")(
        rewards,
        mask,
        index,
        config=None,
        old_log_probs=logp,
        tokenizer=tiny_tokenizer,
        responses=responses,
        metrics=metrics,
    )
    grams = list(DEFAULT_STRATEGIC_GRAMS)
    n_plan = sum(
        sum(ref.planning_tokens(tiny_tokenizer, r.tolist(), m.tolist(), grams)) for r, m in zip(responses, mask)
    )
    assert n_plan > 0
    assert metrics["adv/planning_token_frac"] == pytest.approx(n_plan / int(mask.sum()))
