"""Tool calls, reasoning and client re-serialization through the real HTTP gateway on 127.0.0.1 with the real openai
client, verl's hermes ToolParser and Continuous Token builder, and the tiny tokenizer's chat template. The rollout
is scripted (`ScriptedBackend`: the tiny model does not write tool calls), so the tests control what was "sampled"
and check the trajectory token for token."""

from __future__ import annotations

import json
import random

import httpx
import openai
import pytest
from openai import OpenAI

from tests.agent.tasks import CALC
from verl_ext.agent.trajectory import assemble_segments

ASK = [{"role": "user", "content": "What is (1+2)*4?"}]
SAMPLING = {"temperature": 1.0, "logprobs": True}


def call(name, args, raw=False):
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args if raw else json.dumps(args)}}}\n</tool_call>'


def client(gw, eid):
    return OpenAI(base_url=gw.session_url(eid) + "/v1", api_key="k", max_retries=0)


def check_token_true(s, tok):
    """One segment; its tokens are round 0's prompt, then per round the sampled ids and (between rounds) the
    rendered context; mask 1 exactly on the sampled ids; log-probs of sampled ids are the rollout's."""
    (seg,) = assemble_segments(s.rounds)
    expect_ids, expect_mask, expect_lps = [], [], []
    seen = len(s.rounds[0].prompt_ids)
    for k, r in enumerate(s.rounds):
        ctx = r.prompt_ids[seen:] if k else []
        expect_ids += ctx + r.response_ids
        expect_mask += [0] * len(ctx) + [1] * len(r.response_ids)
        expect_lps += [0.0] * len(ctx) + r.log_probs
        seen = len(r.prompt_ids) + len(r.response_ids)
    assert seg.prompt_ids == s.rounds[0].prompt_ids
    assert seg.response_ids == expect_ids and seg.response_mask == expect_mask and seg.log_probs == expect_lps
    for k in range(1, len(s.rounds)):  # every later prompt starts with everything before it, token for token
        prev = s.rounds[k - 1]
        assert s.rounds[k].prompt_ids[: len(prev.prompt_ids) + len(prev.response_ids)] == (
            prev.prompt_ids + prev.response_ids
        )
    return seg


def test_tool_call_round_trip_with_reserialized_history(scripted_gateway, tool_tokenizer):
    gw, backend = scripted_gateway(
        [
            "<think>multiply after adding</think>I will compute.\n"
            + call("calc", {"expr": "1+2"})
            + "\n"
            + call("calc", {"expr": "3*4"}),
            "The answer is 12.",
        ],
        reasoning_parser="think",
    )
    s = gw.open_session(SAMPLING)
    c = client(gw, s.episode_id)
    r1 = c.chat.completions.create(model="m", messages=ASK, tools=[CALC])
    m = r1.choices[0].message
    assert r1.choices[0].finish_reason == "tool_calls"
    assert [(t.function.name, json.loads(t.function.arguments)) for t in m.tool_calls] == [
        ("calc", {"expr": "1+2"}),
        ("calc", {"expr": "3*4"}),
    ]
    assert m.content == "I will compute." and m.model_extra["reasoning_content"] == "multiply after adding"
    # The prompt rendered the tools with the template.
    assert '"name": "calc"' in tool_tokenizer.decode(s.rounds[0].prompt_ids)
    # The client re-serializes: ids renamed, arguments re-formatted, content null, reasoning dropped.
    echoed = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"renamed-{i}",
                "type": "function",
                "function": {
                    "name": t.function.name,
                    "arguments": json.dumps(json.loads(t.function.arguments), indent=2),
                },
            }
            for i, t in enumerate(m.tool_calls)
        ],
    }
    echoed["content"] = "I will compute."
    follow = ASK + [
        echoed,
        {"role": "tool", "tool_call_id": "renamed-0", "content": "3"},
        {"role": "tool", "tool_call_id": "renamed-1", "content": "12"},
    ]
    r2 = c.chat.completions.create(model="m", messages=follow, tools=[CALC])
    assert r2.choices[0].message.content == "The answer is 12." and r2.choices[0].finish_reason == "stop"
    assert s.drift.as_dict() == {"extended": 1, "split": {}, "tool_faults": {}}
    # each round's request is recorded as the agent sent it (its re-serialization kept), with the reply it got
    assert [t["tools"] for t in s.turns] == [[CALC], [CALC]] and s.turns[0]["messages"] == ASK
    assert s.turns[1]["messages"][1]["tool_calls"][0]["id"] == "renamed-0" and len(s.turns[1]["messages"]) == 4
    assert s.turns[0]["reply"]["tool_calls"][0]["function"]["arguments"] == '{"expr": "1+2"}'
    assert s.turns[1]["reply"] == {"role": "assistant", "content": "The answer is 12."}
    seg = check_token_true(s, tool_tokenizer)
    ctx = tool_tokenizer.decode([t for t, k in zip(seg.response_ids, seg.response_mask, strict=True) if k == 0])
    assert ctx == "\n<|im_start|>user\n<tool_response>\n3\n</tool_response>\n<tool_response>\n12\n</tool_response>" + (
        "<|im_end|>\n<|im_start|>assistant\n"
    )


def test_streaming_sends_tool_call_deltas(scripted_gateway, tool_tokenizer):
    text = "Two calls.\n" + call("calc", {"expr": "1+2"}) + call("calc", {"expr": "5"})
    gw, _ = scripted_gateway([text, text])
    plain = client(gw, gw.open_session(SAMPLING).episode_id).chat.completions.create(
        model="m", messages=ASK, tools=[CALC]
    )
    s = gw.open_session(SAMPLING)
    stream = client(gw, s.episode_id).chat.completions.create(
        model="m", messages=ASK, tools=[CALC], stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    content, calls, finish = "", {}, None
    for ch in chunks:
        for choice in ch.choices:
            content += choice.delta.content or ""
            for d in choice.delta.tool_calls or []:
                slot = calls.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
                slot["id"] = d.id or slot["id"]
                slot["name"] += (d.function.name or "") if d.function else ""
                slot["arguments"] += (d.function.arguments or "") if d.function else ""
            finish = choice.finish_reason or finish
    want = plain.choices[0].message
    assert content == want.content and finish == "tool_calls"
    assert [(calls[i]["name"], calls[i]["arguments"]) for i in sorted(calls)] == [
        (t.function.name, t.function.arguments) for t in want.tool_calls
    ]
    assert all(calls[i]["id"].startswith("call_") for i in calls)
    assert chunks[-1].usage.completion_tokens == len(s.rounds[0].response_ids)


def test_faults_are_counted_exactly(scripted_gateway, tool_tokenizer):
    """One episode with every fault of the issue: malformed JSON, an unknown tool, `required` with no call, a
    stop string inside a tool call, stripped reasoning (not a fault: extends), and one real rewrite (a split)."""
    gw, backend = scripted_gateway(
        [
            call("calc", '{"expr": "1+', raw=True),  # malformed JSON
            call("rm", {"path": "/"}),  # unknown tool
            "I refuse to call tools.",  # required: after the forced opening, not a call
            call("calc", {"expr": "7*6"}) + " STOP",  # stop string inside the call's arguments
            "<think>so 42</think>Answer: 42.",  # reasoning, then the client strips it
            "Final.",
            "After the rewrite.",
        ],
        reasoning_parser="think",
    )
    s = gw.open_session(SAMPLING)
    c = client(gw, s.episode_id)
    msgs = list(ASK)

    def turn(**kw):
        r = c.chat.completions.create(model="m", messages=msgs, tools=[CALC], **kw).choices[0]
        msgs.append({"role": "assistant", "content": r.message.content})  # what a client sends back (no reasoning)
        msgs.append({"role": "user", "content": "go on"})
        return r

    r = turn()
    assert r.finish_reason == "stop" and r.message.tool_calls is None and r.message.content.startswith("<tool_call>")
    assert turn().message.tool_calls is None
    assert turn(tool_choice="required").message.content == "<tool_call>\nI refuse to call tools."
    r = turn(stop=["*"])
    assert r.finish_reason == "stop" and r.message.tool_calls is None and r.message.content.endswith('"7')
    assert backend.calls[3][1]["stop"] == ["*"]  # the rollout engine got the stop string
    r = turn()
    assert r.message.content == "Answer: 42."
    turn()
    assert s.drift.as_dict() == {
        "extended": 5,
        "split": {},
        "tool_faults": {"malformed": 3, "unknown_tool": 1},
    }
    check_token_true(s, tool_tokenizer)
    # A real rewrite: the first user message edited.
    msgs[0] = {"role": "user", "content": "What is 6*7?"}
    c.chat.completions.create(model="m", messages=msgs, tools=[CALC])
    assert s.drift.as_dict()["split"] == {"rewrite": 1} and len(assemble_segments(s.rounds)) == 2


def test_required_and_named_tool_choice_force_the_call_opening(scripted_gateway, tool_tokenizer):
    """`required` (first round) and a named function (second round): the gateway appends the call's opening to the
    prompt, the policy samples the rest, the client gets the call; the opening is context (mask 0), never trained."""
    gw, backend = scripted_gateway(
        ['{"name": "calc", "arguments": {"expr": "(1+2)*4"}}\n</tool_call>', ' {"expr": "12/2"}}\n</tool_call>', "6."]
    )
    s = gw.open_session(SAMPLING)
    c = client(gw, s.episode_id)
    enc = lambda t: tool_tokenizer.encode(t, add_special_tokens=False)  # noqa: E731
    r = c.chat.completions.create(model="m", messages=ASK, tools=[CALC], tool_choice="required").choices[0]
    assert r.finish_reason == "tool_calls" and r.message.content is None
    (tc,) = r.message.tool_calls
    assert (tc.function.name, json.loads(tc.function.arguments)) == ("calc", {"expr": "(1+2)*4"})
    assert backend.calls[0][0][-len(enc("<tool_call>\n")) :] == enc("<tool_call>\n")
    msgs = ASK + [r.message.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": tc.id, "content": "12"}]
    named = {"type": "function", "function": {"name": "calc"}}
    r = c.chat.completions.create(model="m", messages=msgs, tools=[CALC], tool_choice=named).choices[0]
    assert [json.loads(t.function.arguments) for t in r.message.tool_calls] == [{"expr": "12/2"}]
    opening = enc('<tool_call>\n{"name": "calc", "arguments":')
    assert backend.calls[1][0][-len(opening) :] == opening
    msgs += [r.message.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": "x", "content": "6"}]
    assert c.chat.completions.create(model="m", messages=msgs, tools=[CALC]).choices[0].message.content == "6."
    assert s.drift.as_dict() == {"extended": 2, "split": {}, "tool_faults": {}}
    seg = check_token_true(s, tool_tokenizer)
    # the first round's opening ends the segment's prompt; the second's is context inside the response, mask 0
    assert seg.prompt_ids[-len(enc("<tool_call>\n")) :] == enc("<tool_call>\n")
    at = len(s.rounds[1].prompt_ids) - len(seg.prompt_ids)
    assert seg.response_ids[at - len(opening) : at] == opening and seg.response_mask[at - len(opening) : at] == [
        0
    ] * len(opening)


def test_required_with_a_parser_without_a_known_opening_gets_400(scripted_gateway):
    gw, backend = scripted_gateway(["unused"], tool_parser="qwen3_coder")
    s = gw.open_session(SAMPLING)
    with pytest.raises(openai.BadRequestError, match="tool_choice 'required'.*qwen3_coder"):
        client(gw, s.episode_id).chat.completions.create(model="m", messages=ASK, tools=[CALC], tool_choice="required")
    assert backend.calls == [] and s.rounds == []


def test_logprobs_are_the_recorded_policy_logprobs(scripted_gateway):
    gw, _ = scripted_gateway(["Twelve."])
    s = gw.open_session({"temperature": 1.0})  # the trainer did not ask for log-probs; the client does
    r = client(gw, s.episode_id).chat.completions.create(model="m", messages=ASK, logprobs=True)
    got = [t.logprob for t in r.choices[0].logprobs.content]
    assert got == pytest.approx(s.rounds[0].log_probs) and len(got) == len(s.rounds[0].response_ids)


def test_tools_with_a_template_that_cannot_render_them_get_400(loop_thread, tiny_assets):
    from transformers import AutoTokenizer

    from tests.agent.conftest import ScriptedBackend, make_gateway
    from verl_ext.toy.tokenizer import PLAIN_CHAT_TEMPLATE

    tok = AutoTokenizer.from_pretrained(tiny_assets.model_dir)
    tok.chat_template = PLAIN_CHAT_TEMPLATE
    gw = make_gateway(tok, ScriptedBackend(tok, ["x"]))
    loop_thread.run(gw.start())
    try:
        s = gw.open_session(SAMPLING)
        r = httpx.post(
            gw.session_url(s.episode_id) + "/v1/chat/completions",
            json={"messages": ASK, "tools": [CALC]},
            headers={"Authorization": "Bearer k"},
        )
        assert r.status_code == 400 and "does not render tools" in r.json()["error"]["message"]
        assert s.rounds == []
    finally:
        loop_thread.run(gw.stop())


def random_reply(rng: random.Random) -> str:
    parts = []
    if rng.random() < 0.4:
        parts.append(
            f"<think>step {rng.randint(0, 99)} "
            + (call("calc", {"expr": "0"}) if rng.random() < 0.3 else "")
            + "</think>"
        )
    if rng.random() < 0.6:
        parts.append(rng.choice(["Let me see.", "Calling tools:", "Done.", "The answer is 7."]))
    for _ in range(rng.choice([0, 0, 1, 2, 3])):
        parts.append(call("calc", {"expr": f"{rng.randint(0, 9)}+{rng.randint(0, 9)}", "pad": " " * rng.randint(0, 2)}))
    return "\n".join(parts) or "ok"


def reserialize(msg, rng: random.Random) -> dict:
    """What various clients send back for our reply: ids dropped/renamed, arguments re-formatted, null vs "",
    reasoning dropped or kept inline, content as text parts."""
    content = msg.content
    if rng.random() < 0.3 and msg.model_extra.get("reasoning_content") is not None:
        content = f"<think>{msg.model_extra['reasoning_content']}</think>" + (content or "")
    if not content and rng.random() < 0.5:
        content = None if content == "" else ""
    if content and rng.random() < 0.3:
        content = [{"type": "text", "text": content}]
    out = {"role": "assistant", "content": content}
    if msg.tool_calls:
        out["tool_calls"] = []
        for t in msg.tool_calls:
            args = json.loads(t.function.arguments)
            tc = {
                "type": "function",
                "function": {
                    "name": t.function.name,
                    "arguments": json.dumps(args, indent=rng.choice([None, 2]), sort_keys=rng.random() < 0.5),
                },
            }
            if rng.random() < 0.5:
                tc["id"] = f"id-{rng.randint(0, 999)}"
            out["tool_calls"].append(tc)
    if rng.random() < 0.3:
        out["reasoning_content"] = "stale reasoning"
    return out


@pytest.mark.parametrize("seed", range(6))
def test_property_random_conversations_stay_token_true(scripted_gateway, tool_tokenizer, seed):
    """Random conversations (parallel calls, reasoning, re-serialization by the client, tool results and user
    turns): one segment whose ids are the rendered prompt pieces plus the sampled ids, mask 1 exactly on them."""
    rng = random.Random(seed)
    gw, backend = scripted_gateway(lambda prompt: random_reply(rng), reasoning_parser="think")
    s = gw.open_session(SAMPLING)
    c = client(gw, s.episode_id)
    msgs = [{"role": "system", "content": "You are a calculator agent."}] + ASK
    for _ in range(rng.randint(2, 6)):
        m = c.chat.completions.create(model="m", messages=msgs, tools=[CALC]).choices[0].message
        msgs.append(reserialize(m, rng))
        if m.tool_calls:
            msgs += [{"role": "tool", "tool_call_id": f"t{i}", "content": str(i)} for i in range(len(m.tool_calls))]
        if not m.tool_calls or rng.random() < 0.3:
            msgs.append({"role": "user", "content": rng.choice(["go on", "and then?", "check it"])})
    n = len(s.rounds)
    assert s.drift.as_dict() == {"extended": n - 1, "split": {}, "tool_faults": {}}
    seg = check_token_true(s, tool_tokenizer)
    assert sum(seg.response_mask) == sum(len(r.response_ids) for r in s.rounds)
    # every environment piece between rounds is exactly what the template renders for those messages
    assert tool_tokenizer.decode(seg.prompt_ids) == tool_tokenizer.apply_chat_template(
        msgs[:2], tools=[CALC], tokenize=False, add_generation_prompt=True
    )


def test_switching_from_completions_to_chat_is_a_counted_split(scripted_gateway):
    gw, _ = scripted_gateway(["Three.", "Four."])
    s = gw.open_session(SAMPLING)
    c = client(gw, s.episode_id)
    c.completions.create(model="m", prompt="Say a number:")
    c.chat.completions.create(model="m", messages=ASK)
    assert s.drift.as_dict() == {"extended": 0, "split": {"rewrite": 1}, "tool_faults": {}}
    assert len(assemble_segments(s.rounds)) == 2
    assert s.turns[0] is None and s.turns[1]["messages"] == ASK  # a plain-text round has no chat request
