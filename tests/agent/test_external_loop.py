"""The `external_agent` loop's row for one finished episode (`ExternalAgentLoop.run`): the trained segment cut to the
response length or, for a dropped episode, a placeholder on the task's prompt; the status columns; the agent's
reward under `score_source=agent`. The episode itself is a stand-in for `agent_process.run_episode` (what that
returns is tested in test_faults.py), so no gateway, agent process or Ray runs here."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from verl_ext.agent import external_loop
from verl_ext.agent.agent_process import EpisodeResult
from verl_ext.agent.episode import Outcome, Status
from verl_ext.agent.gateway.core import Session
from verl_ext.agent.trajectory import Round, Segment

ASSISTANT_CALL = {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "calc"}}]}
HISTORY = [
    {"role": "user", "content": "What is 2+3?"},
    ASSISTANT_CALL,
    {"role": "tool", "content": "5"},
    {"role": "assistant", "content": "\\boxed{5}"},
]
TASK = {"raw_prompt": [{"role": "user", "content": "What is 2+3?"}], "reward_model": {"ground_truth": "5"}}


def _loop(tok, score_source: str, prompt_length: int, response_length: int = 4):
    cfg = OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {"response_length": response_length, "prompt_length": prompt_length},
                "model": {"path": "m"},
            },
            "external_agent": {"command": "true", "score_source": score_source},
        }
    )
    wrap = SimpleNamespace
    return external_loop.ExternalAgentLoop(
        trainer_config=wrap(config=cfg),
        server_manager=None,
        tokenizer=tok,
        processor=None,
        dataset_cls=None,
        data_config=wrap(config=OmegaConf.create({})),
    )


def _run(monkeypatch, tok, result: EpisodeResult, *, score_source: str, logprobs: bool, prompt_length: int = 3):
    async def episode(gw, settings, task, sampling_params):
        assert task["prompt"] == TASK["raw_prompt"] and "raw_prompt" not in task
        return result

    async def gateway():
        return None

    async def run():
        loop = _loop(tok, score_source, prompt_length=prompt_length)  # verl's agent loop keeps the running loop
        monkeypatch.setattr(loop, "_gateway", gateway)
        return await loop.run({"logprobs": logprobs}, **TASK)

    monkeypatch.setattr(external_loop, "run_episode", episode)
    return asyncio.run(run())


def _result(status: Status, segment, session: Session, use_agent_score: bool = True) -> EpisodeResult:
    outcome = Outcome(status, segment, n_segments=1 if segment else 0, use_agent_score=use_agent_score)
    return EpisodeResult(session, outcome, exit_code=0, timed_out=False, stderr="", wall_s=1.5)


def test_a_trained_episode_gives_its_segment_cut_to_the_lengths_and_the_agents_reward(monkeypatch, tiny_tokenizer):
    session = Session("ep1", {}, rounds=[Round([1, 2, 3, 4], [5, 6], [-0.1, -0.2], policy_version=7)])
    session.history = HISTORY
    session.score = {"score": 1.0, "acc": 1.0, "step_metas": [None, {"error_kind": "tool_error"}]}
    segment = Segment(
        [1, 2, 3, 4], [5, 6, 7, 8, 9, 10], [1, 1, 0, 0, 1, 1], [-0.1, -0.2, 0, 0, -0.3, -0.4], n_rounds=1, min_version=7
    )
    out = _run(monkeypatch, tiny_tokenizer, _result(Status.OK, segment, session), score_source="agent", logprobs=True)
    assert (out.prompt_ids, out.response_ids, out.response_mask) == ([2, 3, 4], [5, 6, 7, 8], [1, 1, 0, 0])
    assert out.response_logprobs == [-0.1, -0.2, 0, 0]
    assert (out.reward_score, out.num_turns, out.metrics.generate_sequences) == (1.0, 2, 1.5)
    extra = out.extra_fields
    assert extra["reward_extra_info"] == {"score": 1.0, "acc": 1.0, "tool_call": 1.0, "tool_result_in_answer": 1.0}
    assert extra["step_metas"] == session.score["step_metas"]
    assert {k: v for k, v in extra.items() if k not in ("reward_extra_info", "step_metas")} == {
        "agent_episode_id": "ep1",
        "agent_status": "ok",
        "agent_rounds": 1,
        "agent_segments": 1,
        "agent_drift": json.dumps({"extended": 0, "split": {}, "tool_faults": {}}),
        "agent_wall_s": 1.5,
        "agent_policy_version": 7,
        "agent_tool_calls": 1,
        "agent_tool_result_in_answer": 1,
        "agent_turns": json.dumps(session.turns),  # the rounds' requests as the policy saw them (the Composer's)
    }


@pytest.mark.parametrize("with_rounds", [True, False])
def test_a_dropped_episode_gives_a_placeholder_on_the_tasks_prompt(monkeypatch, tiny_tokenizer, with_rounds):
    rounds = [Round([11, 12, 13, 14], [15])] if with_rounds else []
    session = Session("ep2", {}, rounds=rounds)
    session.score = {"score": 1.0, "acc": 1.0, "step_metas": [None]}
    result = _result(Status.CRASHED, None, session)
    out = _run(monkeypatch, tiny_tokenizer, result, score_source="agent", logprobs=False, prompt_length=64)
    if with_rounds:
        assert out.prompt_ids == [11, 12, 13, 14]  # the first round's prompt
    else:  # the task's prompt as the chat template renders it
        want = tiny_tokenizer.apply_chat_template(TASK["raw_prompt"], add_generation_prompt=True, tokenize=True)
        assert out.prompt_ids == list(getattr(want, "input_ids", want))
    assert (out.response_ids, out.response_mask, out.response_logprobs) == ([tiny_tokenizer.eos_token_id], [0], None)
    assert (out.reward_score, out.num_turns) == (0.0, 1)
    assert out.extra_fields["reward_extra_info"] == {
        "score": 0.0,
        "acc": 0.0,
        "tool_call": 0.0,
        "tool_result_in_answer": 0.0,
    }
    assert out.extra_fields["agent_status"] == "crashed"
    assert out.extra_fields["agent_policy_version"] == -1
    assert out.extra_fields["step_metas"] == [None]


def test_under_the_reward_function_the_row_has_no_reward_and_no_step_metas(monkeypatch, tiny_tokenizer):
    session = Session("ep3", {}, rounds=[Round([1, 2], [3])])
    session.score = {"score": 1.0, "step_metas": [None]}
    segment = Segment([1, 2], [3], [1], None, n_rounds=1)
    result = _result(Status.OK, segment, session, use_agent_score=False)
    out = _run(monkeypatch, tiny_tokenizer, result, score_source="reward_fn", logprobs=True)
    assert (out.prompt_ids, out.response_ids, out.response_logprobs, out.reward_score) == ([1, 2], [3], None, None)
    assert "reward_extra_info" not in out.extra_fields and "step_metas" not in out.extra_fields
    assert out.extra_fields["agent_policy_version"] == -1
