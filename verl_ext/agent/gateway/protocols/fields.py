"""What the wire protocols' translations share (pure): the check that nothing is silently ignored, typed fields,
content parts, function tools, and the log-prob entries of sampled tokens. Bad input is a 400 naming the field."""

from __future__ import annotations

from typing import Any

from verl_ext.agent.gateway.core import RequestError
from verl_ext.agent.gateway.toolcall import ToolSpecError, check_tool_choice, check_tools


def bad(message: str) -> RequestError:
    return RequestError(400, message)


def text_parts(content: Any, where: str, kinds: tuple[str, ...]) -> str:
    """A string, or a list of text parts of the given `type`s joined; anything else (images, files) is a 400."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad(f"{where} must be a string or a list of text parts, got {type(content).__name__}")
    out = []
    for j, p in enumerate(content):
        kind = p.get("type") if isinstance(p, dict) else None
        if kind not in kinds or not isinstance(p.get("text"), str):
            raise bad(f"{where}[{j}]: content part type {kind!r} is not supported (only {', '.join(kinds)})")
        out.append(p["text"])
    return "".join(out)


def function_tool(name: str, parameters: dict, description: Any = None) -> dict:
    """A chat function tool (the form the chat template renders)."""
    fn = {"name": name, "parameters": parameters}
    if description:
        fn["description"] = description
    return {"type": "function", "function": fn}


def checked_tools(tools: list[dict]) -> list[dict] | None:
    """`toolcall.check_tools` with its error as a 400."""
    try:
        return check_tools(tools)
    except ToolSpecError as e:
        raise bad(str(e)) from None


def checked_tool_choice(choice: Any, tools: list[dict] | None, prefix: str = "") -> str | dict:
    """`toolcall.check_tool_choice` on a choice already in the chat form, with its error as a 400."""
    try:
        return check_tool_choice(choice, tools)
    except ToolSpecError as e:
        raise bad(f"{prefix}{e}") from None


def check_fields(body: dict, honoured: set[str], ignored: set[str], rejected: dict[str, Any]) -> list[str]:
    """Nothing silently ignored: every field is honoured, documented as ignored (returned, for the reply's
    `X-Verl-Ext-Ignored` header), accepted only at its default (`rejected`: field -> the default values allowed),
    or refused with a 400 naming it."""
    ignored_present = []
    for k, v in body.items():
        if k in honoured:
            continue
        if k in ignored:
            if v is not None:
                ignored_present.append(k)
            continue
        if k in rejected:
            if v is None or v in rejected[k]:
                continue
            raise bad(f"{k}={v!r} is not supported by the training gateway ({_WHY.get(k, 'see docs')})")
        raise bad(f"unknown field {k!r} (the training gateway refuses what it would otherwise ignore)")
    return ignored_present


_WHY = {
    "seed": "sampling is the trainer's; a fixed seed would make a task's episodes identical",
    "n": "one sampled continuation per round: run n episodes instead",
    "logit_bias": "it would change the policy's distribution, and the recorded log-probs with it",
    "presence_penalty": "it would change the policy's distribution, and the recorded log-probs with it",
    "frequency_penalty": "it would change the policy's distribution, and the recorded log-probs with it",
    "response_format": "constrained decoding would sample from another distribution than the policy's",
    "top_logprobs": "verl's rollout returns the sampled token's log-prob only",
    "parallel_tool_calls": "calls are parsed as the policy wrote them; a single call cannot be enforced",
    "reasoning_effort": "the chat template decides reasoning",
    "functions": "the legacy functions API: use tools",
    "function_call": "the legacy functions API: use tool_choice",
    "echo": "the prompt is not echoed",
    "best_of": "one sampled continuation per round",
    "suffix": "insertion is not supported",
}


def positive_int(body: dict, key: str) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise bad(f"{key} must be a positive integer, got {v!r}")
    return v


def stop_strings(value: Any, key: str = "stop") -> tuple[str, ...]:
    """`stop`: a string or a list of non-empty strings (honoured by the rollout engine, cut as OpenAI does)."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise bad(f"{key} must be a non-empty string or a list of non-empty strings, got {value!r}")
    return tuple(value)


def token_logprobs(tokens: list[str] | None, logprobs: list[float] | None) -> list[dict] | None:
    """OpenAI's log-prob entries, one per sampled token (`tokens`: each decoded alone; the policy's log-prob, no
    alternatives); None when the request did not ask for log-probs."""
    if logprobs is None:
        return None
    return [
        {"token": t, "logprob": float(lp), "bytes": list(t.encode()), "top_logprobs": []}
        for t, lp in zip(tokens, logprobs, strict=True)
    ]
