"""The estimator registry: every name comes from registry.ALGORITHMS, every algorithm module documents itself, and
a new estimator is its module plus one entry (checked by adding two here: config, pipeline and verl all follow)."""

import inspect

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from verl_ext.advantage import AdvantageConfig, AdvantageInputs, compute_advantages, register, registry
from verl_ext.advantage import config as adv_config
from verl_ext.advantage import reference as ref
from verl_ext.advantage.base import EpisodeMode, TokenTransform
from verl_ext.advantage.estimators import ESTIMATOR_FNS, verl_function
from verl_ext.advantage.groups import group_mean
from verl_ext.config.errors import ConfigError


def test_the_names_are_the_registrys():
    assert adv_config.ESTIMATORS == ("maxrl", "gtpo", "gtpo_hicra", "gtpo_sepa", "composable")
    assert adv_config.EPISODE_MODES == ("grpo", "maxrl")
    assert adv_config.TRANSFORM_MODES == ("none", "gtpo", "gtpo_hicra", "gtpo_sepa")
    assert list(ESTIMATOR_FNS) == list(registry.estimators())
    for name, fn in ESTIMATOR_FNS.items():
        assert fn is verl_function(name)  # one object per name: verl's registry accepts it again
        assert fn.__name__ == f"compute_{name}_advantage" and fn.__doc__ == registry.estimators()[name].summary
        assert fn.__module__ == "verl_ext.advantage.estimators"


@pytest.mark.parametrize(
    "entry", [a for a in registry.ALGORITHMS if a is not registry.COMPOSABLE], ids=lambda a: a.name
)
def test_every_algorithm_module_documents_its_formula_and_assumptions(entry):
    fn = entry.apply if isinstance(entry, TokenTransform) else entry.fn
    doc = inspect.getmodule(fn).__doc__
    for part in ("Formula", "Assumptions", "Registry entry"):
        assert part in doc, f"{fn.__module__}: no {part!r} in the module docstring"


def test_registry_rejects_clashing_names():
    with pytest.raises(ValueError, match="unique"):
        registry.check(registry.ALGORITHMS + (registry.GRPO,))
    with pytest.raises(ValueError, match="'none'"):
        registry.check((TokenTransform("none", lambda w: w.u, summary=""),))


# Two new algorithms, each a function and one entry ------------------------------------------------------------
def loo_advantages(rewards, gid, n_groups):
    """Leave-one-out baseline (RLOO): r_i - mean of the other responses of its group; 0 for a group of one."""
    counts = torch.zeros(n_groups, dtype=rewards.dtype).index_add_(0, gid, torch.ones_like(rewards))[gid]
    mean = group_mean(rewards, gid, n_groups)[gid]
    return torch.where(counts > 1, counts / (counts - 1).clamp(min=1) * (rewards - mean), 0.0)


def scale_by_u(work):
    """A_i * u_t."""
    return work.u.mul_(work.episode.to(work.u.dtype).unsqueeze(-1))


LOO = EpisodeMode("loo_test", loo_advantages, summary="leave-one-out episode advantages")
SCALE = TokenTransform("scale_test", scale_by_u, summary="advantage_mode + A_i * u_t")


def loop_loo(rewards, index):
    out = []
    for i, r in enumerate(rewards):
        others = [rewards[j] for j in range(len(rewards)) if index[j] == index[i] and j != i]
        out.append(r - sum(others) / len(others) if others else 0.0)
    return out


@pytest.fixture
def extended(monkeypatch):
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

    monkeypatch.setattr(registry, "ALGORITHMS", registry.ALGORITHMS + (LOO, SCALE))
    yield
    for name in ("loo_test", "scale_test"):
        ADV_ESTIMATOR_REGISTRY.pop(name, None)


def batch(seed=0, bs=12, T=6):
    g = torch.Generator().manual_seed(seed)
    mask = (torch.arange(T)[None, :] < torch.randint(1, T + 1, (bs,), generator=g)[:, None]).long()
    rewards = torch.zeros(bs, T)
    rewards[:, 0] = torch.rand(bs, generator=g).round()
    index = np.array([f"g{i // 4}" for i in range(bs - 1)] + ["alone"], dtype=object)
    logp = -torch.empty(bs, T).exponential_(generator=g)
    return rewards, mask, index, logp


def expected(rewards, mask, index, logp, transform: bool):
    r = rewards.sum(-1).tolist()
    flat, _, _ = ref.uninformative(r, list(index))
    episode = [0.0 if f else a for a, f in zip(loop_loo(r, list(index)), flat)]
    out = []
    for i, row in enumerate(mask.tolist()):
        out.append(
            [
                episode[i] * (ref.uncertainty("surprisal", logp[i, t].item(), None) if transform else 1.0) * m
                for t, m in enumerate(row)
            ]
        )
    return out


@pytest.mark.parametrize("seed", range(3))
def test_a_new_episode_mode_and_transform_need_only_their_entries(extended, seed):
    rewards, mask, index, logp = batch(seed)
    c = AdvantageConfig.from_algorithm({"adv_estimator": "loo_test"})
    assert (c.effective_episode_mode, c.effective_transform, c.needs_log_probs) == ("loo_test", "none", False)
    got = compute_advantages(c, AdvantageInputs(rewards, mask, index))
    np.testing.assert_allclose(got.tolist(), expected(rewards, mask, index, logp, False), atol=1e-6)

    c = AdvantageConfig.from_algorithm({"adv_estimator": "scale_test", "advantage_mode": "loo_test"})
    assert (c.effective_episode_mode, c.effective_transform, c.needs_log_probs) == ("loo_test", "scale_test", True)
    got = compute_advantages(c, AdvantageInputs(rewards, mask, index, old_log_probs=logp))
    np.testing.assert_allclose(got.tolist(), expected(rewards, mask, index, logp, True), rtol=1e-5, atol=1e-6)
    c = AdvantageConfig.from_algorithm({"adv_estimator": "composable", "transform_mode": "scale_test"})
    assert c.effective_transform == "scale_test"

    with pytest.raises(ConfigError, match="adv_estimator=loo_test takes no"):
        AdvantageConfig.from_algorithm({"adv_estimator": "loo_test", "advantage_mode": "grpo"})
    with pytest.raises(ConfigError, match="adv_estimator=scale_test contradicts transform_mode=gtpo"):
        AdvantageConfig.from_algorithm({"adv_estimator": "scale_test", "transform_mode": "gtpo"})


def test_a_new_estimator_is_registered_in_verl(extended):
    from verl import DataProto
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn
    from verl.trainer.ppo.ray_trainer import compute_advantage

    register()
    register()  # idempotent with the new names too
    rewards, mask, index, logp = batch(5)
    assert get_adv_estimator_fn("loo_test") is verl_function("loo_test")
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask}, non_tensors={"uid": index}
    )
    config = OmegaConf.create({"adv_estimator": "loo_test", "gamma": 1.0, "lam": 1.0})
    out = compute_advantage(data, adv_estimator="loo_test", config=config)
    np.testing.assert_allclose(out.batch["advantages"].tolist(), expected(rewards, mask, index, logp, False), atol=1e-6)
    adv, _ = get_adv_estimator_fn("scale_test")(
        rewards, mask, index, config={"advantage_mode": "loo_test"}, old_log_probs=logp, step=2
    )
    np.testing.assert_allclose(adv.tolist(), expected(rewards, mask, index, logp, True), rtol=1e-5, atol=1e-6)


def test_inputs_from_verls_keywords():
    r, m = torch.zeros(2, 3), torch.ones(2, 3)
    inputs = AdvantageInputs.from_verl(r, m, ["a", "a"], {"step": None, "reward_baselines": 1, "sepa_lambda": 0.5})
    assert (inputs.step, inputs.sepa_lambda, inputs.old_log_probs, inputs.planning_mask) == (0, 0.5, None, None)
    assert AdvantageInputs.from_verl(r, m, ["a", "a"], {"step": 7}).step == 7
    with pytest.raises(AttributeError):
        inputs.step = 3  # frozen
