"""The calculator-tool agent (openai client only) through the gateway with the project's two recipes, 2 steps each
on CPU: fast DAPO (curriculum over agent episodes) and the Composer (SDPO error sites from the environment's
per-step metadata: a tool error after assistant turn t puts a hint before turn t + 1), the latter in SDPO's
sampled-token form ("Recipe B": the hint-conditioned teacher's log-probs of the sampled tokens shape the advantages;
the full-logit form, the default, trains end to end in tests/recipe/composer/test_e2e_composer_real.py)."""

from __future__ import annotations

import math

import pytest

from tests.agent.tasks import write_tasks
from tests.agent.test_e2e_agent_grpo import CALC, agent_overrides
from tests.conftest import e2e_config, run_task_runner, tiny_run_overrides
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


def test_calc_agent_composer_sdpo_from_step_metas(ray_cpu, tiny_assets, tmp_path):
    from verl_ext.trainer.task_runner import ExtTaskRunner

    tasks = write_tasks(tiny_assets.train_file, tmp_path / "tasks.parquet", 8)
    cfg = e2e_config(
        "composer",
        tiny_run_overrides(tiny_assets, tmp_path, 2)
        + [
            "+arm=sdpo",
            "composer.sdpo.form=sampled_token",
            "trainer.trainer_cls=recipe.composer.composer_ray_trainer.AgentComposerTrainer",
        ]
        + agent_overrides(tmp_path, tasks, CALC, response_length=128),
        config_module="recipe.composer.config",
    )
    run_task_runner(ExtTaskRunner, cfg)
    rows = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        for key in ("loss/grpo", "loss/sdpo", "loss/total", "actor/grad_norm"):
            assert math.isfinite(float(r[key])), (r["step"], key)
        assert r["agent/episodes"] == 16
        assert r["training/rollout_probs_diff_max"] < 0.05
        # no teacher pool (beta_replay = 0), and no actor loss term: the total is GRPO's plus the sampled-token term
        assert r["loss/replay_dpo"] == 0 and "teacher/calls" not in r
        assert r["loss/total"] == pytest.approx(r["loss/grpo"] + cfg.algorithm.alpha_sdpo * r["loss/sdpo"])
        # the sampled-token estimate of KL(student || teacher) is non-zero where there are sites: the hint moves it
        assert (r["loss/sdpo"] != 0) == (r["sdpo/error_sites"] > 0), r
    # The tiny model's answers are often wrong; the environment's `wrong_answer` step metadata makes the retry turn
    # an SDPO error site (the hint goes before it).
    assert sum(r["sdpo/error_sites"] for r in rows) > 0 and sum(r["sdpo/tokens"] for r in rows) > 0
    check_ledger(tmp_path, rows)
