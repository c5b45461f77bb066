"""Agents written with real frameworks, and the calculator agent whose environment marks its tool errors, train with
the Composer (GRPO + SDPO in its sampled-token form) through the gateway in front of verl's own vLLM-CPU rollout
servers: 2 steps, sync (on-policy), in ONE run whose tasks cycle through five agents (`tests/agent/agents/agent_mix.py`
starts the unmodified example module, or the test agent, that the task names): the OpenAI Agents SDK agent,
LangGraph's prebuilt ReAct agent, the guess agent (plain chat completions, two rounds), a one-round agent that sends
`stop` and `logprobs` through the plain openai client (`tests/agent/agents/stop_copy.py`), so verl's vLLM server is
shown to stop there, and the calculator agent (`verl_ext.agent.examples.calc_agent`), whose per-step metadata makes
the Composer's SDPO error sites (a tool error or a wrong answer after assistant turn t puts a hint before turn t + 1;
"Recipe B": the hint-conditioned teacher's log-probs of the sampled tokens shape the advantages; the full-logit form,
the default, trains end to end in tests/recipe/composer/test_e2e_composer_real.py). One run for all five keeps CI
time down (one verl start-up instead of two); the tiny model has the project's chat template (tools rendered for the
agents that send tools). The frameworks' tool calls are checked through the gateway in `test_frameworks.py` (the tiny
model does not write tool calls of its own): their episodes here are one round, score 0 (the tiny model, warmed up
without a tools block, does not answer the task under one), so for them the run checks the plumbing (episodes,
masks, log-probs, drift), not learning."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from tests.agent.tasks import write_tasks
from tests.agent.test_e2e_agent_grpo import check_common
from tests.agent.test_e2e_agent_recipes import check_ledger
from tests.conftest import e2e_config, run_task_runner, tiny_run_overrides
from verl_ext.agent.gateway.core import SPLIT_REASONS
from verl_ext.metrics_log import read_jsonl

pytestmark = pytest.mark.e2e

MIX = f"{sys.executable} {Path(__file__).parent / 'agents' / 'agent_mix.py'}"
# the calculator twice in each cycle: its episodes are the ones that make SDPO's error sites
AGENTS = ("openai_agents_sdk", "langgraph_react", "guess", "stop_copy", "calc", "calc")
TASKS, BATCH = 12, 6  # one epoch in the 2 steps: each agent's tasks once, 4 episodes each
EPISODES = BATCH * 4


def test_framework_agents_train_with_the_composer(ray_cpu, tiny_assets, tool_model_dir, tmp_path):
    from verl_ext.trainer.task_runner import ExtTaskRunner

    # 6 tasks per step x 4 episodes. Each episode is a process forked from a server that imported the mix's command
    # (the frameworks are imported in the episode: seconds of CPU each), so the batch is kept small.
    stop_logs = tmp_path / "stop_replies"
    stop_logs.mkdir()
    extra = [{"agent": AGENTS[i % len(AGENTS)]} for i in range(TASKS)]
    for e in extra:
        if e["agent"] == "stop_copy":
            e["stop_log_dir"] = str(stop_logs)
    tasks = write_tasks(tiny_assets.train_file, tmp_path / "tasks.parquet", TASKS, extra=extra)
    cfg = e2e_config(
        "composer",
        tiny_run_overrides(tiny_assets, tmp_path, steps=2)
        + [
            "+arm=sdpo",
            "composer.sdpo.form=sampled_token",
            "trainer.trainer_cls=recipe.composer.composer_ray_trainer.AgentComposerTrainer",
            f"actor_rollout_ref.model.path={tool_model_dir}",
            f"data.train_files={tasks}",
            f"data.val_files={tasks}",
            f"data.train_batch_size={BATCH}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={BATCH}",
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
        ],
        config_module="recipe.composer.config",
    )
    run_task_runner(ExtTaskRunner, cfg, timeout=1800)
    rows = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    ledger = check_common(tmp_path, rows, EPISODES)  # every episode of the five agents trained, token-true log-probs
    check_ledger(tmp_path, rows)
    # sync: every episode was sampled by the weights its step trains
    assert all(r["agent/staleness_max"] == 0 for r in rows)
    assert all(set(e["staleness"].values()) == {0} for e in ledger)
    for r in rows:
        # no episode's history drifted: every later round extended its prefix, no split of any kind
        assert all(r[f"agent/drift/split/{k}"] == 0 for k in SPLIT_REASONS), r
        assert r["agent/drift/extended"] == pytest.approx(EPISODES * (r["agent/rounds_mean"] - 1)), r
    summary = json.loads((tmp_path / "drift_summary.json").read_text())
    assert summary["drift/splits_per_1k_rounds"] == 0.0
    check_stop_replies(stop_logs, n=8)  # the 2 stop tasks x 4 episodes
    check_sdpo(rows, cfg.algorithm.alpha_sdpo)


def check_sdpo(rows: list[dict], alpha: float):
    """The Composer's SDPO channel in its sampled-token form, its error sites from the calculator's step metadata."""
    for r in rows:
        for key in ("loss/grpo", "loss/sdpo", "loss/total", "actor/grad_norm"):
            assert math.isfinite(float(r[key])), (r["step"], key)
        assert r["training/rollout_probs_diff_max"] < 0.05
        # no teacher pool (beta_replay = 0), and no actor loss term: the total is GRPO's plus the sampled-token term
        assert r["loss/replay_dpo"] == 0 and "teacher/calls" not in r
        assert r["loss/total"] == pytest.approx(r["loss/grpo"] + alpha * r["loss/sdpo"])
        # the sampled-token estimate of KL(student || teacher) is non-zero where there are sites: the hint moves it
        assert (r["loss/sdpo"] != 0) == (r["sdpo/error_sites"] > 0), r
    # The tiny model's answers are often wrong; the calculator's `wrong_answer` step metadata makes the retry turn an
    # SDPO error site (the hint goes before it).
    assert sum(r["sdpo/error_sites"] for r in rows) > 0 and sum(r["sdpo/tokens"] for r in rows) > 0


def check_stop_replies(log_dir: Path, n: int):
    """`stop` reached verl's vLLM server and it stopped there: the returned tokens (one per sampled id, with the
    rollout's log-probs) end with the one that completed the stop string, and no end-of-turn token was sampled after
    it (the tiny model writes `\\boxed{d}<|im_end|>`: an engine that ignored `stop` would sample `<|im_end|>`). The
    reply's text is the sampled text cut before the stop string, as OpenAI returns it."""
    replies = [json.loads(p.read_text()) for p in sorted(log_dir.glob("*.json"))]
    assert len(replies) == n
    stopped = [r for r in replies if "}" in "".join(r["tokens"])]
    assert len(stopped) >= n // 2, replies  # the warmed-up model closes its \\boxed{} in most replies
    for r in stopped:
        text = "".join(r["tokens"])
        assert "}" in r["tokens"][-1] and text.index("}") >= len(text) - len(r["tokens"][-1]), r
        assert "<|im_end|>" not in r["tokens"], r
        assert r["finish_reason"] == "stop" and r["content"] == text[: text.index("}")], r
