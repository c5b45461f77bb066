"""The gateway over real HTTP on 127.0.0.1, with the real tiny model as the rollout and the real openai client."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import httpx
import pytest
import torch
from openai import OpenAI

from tests.agent.conftest import SAMPLING, TinyModelBackend, make_gateway
from verl_ext.agent.trajectory import assemble_segments

ASK = [{"role": "user", "content": "Repeat this number: 3. Put the final answer within \\boxed{}."}]


def client(gw, eid, **kw):
    return OpenAI(base_url=gw.session_url(eid) + "/v1", api_key="k", **kw)


def post(gw, path, body, eid=None, raw=None, key="k", headers=None):
    url = (gw.session_url(eid) if eid else gw.base_url) + path
    h = {"Authorization": f"Bearer {key}", **(headers or {})}
    content = raw if raw is not None else json.dumps(body).encode()
    return httpx.post(url, content=content, headers=h, timeout=60)


def reference_logprobs(backend: TinyModelBackend, prompt_ids, ids):
    """Teacher-forced log-probs of `ids` after `prompt_ids`, one forward pass (the actor's computation)."""
    with torch.no_grad():
        logits = backend.model(torch.tensor([prompt_ids + ids])).logits[0].float()
    logp = torch.log_softmax(logits[len(prompt_ids) - 1 : -1], -1)
    return logp[torch.arange(len(ids)), torch.tensor(ids)].tolist()


def test_two_chat_rounds_are_token_true(gateway, tiny_tokenizer, tiny_backend):
    s = gateway.open_session(SAMPLING)
    c = client(gateway, s.episode_id)
    r1 = c.chat.completions.create(model="any", messages=ASK)
    msg = r1.choices[0].message
    follow = ASK + [msg.model_dump(), {"role": "user", "content": "Once more."}]  # echoed with its null fields
    r2 = c.chat.completions.create(model="any", messages=follow)
    (a, b) = s.rounds
    assert tiny_tokenizer.decode(a.prompt_ids) == tiny_tokenizer.apply_chat_template(
        ASK, add_generation_prompt=True, tokenize=False
    )
    assert msg.content == tiny_tokenizer.decode(a.response_ids, skip_special_tokens=True)
    assert r2.choices[0].message.content == tiny_tokenizer.decode(b.response_ids, skip_special_tokens=True)
    # Round 2 starts with round 1's prompt and the *sampled* ids, not a re-tokenization of the reply text.
    assert b.prompt_ids[: len(a.prompt_ids) + len(a.response_ids)] == a.prompt_ids + a.response_ids
    assert tiny_tokenizer.decode(b.prompt_ids).endswith(
        "<|im_start|>user\nOnce more.<|im_end|>\n<|im_start|>assistant\n"
    )
    for r in (a, b):
        assert r.log_probs == pytest.approx(reference_logprobs(tiny_backend, r.prompt_ids, r.response_ids), abs=1e-4)
    (seg,) = assemble_segments(s.rounds)
    assert sum(seg.response_mask) == len(a.response_ids) + len(b.response_ids)
    assert r1.usage.prompt_tokens == len(a.prompt_ids) and r1.usage.completion_tokens == len(a.response_ids)


def test_rewritten_history_starts_a_new_segment(gateway):
    s = gateway.open_session(SAMPLING)
    c = client(gateway, s.episode_id)
    reply = c.chat.completions.create(model="any", messages=ASK).choices[0].message.content
    edited = [
        {"role": "user", "content": "Repeat this number: 4."},
        {"role": "assistant", "content": reply},
        {"role": "user", "content": "Again."},
    ]
    c.chat.completions.create(model="any", messages=edited)
    assert len(assemble_segments(s.rounds)) == 2


def test_completions_models_stream_and_header_session(gateway, tiny_tokenizer):
    s = gateway.open_session(SAMPLING)
    c = client(gateway, s.episode_id)
    assert [m.id for m in c.models.list().data] == ["tiny"]
    t1 = c.completions.create(model="any", prompt="Repeat this number: 1.", max_tokens=5).choices[0].text
    assert len(s.rounds[0].response_ids) <= 5
    c.completions.create(model="any", prompt="Repeat this number: 1." + t1 + " Again:", max_tokens=5)
    assert len(assemble_segments(s.rounds)) == 1
    s2 = gateway.open_session(SAMPLING)
    chunks = list(client(gateway, s2.episode_id).chat.completions.create(model="any", messages=ASK, stream=True))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == tiny_tokenizer.decode(s2.rounds[0].response_ids, skip_special_tokens=True)
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    s3 = gateway.open_session(SAMPLING)
    r = post(gateway, "/v1/chat/completions", {"messages": ASK}, headers={"X-Episode-Id": s3.episode_id})
    assert r.status_code == 200 and len(s3.rounds) == 1


@pytest.mark.parametrize(
    "body, raw, status, reason",
    [
        (None, b"{oops", 400, "not valid JSON"),
        ([1, 2], None, 400, "must be a JSON object"),
        ({}, None, 400, "messages must be a non-empty list"),
        ({"messages": [{"role": "robot", "content": "x"}]}, None, 400, "role must be one of"),
        ({"messages": [{"role": "user", "content": 5}]}, None, 400, "content must be a string"),
        ({"messages": ASK, "n": 2}, None, 400, "n=2 is not supported"),
        ({"messages": ASK, "seed": 7}, None, 400, "seed=7 is not supported"),
        ({"messages": ASK, "response_format": {"type": "json_object"}}, None, 400, "response_format="),
        ({"messages": ASK, "top_logprobs": 3}, None, 400, "top_logprobs=3"),
        ({"messages": ASK, "frobnicate": 1}, None, 400, "unknown field 'frobnicate'"),
        ({"messages": ASK, "stop": [""]}, None, 400, "stop must be"),
        ({"messages": ASK, "max_tokens": 0}, None, 400, "max_tokens must be a positive integer"),
        ({"messages": ASK, "tools": [{"type": "function"}]}, None, 400, "tools[0] must be"),
        ({"messages": ASK, "tool_choice": "required"}, None, 400, "tool_choice 'required' needs tools"),
        ({"messages": ASK + [{"role": "assistant", "content": "x"}]}, None, 400, "must not be the assistant"),
    ],
)
def test_malformed_requests_get_400_with_the_reason(gateway, body, raw, status, reason):
    s = gateway.open_session(SAMPLING)
    r = post(gateway, "/v1/chat/completions", body, s.episode_id, raw=raw)
    assert r.status_code == status and reason in r.json()["error"]["message"]
    assert s.rounds == []  # nothing was generated or recorded


def test_session_key_and_score_errors(gateway):
    assert post(gateway, "/v1/chat/completions", {"messages": ASK}, "nope").status_code == 404
    assert post(gateway, "/v1/chat/completions", {"messages": ASK}).json()["error"]["message"].startswith("no episode")
    s = gateway.open_session(SAMPLING)
    assert post(gateway, "/v1/chat/completions", {"messages": ASK}, s.episode_id, key="wrong").status_code == 401
    assert post(gateway, "/scores", {"score": "high"}, s.episode_id).status_code == 400
    assert post(gateway, "/scores", {"score": 1, "step_metas": "x"}, s.episode_id).status_code == 400
    assert s.score is None
    ok = post(gateway, "/scores", {"score": 1, "step_metas": [None, {"error_kind": "tool_error"}]}, s.episode_id)
    assert ok.status_code == 200 and s.score == {
        "score": 1.0,
        "acc": 1.0,
        "step_metas": [None, {"error_kind": "tool_error"}],
    }
    late = post(gateway, "/v1/chat/completions", {"messages": ASK}, s.episode_id)
    assert late.status_code == 409 and "closed" in late.json()["error"]["message"]


def test_response_budget_is_enforced(loop_thread, tiny_tokenizer, tiny_backend):
    gw = make_gateway(tiny_tokenizer, tiny_backend, response_length=4)
    loop_thread.run(gw.start())
    try:
        s = gw.open_session(SAMPLING)
        c = client(gw, s.episode_id, max_retries=0)
        reply = c.chat.completions.create(model="any", messages=ASK).choices[0].message.content
        assert len(s.rounds[0].response_ids) <= 4
        r = post(
            gw,
            "/v1/chat/completions",
            {"messages": ASK + [{"role": "assistant", "content": reply}, {"role": "user", "content": "more"}]},
            s.episode_id,
        )
        assert r.status_code == 400 and "response budget" in r.json()["error"]["message"]
        assert r.json()["error"]["code"] == "context_length_exceeded"
    finally:
        loop_thread.run(gw.stop())


def test_more_requests_than_the_bound_get_429(loop_thread, tiny_assets, tiny_tokenizer):
    slow = TinyModelBackend(tiny_assets.model_dir, tiny_tokenizer.eos_token_id, delay_s=3.0)
    gw = make_gateway(tiny_tokenizer, slow, max_inflight=2)
    loop_thread.run(gw.start())
    try:
        sessions = [gw.open_session(SAMPLING) for _ in range(5)]

        async def fire():
            async with httpx.AsyncClient(timeout=60) as h:
                return await asyncio.gather(
                    *[
                        h.post(
                            gw.session_url(s.episode_id) + "/v1/chat/completions",
                            json={"messages": ASK, "max_tokens": 2},
                            headers={"Authorization": "Bearer k"},
                        )
                        for s in sessions
                    ]
                )

        codes = sorted(r.status_code for r in asyncio.run(fire()))
        assert codes == [200, 200, 429, 429, 429]
        assert gw.stats.rejected_429 == 3 and sum(len(s.rounds) for s in sessions) == 2
        # The openai client backs off and retries 429 by itself: a burst then completes.
        results = []

        def one(s):
            results.append(
                client(gw, s.episode_id, max_retries=20).chat.completions.create(
                    model="any", messages=ASK, max_tokens=2
                )
            )

        import threading

        fresh = [gw.open_session(SAMPLING) for _ in range(4)]
        threads = [threading.Thread(target=one, args=(s,)) for s in fresh]
        [t.start() for t in threads]
        [t.join(120) for t in threads]
        assert len(results) == 4 and all(len(s.rounds) == 1 for s in fresh)
    finally:
        loop_thread.run(gw.stop())


def test_shutdown_releases_the_port_with_a_request_in_flight(loop_thread, tiny_assets, tiny_tokenizer):
    slow = TinyModelBackend(tiny_assets.model_dir, tiny_tokenizer.eos_token_id, delay_s=30.0)
    gw = make_gateway(tiny_tokenizer, slow)
    loop_thread.run(gw.start())
    s = gw.open_session(SAMPLING)
    import threading

    errors = []

    def call():
        try:
            post(gw, "/v1/chat/completions", {"messages": ASK}, s.episode_id)
        except httpx.HTTPError as e:
            errors.append(e)

    t = threading.Thread(target=call)
    t.start()
    time.sleep(1.0)
    t0 = time.monotonic()
    loop_thread.run(gw.stop(), timeout=30)
    t.join(30)
    assert time.monotonic() - t0 < 15 and not t.is_alive()
    with socket.socket() as sock:  # no listener left (TIME_WAIT connections do not block SO_REUSEADDR, a listener does)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((gw.host, gw.port))
