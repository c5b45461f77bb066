"""The tool-call codec on the real tiny tokenizer and verl's real `hermes` ToolParser, the tiny chat template's
tools rendering, and history matching (pure parts of the agent core)."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.agent.tasks import CALC
from verl_ext.agent.gateway.core import match_history
from verl_ext.agent.gateway.toolcall import (
    ArgumentsNotJSON,
    ToolCallCodec,
    ToolSpecError,
    assistant_key,
    check_tool_choice,
    check_tools,
    split_reasoning,
)
from verl_ext.toy.tokenizer import PLAIN_CHAT_TEMPLATE

TOOLS = [CALC, {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


def call(name, args, raw=False):
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args if raw else json.dumps(args)}}}\n</tool_call>'


@pytest.fixture(scope="module")
def codec(tool_tokenizer):
    return ToolCallCodec(tool_tokenizer, "hermes", "think")


def parse(codec, tok, text, tools=TOOLS, choice="auto", stop=()):
    ids = tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]
    return asyncio.run(codec.parse(ids, tools, choice, stop))


def test_template_renders_tools_and_hermes_calls_like_qwen25(tool_tokenizer):
    tok = tool_tokenizer
    msgs = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "1+2?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "a", "type": "function", "function": {"name": "calc", "arguments": {"expr": "1+2"}}}],
        },
        {"role": "tool", "tool_call_id": "a", "content": "3"},
    ]
    text = tok.apply_chat_template(msgs, tools=[CALC], tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nBe brief.\n\n# Tools\n<tools>\n"
        + json.dumps(CALC)
        + '\n</tools>\nCall a function as <tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}'
        "\n</tool_call><|im_end|>\n<|im_start|>user\n1+2?<|im_end|>\n<|im_start|>assistant\n"
        '<tool_call>\n{"name": "calc", "arguments": {"expr": "1+2"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n3\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    # Without tools the prompts are those the tiny model was warmed up on.
    plain = msgs[:2] + [{"role": "assistant", "content": "3"}, {"role": "user", "content": "ok"}]
    assert tok.apply_chat_template(plain, tokenize=False, add_generation_prompt=True) == tok.apply_chat_template(
        plain, tokenize=False, add_generation_prompt=True, chat_template=PLAIN_CHAT_TEMPLATE
    )


def test_parallel_calls_content_and_reasoning(codec, tool_tokenizer):
    text = (
        "<think>I could "
        + call("calc", {"expr": "9"})
        + " but no.</think>Computing both.\n"
        + call("calc", {"expr": "1+2"})
        + "\n"
        + call("lookup", {"key": "x"})
    )
    r = parse(codec, tool_tokenizer, text)
    assert [(c.name, json.loads(c.arguments)) for c in r.tool_calls] == [
        ("calc", {"expr": "1+2"}),
        ("lookup", {"key": "x"}),
    ]
    assert r.content == "Computing both." and not r.faults
    assert r.reasoning == "I could " + call("calc", {"expr": "9"}) + " but no."  # never a call inside reasoning
    assert len({c.id for c in r.tool_calls}) == 2


def test_a_call_only_inside_reasoning_is_not_a_call(codec, tool_tokenizer):
    r = parse(codec, tool_tokenizer, "<think>" + call("calc", {"expr": "1"}) + "</think>The answer is 1.")
    assert r.tool_calls == [] and r.content == "The answer is 1." and not r.faults


@pytest.mark.parametrize(
    "text, faults",
    [
        (call("calc", '{"expr": "1+', raw=True), {"malformed": 1}),  # bad JSON
        (call("calc", '"1+2"', raw=True), {"malformed": 1}),  # arguments not an object
        (call("rm_rf", {"path": "/"}), {"unknown_tool": 1}),
        (
            call("calc", {"expr": "1"}) + call("nope", {}) + call("calc", "{oops", raw=True),
            {"malformed": 1, "unknown_tool": 1},
        ),
        ('<tool_call>\n{"name": "calc", "arguments": {"expr": "1', {"malformed": 1}),  # unclosed (cut by length)
    ],
)
def test_malformed_calls_come_back_as_plain_content_and_are_counted(codec, tool_tokenizer, text, faults):
    r = parse(codec, tool_tokenizer, text)
    assert r.tool_calls == [] and dict(r.faults) == faults
    assert r.content == text  # exactly as sampled, markup included
    assert r.fault_detail


def test_tool_choice_none_required_and_named(codec, tool_tokenizer):
    text = call("calc", {"expr": "2"})
    r = parse(codec, tool_tokenizer, text, choice="none")
    assert r.tool_calls == [] and r.content == text and not r.faults  # none: no parsing, not a fault
    r = parse(codec, tool_tokenizer, "just text", choice="required")
    assert r.tool_calls == [] and dict(r.faults) == {"choice_unmet": 1}
    named = {"type": "function", "function": {"name": "lookup"}}
    r = parse(codec, tool_tokenizer, text, choice=named)
    assert r.tool_calls == [] and dict(r.faults) == {"unknown_tool": 1}
    r = parse(codec, tool_tokenizer, call("lookup", {}), choice=named)
    assert [c.name for c in r.tool_calls] == ["lookup"]
    assert parse(codec, tool_tokenizer, text, tools=None).tool_calls == []  # no tools: never parsed


def test_forced_openings_are_what_the_template_renders_before_a_call(codec, tool_tokenizer):
    """`required` / a named function make the reply start with the parser's call opening: that text must be what the
    template renders for such a call after the generation prompt, so the next round's context is the same text."""
    tok = tool_tokenizer
    ask = [{"role": "user", "content": "1+2?"}]
    tc = {"id": "a", "type": "function", "function": {"name": "calc", "arguments": {"expr": "1+2"}}}
    prompt = tok.apply_chat_template(ask, tools=[CALC], tokenize=False, add_generation_prompt=True)
    full = tok.apply_chat_template(
        ask + [{"role": "assistant", "content": "", "tool_calls": [tc]}], tools=[CALC], tokenize=False
    )
    reply = full[len(prompt) :]
    named = codec.forced_opening({"type": "function", "function": {"name": "calc"}})
    assert codec.forced_opening("auto") == codec.forced_opening("none") == ""
    assert reply.startswith(codec.forced_opening("required")) and codec.forced_opening("required") == "<tool_call>\n"
    assert reply.startswith(named) and reply[len(named) :].startswith(' {"expr": "1+2"}')
    # The parse of opening + sampled text is the call; stop strings apply to the sampled text only.
    ids = tok.encode(' {"expr": "1+2"}}\n</tool_call>', add_special_tokens=False) + [tok.eos_token_id]
    r = asyncio.run(codec.parse(ids, TOOLS, {"type": "function", "function": {"name": "calc"}}, ("</tool",), named))
    assert r.stopped_by == "</tool" and r.faults == {"malformed": 1}  # the stop cut the closing tag: unclosed
    r = asyncio.run(codec.parse(ids, TOOLS, {"type": "function", "function": {"name": "calc"}}, (), named))
    assert [(c.name, json.loads(c.arguments)) for c in r.tool_calls] == [("calc", {"expr": "1+2"})]


def test_parsers_without_a_known_opening_refuse_required_by_name(tool_tokenizer):
    qwen3 = ToolCallCodec(tool_tokenizer, "qwen3_coder", "none")
    assert qwen3.forced_opening("auto") == ""
    with pytest.raises(ToolSpecError, match="tool_choice 'required'.*hermes.*'qwen3_coder'"):
        qwen3.forced_opening("required")


def test_stop_string_cuts_text_and_a_cut_call_is_malformed(codec, tool_tokenizer):
    r = parse(codec, tool_tokenizer, "The answer is 42. END and more", stop=("END",))
    assert r.content == "The answer is 42. " and r.stopped_by == "END"
    r = parse(codec, tool_tokenizer, call("calc", {"expr": "1+2"}), stop=('"1+',))
    assert r.tool_calls == [] and dict(r.faults) == {"malformed": 1}


def test_split_reasoning_variants():
    assert split_reasoning("<think>a</think>b", "think") == ("a", "b")
    assert split_reasoning("a</think>b", "think") == ("a", "b")  # the template opened the block
    assert split_reasoning("x<think>cut by length", "think") == ("cut by length", "x")
    assert split_reasoning("<think>a</think>b", "none") == (None, "<think>a</think>b")
    with pytest.raises(ValueError, match="reasoning_parser"):
        split_reasoning("x", "deepseek")


def test_request_checks_name_the_field():
    assert check_tools(None) is None
    with pytest.raises(ToolSpecError, match=r"tools\[0\]"):
        check_tools([{"type": "web_search"}])
    with pytest.raises(ToolSpecError, match=r"tools\[1\].function.name 'calc' is defined twice"):
        check_tools([CALC, CALC])
    tools = check_tools(TOOLS)
    assert check_tool_choice(None, tools) == "auto"
    with pytest.raises(ToolSpecError, match="tool_choice 'required' needs tools"):
        check_tool_choice("required", None)
    with pytest.raises(ToolSpecError, match="tool_choice names function 'nope'"):
        check_tool_choice({"type": "function", "function": {"name": "nope"}}, tools)
    with pytest.raises(ToolSpecError, match="tool_choice must be one of"):
        check_tool_choice("any", tools)


def test_assistant_key_survives_reserialization_but_not_edits():
    ours = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "calc", "arguments": '{"expr": "1+2", "n": 1}'}}
        ],
    }
    echoed = {
        "role": "assistant",
        "content": None,
        "reasoning_content": "thinking...",
        "tool_calls": [
            {"id": "tc-renamed", "function": {"name": "calc", "arguments": '{\n  "n": 1,\n  "expr": "1+2"\n}'}}
        ],
    }
    assert assistant_key(echoed) == assistant_key(ours)
    assert assistant_key({**ours, "content": "<think>hmm</think>"}) == assistant_key(ours)  # reasoning kept inline
    edited = {**echoed, "tool_calls": [{"function": {"name": "calc", "arguments": '{"expr": "1+3", "n": 1}'}}]}
    assert assistant_key(edited) != assistant_key(ours)
    with pytest.raises(ArgumentsNotJSON):
        assistant_key({**echoed, "tool_calls": [{"function": {"name": "calc", "arguments": "{'expr': python}"}}]})


def test_match_history_reasons():
    u = {"role": "user", "content": "q"}
    reply = {"role": "assistant", "content": "a"}
    hist = [u, reply]
    nxt = {"role": "user", "content": "more"}
    assert match_history(hist, [u, {"role": "assistant", "content": "a"}, nxt]) is None
    assert match_history(hist, [u, reply]) == "rewrite"  # nothing new
    assert match_history(hist, [{"role": "user", "content": "Q"}, reply, nxt]) == "rewrite"
    assert match_history(hist, [u, {"role": "assistant", "content": "b"}, nxt]) == "reply_changed"
    assert match_history(hist, [u, nxt, nxt]) == "reply_changed"  # our reply dropped
    bad = {"role": "assistant", "content": "a", "tool_calls": [{"function": {"name": "f", "arguments": "{x"}}]}
    assert match_history(hist, [u, bad, nxt]) == "parse_failure"
    tool_hist = [
        u,
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]},
    ]
    t1 = {"role": "tool", "tool_call_id": "x", "content": "r"}
    longer = tool_hist + [t1, {"role": "assistant", "content": "done"}]
    # an earlier tool result whose id the client renamed is the same context (the template renders its content)
    assert match_history(longer, longer[:2] + [{**t1, "tool_call_id": "y"}, longer[3], nxt]) is None
