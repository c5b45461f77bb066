"""Plugins by dotted path: the four kinds, their call forms, and errors at validation and at call time."""

import sys
import textwrap

import numpy as np
import pytest
import torch

from verl_ext.advantage import AdvantageConfig, AdvantageInputs, PluginError, compute_advantages
from verl_ext.advantage import reference as ref

PLUGINS = """
import torch
from verl_ext.advantage import TransformOutput, AlgorithmOutput, episode_vectorized

def hipa_like(rewards):                      # a HIPA-like episode plugin
    if not rewards:
        return []
    mean_r = sum(rewards) / len(rewards)
    return [2.0 * (r - mean_r) for r in rewards]

def scaled(rewards, params):
    return [float(params.get("scale", 1.0)) * r for r in rewards]

@episode_vectorized
def vec_centered(rewards, group_ids, params):
    sums = torch.zeros(int(group_ids.max()) + 1, dtype=rewards.dtype).index_add_(0, group_ids, rewards)
    counts = torch.bincount(group_ids).to(rewards.dtype)
    return rewards - (sums / counts)[group_ids]

def my_transform(ctx):                        # a list-form plugin
    scale = float(ctx.params.get("scale", 1.0))
    token_advs = []
    for i, logprobs in enumerate(ctx.logprobs_G):
        token_advs.append([ctx.episode_advantages[i] * scale for _ in logprobs])
    return TransformOutput(token_advs=token_advs, extra_metrics={"my_scale": scale})

def tensor_transform(ctx):
    return ctx.hicra(ctx.gtpo(ctx.sepa_pool()))
tensor_transform.needs_planning = True
tensor_transform.uses_sepa_controller = True

def whole(ctx):
    return AlgorithmOutput(token_advs=ctx.rewards[:, None].float() * ctx.response_mask, extra_metrics={"n": 1.0})

def neg_logp(log_probs, entropys, mask, params):
    return -log_probs * float(params.get("k", 1.0))

def wrong_shape_transform(ctx):
    return torch.zeros(3, 3)

def short_rows(ctx):
    return [[1.0] for _ in ctx.logprobs_G]

def nan_episode(rewards):
    return [float("nan")] * len(rewards)

def too_few(rewards):
    return rewards[:-1]

def two_args(a, b):
    return a

def no_args():
    return []

NOT_CALLABLE = 3
"""


@pytest.fixture(scope="module", autouse=True)
def plugin_module(tmp_path_factory):
    root = tmp_path_factory.mktemp("plugins")
    (root / "adv_test_plugins.py").write_text(textwrap.dedent(PLUGINS))
    (root / "adv_broken_plugin.py").write_text("raise RuntimeError('boom at import')\n")
    sys.path.insert(0, str(root))
    yield
    sys.path.remove(str(root))


def batch(seed=0, bs=12, T=8):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, T + 1, (bs,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    rewards = torch.zeros(bs, T)
    rewards[:, 0] = torch.rand(bs, generator=g).round()
    index = np.array([f"g{i // 4}" for i in range(bs)], dtype=object)
    logp = -torch.empty(bs, T).exponential_(generator=g)
    plan = (torch.rand(bs, T, generator=g) < 0.3) & mask.bool()
    return rewards, mask, index, logp, plan


def run(cfg, estimator="composable", **kwargs):
    rewards, mask, index, logp, plan = batch()
    config = AdvantageConfig.from_algorithm(cfg, adv_estimator=estimator)
    metrics = kwargs.pop("metrics", None)
    inputs = AdvantageInputs(rewards, mask, index, old_log_probs=logp, planning_mask=plan, **kwargs)
    return compute_advantages(config, inputs, metrics=metrics), batch()


def plain_episode(values_per_response, mask):
    return [[v * m for m in row] for v, row in zip(values_per_response, mask.tolist())]


def test_episode_plugin_per_group_like_the_seed():
    got, (rewards, mask, index, _, _) = run({"advantage_mode": "adv_test_plugins.hipa_like"})
    r = rewards.sum(-1).tolist()
    flat, _, _ = ref.uninformative(r, list(index))
    expected = [0.0 if f else 2.0 * a for a, f in zip(ref.grpo(r, list(index)), flat)]
    np.testing.assert_allclose(got.tolist(), plain_episode(expected, mask), atol=1e-6)


def test_episode_plugin_with_params_and_vectorised_form():
    cfg = {"advantage_mode": "adv_test_plugins.scaled", "advantage_params": {"scale": 3}}
    got, (rewards, mask, index, _, _) = run(cfg)
    r = rewards.sum(-1).tolist()
    flat, _, _ = ref.uninformative(r, list(index))
    expected = plain_episode([0.0 if f else 3 * x for x, f in zip(r, flat)], mask)
    np.testing.assert_allclose(got.tolist(), expected, atol=1e-6)
    got_vec, _ = run({"advantage_mode": "adv_test_plugins.vec_centered"})
    got_grpo, _ = run({"advantage_mode": "grpo"})
    torch.testing.assert_close(got_vec, got_grpo)


def test_transform_plugin_seed_example_with_ragged_lists_and_metrics():
    metrics = {}
    cfg = {"transform_mode": "adv_test_plugins.my_transform", "transform_params": {"scale": 2.0}}
    got, _ = run(cfg, metrics=metrics)
    maxrl, _ = run({"transform_mode": "none"})
    torch.testing.assert_close(got, 2.0 * maxrl)
    assert metrics["adv/my_scale"] == 2.0 and "adv/exec_u_mean_before" in metrics


def test_transform_plugin_using_context_helpers_equals_builtin_chain():
    cfg = {"transform_mode": "adv_test_plugins.tensor_transform"}
    config = AdvantageConfig.from_algorithm(cfg, adv_estimator="composable")
    assert config.needs_planning and config.uses_sepa
    got, (rewards, mask, index, logp, plan) = run(cfg, sepa_lambda=0.5)
    # ctx.hicra(ctx.gtpo(ctx.sepa_pool())) in plain loops
    r = rewards.sum(-1).tolist()
    episode = ref.maxrl(r, list(index))
    flat, _, _ = ref.uninformative(r, list(index))
    expected = []
    for i in range(len(r)):
        pos = [t for t in range(mask.shape[1]) if mask[i, t]]
        u = ref.sepa([min(-float(logp[i, t]), 50) for t in pos], [int(plan[i, t]) for t in pos], 0.5)
        values = ref.hicra(ref.gtpo(0.0 if flat[i] else episode[i], u, 0.1), [int(plan[i, t]) for t in pos], 0.2)
        row = [0.0] * mask.shape[1]
        for t, v in zip(pos, values):
            row[t] = v
        expected.append(row)
    np.testing.assert_allclose(got.tolist(), expected, rtol=2e-5, atol=1e-6)
    with pytest.raises(ValueError, match="sepa_lambda"):
        run(cfg)


def test_algorithm_plugin_wins_over_modes():
    metrics = {}
    got, (rewards, mask, _, _, _) = run(
        {"algorithm_mode": "adv_test_plugins.whole", "advantage_mode": "grpo", "transform_mode": "gtpo"},
        metrics=metrics,
    )
    torch.testing.assert_close(got, rewards.sum(-1, keepdim=True) * mask)
    assert metrics["adv/n"] == 1.0


def test_uncertainty_plugin_receives_params():
    a, _ = run(
        {"transform_mode": "gtpo", "uncertainty_kind": "adv_test_plugins.neg_logp", "transform_params": {"k": 1.0}}
    )
    b, _ = run({"transform_mode": "gtpo", "uncertainty_kind": "surprisal"})
    torch.testing.assert_close(a, b)


@pytest.mark.parametrize(
    "cfg, message",
    [
        ({"advantage_mode": "no_such_pkg.fn"}, r"advantage_mode='no_such_pkg.fn': cannot import module 'no_such_pkg'"),
        (
            {"transform_mode": "adv_broken_plugin.fn"},
            r"cannot import module 'adv_broken_plugin': RuntimeError: boom at import",
        ),
        ({"transform_mode": "adv_test_plugins.missing"}, r"module 'adv_test_plugins' has no attribute 'missing'"),
        ({"algorithm_mode": "adv_test_plugins.NOT_CALLABLE"}, r"'NOT_CALLABLE' is a int, not a function"),
        (
            {"advantage_mode": "adv_test_plugins.two_args"},
            r"advantage_mode='adv_test_plugins.two_args': \(a, b\) cannot be called as fn\(rewards\)",
        ),
        (
            {"transform_mode": "adv_test_plugins.no_args"},
            r"transform_mode='adv_test_plugins.no_args': \(\) cannot be called as fn\(ctx\)",
        ),
        (
            {"transform_mode": "gtpo", "uncertainty_kind": "adv_test_plugins.hipa_like"},
            r"uncertainty_kind='adv_test_plugins.hipa_like'.*fn\(log_probs, entropys, mask, params\)",
        ),
    ],
)
def test_bad_plugins_fail_at_validation_naming_path_and_reason(cfg, message):
    with pytest.raises(PluginError, match=message):
        AdvantageConfig.from_algorithm({**cfg, "adv_estimator": "composable"})


@pytest.mark.parametrize(
    "cfg, message",
    [
        (
            {"transform_mode": "adv_test_plugins.wrong_shape_transform"},
            r"wrong_shape_transform'.*shape \(3, 3\), expected \(12, 8\)",
        ),
        (
            {"transform_mode": "adv_test_plugins.short_rows"},
            r"short_rows'.*1 token advantages for response \d+, expected \d+",
        ),
        ({"advantage_mode": "adv_test_plugins.nan_episode"}, r"nan_episode'.*non-finite"),
        ({"advantage_mode": "adv_test_plugins.too_few"}, r"too_few'.*returned 3 advantages for a group of 4"),
    ],
)
def test_bad_plugin_outputs_fail_at_call_time(cfg, message):
    with pytest.raises(ValueError, match=message):
        run(cfg)
