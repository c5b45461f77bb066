"""A calculator agent on the `anthropic` client (`client.messages.create`, Anthropic's Messages API), with a tool.

The tool-use loop as Anthropic's docs write it: the task's prompt and a `calc` tool (`input_schema`) go in; the
assistant's content blocks go back as its message, followed by a user message of `tool_result` blocks; the next
reply is the final answer. When the model made no call, the agent asks for the final answer instead, so every
episode has two rounds. Score 1 if the final answer's `\\boxed{}` is the task's ground truth. Nothing here knows
about training: `Anthropic()` reads `ANTHROPIC_BASE_URL` / `ANTHROPIC_API_KEY`, which the trainer sets to the
episode's gateway session.

    python -m verl_ext.agent.examples.anthropic_agent        (as external_agent.command)
"""

from __future__ import annotations

import os

from anthropic import Anthropic, BadRequestError

from verl_ext.agent.examples.calc_agent import evaluate, is_correct
from verl_ext.agent.examples.score import post_score, task

# Kept short on purpose: the tools block the chat template adds to the prompt must fit the tiny test model's 512
# positions with the episode (a real agent would describe the tool and its parameter).
CALC = {"name": "calc", "input_schema": {"type": "object", "properties": {"expr": {"type": "string"}}}}
FINAL = "Now give the final answer within \\boxed{}."


def run_calc(tool_input: dict) -> tuple[str, bool]:
    """The tool: (the calculator's answer or its error, is_error)."""
    try:
        return str(evaluate(str(tool_input.get("expr", "")))), False
    except (ValueError, ZeroDivisionError) as e:
        return f"error: {e}", True


def text_of(message) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


def main() -> None:
    t = task()
    truth = str(t["reward_model"]["ground_truth"]).strip()
    prompt = t["prompt"]
    chat = list(prompt) if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
    # Anthropic takes the system prompt as a field of its own, not as a message.
    system = "".join(m["content"] for m in chat if m["role"] == "system")
    messages = [{"role": m["role"], "content": m["content"]} for m in chat if m["role"] != "system"]
    client = Anthropic()
    max_tokens = int(os.environ.get("CALC_MAX_TOKENS", "16"))

    def ask():
        extra = {"system": system} if system else {}
        return client.messages.create(model="policy", max_tokens=max_tokens, messages=messages, tools=[CALC], **extra)

    answer = ""
    try:
        m = ask()
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]})
        results = []
        for b in m.content:
            if b.type == "tool_use":
                out, is_error = run_calc(b.input)
                results.append({"type": "tool_result", "tool_use_id": b.id, "content": out, "is_error": is_error})
        messages.append({"role": "user", "content": results or FINAL})
        answer = text_of(ask())
    except BadRequestError as e:
        if "response budget" not in str(e) and "the limit is" not in str(e):  # not the episode's token budget
            raise  # a real error: the episode crashes and is dropped
    post_score(1.0 if is_correct(answer, truth) else 0.0)


if __name__ == "__main__":
    main()
