"""A calculator agent on the `openai` client's Responses API (`client.responses.create`), with a function tool.

The agent loop as OpenAI's function-calling guide writes it for the Responses API: the task's prompt and a `calc`
function tool go in; the model's output items go back into `input`, followed by one `function_call_output` per
call; the next reply is the final answer. When the model made no call, the agent asks for the final answer in a
user turn instead, so every episode has two rounds. Score 1 if the final answer's `\\boxed{}` is the task's ground
truth. Nothing here knows about training: `OpenAI()` reads `OPENAI_BASE_URL` / `OPENAI_API_KEY`, which the trainer
sets to the episode's gateway session.

    python -m verl_ext.agent.examples.responses_agent        (as external_agent.command)
"""

from __future__ import annotations

import json
import os

from openai import BadRequestError, OpenAI

from verl_ext.agent.examples.calc_agent import evaluate, is_correct
from verl_ext.agent.examples.score import post_score, task

# Kept short on purpose: the tools block the chat template adds to the prompt must fit the tiny test model's 512
# positions with the episode (a real agent would describe the tool and its parameter).
EXPR = {"type": "object", "properties": {"expr": {"type": "string"}}}
CALC = {"type": "function", "name": "calc", "parameters": EXPR}
FINAL = "Now give the final answer within \\boxed{}."


def run_calc(arguments: str) -> str:
    """The tool: the calculator's answer, or its error as text (the model sees either)."""
    try:
        return str(evaluate(str(json.loads(arguments).get("expr", ""))))
    except (ValueError, ZeroDivisionError, AttributeError, json.JSONDecodeError) as e:
        return f"error: {e}"


def main() -> None:
    t = task()
    truth = str(t["reward_model"]["ground_truth"]).strip()
    prompt = t["prompt"]
    items: list = list(prompt) if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
    client = OpenAI()
    max_tokens = int(os.environ.get("CALC_MAX_TOKENS", "16"))
    answer = ""
    try:
        r = client.responses.create(model="policy", input=items, tools=[CALC], max_output_tokens=max_tokens)
        items += [o.model_dump(exclude_none=True) for o in r.output]
        calls = [o for o in r.output if o.type == "function_call"]
        items += [
            {"type": "function_call_output", "call_id": c.call_id, "output": run_calc(c.arguments)} for c in calls
        ]
        if not calls:
            items.append({"role": "user", "content": FINAL})
        answer = client.responses.create(
            model="policy", input=items, tools=[CALC], max_output_tokens=max_tokens
        ).output_text
    except BadRequestError as e:
        if e.code != "context_length_exceeded":
            raise  # a real error: the episode crashes and is dropped
    post_score(1.0 if is_correct(answer, truth) else 0.0)


if __name__ == "__main__":
    main()
