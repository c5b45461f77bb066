"""Anthropic's Messages API (`POST /v1/messages`) over the gateway's chat form (pure: no I/O, no tokenizer).

Wire format: Anthropic API reference, "Messages" (create a message; content blocks; streaming messages; errors), as
the `anthropic` client's types and `client.messages.stream` helper check it.

Request -> `ChatTurn`:
- `system` (a string or text blocks) -> a leading system message; `messages` alternate `user` / `assistant`, each a
  string or content blocks. A user message's `tool_result` blocks become chat `tool` messages (in order) and its
  text a user message; an assistant message's `thinking`, `text` and `tool_use` blocks become one assistant chat
  message (`reasoning_content`, `content`, `tool_calls` with `arguments` = the JSON of `input`), so a history sent
  back is the chat history the core holds and continues its token prefix. A `tool_result` must answer a `tool_use`
  earlier in the conversation (else 400). `is_error` is not rendered: the result's text is what the model sees.
- `tools`: client tools with `input_schema`; server/built-in tools (`web_search_...`, `bash_...`, ...) are a 400
  naming the type. `tool_choice` `auto` / `none` / `any` (= chat `required`) / `tool` (a named function).
- `max_tokens` is required (as Anthropic's API has it); `stop_sequences` become the round's stop strings.
- `temperature`, `top_p`, `top_k` are ignored (the recorded log-probs must be the policy's); `thinking` is accepted
  and the gateway's reasoning parser decides whether thinking blocks come back. Other fields that would change the
  result are 400s naming them.

Reply: a `message` whose `content` is a `thinking` block (when the reasoning parser returned reasoning), a `text`
block, one `tool_use` block per tool call (`id` = the core's tool-call id); `stop_reason` `tool_use`, `max_tokens`,
`stop_sequence` (with `stop_sequence` = the string) or `end_turn`; `usage`. `stream_events` gives Anthropic's event
sequence: `message_start`, per block `content_block_start` / `content_block_delta` / `content_block_stop`,
`message_delta` (stop reason, output tokens), `message_stop`. Errors use Anthropic's shape
`{"type": "error", "error": {"type", "message"}}`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from verl_ext.agent.gateway.core import ChatTurn, TurnResult, normalize_message
from verl_ext.agent.gateway.protocols.fields import (
    bad,
    checked_tool_choice,
    checked_tools,
    function_tool,
    positive_int,
    stop_strings,
    text_parts,
)
from verl_ext.agent.gateway.protocols.fields import check_fields as _check_fields

HONOURED = {"max_tokens", "messages", "system", "tools", "tool_choice", "stop_sequences", "stream"}
# Accepted and not acted on: they do not change what is sampled or recorded.
IGNORED = {
    "model",  # one model is served
    "temperature",  # sampling follows the trainer's rollout settings (the log-probs must be the policy's)
    "top_p",
    "top_k",
    "metadata",
    "thinking",  # the gateway's reasoning parser decides whether thinking blocks come back
    "service_tier",
    "cache_control",  # verl routes an episode to one server (its prefix cache)
    "inference_geo",
    "speed",
}
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}
_USER_BLOCKS = ("text", "tool_result")
_ASSISTANT_BLOCKS = ("text", "thinking", "tool_use")


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def error_body(status: int, message: str) -> dict:
    """Anthropic's error object for an HTTP status."""
    return {"type": "error", "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": message}}


def check_fields(body: dict) -> list[str]:
    """Nothing silently ignored (`fields.check_fields`): the ignored fields present (for the reply's header)."""
    return _check_fields(body, HONOURED, IGNORED, {})


def to_chat_tools(tools: Any) -> list[dict] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise bad("tools: must be a list")
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict):
            raise bad(f"tools.{i}: must be an object")
        if t.get("type") not in (None, "custom"):
            raise bad(
                f"tools.{i}: built-in tool {t.get('type')!r} is not supported (client tools with input_schema only)",
            )
        name, schema = t.get("name"), t.get("input_schema")
        if not isinstance(name, str) or not name:
            raise bad(f"tools.{i}.name: must be a non-empty string")
        if not isinstance(schema, dict):
            raise bad(f"tools.{i}.input_schema: field required (a JSON schema object)")
        out.append(function_tool(name, schema, t.get("description")))
    return checked_tools(out)


def to_chat_tool_choice(choice: Any, tools: list[dict] | None) -> str | dict:
    """{"type": auto | none | any | tool} -> auto | none | required | a named function."""
    if choice is None:
        return checked_tool_choice(None, tools)
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind not in ("auto", "none", "any", "tool"):
        raise bad(f"tool_choice.type: {kind!r} is not one of auto, none, any, tool")
    if choice.get("disable_parallel_tool_use"):
        raise bad("tool_choice.disable_parallel_tool_use is not supported (calls are parsed as the policy wrote them)")
    if kind == "tool":
        chat = {"type": "function", "function": {"name": choice.get("name")}}
    else:
        chat = "required" if kind == "any" else kind
    return checked_tool_choice(chat, tools, prefix="tool_choice: ")


def _blocks(content: Any, where: str, kinds: tuple[str, ...]) -> list[dict]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise bad(f"{where}.content: must be a string or a list of content blocks")
    for j, b in enumerate(content):
        kind = b.get("type") if isinstance(b, dict) else None
        if kind not in kinds:
            raise bad(
                f"{where}.content.{j}: block type {kind!r} is not supported here (supported: {', '.join(kinds)})",
            )
    return content


def to_messages(raw: Any) -> list[dict]:
    """Anthropic messages -> chat messages (see module docstring)."""
    if not isinstance(raw, list) or not raw:
        raise bad("messages: must be a non-empty list")
    out: list[dict] = []
    known: set[str] = set()
    for i, m in enumerate(raw):
        where = f"messages.{i}"
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ("user", "assistant"):
            raise bad(f"{where}.role: must be user or assistant, got {role!r}")
        if role == "assistant":
            turn: dict = {"role": "assistant", "content": ""}
            for j, b in enumerate(_blocks(m.get("content"), where, _ASSISTANT_BLOCKS)):
                at = f"{where}.content.{j}"
                if b["type"] == "text":
                    turn["content"] += _str(b, "text", at)
                elif b["type"] == "thinking":
                    turn["reasoning_content"] = turn.get("reasoning_content", "") + _str(b, "thinking", at)
                else:
                    cid, name, args = b.get("id"), b.get("name"), b.get("input")
                    if not isinstance(cid, str) or not cid or not isinstance(name, str) or not isinstance(args, dict):
                        raise bad(f"{at}: tool_use needs an id, a name and an input object")
                    args_json = json.dumps(args, ensure_ascii=False)
                    call = {"id": cid, "type": "function", "function": {"name": name, "arguments": args_json}}
                    turn.setdefault("tool_calls", []).append(call)
                    known.add(cid)
            out.append(turn)
            continue
        text: list[str] = []
        for j, b in enumerate(_blocks(m.get("content"), where, _USER_BLOCKS)):
            at = f"{where}.content.{j}"
            if b["type"] == "text":
                text.append(_str(b, "text", at))
                continue
            if text:  # text before a tool result stays before it
                out.append({"role": "user", "content": "".join(text)})
                text = []
            cid = b.get("tool_use_id")
            if cid not in known:
                raise bad(
                    f"{at}: tool_result for unknown tool_use_id {cid!r} (no tool_use block with that id precedes it)",
                )
            result = b.get("content", "")
            out.append({"role": "tool", "tool_call_id": cid, "content": text_parts(result, f"{at}.content", ("text",))})
        if text or not out or out[-1]["role"] != "tool":
            out.append({"role": "user", "content": "".join(text)})
    return out


def _str(block: dict, key: str, where: str) -> str:
    v = block.get(key)
    if not isinstance(v, str):
        raise bad(f"{where}.{key}: must be a string")
    return v


def to_chat_turn(body: dict, *, count_only: bool = False) -> ChatTurn:
    """The request as one round for the core (call `check_fields` first). `count_only`: a `count_tokens` request,
    which has no `max_tokens`."""
    if body.get("max_tokens") is None and not count_only:
        raise bad("max_tokens: field required (a positive integer, as in Anthropic's API)")
    max_tokens = positive_int(body, "max_tokens")
    system = body.get("system")
    system_text = "" if system is None else text_parts(system, "system", ("text",))
    tools = to_chat_tools(body.get("tools"))
    tool_choice = to_chat_tool_choice(body.get("tool_choice"), tools)
    stop = stop_strings(body.get("stop_sequences"), "stop_sequences")
    conversation = to_messages(body.get("messages"))
    if conversation[-1]["role"] == "assistant":
        raise bad("messages: the last message must not be the assistant's (prefill is not supported)")
    messages = ([{"role": "system", "content": system_text}] if system_text else []) + conversation
    return ChatTurn(
        messages=[normalize_message(m, i) for i, m in enumerate(messages)],
        tools=tools,
        tool_choice=tool_choice,
        max_tokens=max_tokens,
        stop=stop,
    )


def stop_reason(result: TurnResult, stop_sequence: str | None) -> str:
    if result.tool_calls:
        return "tool_use"
    if result.finish_reason == "length":
        return "max_tokens"
    return "stop_sequence" if stop_sequence else "end_turn"


def build_message(
    result: TurnResult, *, stop_sequence: str | None, model: str, new_id: Callable[[str], str] = _new_id
) -> dict:
    """The Message object for the core's `result`; `stop_sequence`: the stop string that ended the round, if any."""
    content: list[dict] = []
    if result.reasoning:
        # No signature: nothing is signed here, and a client sends the block back as it got it.
        content.append({"type": "thinking", "thinking": result.reasoning, "signature": ""})
    if result.content or not result.tool_calls:
        content.append({"type": "text", "text": result.content})
    for c in result.tool_calls:  # the codec guarantees a JSON object as arguments
        content.append({"type": "tool_use", "id": c.id, "name": c.name, "input": json.loads(c.arguments)})
    reason = stop_reason(result, stop_sequence)
    return {
        "id": new_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": stop_sequence if reason == "stop_sequence" else None,
        "usage": {
            "input_tokens": len(result.prompt_ids),
            "output_tokens": len(result.response_ids),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def stream_events(msg: dict) -> Iterator[dict]:
    """Anthropic's event sequence delivering `msg` (already generated), each block's content as one delta."""
    usage = msg["usage"]
    start = {**msg, "content": [], "stop_reason": None, "stop_sequence": None, "usage": {**usage, "output_tokens": 0}}
    yield {"type": "message_start", "message": start}
    for i, b in enumerate(msg["content"]):
        if b["type"] == "text":
            yield {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}
            yield {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": b["text"]}}
        elif b["type"] == "thinking":
            empty = {"type": "thinking", "thinking": "", "signature": ""}
            yield {"type": "content_block_start", "index": i, "content_block": empty}
            delta = {"type": "thinking_delta", "thinking": b["thinking"]}
            yield {"type": "content_block_delta", "index": i, "delta": delta}
            delta = {"type": "signature_delta", "signature": b["signature"]}
            yield {"type": "content_block_delta", "index": i, "delta": delta}
        else:  # tool_use: input streamed as its JSON text
            yield {"type": "content_block_start", "index": i, "content_block": {**b, "input": {}}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(b["input"], ensure_ascii=False)}
            yield {"type": "content_block_delta", "index": i, "delta": delta}
        yield {"type": "content_block_stop", "index": i}
    delta = {"stop_reason": msg["stop_reason"], "stop_sequence": msg["stop_sequence"]}
    yield {"type": "message_delta", "delta": delta, "usage": {"output_tokens": usage["output_tokens"]}}
    yield {"type": "message_stop"}
