"""The example agents (openai client only) as real processes against the gateway and the tiny model, and the
calculator's own logic."""

from __future__ import annotations

import asyncio
import sys

import pytest

from tests.agent.conftest import SAMPLING, make_gateway
from verl_ext.agent.agent_process import run_episode
from verl_ext.agent.examples.calc_agent import evaluate, tool_step
from verl_ext.agent.settings import AgentSettings

TASK = {
    "prompt": [{"role": "user", "content": "Repeat this number: 3. Put the final answer within \\boxed{}."}],
    "reward_model": {"ground_truth": "3"},
    "extra_info": {},
    "data_source": "toy_copy_digit",
}


def test_calculator():
    assert evaluate("2 * (3 + 4) - -1") == 15
    for bad in ("2 ** 3", "x + 1", "open('f')", "1 +"):
        with pytest.raises(ValueError):
            evaluate(bad)
    assert tool_step("so \\boxed{6 * 7}") == ("[calculator] 6 * 7 = 42", None)
    text, meta = tool_step("\\boxed{2 / 0}")
    assert meta["error_kind"] == "tool_error" and "unsupported" in meta["error_message"] and "error" in text
    assert tool_step("no call")[1]["error_kind"] == "format_error"


@pytest.mark.parametrize("module", ["guess_agent", "calc_agent"])
def test_example_agent_plays_an_episode(module, loop_thread, tiny_tokenizer, tiny_backend):
    gw = make_gateway(tiny_tokenizer, tiny_backend, response_length=128)
    loop_thread.run(gw.start())
    try:
        settings = AgentSettings.from_mapping(
            {"command": [sys.executable, "-m", f"verl_ext.agent.examples.{module}"], "timeout_s": 60, "api_key": "k"}
        )

        async def two():
            return await asyncio.gather(*[run_episode(gw, settings, TASK, SAMPLING) for _ in range(2)])

        for r in loop_thread.run(two()):
            assert r.outcome.status.value == "ok", r.stderr
            assert 1 <= len(r.session.rounds) <= (2 if module == "guess_agent" else 3)  # calc: call, answer, retry
            assert r.session.score["score"] in (0.0, 1.0)
            assert r.outcome.n_segments == 1  # the agent only appends: one token-true multi-turn sample
            if module == "calc_agent":
                metas = r.session.score["step_metas"]
                assert len(metas) == len(r.session.rounds)  # the environment's reply to each assistant turn
                assert (metas[-1] is None) == (r.session.score["score"] == 1.0)
    finally:
        loop_thread.run(gw.stop())
