"""The chat prompt of every row of the generated task: one worked exchange (a demonstration), then the question with
``INSTRUCTION``. ``DEMONSTRATION`` is the plain one; ``WORKED_DEMONSTRATION`` writes its steps out and
``LINE_CALL_DEMONSTRATION`` calls the calculator agent's tool; a mix (task.py ``MIXES``) names which one its rows
start with. A demonstration's questions are never drawn as task questions (``demonstration_questions``).
"""

from __future__ import annotations

from collections.abc import Sequence

from verl_ext.formats.line_calls import RESULT_PREFIX, call_line

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

# The worked exchanges of a calculator agent in the one-line tool-call format (`verl_ext.formats.line_calls`):
# a question, a call of the tool, its result, and an answer that boxes the result as the tool gave it; written as plain
# turns exactly as `${smollm2:line_tool_template}` renders a call and its result, so the agent's frameworks (which
# send the task's chat as role and content only) hand the model worked tool exchanges. The tool is `calc`, the example
# framework agents' (`verl_ext.agent.examples.agents_sdk_calc`, `langgraph_calc`). Two exchanges, the second with a
# result the model could not have worked out itself (scripts/probe_agent_tools.py, 30 held-out questions, greedy;
# docs/AGENT_REAL_MODEL.md): after them the released model calls the tool in 26 of 30 replies and boxes a right call's
# result in 12 of 14 (27 of 30 given the right call and result); after one exchange whose answer writes the sum again
# (`2 + 2 = 4. The final answer is \boxed{4}.`) it boxed it in 0 of 2 (2 of 30), and rewrote its own arithmetic.
CALC_TOOL = "calc"
CALC_EXCHANGES = (("2 + 2", "4"), ("-0.3 * 7.4", "-2.22"))  # (the expression asked for and called, its result)


def calc_exchange(expression: str, result: str) -> tuple[dict[str, str], ...]:
    """One worked calculator exchange as plain turns: `What is <expression>?`, the call, `Result: <result>`, and an
    answer that boxes the result."""
    return (
        {"role": "user", "content": f"What is {expression}? {INSTRUCTION}"},
        {"role": "assistant", "content": call_line(CALC_TOOL, expression)},
        {"role": "user", "content": RESULT_PREFIX + result},
        {"role": "assistant", "content": f"The final answer is \\boxed{{{result}}}."},
    )


LINE_CALL_DEMONSTRATION = tuple(m for exchange in CALC_EXCHANGES for m in calc_exchange(*exchange))


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
