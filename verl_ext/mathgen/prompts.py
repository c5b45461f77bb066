"""The chat prompt of every row of the generated task: one worked exchange (a demonstration), then the question with
``INSTRUCTION``. ``DEMONSTRATION`` is the plain one; ``WORKED_DEMONSTRATION`` writes its steps out and
``LINE_CALL_DEMONSTRATION`` calls the calculator agent's tool; a mix (task.py ``MIXES``) names which one its rows
start with. A demonstration's questions are never drawn as task questions (``demonstration_questions``).
"""

from __future__ import annotations

from collections.abc import Sequence

from verl_ext.agent.gateway.line_calls import RESULT_PREFIX, call_line

INSTRUCTION = "Give the final answer in \\boxed{}."
# One worked exchange before the question (a one-shot chat demonstration). SmolLM2-135M-Instruct almost never writes
# \boxed{} from the instruction alone (8 questions x 16 samples: 12% boxed and 0 right at T 0.7, 20% and 0 at T 1.0);
# after this exchange 54% boxed and 28% right at T 1.0, per question 0 to 13 of 16: all-wrong, mixed and all-right
# prompts, which RL needs. Its question is phrased unlike every generator module, so it is never a task question.
DEMONSTRATION = (
    {"role": "user", "content": f"What is 2 + 2? {INSTRUCTION}"},
    {"role": "assistant", "content": "2 + 2 = 4. The final answer is \\boxed{4}."},
)
# Two worked exchanges that write their steps out (the operation, then its result; "First, ... Then ..."): after
# them the released model writes its own steps ("To solve this equation, first, subtract 2 from both sides: ...
# Then, divide both sides by 3: ..."), where after DEMONSTRATION a reply is one sentence. Phrased as the linear_1d
# and add_sub_multiple generators phrase theirs, so those two questions are never drawn as task questions.
WORKED_DEMONSTRATION = (
    {"role": "user", "content": f"Solve 3*x + 2 = 14 for x. {INSTRUCTION}"},
    {
        "role": "assistant",
        "content": "Subtract 2 from both sides: 3*x = 12. Divide both sides by 3: x = 4. "
        "The final answer is \\boxed{4}.",
    },
    {"role": "user", "content": f"What is 7 - (2 + 3)? {INSTRUCTION}"},
    {"role": "assistant", "content": "First, 2 + 3 = 5. Then 7 - 5 = 2. The final answer is \\boxed{2}."},
)

# The worked exchange of a calculator agent in the one-line tool-call format (`verl_ext.agent.gateway.line_calls`): the
# same question and answer as DEMONSTRATION with a call of the tool in between, written as plain turns exactly as
# `${smollm2:line_tool_template}` renders a call and its result, so the agent's frameworks (which send the task's chat
# as role and content only) hand the model a worked tool exchange. The tool is `calc`, the example framework agents'
# (`verl_ext.agent.examples.agents_sdk_calc`, `langgraph_calc`). After this exchange (with the tool named
# `calculator`) the released model wrote a call in 11 of 30 greedy replies, where it wrote none without it
# (docs/AGENT_REAL_MODEL.md).
CALC_TOOL = "calc"
LINE_CALL_DEMONSTRATION = (
    DEMONSTRATION[0],
    {"role": "assistant", "content": call_line(CALC_TOOL, "2 + 2")},
    {"role": "user", "content": RESULT_PREFIX + "4"},
    DEMONSTRATION[1],
)


def prompt_text(question: str) -> str:
    return f"{question} {INSTRUCTION}"


def prompt_messages(question: str, demonstration: Sequence[dict[str, str]] = DEMONSTRATION) -> list[dict[str, str]]:
    """The chat prompt of one row: the demonstration (``DEMONSTRATION`` unless the mix names another), then the
    question with ``INSTRUCTION``."""
    return [*(dict(m) for m in demonstration), {"role": "user", "content": prompt_text(question)}]


def demonstration_questions(demonstration: Sequence[dict[str, str]]) -> list[str]:
    """The questions a demonstration asks (its user turns without ``INSTRUCTION``): never drawn as task questions."""
    suffix = f" {INSTRUCTION}"
    return [m["content"].removesuffix(suffix) for m in demonstration if m["role"] == "user"]
