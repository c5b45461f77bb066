"""The Responses and Anthropic Messages adapters over real HTTP on 127.0.0.1, driven by the unmodified `openai` and
`anthropic` clients (their own parsers and stream helpers), on the episode core: what the client parsed, the
trajectory's ids and masks, drift counts, and the exact 400s."""

from __future__ import annotations

import asyncio
import json
import sys

import anthropic
import httpx
import pytest
from openai import OpenAI

from tests.agent.conftest import SAMPLING, make_gateway
from verl_ext.agent.agent_process import run_episode
from verl_ext.agent.settings import AgentSettings
from verl_ext.agent.trajectory import assemble_segments

CALL = '<tool_call>\n{"name": "calc", "arguments": {"expr": "2+3"}}\n</tool_call>'
CALC_FN = {
    "type": "function",
    "name": "calc",
    "description": "Evaluate an integer expression.",
    "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]},
    "strict": True,
}
CALC_TOOL = {
    "name": "calc",
    "description": "Evaluate an integer expression.",
    "input_schema": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]},
}
QUESTION = "What is 2+3? Use the calculator."


@pytest.fixture
def scripted(scripted_gateway):
    """`open(texts, **gateway_kw) -> (gateway, session, rollout)`: a gateway over the shared `ScriptedBackend`
    (each call "samples" the next text's tokens + EOS, honouring max_tokens and stop) and an open episode."""

    def open_(texts, **kw):
        gw, backend = scripted_gateway(list(texts), **kw)
        return gw, gw.open_session(SAMPLING), backend

    return open_


def check_one_token_true_sample(tok, s, texts):
    """One segment; mask 1 exactly on the sampled ids (= the scripted texts' tokens + EOS), 0 on the context."""
    (seg,) = assemble_segments(s.rounds)
    sampled = [i for r in s.rounds for i in r.response_ids]
    assert [i for i, m in zip(seg.response_ids, seg.response_mask) if m] == sampled
    assert [tok.decode(r.response_ids, skip_special_tokens=True) for r in s.rounds] == texts
    for a, b in zip(s.rounds, s.rounds[1:]):  # every round extends the previous prompt + its sampled ids
        assert b.prompt_ids[: len(a.prompt_ids) + len(a.response_ids)] == a.prompt_ids + a.response_ids
    assert s.drift.extended == len(s.rounds) - 1 and not s.drift.split
    return seg


# ---------------------------------------------------------------- Responses API through the openai client
def test_responses_agent_with_a_function_tool(scripted, tool_tokenizer):
    texts = [CALL, "The answer is 5.", "Still 5."]
    gw, s, backend = scripted(texts)
    client = OpenAI(base_url=gw.session_url(s.episode_id) + "/v1", api_key="k")
    ask = [{"role": "user", "content": QUESTION}]
    r1 = client.responses.create(model="policy", instructions="Be brief.", input=ask, tools=[CALC_FN])
    (call,) = [o for o in r1.output if o.type == "function_call"]
    assert call.name == "calc" and json.loads(call.arguments) == {"expr": "2+3"} and r1.status == "completed"
    assert r1.usage.output_tokens == len(s.rounds[0].response_ids)
    # The agent's loop as the Responses docs write it: the output items go back in, then the tool's output.
    follow = ask + [o.model_dump(exclude_none=True) for o in r1.output]
    follow.append({"type": "function_call_output", "call_id": call.call_id, "output": "5"})
    r2 = client.responses.create(model="policy", instructions="Be brief.", input=follow, tools=[CALC_FN])
    assert r2.output_text == "The answer is 5."
    # previous_response_id: the gateway holds the episode's last response
    r3 = client.responses.create(
        model="policy",
        instructions="Be brief.",
        previous_response_id=r2.id,
        input=[{"role": "user", "content": "Sure?"}],
        tools=[CALC_FN],
    )
    assert r3.output_text == "Still 5."
    prompt2 = tool_tokenizer.decode(s.rounds[1].prompt_ids)
    assert prompt2.startswith("<|im_start|>system\nBe brief.\n\n# Tools") and '"name": "calc"' in prompt2
    assert prompt2.endswith("<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    check_one_token_true_sample(tool_tokenizer, s, texts)
    with pytest.raises(Exception, match="send the full input"):
        client.responses.create(model="p", previous_response_id=r1.id, input="again", tools=[CALC_FN])


# ---------------------------------------------------------------- Messages API through the anthropic client
def test_anthropic_agent_with_a_tool(scripted, tool_tokenizer):
    texts = [CALL, "The answer is 5.\nEND"]
    gw, s, backend = scripted(texts)
    # The header form (base URL without the episode, X-Episode-Id) and the client's own x-api-key header.
    client = anthropic.Anthropic(
        base_url=gw.base_url, api_key="k", default_headers={"X-Episode-Id": s.episode_id}, max_retries=0
    )
    msgs = [{"role": "user", "content": QUESTION}]
    m1 = client.messages.create(model="policy", max_tokens=200, system="Be brief.", messages=msgs, tools=[CALC_TOOL])
    assert m1.stop_reason == "tool_use"
    (use,) = [b for b in m1.content if b.type == "tool_use"]
    assert use.name == "calc" and use.input == {"expr": "2+3"}
    msgs += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m1.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "5"}]},
    ]
    m2 = client.messages.create(
        model="policy", max_tokens=200, system="Be brief.", messages=msgs, tools=[CALC_TOOL], stop_sequences=["\nEND"]
    )
    assert [b.type for b in m2.content] == ["text"] and m2.content[0].text == "The answer is 5."
    assert (m2.stop_reason, m2.stop_sequence) == ("stop_sequence", "\nEND")
    assert backend.calls[1][1]["stop"] == ["\nEND"]  # the rollout engine was asked to stop there
    assert m2.usage.input_tokens == len(s.rounds[1].prompt_ids)
    assert tool_tokenizer.decode(s.rounds[1].prompt_ids).endswith(
        "<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    seg = check_one_token_true_sample(tool_tokenizer, s, [CALL, "The answer is 5.\nEND"])
    # Round 2 was cut by a stop string (no EOS sampled): the next round would close the turn with an EOS of the
    # context (mask 0), never one the policy is credited with.
    assert seg.response_mask[-1] == 1 and seg.response_ids[-1] != tool_tokenizer.eos_token_id


# ---------------------------------------------------------------- streaming through the clients' stream helpers
def test_both_streams_through_the_clients_stream_helpers(scripted, tool_tokenizer):
    text = "<think>2 plus 3</think>Calling it.\n" + CALL
    gw, s, _ = scripted([text, "It is 5."], reasoning_parser="think")
    client = OpenAI(base_url=gw.session_url(s.episode_id) + "/v1", api_key="k")
    with client.responses.stream(model="policy", input=QUESTION, tools=[CALC_FN]) as stream:
        kinds = [ev.type for ev in stream]
        final = stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds and "response.function_call_arguments.delta" in kinds
    assert [o.type for o in final.output] == ["reasoning", "message", "function_call"]
    assert final.output[0].content[0].text == "2 plus 3" and final.output_text == "Calling it."
    call = final.output[2]
    assert json.loads(call.arguments) == {"expr": "2+3"}
    follow = [{"role": "user", "content": QUESTION}, *[o.model_dump(exclude_none=True) for o in final.output]]
    follow.append({"type": "function_call_output", "call_id": call.call_id, "output": "5"})
    with client.responses.stream(model="policy", input=follow, tools=[CALC_FN]) as stream:
        assert stream.get_final_response().output_text == "It is 5."
    check_one_token_true_sample(tool_tokenizer, s, [text, "It is 5."])

    gw2, s2, _ = scripted([text, "It is 5."], reasoning_parser="think")
    aclient = anthropic.Anthropic(base_url=gw2.session_url(s2.episode_id), api_key="k")
    msgs = [{"role": "user", "content": QUESTION}]
    with aclient.messages.stream(model="policy", max_tokens=200, messages=msgs, tools=[CALC_TOOL]) as stream:
        streamed = "".join(stream.text_stream)
        m = stream.get_final_message()
    assert streamed == "Calling it." and [b.type for b in m.content] == ["thinking", "text", "tool_use"]
    assert m.content[0].thinking == "2 plus 3" and m.content[2].input == {"expr": "2+3"}
    assert m.stop_reason == "tool_use" and m.usage.output_tokens == len(s2.rounds[0].response_ids)
    msgs += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": m.content[2].id, "content": "5"}]},
    ]
    with aclient.messages.stream(model="policy", max_tokens=200, messages=msgs, tools=[CALC_TOOL]) as stream:
        assert stream.get_final_message().content[0].text == "It is 5."
    check_one_token_true_sample(tool_tokenizer, s2, [text, "It is 5."])


# ---------------------------------------------------------------- bad inputs: exact 400s, nothing generated
def post(gw, eid, path, body, headers=None):
    h = {"Authorization": "Bearer k", **(headers or {})}
    return httpx.post(gw.session_url(eid) + path, json=body, headers=h, timeout=30)


ASK = [{"role": "user", "content": "hi"}]
FC_OUT = {"type": "function_call_output", "call_id": "call_x", "output": "5"}
RESULT = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "5"}]}


@pytest.mark.parametrize(
    "path, body, message",
    [
        ("/v1/messages", {"messages": ASK}, "max_tokens: field required (a positive integer, as in Anthropic's API)"),
        (
            "/v1/responses",
            {"input": [{"type": "computer_call_output", "call_id": "c"}]},
            "input[0]: item type 'computer_call_output' is not supported "
            "(supported: message, function_call, function_call_output, reasoning)",
        ),
        (
            "/v1/responses",
            {"input": "hi", "tools": [{"type": "web_search"}]},
            "tools[0]: built-in tool 'web_search' is not supported (function tools only: agents run their tools)",
        ),
        (
            "/v1/messages",
            {"max_tokens": 5, "messages": ASK, "tools": [{"type": "web_search_20250305", "name": "web_search"}]},
            "tools.0: built-in tool 'web_search_20250305' is not supported (client tools with input_schema only)",
        ),
        (
            "/v1/responses",
            {"input": [*ASK, FC_OUT]},
            "input[1]: function_call_output for unknown call_id 'call_x' (no function_call with that call_id "
            "precedes it)",
        ),
        (
            "/v1/messages",
            {"max_tokens": 5, "messages": [RESULT]},
            "messages.0.content.0: tool_result for unknown tool_use_id 'toolu_x' (no tool_use block with that id "
            "precedes it)",
        ),
    ],
)
def test_bad_inputs_get_exact_400s_in_each_protocols_shape(scripted, path, body, message):
    gw, s, backend = scripted(["unused"])
    r = post(gw, s.episode_id, path, body)
    assert r.status_code == 400
    if path == "/v1/messages":
        assert r.json() == {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    else:
        assert r.json()["error"]["message"] == message and r.json()["error"]["type"] == "invalid_request_error"
    assert s.rounds == [] and backend.calls == [] and gw.stats.rejected_400 == 1


def test_anthropic_client_sees_its_own_error_types(scripted):
    gw, s, _ = scripted(["unused"])
    bad_key = anthropic.Anthropic(base_url=gw.session_url(s.episode_id), api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as e:
        bad_key.messages.create(model="p", max_tokens=5, messages=ASK)
    assert e.value.body["error"] == {"type": "authentication_error", "message": "invalid API key"}
    nowhere = anthropic.Anthropic(base_url=gw.session_url("nope"), api_key="k", max_retries=0)
    with pytest.raises(anthropic.NotFoundError):
        nowhere.messages.create(model="p", max_tokens=5, messages=ASK)
    client = anthropic.Anthropic(base_url=gw.session_url(s.episode_id), api_key="k", max_retries=0)
    with pytest.raises(anthropic.BadRequestError, match="thinking.*signature|block type 'image'"):
        client.messages.create(
            model="p",
            max_tokens=5,
            messages=[{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "x"}}]}],
        )
    # anthropic-version is accepted whatever its value (the client sends its own)
    r = post(gw, s.episode_id, "/v1/messages", {"max_tokens": 5, "messages": ASK}, {"anthropic-version": "2099-01-01"})
    assert r.status_code == 200 and r.json()["content"] == [{"type": "text", "text": "unused"}]


# ---------------------------------------------------------------- the example agents as real processes
TASK = {
    "prompt": [{"role": "user", "content": "Repeat this number: 3. Put the final answer within \\boxed{}."}],
    "reward_model": {"ground_truth": "3"},
    "extra_info": {},
    "data_source": "toy_copy_digit",
}
AGENTS = ["responses_agent", "anthropic_agent"]


def play(loop_thread, gw, module: str, n: int = 1, max_tokens: int = 16):
    command = [sys.executable, "-m", f"verl_ext.agent.examples.{module}"]
    env = {"CALC_MAX_TOKENS": str(max_tokens)}
    settings = AgentSettings.from_mapping({"command": command, "timeout_s": 60, "api_key": "k", "env": env})

    async def episodes():
        return await asyncio.gather(*[run_episode(gw, settings, TASK, SAMPLING) for _ in range(n)])

    return loop_thread.run(episodes())


@pytest.mark.parametrize("module", AGENTS)
def test_example_agent_calls_its_tool_through_the_gateway(module, loop_thread, tool_tokenizer, scripted):
    call = '<tool_call>\n{"name": "calc", "arguments": {"expr": "1+2"}}\n</tool_call>'
    gw, _, backend = scripted([call, "\\boxed{3}"])
    (r,) = play(loop_thread, gw, module, max_tokens=100)
    assert r.outcome.status.value == "ok", r.stderr
    assert r.session.score["score"] == 1.0  # the agent ran its tool on what the client parsed, the model answered
    prompt2 = tool_tokenizer.decode(r.session.rounds[1].prompt_ids)
    assert prompt2.endswith("<tool_response>\n3\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    assert "# Tools" in prompt2 and '"name": "calc"' in prompt2
    check_one_token_true_sample(tool_tokenizer, r.session, [call, "\\boxed{3}"])


@pytest.mark.parametrize("module", AGENTS)
def test_example_agent_plays_on_the_tiny_model(module, loop_thread, tool_tokenizer, tiny_backend):
    gw = make_gateway(tool_tokenizer, tiny_backend, prompt_length=1024, response_length=128)
    loop_thread.run(gw.start())
    try:
        for r in play(loop_thread, gw, module, n=2):
            assert r.outcome.status.value == "ok", r.stderr
            assert len(r.session.rounds) == 2 and r.session.score["score"] in (0.0, 1.0)
            assert r.outcome.n_segments == 1 and r.session.drift.extended == 1  # one token-true sample
    finally:
        loop_thread.run(gw.stop())


# ---------------------------------------------------------------- the OpenAI Agents SDK on its default Responses model
def test_openai_agents_sdk_on_its_responses_model(scripted, tool_tokenizer):
    from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled
    from agents.models.openai_provider import OpenAIProvider
    from openai import AsyncOpenAI

    from verl_ext.agent.examples.calc_agent import evaluate

    set_tracing_disabled(True)  # no trace export to OpenAI's servers
    call = '<tool_call>\n{"name": "calc", "arguments": {"expr": "1+2"}}\n</tool_call>'
    gw, s, backend = scripted([call, "\\boxed{3}"])
    seen = []

    @function_tool
    def calc(expr: str) -> str:
        """Evaluate an integer expression."""
        seen.append(expr)
        return str(evaluate(expr))

    agent = Agent(name="calculator", instructions="Use the calculator, then answer in \\boxed{}.", tools=[calc])
    client = AsyncOpenAI(base_url=gw.session_url(s.episode_id) + "/v1", api_key="k")
    # The SDK's default model class for a model name (OpenAIResponsesModel), on the gateway's client.
    config = RunConfig(model="policy", model_provider=OpenAIProvider(openai_client=client, use_responses=True))
    result = Runner.run_sync(agent, "What is 1+2?", run_config=config)
    assert seen == ["1+2"] and result.final_output == "\\boxed{3}"
    prompt2 = tool_tokenizer.decode(s.rounds[1].prompt_ids)
    assert prompt2.startswith("<|im_start|>system\nUse the calculator") and '"strict"' not in prompt2
    assert prompt2.endswith("<tool_response>\n3\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    check_one_token_true_sample(tool_tokenizer, s, [call, "\\boxed{3}"])


def test_rewrites_through_either_adapter_are_counted_splits(scripted, tool_tokenizer):
    """The drift counts cover both adapters: an edited earlier turn splits the episode as `rewrite`, our reply sent
    back with other arguments as `reply_changed`; re-serialization alone (ids, JSON spacing, reasoning) does not."""
    gw, s, _ = scripted([CALL, "5.", "Yes."])
    client = OpenAI(base_url=gw.session_url(s.episode_id) + "/v1", api_key="k")
    r1 = client.responses.create(model="p", input=QUESTION, tools=[CALC_FN])
    (call,) = r1.output
    # Re-serialized: another call_id, re-formatted JSON arguments, the item's id dropped.
    echoed = {"type": "function_call", "call_id": "mine_1", "name": "calc", "arguments": '{ "expr" : "2+3" }'}
    out = {"type": "function_call_output", "call_id": "mine_1", "output": "5"}
    client.responses.create(model="p", input=[{"role": "user", "content": QUESTION}, echoed, out], tools=[CALC_FN])
    assert s.drift.as_dict()["extended"] == 1 and not s.drift.split
    edited = {"role": "user", "content": "What is 2+4?"}
    client.responses.create(model="p", input=[edited, echoed, out], tools=[CALC_FN])
    assert s.drift.split == {"rewrite": 1} and len(assemble_segments(s.rounds)) == 2

    gw2, s2, _ = scripted([CALL, "5."])
    aclient = anthropic.Anthropic(base_url=gw2.session_url(s2.episode_id), api_key="k")
    m1 = aclient.messages.create(model="p", max_tokens=200, messages=[{"role": "user", "content": QUESTION}])
    assert m1.content[0].type == "text"  # no tools in the request: the markup is plain text, not a call
    aclient.messages.create(
        model="p",
        max_tokens=200,
        messages=[
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "content": "I will not call anything."},  # our reply, rewritten
            {"role": "user", "content": "Go on."},
        ],
    )
    assert s2.drift.split == {"reply_changed": 1} and len(assemble_segments(s2.rounds)) == 2


def test_pool_mode_hands_out_the_anthropic_base_url(scripted):
    gw, s, _ = scripted(["Hi."])
    gw.offer_task(s.episode_id, TASK)
    got = httpx.get(f"{gw.base_url}/tasks/next?wait_s=5", headers={"Authorization": "Bearer k"}, timeout=30).json()
    client = anthropic.Anthropic(base_url=got["anthropic_base_url"], api_key="k", max_retries=0)
    assert client.messages.create(model="p", max_tokens=20, messages=ASK).content[0].text == "Hi."
    assert got["base_url"] == got["anthropic_base_url"] + "/v1" and len(s.rounds) == 1


def test_anthropic_count_tokens_is_the_first_rounds_prompt(scripted):
    gw, s, backend = scripted(["Hi."])
    client = anthropic.Anthropic(base_url=gw.session_url(s.episode_id), api_key="k", max_retries=0)
    ask = {
        "model": "p",
        "system": "Be brief.",
        "messages": [{"role": "user", "content": QUESTION}],
        "tools": [CALC_TOOL],
    }
    counted = client.messages.count_tokens(**ask).input_tokens
    assert backend.calls == [] and s.rounds == []  # counting generates and records nothing
    client.messages.create(max_tokens=20, **ask)
    assert counted == len(s.rounds[0].prompt_ids) > 0
