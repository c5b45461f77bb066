"""Per-episode tool use from the recorded conversation (`verl_ext.agent.tool_use`), and the step's shares."""

from __future__ import annotations

import pytest

from verl_ext.agent.tool_use import ToolUse, tool_use, tool_use_metrics, writes_result

ASK = {"role": "user", "content": "What is 2 - -2? Give the final answer in \\boxed{}."}


def call(expr="2 - -2"):
    fn = {"name": "calc", "arguments": f'{{"expr": "{expr}"}}'}
    return {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function", "function": fn}]}


def result(text):
    return {"role": "tool", "tool_call_id": "c", "content": text}


def answer(text):
    return {"role": "assistant", "content": text}


def test_a_result_reaches_the_answer_only_as_a_number_of_its_own():
    assert writes_result("2 - -2 = 4. The final answer is \\boxed{4}.", "4")
    assert writes_result("so \\boxed{-0.62}", "-0.62") and writes_result("It is 16/5.", "16/5")
    for text in ("\\boxed{14}", "\\boxed{-4}", "\\boxed{4.5}", "\\boxed{4/5}", "x4", ""):
        assert not writes_result(text, "4"), text
    assert not writes_result("4", "  ")


def test_tool_use_of_an_episode():
    assert tool_use(None) == ToolUse(0, False) and tool_use([]) == ToolUse(0, False)
    assert tool_use([ASK, answer("\\boxed{4}")]) == ToolUse(0, False)  # answered without the tool
    used = [ASK, call(), result("4")]
    assert tool_use(used + [answer("The final answer is \\boxed{4}.")]) == ToolUse(1, True)
    assert tool_use(used + [answer("The final answer is \\boxed{0}.")]) == ToolUse(1, False)
    # the episode ended on another call (out of turns): no answer reached
    assert tool_use(used + [call("4 + 0")]) == ToolUse(2, False)
    # an error message is never a result that reached the answer
    errored = [ASK, call("2 - 2 = 0"), result("error: syntax error: invalid syntax"), answer("error \\boxed{0}")]
    assert tool_use(errored) == ToolUse(1, False)


def test_step_shares():
    m = tool_use_metrics([0, 1, 2, 0], [0, 1, 0, 0])
    assert m == {"agent/tool_call_frac": 0.5, "agent/tool_calls_mean": 0.75, "agent/tool_result_in_answer_frac": 0.25}
    assert tool_use_metrics([], []) == pytest.approx(
        {"agent/tool_call_frac": 0.0, "agent/tool_calls_mean": 0.0, "agent/tool_result_in_answer_frac": 0.0}
    )
