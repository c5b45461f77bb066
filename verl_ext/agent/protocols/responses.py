"""OpenAI's Responses API (`POST /v1/responses`) over the gateway's chat form (pure: no I/O, no tokenizer).

Wire format: OpenAI API reference, "Responses" (create a model response; input items; streaming events), as the
`openai` client's `openai.types.responses` types and `client.responses.stream` helper check it.

Request -> `ChatTurn`:
- `instructions` -> a leading system message; `input` a string (one user message) or items: `message` (roles user /
  system / developer / assistant, text parts), `function_call`, `function_call_output`, `reasoning`. The items of one
  assistant turn (`reasoning`, then `message`, then `function_call`s, as `build_response` emits them) fold into one
  assistant chat message (`reasoning_content`, `content`, `tool_calls`), so a history the agent sends back is the
  chat history the core already holds and continues its token prefix.
- `tools`: function tools only (`strict` is accepted: the schema is rendered to the model, not enforced by
  constrained decoding); a built-in tool (web search, file search, ...) is a 400 naming its type.
- `previous_response_id`: works within an episode for its last response (the caller holds that response's
  conversation); any other id is a 400 that says to send the full input. `store: true` is a 400.
- Sampling fields (`temperature`, `top_p`) are ignored as on the chat path: the recorded log-probs must be the
  policy's. Fields that would change the result and are not implemented are 400s naming them; unknown fields too.

Reply: `output` items `reasoning` (when the core's reasoning parser returned some), `message` with one `output_text`,
`function_call` per tool call (`call_id` = the core's tool-call id); `status` `completed`, or `incomplete` with
`incomplete_details.reason = "max_output_tokens"` when the round hit its token budget; `usage`. `stream_events`
turns a finished reply into the Responses event sequence (`response.created`, `response.in_progress`, per item
`response.output_item.added` ... `response.output_item.done`, then `response.completed` or `response.incomplete`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from verl_ext.agent.protocols import ChatTurn, InvalidRequest, positive_int, text_parts

# Fields accepted and not acted on (they do not change what is sampled or recorded), with the reason.
IGNORED = {
    "model": "one model is served",
    "temperature": "sampling follows the trainer's rollout settings",
    "top_p": "sampling follows the trainer's rollout settings",
    "metadata": "not stored",
    "user": "no effect",
    "safety_identifier": "no effect",
    "prompt_cache_key": "verl routes an episode to one server (prefix cache)",
    "prompt_cache_retention": "as prompt_cache_key",
    "service_tier": "no tiers",
    "truncation": "never truncated: an over-long episode gets 400 context_length_exceeded",
    "include": "nothing extra to include",
    "reasoning": "the gateway's reasoning parser decides",
    "stream_options": "no effect",
    "parallel_tool_calls": "the model decides how many calls it makes",
}
HANDLED = {"input", "instructions", "tools", "tool_choice", "max_output_tokens", "stream", "store"}
HANDLED |= {"previous_response_id", "text"}  # text.format: only {"type": "text"}
INPUT_ITEM_TYPES = ("message", "function_call", "function_call_output", "reasoning")
_TEXT_IN = ("input_text", "output_text", "text")


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def check_fields(body: dict) -> None:
    """400 for any field this adapter neither implements nor may ignore (named, as issue 21 asks of chat)."""
    for key, v in body.items():
        if key in HANDLED or key in IGNORED or v is None:
            continue
        if key == "background" and v is False:
            continue
        raise InvalidRequest(f"{key} is not supported by this gateway's Responses API", key)
    if body.get("store") is True:
        raise InvalidRequest("store is not supported: send the full input each turn (store: false)", "store")
    text = body.get("text")
    if text is not None:
        fmt = text.get("format") if isinstance(text, dict) else None
        if not isinstance(text, dict) or (fmt is not None and (not isinstance(fmt, dict) or fmt.get("type") != "text")):
            kind = fmt.get("type") if isinstance(fmt, dict) else fmt
            raise InvalidRequest(f"text.format {kind!r} is not supported (structured output is not enforced)", "text")


def to_chat_tools(tools: Any) -> list[dict] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise InvalidRequest("tools must be a list", "tools")
    out = []
    for i, t in enumerate(tools):
        kind = t.get("type") if isinstance(t, dict) else None
        if kind != "function":
            raise InvalidRequest(
                f"tools[{i}]: built-in tool {kind!r} is not supported (function tools only: the agent runs its tools)",
                "tools",
            )
        if not isinstance(t.get("name"), str) or not t["name"]:
            raise InvalidRequest(f"tools[{i}].name must be a non-empty string", "tools")
        fn = {"name": t["name"], "parameters": t.get("parameters") or {"type": "object", "properties": {}}}
        if t.get("description"):
            fn["description"] = t["description"]
        out.append({"type": "function", "function": fn})
    return out or None


def to_chat_tool_choice(choice: Any, tools: list[dict] | None) -> str | dict | None:
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        name = choice.get("name")
        if name not in {t["function"]["name"] for t in tools or []}:
            raise InvalidRequest(f"tool_choice names function {name!r}, which is not in tools", "tool_choice")
        return {"type": "function", "function": {"name": name}}
    kind = choice.get("type") if isinstance(choice, dict) else choice
    raise InvalidRequest(f"tool_choice {kind!r} is not supported (auto, none, required or a function)", "tool_choice")


def _call_ids(messages: list[dict]) -> set[str]:
    return {c["id"] for m in messages for c in m.get("tool_calls") or [] if c.get("id")}


def items_to_messages(items: Any, known_calls: set[str]) -> list[dict]:
    """Input items -> chat messages (see module docstring). `known_calls`: call ids of function calls already in
    the conversation (held by `previous_response_id`); a `function_call_output` must answer one of them or a
    `function_call` earlier in `items`."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise InvalidRequest("input must be a non-empty string or a non-empty list of items", "input")
    known = set(known_calls)
    out: list[dict] = []
    turn: dict | None = None  # the assistant turn being folded together

    def assistant() -> dict:
        nonlocal turn
        if turn is None:
            turn = {"role": "assistant", "content": ""}
            out.append(turn)
        return turn

    for i, it in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(it, dict):
            raise InvalidRequest(f"{where} must be an object", "input")
        kind = it.get("type", "message" if "role" in it else None)
        if kind not in INPUT_ITEM_TYPES:
            raise InvalidRequest(
                f"{where}: item type {kind!r} is not supported (supported: {', '.join(INPUT_ITEM_TYPES)})", "input"
            )
        if kind == "message":
            role = it.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise InvalidRequest(f"{where}.role must be user, system, developer or assistant: {role!r}", "input")
            text = text_parts(it.get("content"), f"{where}.content", _TEXT_IN + ("refusal",) * (role == "assistant"))
            if role == "assistant":
                if turn is not None and turn.get("tool_calls"):
                    turn = None  # text after a turn's calls: a new assistant turn
                t = assistant()
                t["content"] += text
            else:
                turn = None
                out.append({"role": "system" if role == "developer" else role, "content": text})
        elif kind == "reasoning":
            if turn is not None and (turn["content"] or turn.get("tool_calls")):
                turn = None  # reasoning opens a turn
            parts = it.get("content") or it.get("summary") or []
            reasoning = text_parts(parts, f"{where}.content", ("reasoning_text", "summary_text"))
            t = assistant()
            t["reasoning_content"] = t.get("reasoning_content", "") + reasoning
        elif kind == "function_call":
            cid, name, args = it.get("call_id"), it.get("name"), it.get("arguments")
            if not isinstance(cid, str) or not cid:
                raise InvalidRequest(f"{where}.call_id must be a non-empty string", "input")
            if not isinstance(name, str) or not name or not isinstance(args, str):
                raise InvalidRequest(f"{where}: a function_call needs a name and arguments (a JSON string)", "input")
            assistant().setdefault("tool_calls", []).append(
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
            )
            known.add(cid)
        else:  # function_call_output
            turn = None
            cid = it.get("call_id")
            if cid not in known:
                raise InvalidRequest(
                    f"{where}: function_call_output for unknown call_id {cid!r} (no function_call with that call_id "
                    "precedes it)",
                    "input",
                )
            output = text_parts(it.get("output"), f"{where}.output", _TEXT_IN)
            out.append({"role": "tool", "tool_call_id": cid, "content": output})
    return out


def to_chat_turn(body: dict, held: tuple[str, list[dict]] | None = None) -> ChatTurn:
    """The request as one round for the core. `held`: (id, conversation without instructions) of the episode's last
    response, which `previous_response_id` may name."""
    check_fields(body)
    prev_id = body.get("previous_response_id")
    history: list[dict] = []
    if prev_id is not None:
        if held is None or held[0] != prev_id:
            raise InvalidRequest(
                f"previous_response_id {prev_id!r} is not this episode's last response: send the full input "
                "(the gateway holds only an episode's last response)",
                "previous_response_id",
            )
        history = held[1]
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise InvalidRequest("instructions must be a string", "instructions")
    tools = to_chat_tools(body.get("tools"))
    tool_choice = to_chat_tool_choice(body.get("tool_choice"), tools)
    conversation = history + items_to_messages(body.get("input"), _call_ids(history))
    if conversation[-1]["role"] == "assistant":
        raise InvalidRequest("the last input item must not be the assistant's (prefill is not supported)", "input")
    system = [{"role": "system", "content": instructions}] if instructions else []
    return ChatTurn(
        messages=system + conversation,
        tools=tools,
        tool_choice=tool_choice,
        max_tokens=positive_int(body, "max_output_tokens"),
        stream=bool(body.get("stream")),
        extra={"conversation": conversation},
    )


def build_response(
    body: dict,
    message: dict,
    finish_reason: str,
    *,
    prompt_tokens: int,
    completion_tokens: int,
    model: str,
    created_at: float,
    new_id: Callable[[str], str] = _new_id,
) -> dict:
    """The Response object for the core's assistant chat `message` (`content`, `reasoning_content`, `tool_calls`)."""
    incomplete = finish_reason == "length"
    output: list[dict] = []
    if message.get("reasoning_content"):
        output.append(
            {
                "id": new_id("rs"),
                "type": "reasoning",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": message["reasoning_content"]}],
                "status": "completed",
            }
        )
    calls = message.get("tool_calls") or []
    if message.get("content") or not calls:
        output.append(
            {
                "id": new_id("msg"),
                "type": "message",
                "role": "assistant",
                "status": "incomplete" if incomplete and not calls else "completed",
                "content": [
                    {"type": "output_text", "text": message.get("content") or "", "annotations": [], "logprobs": []}
                ],
            }
        )
    for c in calls:
        output.append(
            {
                "id": new_id("fc"),
                "type": "function_call",
                "call_id": c["id"],
                "name": c["function"]["name"],
                "arguments": c["function"]["arguments"],
                "status": "completed",
            }
        )
    return {
        "id": new_id("resp"),
        "object": "response",
        "created_at": created_at,
        "completed_at": created_at,
        "model": model,
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "error": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "previous_response_id": body.get("previous_response_id"),
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": body.get("tool_choice") or "auto",
        "tools": body.get("tools") or [],
        "temperature": None,
        "top_p": None,
        "store": False,
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
        "metadata": body.get("metadata") or {},
        "usage": {
            "input_tokens": prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def output_to_messages(response: dict) -> list[dict]:
    """The response's output as the chat messages it adds to the conversation (held for previous_response_id)."""
    return items_to_messages(response["output"], set()) if response["output"] else []


def stream_events(response: dict) -> Iterator[dict]:
    """The Responses event sequence that delivers `response` (already generated): lifecycle events, then every
    output item added, its content streamed as one delta, done; `sequence_number` counts from 0."""
    seq = iter(range(1 << 62))

    def ev(kind: str, **fields) -> dict:
        return {"type": kind, "sequence_number": next(seq), **fields}

    opening = {**response, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
    yield ev("response.created", response=opening)
    yield ev("response.in_progress", response=opening)
    for i, item in enumerate(response["output"]):
        at = {"item_id": item["id"], "output_index": i}
        started = {**item, "status": "in_progress"}
        if item["type"] == "message":
            yield ev("response.output_item.added", output_index=i, item={**started, "content": []})
            text = item["content"][0]["text"]
            empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            yield ev("response.content_part.added", **at, content_index=0, part=empty)
            if text:
                yield ev("response.output_text.delta", **at, content_index=0, delta=text, logprobs=[])
            yield ev("response.output_text.done", **at, content_index=0, text=text, logprobs=[])
            yield ev("response.content_part.done", **at, content_index=0, part=item["content"][0])
        elif item["type"] == "reasoning":
            yield ev("response.output_item.added", output_index=i, item={**started, "content": []})
            text = item["content"][0]["text"]
            yield ev("response.content_part.added", **at, content_index=0, part={"type": "reasoning_text", "text": ""})
            yield ev("response.reasoning_text.delta", **at, content_index=0, delta=text)
            yield ev("response.reasoning_text.done", **at, content_index=0, text=text)
            yield ev("response.content_part.done", **at, content_index=0, part=item["content"][0])
        else:  # function_call
            yield ev("response.output_item.added", output_index=i, item={**started, "arguments": ""})
            yield ev("response.function_call_arguments.delta", **at, delta=item["arguments"])
            yield ev("response.function_call_arguments.done", **at, name=item["name"], arguments=item["arguments"])
        yield ev("response.output_item.done", output_index=i, item=item)
    final = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
    yield ev(final, response=response)


def sse(event: dict) -> bytes:
    """One server-sent event as OpenAI sends them (`event:` the type, `data:` the JSON)."""
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
