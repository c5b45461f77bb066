"""OpenAI chat completions (`POST /v1/chat/completions`) over the episode core.

Fields: `messages`, `tools`, `tool_choice` (`auto`, `none`, `required`, a named function: see `toolcall`), `stop`,
`max_tokens` / `max_completion_tokens`, `logprobs`, `stream` (+ `stream_options.include_usage`) are honoured;
`temperature`, `top_p`, `top_k` are the trainer's (listed in the reply's `X-Verl-Ext-Ignored` header); `n`, `seed`,
`response_format`, `top_logprobs`, `logit_bias`, penalties, `parallel_tool_calls`, `reasoning_effort` are accepted
only at their defaults and otherwise refused with a 400 naming the field (why: `base._WHY`); unknown fields too.

A reply with tool calls has `message.tool_calls` (ids `call_...`), `content` null when the model wrote nothing else,
and `finish_reason: "tool_calls"`; reasoning is `message.reasoning_content`. Streaming sends the same reply as
chunks: the role, the reasoning, the content, then per call one delta with its index, id and name and one with its
arguments (the openai client and the frameworks assemble these), the finish reason, and the usage chunk when asked.
"""

from __future__ import annotations

import time
import uuid

from aiohttp import web

from verl_ext.agent.core import ChatTurn, RequestError, TurnResult, normalize_message
from verl_ext.agent.toolcall import ToolSpecError, check_tool_choice, check_tools
from verl_ext.agent.wire.base import (
    WireAdapter,
    check_fields,
    logprobs_block,
    positive_int,
    register_adapter,
    reply_headers,
    stop_strings,
    write_sse,
)

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


def parse_chat_request(body: dict) -> tuple[ChatTurn, list[str]]:
    """The request as the core's `ChatTurn` (400 naming the field on anything wrong) and the ignored fields."""
    ignored = check_fields(body, HONOURED, IGNORED, AT_DEFAULT)
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise RequestError(400, "messages must be a non-empty list")
    messages = [normalize_message(m, i) for i, m in enumerate(raw)]
    try:
        tools = check_tools(body.get("tools"))
        choice = check_tool_choice(body.get("tool_choice"), tools)
    except ToolSpecError as e:
        raise RequestError(400, str(e)) from None
    logprobs = body.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise RequestError(400, f"logprobs must be a boolean, got {logprobs!r}")
    turn = ChatTurn(
        messages=messages,
        tools=tools,
        tool_choice=choice,
        max_tokens=positive_int(body, "max_tokens") or positive_int(body, "max_completion_tokens"),
        stop=stop_strings(body.get("stop")),
        logprobs=bool(logprobs),
    )
    return turn, ignored


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


@register_adapter
class ChatCompletions(WireAdapter):
    name = "chat_completions"
    routes = (("POST", "/v1/chat/completions", "create"),)

    async def create(self, request: web.Request) -> web.StreamResponse:
        t0, s, body = await self.begin(request)
        turn, ignored = parse_chat_request(body)
        async with self.admitted():
            r = await self.core.chat(s, turn)
        rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        headers = reply_headers(ignored, r.fault)
        base = {"id": rid, "created": created, "model": self.model_name}
        self.core.stats.handler_s += time.perf_counter() - t0
        if body.get("stream"):
            events = [{**base, "object": "chat.completion.chunk", "choices": [choice]} for choice in stream_deltas(r)]
            if (body.get("stream_options") or {}).get("include_usage"):
                events.append({**base, "object": "chat.completion.chunk", "choices": [], "usage": r.usage()})
            return await write_sse(request, events, headers)
        choice = {
            "index": 0,
            "message": chat_message(r),
            "finish_reason": r.finish_reason,
            "logprobs": logprobs_block(self.core.tokenizer, r.response_ids, r.logprobs),
        }
        return web.json_response(
            {**base, "object": "chat.completion", "choices": [choice], "usage": r.usage()}, headers=headers
        )
