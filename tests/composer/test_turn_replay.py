"""Trace replay on an agent's turns (`verl_ext.composer.turn_replay`): episodes the Agents SDK calculator agent,
unchanged, played through the project's gateway on 127.0.0.1 (`agent_episodes.gateway_episodes`), their turns sent
by the teacher pool to three teachers, a real OpenAI-compatible HTTP server on 127.0.0.1 that answers each
deterministically, in text in the policy's call format or with structured tool calls. Checked: what each teacher
received is the policy's request for that turn as the gateway recorded it (messages and tools), and the pairs the
majority rule makes at tool-call and final-answer turns."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from verl_ext.composer.agent_trace import read_trace
from verl_ext.composer.disagreement import DisagreementConfig
from verl_ext.composer.teacher_pool import TeacherAnswer, TeacherConfig, TeacherPool, TeacherPoolConfig
from verl_ext.composer.turn_replay import (
    TurnAction,
    action_key,
    read_text,
    render_action,
    replay_turns,
    turn_pairs,
    turn_requests,
)


def call(expr):
    return {"tool_calls": [{"expr": expr}]}


# teacher -> question -> the answer at each turn (the policy's turn index): text, or structured tool calls
ANSWERS = {
    "a": {
        "Calculate 16 divided by 5.": ["calc: 16/5", "calc: (16)/(5)", "The final answer is \\boxed{16/5}."],
        "What is the distance between 0.4 and 0.03?": ["calc: 0.4 - 0.03", "The final answer is \\boxed{0.37}."],
        "What is -1 divided by -2?": [call("-1 / -2")],
        "What is 2 - -2?": ["calc: 2 - (-2)", "The final answer is \\boxed{4}."],
        "What is 3 + 5?": ["calc: 3+5", "The final answer is \\boxed{8}."],
    },
    "b": {
        "Calculate 16 divided by 5.": ["calc: 16 / 5", call("16 / 5"), "The final answer is \\boxed{16/5}."],
        "What is the distance between 0.4 and 0.03?": ["calc: 0.4 + 0.03", "The final answer is \\boxed{0.37}."],
        "What is -1 divided by -2?": [call("(-1) / (-2)")],
        "What is 2 - -2?": ["calc: 2 - -2", "So \\boxed{4}."],
        "What is 3 + 5?": ["calc: 5 + 3", "The final answer is \\boxed{8}."],
    },
    "c": {
        "Calculate 16 divided by 5.": [call("16/5"), "calc: 16 * 5", "The final answer is \\boxed{16}."],
        "What is the distance between 0.4 and 0.03?": ["calc: 0.03 + 0.4", "The final answer is \\boxed{0.43}."],
        "What is -1 divided by -2?": ["The final answer is \\boxed{1/2}."],
        "What is 2 - -2?": ["calc: 2 + 2", "The final answer is \\boxed{0}."],
        "What is 3 + 5?": ["I would call the calculator.", "The answer is 8."],
    },
}


class TeacherServer:
    """OpenAI-compatible chat completions on 127.0.0.1: each model (teacher) answers from ANSWERS by the task's
    question and the number of assistant turns after it; every request body is kept."""

    def __init__(self):
        self.bodies: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.bodies.append(body)
                payload = json.dumps(server.answer(body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def answer(self, body: dict) -> dict:
        messages = body["messages"]
        questions = [
            i for i, m in enumerate(messages) if m["role"] == "user" and not m["content"].startswith("Result:")
        ]
        asked = questions[-1]  # the task's question, after the worked exchanges
        question = messages[asked]["content"].removesuffix(" Give the final answer in \\boxed{}.")
        turn = sum(m["role"] == "assistant" for m in messages[asked:])
        reply = ANSWERS[body["model"]][question][turn]
        message = {"role": "assistant", "content": reply}
        if isinstance(reply, dict):
            calls = [
                {"id": f"t{i}", "type": "function", "function": {"name": "calc", "arguments": json.dumps(args)}}
                for i, args in enumerate(reply["tool_calls"])
            ]
            message = {"role": "assistant", "content": None, "tool_calls": calls}
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        return {"object": "chat.completion", "choices": [{"index": 0, "message": message}], "usage": usage}

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def played():
    from tests.composer.agent_episodes import gateway_episodes

    return gateway_episodes()


@pytest.fixture
def teachers():
    server = TeacherServer()
    yield server
    server.close()


def pool_config(server, cache_path=None, tool_choice=None):
    return TeacherPoolConfig(
        teachers=tuple(
            TeacherConfig(name=n, base_url=server.base_url, model=n, max_tokens=64, tool_choice=tool_choice)
            for n in "abc"
        ),
        cache_path=cache_path,
        max_calls=None,
        max_total_tokens=None,
        max_retries=0,
        backoff_base_s=0.0,
        backoff_max_s=0.0,
        max_workers=6,
        on_teacher_down="continue",
    )


def ask(played, server, cache_path=None, tool_choice=None):
    """Every episode's asked turns through the pool: {question: (trace, {turn: {teacher: answer}})}."""
    episodes, _ = played
    out = {}
    with TeacherPool(pool_config(server, cache_path, tool_choice)) as pool:
        for e in episodes:
            trace = read_trace(e["session"].turns)
            requests = turn_requests(trace, step=3)
            answers = pool.query_many([r for _, r in requests])
            out[e["question"]] = (trace, {t: a for (t, _), a in zip(requests, answers)})
    return out


def test_teachers_receive_the_policys_recorded_request_for_each_turn(played, teachers):
    episodes, _ = played
    ask(played, teachers)
    asked = {
        e["question"]: [e["session"].turns[t] for t in replay_turns(read_trace(e["session"].turns))] for e in episodes
    }
    # tool-call turns and the final answer: all three turns of the first episode, the no-call episode's one
    assert {q: len(turns) for q, turns in asked.items()} == {
        "Calculate 16 divided by 5.": 3,
        "What is the distance between 0.4 and 0.03?": 2,
        "What is -1 divided by -2?": 1,
        "What is 2 - -2?": 2,
        "What is 3 + 5?": 2,
    }
    recorded = [turn for turns in asked.values() for turn in turns]
    assert len(teachers.bodies) == 3 * len(recorded)
    for turn in recorded:
        got = [b for b in teachers.bodies if b["messages"] == turn["messages"]]
        assert sorted(b["model"] for b in got) == ["a", "b", "c"]  # each teacher once, with exactly these messages
        for body in got:
            assert body["tools"] == turn["tools"]  # the tools declared as the policy's template rendered them
            assert "tool_choice" not in body and turn["tool_choice"] == "auto"  # the API's default, as the agent's
    # the requests are the policy's own: the task's worked exchanges, its calls and the agent's tool results
    third = asked["Calculate 16 divided by 5."][2]["messages"]
    assert [m["role"] for m in third[-4:]] == ["assistant", "tool", "assistant", "tool"]
    assert third[-3]["content"] == "error: syntax error: '(' was never closed" and third[-1]["content"] == "16/5"
    assert third[-4]["tool_calls"][0]["function"]["arguments"] == json.dumps({"expr": "(16 / 5"})
    assert asked["What is 2 - -2?"][0]["tools"][0]["function"]["name"] == "calc"


def test_a_teacher_served_without_a_tool_parser_is_asked_with_tool_choice_none(played, teachers):
    """TeacherConfig.tool_choice: a vLLM server run without --enable-auto-tool-choice refuses tools unless the tool
    choice is none; the tools still go in the body (its chat template renders them as the policy's did)."""
    ask(played, teachers, tool_choice="none")
    assert teachers.bodies and all(b["tool_choice"] == "none" and b["tools"] for b in teachers.bodies)


def test_disagreement_makes_pairs_at_tool_call_and_final_answer_turns(played, teachers):
    majority = DisagreementConfig(rule="majority", min_agree=2)
    pairs = {
        q: [
            (p.prompt["turn"], p.chosen, p.rejected, p.teachers)
            for p in turn_pairs(trace, 3, answers, majority, "line")
        ]
        for q, (trace, answers) in ask(played, teachers).items()
    }
    assert pairs == {
        # turn 0: all three call 16/5 (as text, text and a structured call) against the student's open parenthesis;
        # turn 1: a and b agree with the student's call up to redundant parentheses and spaces: no pair;
        # turn 2: two of three box the whole fraction against the student's numerator
        "Calculate 16 divided by 5.": [
            (0, "calc: 16/5", "calc: (16 / 5", ["a", "b", "c"]),
            (2, "The final answer is \\boxed{16/5}.", "The final answer is \\boxed{16}.", ["a", "b"]),
        ],
        # turn 0: b and c call the student's sum (operands in either order): no pair; turn 1: a and b box 0.37
        "What is the distance between 0.4 and 0.03?": [
            (1, "The final answer is \\boxed{0.37}.", "The final answer is \\boxed{0.43}.", ["a", "b"]),
        ],
        # the student answered without the tool; a and b call it (structured calls, rendered as the policy's line)
        "What is -1 divided by -2?": [(0, "calc: -1 / -2", "The final answer is \\boxed{1}.", ["a", "b"])],
        # every turn agrees with the student's (2 - (-2) is 2 - -2; both boxes say 4)
        "What is 2 - -2?": [],
        # the student's answer has no box; a and b box 8
        "What is 3 + 5?": [(1, "The final answer is \\boxed{8}.", "The final answer is 8.", ["a", "b"])],
    }


def test_a_pair_carries_its_turn_and_any_differs_pairs_more(played, teachers):
    answered = ask(played, teachers)
    trace, answers = answered["What is the distance between 0.4 and 0.03?"]
    (pair,) = turn_pairs(trace, 3, answers, DisagreementConfig(rule="majority", min_agree=2), "line", "ep")
    assert pair.trace_id == "ep:1" and pair.step == 3 and pair.rule == "majority>=2"
    assert pair.prompt == {"messages": trace[1].messages, "tools": trace[1].tools, "turn": 1}
    assert pair.answers == {"a": answers[1]["a"].text, "b": answers[1]["b"].text, "c": answers[1]["c"].text}
    loose = turn_pairs(trace, 3, answers, DisagreementConfig(rule="any_differs", min_agree=1), "line")
    assert [(p.prompt["turn"], p.chosen) for p in loose] == [
        (0, "calc: 0.4 - 0.03"),
        (1, "The final answer is \\boxed{0.37}."),
    ]


def test_tool_call_answers_are_cached_with_their_calls(played, teachers, tmp_path):
    first = ask(played, teachers, cache_path=str(tmp_path / "cache.jsonl"))
    n = len(teachers.bodies)
    again = ask(played, teachers, cache_path=str(tmp_path / "cache.jsonl"))
    assert len(teachers.bodies) == n  # a restart pays nothing
    _, answers = again["What is -1 divided by -2?"]
    assert answers[0]["a"].cached and answers[0]["a"].tool_calls == (
        {"name": "calc", "arguments": json.dumps({"expr": "-1 / -2"})},
    )
    assert first["What is -1 divided by -2?"][1][0]["a"].tool_calls == answers[0]["a"].tool_calls


def test_actions_read_and_written_in_the_policys_format():
    tools = [{"type": "function", "function": {"name": "calc", "parameters": {"properties": {"expr": {}}}}}]
    line = read_text("I will compute.\ncalc: (2*3)+4", tools, "line")
    assert line == TurnAction("I will compute.", (("calc", "(2*3)+4"),))
    assert render_action(line, "line") == "I will compute.\ncalc: (2*3)+4"
    hermes = render_action(line, "hermes", tools)
    assert hermes == 'I will compute.\n<tool_call>\n{"name": "calc", "arguments": {"expr": "(2*3)+4"}}\n</tool_call>'
    assert read_text(hermes, tools, "hermes") == line
    assert action_key(line) == action_key(TurnAction("", (("calc", "2 * 3 + 4"),))) == "call:calc(2*3+4)"
    assert read_text("Calc: 2+2", tools, "line") == TurnAction("Calc: 2+2")  # a near miss is no call
    assert action_key(TurnAction("So \\boxed{ 4 }.")) == action_key(TurnAction("The final answer is \\boxed{4}."))
    with pytest.raises(ValueError, match="tool_parser must be one of"):
        read_text("x", tools, "qwen3_coder")
    assert TeacherAnswer("t", "", 1, tool_calls=({"name": "calc", "arguments": '{"expr": "1"}'},)).tool_calls


def test_a_turn_pairs_rows_are_its_context_as_sampled(played, teachers):
    """In training a pair carries its turn's tokens (`episode_turns`, from the trained sample), and its rows
    (`replay.pair_rows`) are that context with the action as the only loss tokens: the rejected row is the trained
    sample itself up to the end of the turn, token for token; the chosen row the same context, then the teachers'
    action in the policy's line format and the end of the turn."""
    from verl_ext.agent.trajectory import assemble_segments
    from verl_ext.composer.replay import pair_rows
    from verl_ext.composer.turn_replay import episode_turns

    episodes, tok = played
    answered = ask(played, teachers)
    pairs = []
    for e in episodes:
        (seg,) = assemble_segments(e["session"].rounds)
        ep = episode_turns("ep", e["session"].turns, 3, seg.prompt_ids, seg.response_ids, seg.response_mask)
        assert sorted(ep.requests) == replay_turns(ep.trace)  # every asked turn is in the trained sample
        for t, request in ep.requests.items():  # the same requests as the pool's above
            assert request.messages == e["session"].turns[t]["messages"]
            round_ = e["session"].rounds[t]
            assert seg.prompt_ids + ep.tokens[t]["context"] == round_.prompt_ids  # what the policy saw
            assert ep.tokens[t]["rejected_ids"] == round_.response_ids  # what it sampled
        _, answers = answered[e["question"]]
        pairs += turn_pairs(ep.trace, 3, answers, DisagreementConfig("majority", 2), "line", ep.episode, ep.tokens)
    assert len(pairs) == 5
    width_p = max(len(p.prompt["ids"]) for p in pairs)
    width_r = max(len(p.prompt["context"]) + 40 for p in pairs)
    rows = pair_rows(pairs, tok, prompt_width=width_p, response_width=width_r)
    for k, pair in enumerate(pairs):
        context = pair.prompt["context"]
        for r, action in ((2 * k, tok.encode(pair.chosen, add_special_tokens=False) + [tok.eos_token_id]),
                          (2 * k + 1, pair.prompt["rejected_ids"])):  # fmt: skip
            response = rows["responses"][r].tolist()
            mask = rows["response_mask"][r].tolist()
            assert response[: len(context) + len(action)] == context + action
            assert mask == [0] * len(context) + [1] * len(action) + [0] * (width_r - len(context) - len(action))
        assert tok.decode(pair.prompt["rejected_ids"], skip_special_tokens=True) == pair.rejected
