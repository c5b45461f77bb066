"""Calculator-tool agent: the model calls a calculator by writing `\\boxed{<expression>}`, the agent evaluates it
(integers, + - * and parentheses only) and returns the result as the tool's message; then the model gives its final
answer in `\\boxed{}`. Score 1 if the final answer equals the task's ground truth.

Tool errors carry `error_kind` in the episode's `step_metas` (posted with the score), which the Composer turns into
hints for the next assistant turn: `format_error` (no `\\boxed{}` call) and `tool_error` (the expression does not
evaluate), with the template fields the hints need. `step_metas[t]` is the environment's reply to assistant turn t.
"""

from __future__ import annotations

import ast
import operator
import os
import re

from openai import BadRequestError, OpenAI

from verl_ext.agent.examples.score import post_score, task

BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def evaluate(expr: str) -> int:
    """The calculator: integer arithmetic, no names, no calls (ValueError otherwise)."""

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        raise ValueError(f"unsupported expression {ast.dump(node)[:40]}")

    try:
        return ev(ast.parse(expr.strip(), mode="eval"))
    except SyntaxError as e:
        raise ValueError(f"syntax error: {e.msg}") from None


def tool_step(reply: str) -> tuple[str, dict | None]:
    """The calculator's message for the model and its step metadata (None when the call worked)."""
    m = BOXED.search(reply or "")
    if m is None:
        spec = "Call the calculator as \\boxed{expression}."
        return f"[calculator] error: no call found. {spec}", {"error_kind": "format_error", "format_spec": spec}
    try:
        return f"[calculator] {m.group(1).strip()} = {evaluate(m.group(1))}", None
    except (ValueError, ZeroDivisionError) as e:
        return f"[calculator] error: {e}", {"error_kind": "tool_error", "error_message": str(e)}


def is_correct(answer: str, truth: str) -> bool:
    m = BOXED.search(answer or "")
    return m is not None and m.group(1).strip() == truth


def main() -> None:
    t = task()
    truth = str(t["reward_model"]["ground_truth"]).strip()
    # The task's own prompt (a chat, as in the dataset) is the question; the model's first \\boxed{} is its
    # calculator call, the calculator's reply comes back as the next user turn, the next \\boxed{} is the answer.
    # A wrong answer gets feedback and `CALC_RETRIES` (default 1) more tries: that feedback is the environment's
    # `wrong_answer` step, whose hint ("The correct answer is ...") targets the retry turn.
    prompt = t["prompt"]
    messages = list(prompt) if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
    client = OpenAI()
    max_tokens = int(os.environ.get("CALC_MAX_TOKENS", "16"))
    retries = int(os.environ.get("CALC_RETRIES", "1"))

    turns = 0

    def ask() -> str:
        nonlocal turns
        out = client.chat.completions.create(model="policy", messages=messages, max_tokens=max_tokens)
        turns += 1
        return out.choices[0].message.content or ""

    metas: list[dict | None] = []  # metas[t]: the environment's reply to assistant turn t
    answer = ""
    try:
        call = ask()
        tool_text, meta = tool_step(call)
        metas.append(meta)
        messages += [
            {"role": "assistant", "content": call},
            {"role": "user", "content": f"{tool_text}\nNow put the final answer within \\boxed{{}}."},
        ]
        answer = ask()
        for _ in range(retries):
            if is_correct(answer, truth):
                break
            metas.append({"error_kind": "wrong_answer", "ground_truth": truth})
            messages += [
                {"role": "assistant", "content": answer},
                {"role": "user", "content": "Wrong answer. Try again within \\boxed{}."},
            ]
            answer = ask()
    except BadRequestError as e:
        if e.code != "context_length_exceeded":
            raise  # a real error: the episode crashes and is dropped
    correct = is_correct(answer, truth)
    # one meta per assistant turn that happened; the last one is the verdict on the final answer
    metas = metas[: max(turns - 1, 0)] + [None if correct else {"error_kind": "wrong_answer", "ground_truth": truth}]
    post_score(1.0 if correct else 0.0, step_metas=metas)


if __name__ == "__main__":
    main()
