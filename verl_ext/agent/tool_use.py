"""How an episode used its tools, read from the conversation the gateway recorded (pure: no I/O, no verl).

Why: whether an agent "learns to use a tool" is more than its score. Per episode the agent loop records how many
well-formed tool calls the policy made (`calls`: the calls the gateway parsed and handed the agent; a reply whose
call markup did not parse is counted apart, as a `malformed` tool fault) and whether a tool's result reached the
final answer (`result_in_answer`: the episode's last reply is an answer, not a call, and writes the result of one of
its tool calls as a number of its own). The trainer logs their shares per step (`agent/tool_call_frac`,
`agent/tool_result_in_answer_frac`); with `external_agent.score_source=agent` they are also validation metrics
(`val-aux/<data source>/tool_call/mean@1`, `.../tool_result_in_answer/mean@1`: greedy, through the same agent).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from verl_ext.metrics_log.keys import TOOL_CALL_FRAC_KEY, TOOL_RESULT_IN_ANSWER_KEY

# A result that is an error message is never "reached the answer" (the example tools write `error: ...`).
_ERROR = re.compile(r"^\s*error\b", re.IGNORECASE)


@dataclass(frozen=True)
class ToolUse:
    calls: int
    result_in_answer: bool


def writes_result(text: str, result: str) -> bool:
    """Whether `text` writes `result` as a whole token: not inside a longer number or word (`4` is not in `14`,
    `-4`, `4.5` or `4/5`)."""
    result = result.strip()
    if not result:
        return False
    return re.search(rf"(?<![\w.\-/]){re.escape(result)}(?![\w/]|\.\d)", text or "") is not None


def tool_use(history: list[dict] | None) -> ToolUse:
    """The tool use of an episode whose last chat request and reply are `history` (`core.Session.history`: the
    messages of the last request, the reply appended; None for an episode that never chatted)."""
    if not history:
        return ToolUse(0, False)
    calls = sum(len(m.get("tool_calls") or []) for m in history if m.get("role") == "assistant")
    last = history[-1]
    answered = last.get("role") == "assistant" and not last.get("tool_calls")
    results = [m.get("content") or "" for m in history if m.get("role") == "tool"]
    reached = answered and any(writes_result(last.get("content") or "", r) for r in results if not _ERROR.match(r))
    return ToolUse(calls, reached)


def tool_use_metrics(calls, result_in_answer) -> dict[str, float]:
    """The step's shares over its episodes, from the batch columns `agent_tool_calls` and
    `agent_tool_result_in_answer`."""
    calls = np.asarray(calls, dtype=np.int64)
    reached = np.asarray(result_in_answer, dtype=np.float64)
    if not len(calls):
        return {TOOL_CALL_FRAC_KEY: 0.0, "agent/tool_calls_mean": 0.0, TOOL_RESULT_IN_ANSWER_KEY: 0.0}
    return {
        TOOL_CALL_FRAC_KEY: float((calls > 0).mean()),
        "agent/tool_calls_mean": float(calls.mean()),
        TOOL_RESULT_IN_ANSWER_KEY: float(reached.mean()),
    }
