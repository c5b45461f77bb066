"""Agents written with real frameworks, installed from their packages and not modified (the OpenAI Agents SDK's
function tools on its chat-completions model; LangGraph's prebuilt ReAct agent on langchain-openai), each run as a
real agent process by `run_episode` against the real gateway on 127.0.0.1. The rollout is scripted to emit two
parallel hermes tool calls, then a final answer, so the test checks what the framework received (it ran its tool on
the parsed arguments: both results come back in its next request), the score it posted, and the trajectory's ids
and masks (one segment, no drift)."""

from __future__ import annotations

import json
import sys

import pytest

from tests.agent.test_tool_gateway import check_token_true
from verl_ext.agent.agent_process import run_episode
from verl_ext.agent.episode import Status
from verl_ext.agent.settings import AgentSettings

TASK = {
    "prompt": [  # a worked exchange before the question, as the real task's prompts have (verl_ext/mathgen)
        {"role": "user", "content": "What is 2 + 2? Put it in \\boxed{}."},
        {"role": "assistant", "content": "2 + 2 = 4. The final answer is \\boxed{4}."},
        {"role": "user", "content": "What is (1+2)*4 and 5*5? Put the first in \\boxed{}."},
    ],
    "reward_model": {"ground_truth": "12"},
    "extra_info": {},
    "data_source": "calc",
}
FRAMEWORKS = {
    "openai_agents_sdk": "verl_ext.agent.examples.agents_sdk_calc",
    "langgraph_react": "verl_ext.agent.examples.langgraph_calc",
}


def call(name, args):
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(args)}}}\n</tool_call>'


def policy(prompt_text: str) -> str:
    """Two parallel calls first; once the tool results are in the prompt, the answer."""
    if "<tool_response>" in prompt_text:
        return "It is \\boxed{12}."
    return "Computing.\n" + call("calc", {"expr": "(1+2)*4"}) + "\n" + call("calc", {"expr": "5*5"})


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_framework_agent_through_the_gateway(framework, scripted_gateway, loop_thread, tool_tokenizer):
    gw, backend = scripted_gateway(policy)
    settings = AgentSettings.from_mapping(
        {"command": [sys.executable, "-m", FRAMEWORKS[framework]], "api_key": "k", "timeout_s": 240}
    )

    async def episode():
        return await run_episode(gw, settings, TASK, {"temperature": 1.0, "logprobs": True})

    res = loop_thread.run(episode(), timeout=300)
    assert res.outcome.status is Status.OK, (res.exit_code, res.stderr)
    assert res.session.score["score"] == 1.0  # the framework returned the scripted final answer
    assert gw.stats.rejected_400 == 0  # every field the framework sends is understood
    s = res.session
    assert len(s.rounds) == 2
    first, second = (tool_tokenizer.decode(r.prompt_ids) for r in s.rounds)
    assert '"name": "calc"' in first  # the framework's tool schema, rendered by the chat template
    assert "The final answer is \\boxed{4}.<|im_end|>" in first  # the task's worked exchange reached the model
    # The framework parsed both calls' arguments, ran its own tool on each and sent both results back.
    assert "<tool_response>\n12\n</tool_response>\n<tool_response>\n25\n</tool_response>" in second
    assert s.drift.as_dict() == {"extended": 1, "split": {}, "tool_faults": {}}
    check_token_true(s, tool_tokenizer)
