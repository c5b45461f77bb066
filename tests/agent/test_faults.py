"""Fault cases with exact counts: real agent processes (openai client) against the gateway on 127.0.0.1, the real
tiny model behind it, episodes run and judged by `agent_process.run_episode` as the `external_agent` loop does."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.agent.conftest import SAMPLING, TinyModelBackend, make_gateway
from verl_ext.agent.agent_process import run_episode
from verl_ext.agent.settings import AgentSettings

FAULTY = str(Path(__file__).parent / "agents" / "faulty_agent.py")
ASK = [{"role": "user", "content": "Guess my secret number between 0 and 4. Put the final answer within \\boxed{}."}]


def task(behavior: str, truth: str = "3") -> dict:
    return {
        "prompt": ASK,
        "reward_model": {"ground_truth": truth},
        "extra_info": {"behavior": behavior},
        "data_source": "test",
    }


def run_all(loop_thread, gw, settings, behaviors):
    async def go():
        return await asyncio.gather(*[run_episode(gw, settings, task(b), SAMPLING) for b in behaviors])

    return loop_thread.run(go(), timeout=300)


@pytest.fixture
def short_gateway(loop_thread, tiny_tokenizer, tiny_backend):
    gw = make_gateway(tiny_tokenizer, tiny_backend, response_length=64)
    loop_thread.run(gw.start())
    yield gw
    loop_thread.run(gw.stop())


def test_every_fault_is_dropped_with_its_status(loop_thread, short_gateway):
    gw = short_gateway
    # 20 s: the episodes are forked from a fork server that imported the openai client before the episode's clock
    # starts (launch=fork, the default), so the bound covers the rounds only (a process per episode took 2-3 s to
    # start idle and over 15 s loaded); the slow agent sleeps an hour, so it times out whatever the bound.
    settings = AgentSettings.from_mapping({"command": [sys.executable, FAULTY], "timeout_s": 20, "api_key": "k"})
    assert settings.launch == "fork"
    behaviors = ["ok", "ok", "crash", "slow", "bad_json", "rewrite", "no_score"]
    results = run_all(loop_thread, gw, settings, behaviors)
    status = [r.outcome.status.value for r in results]
    assert status == ["ok", "ok", "crashed", "timeout", "ok", "rewrite", "no_score"], [r.stderr for r in results]
    assert Counter(status) == {"ok": 3, "crashed": 1, "timeout": 1, "rewrite": 1, "no_score": 1}
    by = dict(zip(behaviors[1:], results[1:], strict=True))
    assert by["crash"].exit_code == -9 and len(by["crash"].session.rounds) == 1  # killed after its first round
    assert by["slow"].timed_out and by["slow"].wall_s < 90 and len(by["slow"].session.rounds) == 1
    assert by["rewrite"].outcome.n_segments == 2 and by["no_score"].session.score is None
    assert gw.stats.rejected_400 == 1  # the malformed body, answered with its reason (the agent checks the text)
    assert all(len(r.session.rounds) == 2 for r in (results[0], by["bad_json"], by["no_score"]))
    assert gw.sessions == {}  # every session closed, whatever its agent did
    # a killed agent's session is gone: a late request from it gets 404, nothing is recorded
    assert by["crash"].session.episode_id not in gw.sessions


def test_rewrite_last_trains_the_final_segment(loop_thread, short_gateway):
    settings = AgentSettings.from_mapping(
        {"command": [sys.executable, FAULTY], "timeout_s": 60, "api_key": "k", "on_rewrite": "last"}
    )
    (r,) = run_all(loop_thread, short_gateway, settings, ["rewrite"])
    assert r.outcome.status.value == "ok" and r.outcome.n_segments == 2
    assert r.outcome.segment.prompt_ids == r.session.rounds[1].prompt_ids  # the rewritten round starts it


def test_more_agents_than_the_queue_bound(loop_thread, tiny_assets, tiny_tokenizer):
    """6 agents, at most 2 generation requests admitted: the rest get 429, the openai client backs off and retries,
    and every episode completes with its two rounds."""
    slow = TinyModelBackend(tiny_assets.model_dir, tiny_tokenizer.eos_token_id, delay_s=0.5)
    gw = make_gateway(tiny_tokenizer, slow, response_length=64, max_inflight=2)
    loop_thread.run(gw.start())
    try:
        settings = AgentSettings.from_mapping({"command": [sys.executable, FAULTY], "timeout_s": 120, "api_key": "k"})
        results = run_all(loop_thread, gw, settings, ["ok"] * 6)
        assert [r.outcome.status.value for r in results] == ["ok"] * 6
        assert gw.stats.generations == 12 == sum(len(r.session.rounds) for r in results)
        assert gw.stats.rejected_429 >= 1
    finally:
        loop_thread.run(gw.stop())
