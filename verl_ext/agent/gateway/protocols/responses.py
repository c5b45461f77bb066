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
    text_parts,
)
from verl_ext.agent.gateway.protocols.fields import check_fields as _check_fields

HONOURED = {"input", "instructions", "tools", "tool_choice", "max_output_tokens", "stream", "previous_response_id"}
HONOURED |= {"text"}  # text.format {"type": "text"} only (checked in `to_chat_turn`); text.verbosity is ignored
# Accepted and not acted on: they do not change what is sampled or recorded.
IGNORED = {
    "model",  # one model is served
    "temperature",  # sampling follows the trainer's rollout settings (the log-probs must be the policy's)
    "top_p",
    "metadata",
    "user",
    "safety_identifier",
    "prompt_cache_key",  # verl routes an episode to one server (its prefix cache)
    "prompt_cache_retention",
    "prompt_cache_options",
    "service_tier",
    "include",  # nothing extra exists to include
    "reasoning",  # the gateway's reasoning parser decides
    "stream_options",
}
# Accepted only at these values; anything else is a 400 naming the field.
REJECTED = {
    "store": (False,),  # the gateway holds only an episode's last response (previous_response_id)
    "background": (False,),
    "truncation": ("disabled",),  # an over-long episode gets 400 context_length_exceeded, never a cut history
    "parallel_tool_calls": (True,),  # calls are parsed as the policy wrote them
}
INPUT_ITEM_TYPES = ("message", "function_call", "function_call_output", "reasoning")
_TEXT_IN = ("input_text", "output_text", "text")


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def check_fields(body: dict) -> list[str]:
    """Nothing silently ignored (`fields.check_fields`): the ignored fields present (for the reply's header)."""
    return _check_fields(body, HONOURED, IGNORED, REJECTED)


def to_chat_tools(tools: Any) -> list[dict] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise bad("tools must be a list")
    out = []
    for i, t in enumerate(tools):
        kind = t.get("type") if isinstance(t, dict) else None
        if kind != "function":
            raise bad(
                f"tools[{i}]: built-in tool {kind!r} is not supported (function tools only: agents run their tools)"
            )
        if not isinstance(t.get("name"), str) or not t["name"]:
            raise bad(f"tools[{i}].name must be a non-empty string")
        out.append(
            function_tool(t["name"], t.get("parameters") or {"type": "object", "properties": {}}, t.get("description"))
        )
    return checked_tools(out)


def to_chat_tool_choice(choice: Any, tools: list[dict] | None) -> str | dict:
    """`auto` / `none` / `required` / {"type": "function", "name"} -> the chat form; hosted-tool choices are 400s."""
    if isinstance(choice, dict) and choice.get("type") == "function":
        choice = {"type": "function", "function": {"name": choice.get("name")}}
    elif isinstance(choice, dict):
        raise bad(f"tool_choice {choice.get('type')!r} is not supported (auto, none, required or a function)")
    return checked_tool_choice(choice, tools)


def _call_ids(messages: list[dict]) -> set[str]:
    return {c["id"] for m in messages for c in m.get("tool_calls") or [] if c.get("id")}


def items_to_messages(items: Any, known_calls: set[str]) -> list[dict]:
    """Input items -> chat messages (see module docstring). `known_calls`: call ids of function calls already in
    the conversation (held by `previous_response_id`); a `function_call_output` must answer one of them or a
    `function_call` earlier in `items`."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise bad("input must be a non-empty string or a non-empty list of items")
    fold = _Fold(known_calls)
    for i, it in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(it, dict):
            raise bad(f"{where} must be an object")
        kind = it.get("type", "message" if "role" in it else None)
        if kind not in INPUT_ITEM_TYPES:
            raise bad(f"{where}: item type {kind!r} is not supported (supported: {', '.join(INPUT_ITEM_TYPES)})")
        getattr(fold, kind)(it, where)
    return fold.out


class _Fold:
    """Input items folded into chat messages, one method per item type: consecutive assistant items (text,
    reasoning, calls) make one assistant turn; a user/system message or a call's output closes it."""

    def __init__(self, known_calls: set[str]):
        self.known = set(known_calls)
        self.out: list[dict] = []
        self.turn: dict | None = None  # the assistant turn being folded together

    def assistant(self) -> dict:
        if self.turn is None:
            self.turn = {"role": "assistant", "content": ""}
            self.out.append(self.turn)
        return self.turn

    def message(self, it: dict, where: str) -> None:
        role = it.get("role")
        if role not in ("user", "system", "developer", "assistant"):
            raise bad(f"{where}.role must be user, system, developer or assistant: {role!r}")
        text = text_parts(it.get("content"), f"{where}.content", _TEXT_IN + ("refusal",) * (role == "assistant"))
        if role == "assistant":
            if self.turn is not None and self.turn.get("tool_calls"):
                self.turn = None  # text after a turn's calls: a new assistant turn
            self.assistant()["content"] += text
        else:
            self.turn = None
            self.out.append({"role": "system" if role == "developer" else role, "content": text})

    def reasoning(self, it: dict, where: str) -> None:
        if self.turn is not None and (self.turn["content"] or self.turn.get("tool_calls")):
            self.turn = None  # reasoning opens a turn
        parts = it.get("content") or it.get("summary") or []
        reasoning = text_parts(parts, f"{where}.content", ("reasoning_text", "summary_text"))
        t = self.assistant()
        t["reasoning_content"] = t.get("reasoning_content", "") + reasoning

    def function_call(self, it: dict, where: str) -> None:
        cid, name, args = it.get("call_id"), it.get("name"), it.get("arguments")
        if not isinstance(cid, str) or not cid:
            raise bad(f"{where}.call_id must be a non-empty string")
        if not isinstance(name, str) or not name or not isinstance(args, str):
            raise bad(f"{where}: a function_call needs a name and arguments (a JSON string)")
        self.assistant().setdefault("tool_calls", []).append(
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
        )
        self.known.add(cid)

    def function_call_output(self, it: dict, where: str) -> None:
        self.turn = None
        cid = it.get("call_id")
        if cid not in self.known:
            raise bad(
                f"{where}: function_call_output for unknown call_id {cid!r} (no function_call with that call_id "
                "precedes it)",
            )
        output = text_parts(it.get("output"), f"{where}.output", _TEXT_IN)
        self.out.append({"role": "tool", "tool_call_id": cid, "content": output})


LOGPROBS_INCLUDE = "message.output_text.logprobs"


def to_chat_turn(body: dict, held: tuple[str, list[dict]] | None = None) -> tuple[ChatTurn, list[dict]]:
    """The request as one round for the core, and the conversation it continues without the instructions (what the
    caller holds, with the reply, for the next `previous_response_id`). `held`: (id, conversation) of the episode's
    last response. Call `check_fields` first."""
    prev_id = body.get("previous_response_id")
    history: list[dict] = []
    if prev_id is not None:
        if held is None or held[0] != prev_id:
            raise bad(
                f"previous_response_id {prev_id!r} is not this episode's last response: send the full input "
                "(the gateway holds only an episode's last response)"
            )
        history = held[1]
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise bad("instructions must be a string")
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    if text is not None and (not isinstance(text, dict) or (fmt is not None and (fmt or {}).get("type") != "text")):
        kind = fmt.get("type") if isinstance(fmt, dict) else fmt
        raise bad(f"text.format {kind!r} is not supported (constrained decoding would not sample the policy)")
    tools = to_chat_tools(body.get("tools"))
    tool_choice = to_chat_tool_choice(body.get("tool_choice"), tools)
    conversation = history + items_to_messages(body.get("input"), _call_ids(history))
    if conversation[-1]["role"] == "assistant":
        raise bad("the last input item must not be the assistant's (prefill is not supported)")
    system = [{"role": "system", "content": instructions}] if instructions else []
    include = body.get("include") or []
    turn = ChatTurn(
        messages=[normalize_message(m, i) for i, m in enumerate(system + conversation)],
        tools=tools,
        tool_choice=tool_choice,
        max_tokens=positive_int(body, "max_output_tokens"),
        logprobs=isinstance(include, list) and LOGPROBS_INCLUDE in include,
    )
    return turn, conversation


def build_response(
    body: dict,
    result: TurnResult,
    *,
    model: str,
    created_at: float,
    token_logprobs: list[dict] | None = None,
    new_id: Callable[[str], str] = _new_id,
) -> dict:
    """The Response object for the core's `result`. `token_logprobs`: OpenAI logprob entries of the sampled tokens
    (when the request included `message.output_text.logprobs`)."""
    incomplete = result.finish_reason == "length"
    n_in, n_out = len(result.prompt_ids), len(result.response_ids)
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
        "output": _output_items(result, incomplete, token_logprobs, new_id),
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
            "input_tokens": n_in,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": n_out,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": n_in + n_out,
        },
    }


def _output_items(
    result: TurnResult, incomplete: bool, token_logprobs: list[dict] | None, new_id: Callable[[str], str]
) -> list[dict]:
    """The response's `output`: the reasoning item, the message, then one function_call item per tool call."""
    output: list[dict] = []
    if result.reasoning:
        output.append(
            {
                "id": new_id("rs"),
                "type": "reasoning",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": result.reasoning}],
                "status": "completed",
            }
        )
    if result.content or not result.tool_calls:
        part = {"type": "output_text", "text": result.content, "annotations": [], "logprobs": token_logprobs or []}
        output.append(
            {
                "id": new_id("msg"),
                "type": "message",
                "role": "assistant",
                "status": "incomplete" if incomplete and not result.tool_calls else "completed",
                "content": [part],
            }
        )
    for c in result.tool_calls:
        output.append(
            {
                "id": new_id("fc"),
                "type": "function_call",
                "call_id": c.id,
                "name": c.name,
                "arguments": c.arguments,
                "status": "completed",
            }
        )
    return output


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
