"""The protocol translations (pure): chat completions, completions, Responses and Messages requests -> the core's
form, replies -> the protocols' objects and event streams, checked against the `openai` and `anthropic` clients' own
types."""

from __future__ import annotations

import json

import pytest
from anthropic.types import Message, RawMessageStreamEvent
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from verl_ext.agent.gateway.core import RequestError, TurnResult
from verl_ext.agent.gateway.protocols import chat as cc
from verl_ext.agent.gateway.protocols import completions as tc
from verl_ext.agent.gateway.protocols import messages as am
from verl_ext.agent.gateway.protocols import responses as rs
from verl_ext.agent.gateway.toolcall import ToolCall

CALC = {"type": "function", "name": "calc", "description": "evaluate", "parameters": {"type": "object"}, "strict": True}
CALL = {"id": "call_1", "type": "function", "function": {"name": "calc", "arguments": '{"expr": "2+3"}'}}
REPLY = {"role": "assistant", "content": "Let me compute.", "reasoning_content": "think", "tool_calls": [CALL]}
ASK = [{"role": "user", "content": "x"}]


def result(message: dict, finish: str, n_prompt: int = 10, n_out: int = 4) -> TurnResult:
    """The core's answer for an assistant chat message (ids are placeholders: only their counts matter here)."""
    calls = [
        ToolCall(c["function"]["name"], c["function"]["arguments"], c["id"]) for c in message.get("tool_calls", [])
    ]
    return TurnResult(
        content=message["content"],
        reasoning=message.get("reasoning_content"),
        tool_calls=calls,
        finish_reason=finish,
        prompt_ids=[1] * n_prompt,
        response_ids=[2] * n_out,
        logprobs=None,
    )


def responses_turn(body, held=None):
    rs.check_fields(body)
    return rs.to_chat_turn(body, held)


def messages_turn(body):
    am.check_fields(body)
    return am.to_chat_turn(body)


def counter():
    n = iter(range(1000))
    return lambda prefix: f"{prefix}_{next(n)}"


# ---------------------------------------------------------------- chat completions
def test_chat_request_becomes_a_chat_turn():
    body = {
        "model": "m",
        "messages": [{"role": "developer", "content": [{"type": "text", "text": "rules"}]}, *ASK],
        "tools": [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}],
        "tool_choice": "required",
        "max_completion_tokens": 7,
        "stop": "\n\n",
        "logprobs": True,
        "temperature": 0.3,
        "n": 1,
    }
    assert cc.check_fields(body) == ["temperature"]  # reported in the reply's header; n at its default passes
    turn = cc.to_chat_turn(body)
    assert turn.messages == [{"role": "system", "content": "rules"}, *ASK]
    assert turn.tools == body["tools"] and turn.tool_choice == "required"
    assert (turn.max_tokens, turn.stop, turn.logprobs) == (7, ("\n\n",), True)


@pytest.mark.parametrize(
    "body, reason",
    [
        ({"messages": ASK, "n": 2}, "n=2 is not supported by the training gateway (one sampled continuation"),
        ({"messages": ASK, "seed": 1}, "seed=1 is not supported"),
        ({"messages": ASK, "best_of": 1}, "unknown field 'best_of'"),
        ({"messages": []}, "messages must be a non-empty list"),
        ({"messages": ASK, "tool_choice": "required"}, "tool_choice 'required' needs tools"),
        ({"messages": ASK, "logprobs": 1}, "logprobs must be a boolean, got 1"),
        ({"messages": ASK, "max_tokens": -1}, "max_tokens must be a positive integer, got -1"),
        ({"messages": ASK, "stop": [""]}, "stop must be a non-empty string or a list of non-empty strings"),
    ],
)
def test_chat_bad_requests_name_the_field(body, reason):
    with pytest.raises(RequestError) as e:
        cc.check_fields(body)
        cc.to_chat_turn(body)
    assert e.value.status == 400 and reason in e.value.message


def test_chat_reply_and_chunks_are_valid_and_carry_the_same_message():
    r = result(REPLY, "tool_calls")
    c = ChatCompletion.model_validate(cc.build_completion(r, model="tiny", created=1))
    assert c.object == "chat.completion" and c.id.startswith("chatcmpl-") and c.choices[0].logprobs is None
    m = c.choices[0].message
    assert m.content == "Let me compute." and m.tool_calls[0].id == "call_1"
    assert m.model_extra["reasoning_content"] == "think" and c.choices[0].finish_reason == "tool_calls"
    assert (c.usage.prompt_tokens, c.usage.completion_tokens, c.usage.total_tokens) == (10, 4, 14)
    chunks = [
        ChatCompletionChunk.model_validate(e) for e in cc.stream_events(r, model="tiny", created=1, include_usage=True)
    ]
    assert len({k.id for k in chunks}) == 1 and chunks[-1].choices == [] and chunks[-1].usage.total_tokens == 14
    deltas = [k.choices[0].delta for k in chunks[:-1]]
    assert "".join(d.content or "" for d in deltas) == REPLY["content"]
    assert "".join(d.model_extra.get("reasoning_content", "") for d in deltas) == "think"
    calls = [tc for d in deltas for tc in d.tool_calls or []]
    assert calls[0].id == "call_1" and "".join(tc.function.arguments for tc in calls) == CALL["function"]["arguments"]
    assert chunks[-2].choices[0].finish_reason == "tool_calls"
    assert len(cc.stream_events(r, model="tiny", created=1, include_usage=False)) == len(chunks) - 1


def test_chat_logprobs_are_one_entry_per_sampled_token():
    r = result({"content": "ab"}, "stop", n_out=2)
    r.logprobs = [-0.5, -1.0]
    c = ChatCompletion.model_validate(cc.build_completion(r, model="m", created=0, tokens=["a", "é"]))
    entries = c.choices[0].logprobs.content
    assert [(e.token, e.logprob, e.bytes, e.top_logprobs) for e in entries] == [
        ("a", -0.5, [97], []),
        ("é", -1.0, [195, 169], []),
    ]
    assert c.choices[0].message.content == "ab" and c.choices[0].message.tool_calls is None


# ---------------------------------------------------------------- completions
def test_completions_request_and_reply():
    body = {"prompt": ["Count: 1"], "max_tokens": 3, "stop": ["\n"], "logprobs": 0, "echo": False, "user": "u"}
    assert tc.check_fields(body) == ["user"]
    assert tc.to_text_turn(body) == tc.TextTurn("Count: 1", 3, ("\n",), True)
    assert not tc.to_text_turn({"prompt": "x"}).logprobs
    r = result({"content": " 2"}, "stop", 4, 2)
    r.logprobs = [-0.1, -0.2]
    out = Completion.model_validate(tc.build_completion(r, model="m", created=0, tokens=[" ", "2"]))
    assert out.id.startswith("cmpl-") and out.choices[0].text == " 2" and out.choices[0].finish_reason == "stop"
    assert out.choices[0].logprobs.tokens == [" ", "2"] and out.choices[0].logprobs.token_logprobs == [-0.1, -0.2]
    assert out.usage.total_tokens == 6


@pytest.mark.parametrize(
    "body, reason",
    [
        ({"prompt": ""}, "prompt must be a non-empty string"),
        ({"prompt": ["a", "b"]}, "prompt must be a non-empty string"),
        ({"prompt": "x", "logprobs": 2}, "logprobs must be 0 or 1"),
        ({"prompt": "x", "logprobs": True}, "logprobs must be 0 or 1"),
        (
            {"prompt": "x", "echo": True},
            "echo=True is not supported by the training gateway (the prompt is not echoed)",
        ),
        ({"prompt": "x", "messages": ASK}, "unknown field 'messages'"),
    ],
)
def test_completions_bad_requests_name_the_field(body, reason):
    with pytest.raises(RequestError) as e:
        tc.check_fields(body)
        tc.to_text_turn(body)
    assert e.value.status == 400 and reason in e.value.message


# ---------------------------------------------------------------- Responses API
ITEMS = [
    {"role": "developer", "content": "rules"},
    {"role": "user", "content": [{"type": "input_text", "text": "2+3?"}]},
    {"type": "reasoning", "id": "rs_0", "summary": [], "content": [{"type": "reasoning_text", "text": "t"}]},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "On it."}]},
    {"type": "function_call", "call_id": "c1", "name": "calc", "arguments": "{}"},
    {"type": "function_call", "call_id": "c2", "name": "calc", "arguments": '{"a": 1}'},
    {"type": "function_call_output", "call_id": "c1", "output": "5"},
    {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "1"}]},
]
TWO_CALLS = [
    {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": "{}"}},
    {"id": "c2", "type": "function", "function": {"name": "calc", "arguments": '{"a": 1}'}},
]


def test_responses_input_items_fold_into_chat_turns():
    assert rs.items_to_messages(ITEMS, set()) == [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "2+3?"},
        {"role": "assistant", "content": "On it.", "reasoning_content": "t", "tool_calls": TWO_CALLS},
        {"role": "tool", "tool_call_id": "c1", "content": "5"},
        {"role": "tool", "tool_call_id": "c2", "content": "1"},
    ]
    body = {
        "model": "m",
        "instructions": "be brief",
        "input": ITEMS,
        "tools": [CALC],
        "tool_choice": {"type": "function", "name": "calc"},
        "max_output_tokens": 7,
        "temperature": 0.3,
        "include": [rs.LOGPROBS_INCLUDE],
    }
    assert rs.check_fields(body) == ["model", "temperature", "include"]  # reported in the reply's header
    turn, conversation = rs.to_chat_turn(body)
    # The core's form: reasoning is not part of a chat message the template renders for an earlier turn.
    assert turn.messages[0] == {"role": "system", "content": "be brief"}
    assert turn.messages[3] == {"role": "assistant", "content": "On it.", "tool_calls": TWO_CALLS}
    assert conversation == rs.items_to_messages(ITEMS, set())  # held for previous_response_id, instructions apart
    assert turn.tools == [
        {"type": "function", "function": {"name": "calc", "description": "evaluate", "parameters": {"type": "object"}}}
    ]
    assert turn.tool_choice == {"type": "function", "function": {"name": "calc"}}
    assert turn.max_tokens == 7 and turn.logprobs
    assert rs.to_chat_turn({"input": "hi"})[0].messages == [{"role": "user", "content": "hi"}]


def test_responses_reply_is_a_valid_response_and_round_trips_to_the_same_chat_message():
    body = {"input": "2+3?", "tools": [CALC]}
    out = rs.build_response(body, result(REPLY, "tool_calls"), model="tiny", created_at=1.0, new_id=counter())
    r = Response.model_validate(out)
    assert [i.type for i in r.output] == ["reasoning", "message", "function_call"]
    assert r.output[2].call_id == "call_1" and json.loads(r.output[2].arguments) == {"expr": "2+3"}
    assert r.output_text == "Let me compute." and r.status == "completed"
    assert (r.usage.input_tokens, r.usage.output_tokens, r.usage.total_tokens) == (10, 4, 14)
    # The agent sends the output items back (as the openai client's model_dump gives them): same assistant message.
    echoed = [i.model_dump(exclude_none=True) for i in r.output]
    assert rs.items_to_messages(echoed, set()) == [REPLY]
    assert rs.output_to_messages(out) == [REPLY]
    cut = rs.build_response(body, result({"content": "3"}, "length"), model="m", created_at=0)
    assert cut["status"] == "incomplete" and cut["incomplete_details"] == {"reason": "max_output_tokens"}
    assert Response.model_validate(cut).output_text == "3"


@pytest.mark.parametrize("message", [REPLY, {"role": "assistant", "content": ""}])
@pytest.mark.parametrize("finish", ["stop", "length"])
def test_responses_event_sequence_is_well_formed(message, finish):
    out = rs.build_response({"input": "x"}, result(message, finish), model="m", created_at=0)
    events = list(rs.stream_events(out))
    adapter = TypeAdapter(ResponseStreamEvent)
    for e in events:
        adapter.validate_python(e)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == ("response.incomplete" if finish == "length" else "response.completed")
    assert kinds.count("response.output_item.added") == kinds.count("response.output_item.done") == len(out["output"])
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == message["content"]
    assert events[-1]["response"] == out


@pytest.mark.parametrize(
    "body, reason",
    [
        ({"input": [{"type": "image_generation_call", "id": "x"}]}, "input[0]: item type 'image_generation_call'"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "not supported (supported: message"),
        ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0]: built-in tool 'web_search'"),
        ({"input": "x", "tools": [{"type": "file_search", "vector_store_ids": []}]}, "built-in tool 'file_search'"),
        (
            {"input": [{"type": "function_call_output", "call_id": "nope", "output": "1"}]},
            "function_call_output for unknown call_id 'nope'",
        ),
        ({"input": "x", "store": True}, "store=True is not supported"),
        ({"input": "x", "previous_response_id": "resp_1"}, "send the full input"),
        ({"input": "x", "text": {"format": {"type": "json_schema"}}}, "text.format 'json_schema' is not supported"),
        ({"input": "x", "top_logprobs": 2}, "unknown field 'top_logprobs'"),
        ({"input": "x", "conversation": "conv_1"}, "unknown field 'conversation'"),
        ({"input": "x", "max_output_tokens": 0}, "max_output_tokens must be a positive integer"),
        ({"input": "x", "tool_choice": {"type": "function", "name": "nope"}}, "not in tools"),
        ({"input": "x", "tool_choice": {"type": "web_search_preview"}}, "tool_choice 'web_search_preview'"),
        ({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}, "content part type 'input_image'"),
        ({"input": []}, "input must be a non-empty"),
        ({"input": [{"role": "assistant", "content": "x"}]}, "prefill"),
    ],
)
def test_responses_bad_requests_name_the_field(body, reason):
    with pytest.raises(RequestError) as e:
        responses_turn(body)
    assert e.value.status == 400 and reason in e.value.message


def test_previous_response_id_continues_the_held_conversation():
    held_conv = [{"role": "user", "content": "2+3?"}, REPLY]
    body = {
        "instructions": "be brief",
        "previous_response_id": "resp_7",
        "input": [{"type": "function_call_output", "call_id": "call_1", "output": "5"}],
    }
    turn, conversation = responses_turn(body, held=("resp_7", held_conv))
    tool = {"role": "tool", "tool_call_id": "call_1", "content": "5"}
    assert conversation == [*held_conv, tool]
    assert turn.messages == [
        {"role": "system", "content": "be brief"},
        held_conv[0],
        {
            "role": "assistant",
            "content": "Let me compute.",
            "tool_calls": [CALL],
        },
        tool,
    ]
    with pytest.raises(RequestError, match="not this episode's last response"):
        responses_turn({"previous_response_id": "resp_6", "input": "x"}, held=("resp_7", held_conv))


# ---------------------------------------------------------------- Anthropic Messages
def test_messages_blocks_become_chat_turns():
    raw = [
        {"role": "user", "content": "2+3?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "t", "signature": "s"},
                {"type": "text", "text": "On it."},
                {"type": "tool_use", "id": "toolu_1", "name": "calc", "input": {"expr": "2+3"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "5"}]},
                {"type": "text", "text": "Now answer."},
            ],
        },
    ]
    call = {"id": "toolu_1", "type": "function", "function": {"name": "calc", "arguments": '{"expr": "2+3"}'}}
    chat = [
        {"role": "user", "content": "2+3?"},
        {"role": "assistant", "content": "On it.", "reasoning_content": "t", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "5"},
        {"role": "user", "content": "Now answer."},
    ]
    assert am.to_messages(raw) == chat
    turn = messages_turn(
        {
            "model": "claude",
            "max_tokens": 9,
            "system": [{"type": "text", "text": "be brief"}],
            "messages": raw,
            "tools": [{"name": "calc", "description": "evaluate", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any"},
            "stop_sequences": ["\n\n"],
            "temperature": 0.1,
        }
    )
    del chat[1]["reasoning_content"]  # the core's form (reasoning of earlier turns is not rendered)
    assert turn.messages == [{"role": "system", "content": "be brief"}, *chat]
    assert turn.tool_choice == "required" and turn.stop == ("\n\n",) and turn.max_tokens == 9
    assert turn.tools[0]["function"] == {"name": "calc", "description": "evaluate", "parameters": {"type": "object"}}


@pytest.mark.parametrize(
    "finish, stop_seq, message, reason",
    [
        ("tool_calls", None, REPLY, "tool_use"),
        ("length", None, {"role": "assistant", "content": "3"}, "max_tokens"),
        ("stop", "\n\n", {"role": "assistant", "content": "3"}, "stop_sequence"),
        ("stop", None, {"role": "assistant", "content": ""}, "end_turn"),
    ],
)
def test_messages_reply_and_stream_are_valid_and_round_trip(finish, stop_seq, message, reason):
    out = am.build_message(result(message, finish, 5, 3), stop_sequence=stop_seq, model="tiny", new_id=counter())
    m = Message.model_validate(out)
    assert m.stop_reason == reason and m.stop_sequence == (stop_seq if reason == "stop_sequence" else None)
    assert (m.usage.input_tokens, m.usage.output_tokens) == (5, 3)
    echoed = {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]}
    assert am.to_messages([{"role": "user", "content": "q"}, echoed])[1] == message
    events = list(am.stream_events(out))
    adapter = TypeAdapter(RawMessageStreamEvent)
    for e in events:
        adapter.validate_python(e)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds.count("content_block_start") == kinds.count("content_block_stop") == len(out["content"])
    assert events[-2]["delta"]["stop_reason"] == reason and events[-2]["usage"]["output_tokens"] == 3


@pytest.mark.parametrize(
    "body, reason",
    [
        ({"messages": ASK}, "max_tokens: field required"),
        ({"max_tokens": 0, "messages": ASK}, "max_tokens must be a positive integer"),
        ({"max_tokens": 5, "messages": []}, "messages: must be a non-empty list"),
        (
            {"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
            "messages.0.content.0: block type 'image' is not supported",
        ),
        (
            {
                "max_tokens": 5,
                "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t9"}]}],
            },
            "tool_result for unknown tool_use_id 't9'",
        ),
        (
            {"max_tokens": 5, "messages": ASK, "tools": [{"type": "web_search_20250305", "name": "web_search"}]},
            "tools.0: built-in tool 'web_search_20250305'",
        ),
        ({"max_tokens": 5, "messages": ASK, "tools": [{"name": "calc"}]}, "input_schema: field required"),
        ({"max_tokens": 5, "messages": ASK, "tool_choice": {"type": "tool", "name": "x"}}, "'x', which is not in"),
        ({"max_tokens": 5, "messages": ASK, "stop_sequences": [""]}, "stop_sequences must be"),
        ({"max_tokens": 5, "messages": ASK, "container": "c"}, "unknown field 'container'"),
        ({"max_tokens": 5, "messages": [*ASK, {"role": "assistant", "content": "y"}]}, "prefill is not supported"),
    ],
)
def test_messages_bad_requests_name_the_field(body, reason):
    with pytest.raises(RequestError) as e:
        messages_turn(body)
    assert e.value.status == 400 and reason in e.value.message


def test_messages_error_shape():
    assert am.error_body(400, "max_tokens: field required") == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "max_tokens: field required"},
    }
    assert am.error_body(401, "x")["error"]["type"] == "authentication_error"
    assert am.error_body(500, "x")["error"]["type"] == "api_error"
