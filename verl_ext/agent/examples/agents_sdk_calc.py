"""The calculator task played by an agent written with the OpenAI Agents SDK (`pip install openai-agents`), unchanged:
a function tool (`@function_tool`), an `Agent` on the SDK's chat-completions model, `Runner.run`. The runner around
it only reads the task, turns the SDK's tracing export off (it would post traces to OpenAI) and posts the score.

    python -m verl_ext.agent.examples.agents_sdk_calc        (as external_agent.command)

`AsyncOpenAI()` reads `OPENAI_BASE_URL` / `OPENAI_API_KEY`, which the trainer sets to the episode's gateway
session. The tool is an exact calculator (`verl_ext.mathgen.calculator`). Score: the project's math reward of the final
output against the task's ground truth (`score.answer_score`). An episode that runs out of turns or of the episode's
token budget scores 0 (it is the policy's outcome, not a crash).
"""

from __future__ import annotations

import asyncio
import os

from agents import (
    Agent,
    MaxTurnsExceeded,
    ModelSettings,
    OpenAIChatCompletionsModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI, BadRequestError

from verl_ext.agent.examples.score import answer_score, post_score, task
from verl_ext.mathgen.calculator import calculate


@function_tool
def calc(expr: str) -> str:
    """Evaluate arithmetic: + - * / and parentheses, on integers and decimals."""
    try:
        return calculate(expr)
    except ValueError as e:
        return f"error: {e}"


def conversation(t: dict) -> list[dict] | str:
    """The task's prompt as the run's input: the whole chat (a worked example before the question stays; the SDK
    sends input messages as they are), or the plain question."""
    prompt = t["prompt"]
    if isinstance(prompt, list):
        return [{"role": m["role"], "content": m["content"]} for m in prompt]
    return str(prompt)


async def play(t: dict) -> str:
    set_tracing_disabled(True)
    model = OpenAIChatCompletionsModel(model="policy", openai_client=AsyncOpenAI(max_retries=2))
    # max_tokens per reply: CALC_MAX_TOKENS if set, else the episode's remaining budget (the gateway's cap)
    settings = ModelSettings(max_tokens=int(os.environ["CALC_MAX_TOKENS"]) if "CALC_MAX_TOKENS" in os.environ else None)
    agent = Agent(name="calculator", tools=[calc], model=model, model_settings=settings)
    try:
        result = await Runner.run(agent, conversation(t), max_turns=int(os.environ.get("CALC_MAX_TURNS", "3")))
    except MaxTurnsExceeded:
        return ""
    except BadRequestError as e:
        if e.code != "context_length_exceeded":
            raise
        return ""
    return str(result.final_output or "")


def main() -> None:
    t = task()
    answer = asyncio.run(play(t))
    post_score(answer_score(answer, t))


if __name__ == "__main__":
    main()
