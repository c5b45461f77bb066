"""The calculator task played by LangGraph's prebuilt ReAct agent (`pip install langgraph langchain-openai`),
unchanged: a LangChain `@tool`, `ChatOpenAI`, `create_react_agent`. The runner around it only reads the task and
posts the score.

    python -m verl_ext.agent.examples.langgraph_calc        (as external_agent.command)

`ChatOpenAI` builds an `openai` client, which reads `OPENAI_BASE_URL` / `OPENAI_API_KEY` (the episode's gateway
session). The tool is an exact calculator (`verl_ext.mathgen.calculator`). Score: the project's math reward of the
final message against the task's ground truth (`score.answer_score`); running out of steps or of the episode's token
budget scores 0.
"""

from __future__ import annotations

import os
import warnings

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from openai import BadRequestError

from verl_ext.agent.examples.score import answer_score, post_score, task
from verl_ext.mathgen.calculator import calculate

with warnings.catch_warnings():  # langgraph 1.x points to langchain.agents.create_agent; the prebuilt one is kept
    warnings.simplefilter("ignore")
    from langgraph.errors import GraphRecursionError
    from langgraph.prebuilt import create_react_agent


@tool
def calc(expr: str) -> str:
    """Evaluate arithmetic: + - * / and parentheses, on integers and decimals."""
    try:
        return calculate(expr)
    except ValueError as e:
        return f"error: {e}"


def play(t: dict) -> str:
    # max_tokens per reply: CALC_MAX_TOKENS if set, else the episode's remaining budget (the gateway's cap)
    max_tokens = int(os.environ["CALC_MAX_TOKENS"]) if "CALC_MAX_TOKENS" in os.environ else None
    llm = ChatOpenAI(model="policy", max_tokens=max_tokens, max_retries=2)
    agent = create_react_agent(llm, [calc])
    prompt = t["prompt"]
    messages = [(m["role"], m["content"]) for m in prompt] if isinstance(prompt, list) else [("user", str(prompt))]
    try:
        # recursion_limit counts graph steps: model, tools, model, ... (3 model calls at most here)
        out = agent.invoke({"messages": messages}, {"recursion_limit": int(os.environ.get("CALC_MAX_STEPS", "5"))})
    except GraphRecursionError:
        return ""
    except BadRequestError as e:
        if e.code != "context_length_exceeded":
            raise
        return ""
    return str(out["messages"][-1].content or "")


def main() -> None:
    t = task()
    answer = play(t)
    post_score(answer_score(answer, t))


if __name__ == "__main__":
    main()
