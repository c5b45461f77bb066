"""OpenAI chat completions (`POST /v1/chat/completions`) over the gateway's chat form (pure: no I/O, no tokenizer).

Fields: `messages`, `tools`, `tool_choice` (`auto`, `none`, `required`, a named function: see `toolcall`), `stop`,
`max_tokens` / `max_completion_tokens`, `logprobs`, `stream` (+ `stream_options.include_usage`) are honoured;
`temperature`, `top_p`, `top_k` are the trainer's (listed in the reply's `X-Verl-Ext-Ignored` header); `n`, `seed`,
`response_format`, `top_logprobs`, `logit_bias`, penalties, `parallel_tool_calls`, `reasoning_effort` are accepted
only at their defaults and otherwise refused with a 400 naming the field (why: `fields._WHY`); unknown fields too.

A reply with tool calls has `message.tool_calls` (ids `call_...`), `content` null when the model wrote nothing else,
and `finish_reason: "tool_calls"`; reasoning is `message.reasoning_content`. Streaming sends the same reply as
chunks: the role, the reasoning, the content, then per call one delta with its index, id and name and one with its
arguments (the openai client and the frameworks assemble these), the finish reason, and the usage chunk when asked.
"""

from __future__ import annotations

import uuid

from verl_ext.agent.gateway.core import ChatTurn, TurnResult, normalize_message
from verl_ext.agent.gateway.protocols.fields import (
    bad,
    checked_tool_choice,
    checked_tools,
    positive_int,
    stop_strings,
    token_logprobs,
)
from verl_ext.agent.gateway.protocols.fields import check_fields as _check_fields

HONOURED = {
    "model",
    "messages",
    "tools",
    "tool_choice",
    "stop",
    "max_tokens",
    "max_completion_tokens",
    "logprobs",
    "stream",
    "stream_options",
}
IGNORED = {"temperature", "top_p", "top_k", "user", "metadata", "store", "service_tier", "prompt_cache_key"}
IGNORED |= {"safety_identifier"}
AT_DEFAULT = {
    "n": (1,),
    "seed": (),
    "response_format": ({"type": "text"},),
    "top_logprobs": (0,),
    "logit_bias": ({},),
    "presence_penalty": (0, 0.0),
    "frequency_penalty": (0, 0.0),
    "parallel_tool_calls": (True,),
    "reasoning_effort": (),
    "functions": ([],),
    "function_call": (),
}


def check_fields(body: dict) -> list[str]:
    """Nothing silently ignored (`fields.check_fields`): the ignored fields present (for the reply's header)."""
    return _check_fields(body, HONOURED, IGNORED, AT_DEFAULT)


def to_chat_turn(body: dict) -> ChatTurn:
    """The request as the core's `ChatTurn` (400 naming the field on anything wrong)."""
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise bad("messages must be a non-empty list")
    messages = [normalize_message(m, i) for i, m in enumerate(raw)]
    tools = checked_tools(body.get("tools"))
    choice = checked_tool_choice(body.get("tool_choice"), tools)
    logprobs = body.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise bad(f"logprobs must be a boolean, got {logprobs!r}")
    return ChatTurn(
        messages=messages,
        tools=tools,
        tool_choice=choice,
        max_tokens=positive_int(body, "max_tokens") or positive_int(body, "max_completion_tokens"),
        stop=stop_strings(body.get("stop")),
        logprobs=bool(logprobs),
    )


def chat_message(r: TurnResult) -> dict:
    m = {"role": "assistant", "content": r.content if (r.content or not r.tool_calls) else None}
    if r.reasoning is not None:
        m["reasoning_content"] = r.reasoning
    if r.tool_calls:
        m["tool_calls"] = [c.to_openai() for c in r.tool_calls]
    return m


def stream_deltas(r: TurnResult) -> list[dict]:
    """The reply as chat.completion.chunk deltas (choices[0] of each chunk), in OpenAI's order."""
    out = [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]
    if r.reasoning:
        out.append({"index": 0, "delta": {"reasoning_content": r.reasoning}, "finish_reason": None})
    if r.content:
        out.append({"index": 0, "delta": {"content": r.content}, "finish_reason": None})
    for i, c in enumerate(r.tool_calls):
        head = {"index": i, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": ""}}
        out.append({"index": 0, "delta": {"tool_calls": [head]}, "finish_reason": None})
        args = {"index": i, "function": {"arguments": c.arguments}}
        out.append({"index": 0, "delta": {"tool_calls": [args]}, "finish_reason": None})
    out.append({"index": 0, "delta": {}, "finish_reason": r.finish_reason})
    return out


def _envelope(model: str, created: int) -> dict:
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": created, "model": model}


def build_completion(r: TurnResult, *, model: str, created: int, tokens: list[str] | None = None) -> dict:
    """The `chat.completion` object for the core's result; `tokens`: the sampled tokens, each decoded alone (when
    the request asked for log-probs)."""
    lps = token_logprobs(tokens, r.logprobs)
    choice = {
        "index": 0,
        "message": chat_message(r),
        "finish_reason": r.finish_reason,
        "logprobs": None if lps is None else {"content": lps},
    }
    return {**_envelope(model, created), "object": "chat.completion", "choices": [choice], "usage": r.usage()}


def stream_events(r: TurnResult, *, model: str, created: int, include_usage: bool) -> list[dict]:
    """The `chat.completion.chunk` sequence delivering the core's result (already generated), then the usage chunk
    when `stream_options.include_usage` asked for it."""
    base = _envelope(model, created)
    events = [{**base, "object": "chat.completion.chunk", "choices": [choice]} for choice in stream_deltas(r)]
    if include_usage:
        events.append({**base, "object": "chat.completion.chunk", "choices": [], "usage": r.usage()})
    return events
