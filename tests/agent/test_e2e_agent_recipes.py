"""The calculator-tool agent (openai client only) through the gateway with fast DAPO, 2 steps on CPU (curriculum over
agent episodes). The same agent with the Composer (SDPO error sites from the environment's per-step metadata) trains
in the frameworks run (`test_e2e_frameworks.py`: one verl start-up for both)."""

from __future__ import annotations

import math

import pytest

from tests.agent.tasks import write_tasks
from tests.agent.test_e2e_agent_grpo import CALC, agent_overrides
from tests.conftest import e2e_config, run_task_runner
from verl_ext.metrics_log import read_jsonl

pytestmark = pytest.mark.e2e


def check_ledger(tmp_path, rows):
    ledger = read_jsonl(tmp_path / "episodes.jsonl")
    assert [e["step"] for e in ledger] == [r["step"] for r in rows]
    ids = [i for e in ledger for i in [*e["trained"], *e["dropped"]]]
    assert len(ids) == len(set(ids))  # no episode twice
    for e, r in zip(ledger, rows, strict=True):
        assert len(e["trained"]) == r["agent/ok"] and len(e["trained"]) + len(e["dropped"]) == r["agent/episodes"]


def test_calc_agent_fast_dapo(ray_cpu, tiny_assets, tmp_path):
    from recipe.fast_dapo.config_check import prepare_config
    from verl_ext.toy.resolvers import register_resolvers
    from verl_ext.trainer.task_runner import ExtTaskRunner

    register_resolvers()
    tasks = write_tasks(tiny_assets.train_file, tmp_path / "tasks.parquet", 32)
    cfg = e2e_config(
        "fast_dapo",
        [
            "+preset=tiny",
            "data.train_batch_size=2",
            "data.gen_batch_size=4",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.rollout.n_continue=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
            "curriculum.max_num_gen_batches=8",
            "trainer.total_training_steps=2",
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
            f"trainer.default_local_dir={tmp_path / 'ckpt'}",
            "trainer.plot_keys=[]",
            "trainer.trainer_cls=recipe.fast_dapo.fast_dapo_ray_trainer.AgentFastDAPOTrainer",
        ]
        + agent_overrides(tmp_path, tasks, CALC, response_length=128),
        config_module="recipe.fast_dapo.config",
    )
    prepare_config(cfg)
    run_task_runner(ExtTaskRunner, cfg)
    rows = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["agent/episodes"] == 2 * 4 and r["curriculum/train_batch_groups"] == 2
        assert r["curriculum/train_groups_mixed_frac"] == 1.0  # fast DAPO trains on mixed groups of episodes only
        assert math.isfinite(r["actor/grad_norm"]) and r["agent/policy_tokens_mean"] > 0
        # Kept prompts' screening episodes train after later updates (fast DAPO's design), so only the on-policy
        # rows' rollout/actor gap is the gateway's: it must be the numeric one.
        assert r.get("curriculum/probs_diff_max_onpolicy", 0.0) < 0.05, r.get("curriculum/probs_diff_max_onpolicy")
    check_ledger(tmp_path, rows)
