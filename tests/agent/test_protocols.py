"""The Responses and Messages translations (pure): requests -> the core's chat form, replies -> the protocols'
objects and event streams, checked against the `openai` and `anthropic` clients' own types."""

from __future__ import annotations

import json

import pytest
from anthropic.types import Message, RawMessageStreamEvent
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from verl_ext.agent.protocols import InvalidRequest
from verl_ext.agent.protocols import messages as am
from verl_ext.agent.protocols import responses as rs

CALC = {"type": "function", "name": "calc", "description": "evaluate", "parameters": {"type": "object"}, "strict": True}
CALL = {"id": "call_1", "type": "function", "function": {"name": "calc", "arguments": '{"expr": "2+3"}'}}
REPLY = {"role": "assistant", "content": "Let me compute.", "reasoning_content": "think", "tool_calls": [CALL]}


def counter():
    n = iter(range(1000))
    return lambda prefix: f"{prefix}_{next(n)}"


# ---------------------------------------------------------------- Responses API
def test_responses_input_items_fold_into_chat_turns():
    turn = rs.to_chat_turn(
        {
            "model": "m",
            "instructions": "be brief",
            "input": [
                {"role": "developer", "content": "rules"},
                {"role": "user", "content": [{"type": "input_text", "text": "2+3?"}]},
                {
                    "type": "reasoning",
                    "id": "rs_0",
                    "summary": [],
                    "content": [{"type": "reasoning_text", "text": "t"}],
                },
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "On it."}]},
                {"type": "function_call", "call_id": "c1", "name": "calc", "arguments": "{}"},
                {"type": "function_call", "call_id": "c2", "name": "calc", "arguments": '{"a": 1}'},
                {"type": "function_call_output", "call_id": "c1", "output": "5"},
                {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "1"}]},
            ],
            "tools": [CALC],
            "tool_choice": {"type": "function", "name": "calc"},
            "max_output_tokens": 7,
            "temperature": 0.3,
        }
    )
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": "{}"}},
        {"id": "c2", "type": "function", "function": {"name": "calc", "arguments": '{"a": 1}'}},
    ]
    assert turn.messages == [
        {"role": "system", "content": "be brief"},
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "2+3?"},
        {"role": "assistant", "content": "On it.", "reasoning_content": "t", "tool_calls": calls},
        {"role": "tool", "tool_call_id": "c1", "content": "5"},
        {"role": "tool", "tool_call_id": "c2", "content": "1"},
    ]
    assert turn.tools == [
        {"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}, "description": "evaluate"}}
    ]
    assert turn.tool_choice == {"type": "function", "function": {"name": "calc"}} and turn.max_tokens == 7
    assert rs.to_chat_turn({"input": "hi"}).messages == [{"role": "user", "content": "hi"}]


def test_responses_reply_is_a_valid_response_and_round_trips_to_the_same_chat_message():
    body = {"input": "2+3?", "tools": [CALC]}
    out = rs.build_response(
        body, REPLY, "tool_calls", prompt_tokens=10, completion_tokens=4, model="tiny", created_at=1.0, new_id=counter()
    )
    r = Response.model_validate(out)
    assert [i.type for i in r.output] == ["reasoning", "message", "function_call"]
    assert r.output[2].call_id == "call_1" and json.loads(r.output[2].arguments) == {"expr": "2+3"}
    assert r.output_text == "Let me compute." and r.status == "completed"
    assert (r.usage.input_tokens, r.usage.output_tokens, r.usage.total_tokens) == (10, 4, 14)
    # The agent sends the output items back (as the openai client's model_dump gives them): same assistant message.
    echoed = [i.model_dump(exclude_none=True) for i in r.output]
    assert rs.items_to_messages(echoed, set()) == [REPLY]
    assert rs.output_to_messages(out) == [REPLY]
    plain = {"role": "assistant", "content": "3"}
    cut = rs.build_response(body, plain, "length", prompt_tokens=1, completion_tokens=2, model="m", created_at=0)
    assert cut["status"] == "incomplete" and cut["incomplete_details"] == {"reason": "max_output_tokens"}
    assert Response.model_validate(cut).output_text == "3"


@pytest.mark.parametrize("message", [REPLY, {"role": "assistant", "content": ""}])
@pytest.mark.parametrize("finish", ["stop", "length"])
def test_responses_event_sequence_is_well_formed(message, finish):
    out = rs.build_response(
        {"input": "x"}, message, finish, prompt_tokens=3, completion_tokens=2, model="m", created_at=0
    )
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
    assert rs.sse(events[0]).startswith(b"event: response.created\ndata: {")


@pytest.mark.parametrize(
    "body, param, reason",
    [
        ({"input": [{"type": "image_generation_call", "id": "x"}]}, "input", "item type 'image_generation_call'"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input", "not supported (supported: message"),
        ({"input": "x", "tools": [{"type": "web_search"}]}, "tools", "built-in tool 'web_search'"),
        ({"input": "x", "tools": [{"type": "file_search", "vector_store_ids": []}]}, "tools", "'file_search'"),
        ({"input": [{"type": "function_call_output", "call_id": "nope", "output": "1"}]}, "input", "unknown call_id"),
        ({"input": "x", "store": True}, "store", "store is not supported"),
        ({"input": "x", "previous_response_id": "resp_1"}, "previous_response_id", "send the full input"),
        ({"input": "x", "text": {"format": {"type": "json_schema"}}}, "text", "'json_schema' is not supported"),
        ({"input": "x", "top_logprobs": 2}, "top_logprobs", "top_logprobs is not supported"),
        ({"input": "x", "max_output_tokens": 0}, "max_output_tokens", "positive integer"),
        ({"input": "x", "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice", "not in tools"),
        ({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}, "input[0].content", "'input_image'"),
        ({"input": []}, "input", "non-empty"),
        ({"input": [{"role": "assistant", "content": "x"}]}, "input", "prefill"),
    ],
)
def test_responses_bad_requests_name_the_field(body, param, reason):
    with pytest.raises(InvalidRequest) as e:
        rs.to_chat_turn(body)
    assert reason in e.value.message and e.value.param == param


def test_previous_response_id_continues_the_held_conversation():
    held_conv = [{"role": "user", "content": "2+3?"}, REPLY]
    turn = rs.to_chat_turn(
        {
            "instructions": "be brief",
            "previous_response_id": "resp_7",
            "input": [{"type": "function_call_output", "call_id": "call_1", "output": "5"}],
        },
        held=("resp_7", held_conv),
    )
    assert turn.messages == [
        {"role": "system", "content": "be brief"},
        *held_conv,
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": "5",
        },
    ]
    assert turn.extra["conversation"] == turn.messages[1:]  # what the caller holds next (instructions apart)
    with pytest.raises(InvalidRequest, match="not this episode's last response"):
        rs.to_chat_turn({"previous_response_id": "resp_6", "input": "x"}, held=("resp_7", held_conv))


# ---------------------------------------------------------------- Anthropic Messages
def test_messages_blocks_become_chat_turns():
    turn = am.to_chat_turn(
        {
            "model": "claude",
            "max_tokens": 9,
            "system": [{"type": "text", "text": "be brief"}],
            "messages": [
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
            ],
            "tools": [{"name": "calc", "description": "evaluate", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any"},
            "stop_sequences": ["\n\n"],
            "temperature": 0.1,
        }
    )
    call = {"id": "toolu_1", "type": "function", "function": {"name": "calc", "arguments": '{"expr": "2+3"}'}}
    assert turn.messages == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "2+3?"},
        {"role": "assistant", "content": "On it.", "reasoning_content": "t", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "5"},
        {"role": "user", "content": "Now answer."},
    ]
    assert turn.tool_choice == "required" and turn.stop == ["\n\n"] and turn.max_tokens == 9
    assert turn.tools[0]["function"] == {"name": "calc", "parameters": {"type": "object"}, "description": "evaluate"}


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
    out = am.build_message(
        message, finish, stop_sequence=stop_seq, prompt_tokens=5, completion_tokens=3, model="tiny", new_id=counter()
    )
    m = Message.model_validate(out)
    assert m.stop_reason == reason and m.stop_sequence == (stop_seq if reason == "stop_sequence" else None)
    assert (m.usage.input_tokens, m.usage.output_tokens) == (5, 3)
    echoed = {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]}
    ask = {"role": "user", "content": "q"}
    back = am.to_messages([ask, echoed])[1]
    assert back == message
    events = list(am.stream_events(out))
    adapter = TypeAdapter(RawMessageStreamEvent)
    for e in events:
        adapter.validate_python(e)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds.count("content_block_start") == kinds.count("content_block_stop") == len(out["content"])
    assert events[-2]["delta"]["stop_reason"] == reason and events[-2]["usage"]["output_tokens"] == 3
    assert am.sse(events[0]).startswith(b"event: message_start\ndata: {")


@pytest.mark.parametrize(
    "body, reason",
    [
        ({"messages": [{"role": "user", "content": "x"}]}, "max_tokens: field required"),
        ({"max_tokens": 0, "messages": [{"role": "user", "content": "x"}]}, "max_tokens must be a positive integer"),
        ({"max_tokens": 5, "messages": []}, "messages: must be a non-empty list"),
        (
            {"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
            "block type 'image' is not supported",
        ),
        (
            {
                "max_tokens": 5,
                "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9"}]}],
            },
            "tool_result for unknown tool_use_id 'toolu_9'",
        ),
        (
            {
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "web_search_20250305", "name": "web_search"}],
            },
            "built-in tool 'web_search_20250305'",
        ),
        (
            {"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tools": [{"name": "calc"}]},
            "input_schema: field required",
        ),
        (
            {"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "tool"}},
            "tool_choice.name: None is not in tools",
        ),
        ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "container": "c"}, "container: this field"),
        (
            {"max_tokens": 5, "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]},
            "prefill is not supported",
        ),
    ],
)
def test_messages_bad_requests_name_the_field(body, reason):
    with pytest.raises(InvalidRequest) as e:
        am.to_chat_turn(body)
    assert reason in e.value.message


def test_messages_error_shape():
    assert am.error_body(400, "max_tokens: field required") == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "max_tokens: field required"},
    }
    assert am.error_body(401, "x")["error"]["type"] == "authentication_error"
    assert am.error_body(500, "x")["error"]["type"] == "api_error"
