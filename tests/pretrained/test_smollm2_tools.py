"""Tool calls on the real model's tokenizer: what SmolLM2-135M-Instruct's released chat template drops (tools, assistant
tool calls, null content), that the gateway's episode core refuses such requests with a 400 naming the fix instead of
training on a prompt without them, and that `smollm2.TOOL_CHAT_TEMPLATE` (`${smollm2:tool_template}`) renders plain
chats exactly as released and carries a framework-shaped tool episode token for token; the same for the one-line
call format (`smollm2.LINE_TOOL_CHAT_TEMPLATE`, `${smollm2:line_tool_template}`, read by the gateway's `line` tool
parser) with the example agents' own tool schemas (docs/AGENT_REAL_MODEL.md).

Only the tokenizer is loaded (no weights are run). Skipped when the model cannot be built here (no cached copy and no
package index)."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.agent.tasks import CALC
from verl_ext.pretrained import smollm2

ASK = [{"role": "user", "content": "What is 2 - -2? Give the final answer in \\boxed{}."}]
CALL = '<tool_call>\n{"name": "calc", "arguments": {"expr": "2 - -2"}}\n</tool_call>'


def _tokenizer(template: str | None = None):
    from transformers import AutoTokenizer

    try:
        model_dir = smollm2.ensure_smollm2()
    except smollm2.AssetError as e:
        pytest.skip(f"SmolLM2-135M-Instruct cannot be built here: {e}")
    tok = AutoTokenizer.from_pretrained(model_dir)
    if template is not None:
        tok.chat_template = template
    return tok


@pytest.fixture(scope="module")
def released():
    return _tokenizer()


@pytest.fixture(scope="module")
def with_tools():
    return _tokenizer(smollm2.TOOL_CHAT_TEMPLATE)


@pytest.fixture(scope="module")
def with_line_tools():
    return _tokenizer(smollm2.LINE_TOOL_CHAT_TEMPLATE)


def render(tok, messages, **kw):
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kw)


def call_message(content=""):
    tc = {"id": "call_1", "type": "function", "function": {"name": "calc", "arguments": {"expr": "2 - -2"}}}
    return {"role": "assistant", "content": content, "tool_calls": [tc]}


def make_core(tok, replies: list[str], tool_parser: str = "hermes"):
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    from verl_ext.agent.continuous_token import family_for
    from verl_ext.agent.gateway.core import EpisodeCore

    builder = create_continuous_token_builder(tok, model_family=family_for(tok, "llama"))

    async def generate(request_id, prompt_ids, params):
        return tok.encode(replies.pop(0), add_special_tokens=False) + [tok.eos_token_id], None, 0

    lengths = {"prompt_length": 1024, "response_length": 256}
    return EpisodeCore(tokenizer=tok, builder=builder, generate=generate, tool_parser=tool_parser, **lengths)


def test_released_template_drops_tools_and_tool_calls_and_cannot_render_null_content(released):
    tok = released
    assert render(tok, ASK, tools=[CALC]) == render(tok, ASK)  # the tools never reach the prompt
    # an assistant tool call renders as an empty assistant turn, its result as a `tool` turn
    text = render(tok, ASK + [call_message(), {"role": "tool", "tool_call_id": "call_1", "content": "4"}])
    assert text.endswith("<|im_start|>assistant\n<|im_end|>\n<|im_start|>tool\n4<|im_end|>\n<|im_start|>assistant\n")
    assert "calc" not in text
    with pytest.raises(TypeError):  # what OpenAI clients send for a call without text: content null
        render(tok, ASK + [call_message(content=None)])


def test_episode_core_refuses_what_the_released_template_would_drop(released):
    from verl_ext.agent.gateway.core import ChatTurn, RequestError, normalize_message

    core = make_core(released, ["The final answer is \\boxed{4}."])
    s = core.open_session({"temperature": 1.0})
    loop = asyncio.new_event_loop()
    with pytest.raises(RequestError) as e:
        loop.run_until_complete(core.chat(s, ChatTurn(messages=ASK, tools=[CALC])))
    assert e.value.status == 400 and "actor_rollout_ref.model.custom_chat_template" in e.value.message
    assert "smollm2:tool_template" in e.value.message
    # a history holding a tool call, sent without `tools`: the call would become an empty turn
    history = ASK + [
        normalize_message({**call_message(content=None), "tool_calls": [_openai_call()]}, 1),
        normalize_message({"role": "tool", "tool_call_id": "call_1", "content": "4"}, 2),
    ]
    with pytest.raises(RequestError) as e:
        loop.run_until_complete(core.chat(s, ChatTurn(messages=history)))
    assert e.value.status == 400 and "tool_calls" in e.value.message and "custom_chat_template" in e.value.message
    assert s.rounds == []  # nothing was generated or recorded
    # a plain chat whose assistant content is null renders (the core reads null as "")
    plain = ASK + [normalize_message({"role": "assistant", "content": None}, 1), {"role": "user", "content": "ok"}]
    r = loop.run_until_complete(core.chat(s, ChatTurn(messages=plain)))
    assert r.content == "The final answer is \\boxed{4}." and len(s.rounds) == 1
    loop.close()


def _openai_call(call_id="call_1", args='{"expr": "2 - -2"}'):
    return {"id": call_id, "type": "function", "function": {"name": "calc", "arguments": args}}


@pytest.mark.parametrize("name", ["tool_template", "line_tool_template"])
def test_tool_template_renders_plain_chats_exactly_as_released(released, name):
    from omegaconf import OmegaConf

    from verl_ext.trainer.launch import register_lazy_resolvers

    templates = {"tool_template": smollm2.TOOL_CHAT_TEMPLATE, "line_tool_template": smollm2.LINE_TOOL_CHAT_TEMPLATE}
    template = templates[name]
    with_tools = _tokenizer(template)
    chats = [
        ASK,
        [{"role": "system", "content": "Be brief."}, *ASK],
        ASK + [{"role": "assistant", "content": "\\boxed{4}"}, {"role": "user", "content": "And 3 + 5?"}],
        [{"role": "user", "content": "a"}, {"role": "system", "content": "late system turn"}],
    ]
    for chat in chats:
        assert render(with_tools, chat) == render(released, chat)
        no_prompt = {"tokenize": False, "add_generation_prompt": False}
        assert with_tools.apply_chat_template(chat, **no_prompt) == released.apply_chat_template(chat, **no_prompt)
    register_lazy_resolvers()
    cfg = OmegaConf.create({"template": f"${{smollm2:{name}}}"})
    assert cfg.template == template


def test_tool_template_renders_tools_calls_and_results_as_the_hermes_parser_reads_them(with_tools):
    from verl_ext.agent.gateway.toolcall import ToolCallCodec

    tok = with_tools
    msgs = ASK + [
        call_message(),
        {"role": "tool", "tool_call_id": "call_1", "content": "4"},
        {"role": "tool", "tool_call_id": "call_2", "content": "5"},
    ]
    text = render(tok, msgs, tools=[CALC])
    assert text == (
        f"<|im_start|>system\n{smollm2.DEFAULT_SYSTEM}\n\n# Tools\n\nYou may call one or more functions to assist with "
        "the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        + json.dumps(CALC)
        + "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
        '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}'
        "\n</tool_call><|im_end|>\n<|im_start|>user\n"
        + ASK[0]["content"]
        + "<|im_end|>\n<|im_start|>assistant\n"
        + CALL
        + "<|im_end|>\n<|im_start|>user\n<tool_response>\n4\n</tool_response>\n<tool_response>\n5\n</tool_response>"
        "<|im_end|>\n<|im_start|>assistant\n"
    )
    # a system message stays, before the tools section; content next to a call comes first
    sys_text = render(tok, [{"role": "system", "content": "Be brief."}, *ASK, call_message("Let me compute.")],
                      tools=[CALC])  # fmt: skip
    assert sys_text.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    assert "<|im_start|>assistant\nLet me compute.\n<tool_call>\n" in sys_text
    # what the template renders after the generation prompt is what the gateway forces for `required`, and what the
    # hermes parser reads back
    prompt = render(tok, ASK, tools=[CALC])
    reply = tok.apply_chat_template(ASK + [call_message()], tools=[CALC], tokenize=False)[len(prompt) :]
    codec = ToolCallCodec(tok, "hermes", "none")
    assert reply.startswith(codec.forced_opening("required")) and reply.startswith(CALL)
    parsed = asyncio.run(codec.parse(tok.encode(CALL, add_special_tokens=False) + [2], [CALC], "auto"))
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == [("calc", {"expr": "2 - -2"})]


def test_forced_call_openings_are_token_prefixes_of_the_rendered_call(with_tools):
    """`required` / a named tool_choice append the opening, tokenized alone, to the prompt ids and the policy samples
    the rest: prompt + opening must be a token prefix of the template's own tokens of such a call. SmolLM2's BPE
    writes `"arguments": {"expr"` as `":`, ` {"`, `expr`: an opening ending in the space (as it did) would leave the
    policy after a lone ` ` token, which rendered calls never contain."""
    from verl_ext.agent.gateway.toolcall import ToolCallCodec

    tok, codec = with_tools, ToolCallCodec(with_tools, "hermes", "none")
    enc = lambda text: tok.encode(text, add_special_tokens=False)  # noqa: E731
    prompt = render(tok, ASK, tools=[CALC])
    call = enc(tok.apply_chat_template(ASK + [call_message()], tools=[CALC], tokenize=False))
    for choice in ("required", {"type": "function", "function": {"name": "calc"}}):
        forced = enc(prompt) + enc(codec.forced_opening(choice))
        assert call[: len(forced)] == forced, choice
    with_space = enc(prompt) + enc('<tool_call>\n{"name": "calc", "arguments": ')  # the opening as it was
    assert call[: len(with_space)] != with_space
    assert [tok.decode([i]) for i in enc('"arguments": {"')] == ['"', "arguments", '":', ' {"']


def test_hermes_parser_does_not_read_the_list_calls_of_smollm2s_own_function_calling_format(with_tools):
    """SmolLM2's function-calling SFT format (APIGen: a JSON list inside one <tool_call> block) is not what verl's
    hermes parser reads: such a reply comes back as plain content, counted `malformed`. The template above teaches
    the hermes form instead."""
    from verl_ext.agent.gateway.toolcall import ToolCallCodec

    codec = ToolCallCodec(with_tools, "hermes", "none")
    listed = '<tool_call>[\n{"name": "calc", "arguments": {"expr": "2 - -2"}}\n]</tool_call>'
    parsed = asyncio.run(codec.parse(with_tools.encode(listed, add_special_tokens=False) + [2], [CALC], "auto"))
    assert parsed.tool_calls == [] and parsed.faults == {"malformed": 1} and parsed.content == listed


def test_framework_shaped_tool_episode_is_token_true_on_the_tool_template(with_tools):
    """Round 1 asks with the tool, the policy writes a hermes call; round 2 sends the history back as the Agents SDK and
    LangGraph do (content null, the call re-serialized with its id, the tool result): one extended segment whose
    tokens are the template's own rendering of the whole conversation."""
    check_two_round_episode(with_tools, "hermes", CALL, CALC)


def check_two_round_episode(tok, parser: str, call: str, tool: dict, prompt=ASK) -> list[int]:
    """The policy writes `call` (which `parser` reads as calc(expr="2 - -2")), the framework echoes it back with null
    content and compact JSON arguments under another id, with the result `4`; then the answer. Asserts one extended
    segment equal to the template's rendering of the conversation and returns its tokens."""
    from verl_ext.agent.continuous_token import family_for
    from verl_ext.agent.gateway.core import ChatTurn, normalize_message
    from verl_ext.agent.gateway.toolcall import for_template
    from verl_ext.agent.trajectory import assemble_segments

    assert family_for(tok, "llama") == "qwen"  # still a ChatML template: verl's ChatML builder
    answer = "2 - -2 = 4. The final answer is \\boxed{4}."
    core = make_core(tok, [call, answer], parser)
    s = core.open_session({"temperature": 1.0})
    loop = asyncio.new_event_loop()
    r1 = loop.run_until_complete(core.chat(s, ChatTurn(messages=prompt, tools=[tool])))
    assert r1.finish_reason == "tool_calls" and r1.content == ""
    assert [(c.name, json.loads(c.arguments)) for c in r1.tool_calls] == [("calc", {"expr": "2 - -2"})]
    echoed = {"role": "assistant", "content": None, "tool_calls": [_openai_call("call_x", '{"expr":"2 - -2"}')]}
    history = prompt + [normalize_message(echoed, 1), normalize_message({"role": "tool", "tool_call_id": "call_x",
                                                                         "content": "4"}, 2)]  # fmt: skip
    r2 = loop.run_until_complete(core.chat(s, ChatTurn(messages=history, tools=[tool])))
    loop.close()
    assert r2.content == answer and s.drift.as_dict() == {"extended": 1, "split": {}, "tool_faults": {}}
    (segment,) = assemble_segments(s.rounds)
    full = [for_template(m) for m in history] + [{"role": "assistant", "content": answer}]
    want = tok.apply_chat_template(full, tools=[tool], tokenize=True, return_dict=False)
    got = segment.prompt_ids + segment.response_ids
    assert got == want[: len(got)] and tok.decode(want[len(got) :]) == "\n"  # the template's newline after the end
    return got


# The example agents' `calc` tool as the frameworks send it (captured by scripts/probe_agent_frameworks.py): the
# Agents SDK's strict schema with titles, LangGraph's plain one.
SDK_CALC = {"type": "function", "function": {
    "name": "calc", "description": "Evaluate arithmetic: + - * / and parentheses, on integers and decimals.",
    "parameters": {"properties": {"expr": {"title": "Expr", "type": "string"}}, "required": ["expr"],
                   "title": "calc_args", "type": "object", "additionalProperties": False}, "strict": True}}  # fmt: skip
LANGGRAPH_CALC = {"type": "function", "function": {
    "name": "calc", "description": "Evaluate arithmetic: + - * / and parentheses, on integers and decimals.",
    "parameters": {"properties": {"expr": {"type": "string"}}, "required": ["expr"], "type": "object"}}}  # fmt: skip


def test_line_template_renders_tools_calls_and_results_as_the_line_parser_reads_them(with_line_tools):
    from verl_ext.agent.gateway.toolcall import ToolCallCodec, check_tools

    tok = with_line_tools
    msgs = ASK + [call_message(), {"role": "tool", "tool_call_id": "call_1", "content": "4"}]
    text = render(tok, msgs, tools=check_tools([SDK_CALC]))
    assert text == (
        f"<|im_start|>system\n{smollm2.DEFAULT_SYSTEM}\n\nYou can use these tools:\n- calc: "
        + SDK_CALC["function"]["description"]
        + "\nTo use a tool, reply with one line: the tool name, a colon and its input, e.g.\ncalc: 12 * 3\n"
        "The result comes back in the next message.<|im_end|>\n<|im_start|>user\n"
        + ASK[0]["content"]
        + "<|im_end|>\n<|im_start|>assistant\ncalc: 2 - -2<|im_end|>\n<|im_start|>user\nResult: 4<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    # content next to a call comes first, on its own line; a second call is the next line
    two = {**call_message("Let me compute."), "tool_calls": call_message()["tool_calls"] * 2}
    rendered = render(tok, [*ASK, two], tools=[CALC])
    assert "<|im_start|>assistant\nLet me compute.\ncalc: 2 - -2\ncalc: 2 - -2<|im_end|>" in rendered
    # what the template renders after the generation prompt is what the `line` parser reads back, with either
    # framework's schema; near misses are counted malformed and stay plain content
    prompt = render(tok, ASK, tools=[SDK_CALC])
    reply = tok.apply_chat_template(ASK + [call_message()], tools=[SDK_CALC], tokenize=False)[len(prompt) :]
    assert reply == "calc: 2 - -2<|im_end|>\n"
    codec = ToolCallCodec(tok, "line", "none")
    enc = lambda t: tok.encode(t, add_special_tokens=False) + [tok.eos_token_id]  # noqa: E731
    for schema in (SDK_CALC, LANGGRAPH_CALC):
        parsed = asyncio.run(codec.parse(enc("calc: 2 - -2"), check_tools([schema]), "auto"))
        assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == [("calc", {"expr": "2 - -2"})]
        assert parsed.content == "" and not parsed.faults
    for near in ("Calc: 2 - -2", "calc:2 - -2", "calc: 2 - -2\nResult: 4"):
        parsed = asyncio.run(codec.parse(enc(near), [SDK_CALC], "auto"))
        assert parsed.tool_calls == [] and parsed.faults == {"malformed": 1} and parsed.content == near
    parsed = asyncio.run(codec.parse(enc("Calculator: 4"), [SDK_CALC], "auto"))  # names no tool: an answer
    assert parsed.tool_calls == [] and not parsed.faults
    with pytest.raises(Exception, match="tool_parser"):  # tool_choice required has no forced opening in this format
        codec.forced_opening("required")


def test_line_call_demonstration_is_the_templates_rendering_of_a_call_and_its_result(with_line_tools):
    """mathgen's `arithmetic_calc` prompts carry the worked exchange as plain turns (the frameworks send role and
    content only): they render exactly as the template renders a `calc` call and its result."""
    from verl_ext.agent.examples import agents_sdk_calc
    from verl_ext.mathgen.calculator import calculate
    from verl_ext.mathgen.prompts import CALC_EXCHANGES, CALC_TOOL, LINE_CALL_DEMONSTRATION

    demo = [dict(m) for m in LINE_CALL_DEMONSTRATION]
    as_tool_turns = []
    for k, (expr, result) in enumerate(CALC_EXCHANGES):
        ask, _, _, answer = demo[4 * k : 4 * k + 4]
        call = call_message()
        call["tool_calls"][0]["function"]["arguments"] = {"expr": expr}
        as_tool_turns += [ask, call, {"role": "tool", "tool_call_id": "call_1", "content": result}, answer]
        assert ask["content"].startswith(f"What is {expr}?") and answer["content"].endswith(f"\\boxed{{{result}}}.")
        assert calculate(expr) == result  # the result the agents' tool returns, written as the tool writes it
    assert len(demo) == 4 * len(CALC_EXCHANGES) == 8
    assert render(with_line_tools, demo, tools=[SDK_CALC]) == render(with_line_tools, as_tool_turns, tools=[SDK_CALC])
    assert CALC_TOOL == agents_sdk_calc.calc.name == "calc"  # the demonstration calls the example agents' tool


def test_framework_shaped_line_episode_is_token_true_on_the_line_template(with_line_tools):
    """The two-round episode above in the line format, after the task's worked exchange, with the Agents SDK's tool
    schema: one extended segment, token for token the line template's rendering of the conversation (the call line
    and the `Result:` turn included)."""
    from verl_ext.mathgen.prompts import LINE_CALL_DEMONSTRATION

    prompt = [dict(m) for m in LINE_CALL_DEMONSTRATION] + ASK
    tokens = check_two_round_episode(with_line_tools, "line", "calc: 2 - -2", SDK_CALC, prompt)
    text = with_line_tools.decode(tokens)
    assert text.endswith(
        "<|im_start|>assistant\ncalc: 2 - -2<|im_end|>\n<|im_start|>user\nResult: 4<|im_end|>\n<|im_start|>assistant\n"
        "2 - -2 = 4. The final answer is \\boxed{4}.<|im_end|>"
    )
