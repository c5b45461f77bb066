"""Pool mode: long-running agent workers (real processes) take episodes from `GET /tasks/next`."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import httpx

from tests.agent.conftest import SAMPLING, make_gateway
from verl_ext.agent.agent_process import run_episode
from verl_ext.agent.settings import AgentSettings

TASK = {"prompt": [], "reward_model": {"ground_truth": "3"}, "extra_info": {}, "data_source": "toy"}


def test_workers_take_every_episode_once(loop_thread, tiny_tokenizer, tiny_backend):
    gw = make_gateway(tiny_tokenizer, tiny_backend, response_length=64)
    loop_thread.run(gw.start())
    workers = []
    try:
        r = httpx.get(f"{gw.base_url}/tasks/next?wait_s=0.2", headers={"Authorization": "Bearer k"}, timeout=30)
        assert r.status_code == 204  # nothing offered yet
        env = {**os.environ, "OPENAI_API_KEY": "k"}
        workers = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "verl_ext.agent.examples.pool_worker",
                    "--gateway",
                    gw.base_url,
                    "--max-idle-s",
                    "3",
                ],
                env=env,
            )
            for _ in range(2)
        ]
        settings = AgentSettings.from_mapping({"launch": "pool", "port": 1, "timeout_s": 60, "api_key": "k"})

        async def six():
            return await asyncio.gather(*[run_episode(gw, settings, TASK, SAMPLING) for _ in range(6)])

        results = loop_thread.run(six())
        assert [r.outcome.status.value for r in results] == ["ok"] * 6
        assert all(1 <= len(r.session.rounds) <= 2 and r.session.score is not None for r in results)
        assert all(w.wait(30) == 0 for w in workers)  # idle workers exit cleanly
        # No worker left: an offered episode times out and is dropped.
        fast = AgentSettings.from_mapping({"launch": "pool", "port": 1, "timeout_s": 1, "api_key": "k"})
        late = loop_thread.run(run_episode(gw, fast, TASK, SAMPLING))
        assert late.outcome.status.value == "timeout" and late.session.rounds == []
        assert gw.sessions == {}
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
        loop_thread.run(gw.stop())
