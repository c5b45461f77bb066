"""The owner of an agent-loop worker's gateways (`verl_ext.agent.gateway_owner.LoopGateways`): one real gateway
per event loop on 127.0.0.1, started once however many trajectories ask at once, and its port closed by the owner."""

from __future__ import annotations

import asyncio
import socket

import httpx

from tests.agent.conftest import ScriptedBackend, make_gateway
from verl_ext.agent.gateway_owner import LoopGateways


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _starter(tokenizer):
    """`(start, started)`: a real gateway factory as the agent loop hands to its owner, and what it started."""
    started = []

    async def start():
        gw = make_gateway(tokenizer, ScriptedBackend(tokenizer, []))
        await gw.start()
        started.append(gw)
        return gw

    return start, started


def test_one_gateway_per_loop_started_once_and_closed_by_its_owner(tool_tokenizer):
    owner, (start, started) = LoopGateways(), _starter(tool_tokenizer)

    async def many():  # the trajectories of one step ask for the gateway at once
        return await asyncio.gather(*(owner.get(start) for _ in range(8)))

    loop = asyncio.new_event_loop()
    try:
        got = loop.run_until_complete(many())
        assert len(started) == 1 and all(g is started[0] for g in got) and len(owner) == 1
        gw = started[0]
        r = loop.run_until_complete(
            asyncio.to_thread(httpx.get, gw.base_url + "/v1/models", headers={"Authorization": "Bearer k"})
        )
        assert r.status_code == 200 and _listening(gw.port)
        owner.close()  # from outside the loop, as at process exit
        assert len(owner) == 0 and not _listening(gw.port)
        again = loop.run_until_complete(owner.get(start))  # a later request starts a fresh one
        assert again is started[1] and _listening(again.port)
        loop.run_until_complete(owner.aclose())  # from inside the loop
        assert len(owner) == 0 and not _listening(again.port)
    finally:
        loop.close()


def test_a_closed_loops_gateway_is_never_handed_to_another_loop(tool_tokenizer):
    owner, (start, started) = LoopGateways(), _starter(tool_tokenizer)

    async def use_and_stop():
        gw = await owner.get(start)
        await owner.aclose()
        return gw

    first = asyncio.run(use_and_stop())
    dead = asyncio.new_event_loop()
    stale = dead.run_until_complete(owner.get(start))
    dead.close()  # the worker's loop went away without stopping its gateway
    second = asyncio.run(use_and_stop())
    assert len({id(first), id(stale), id(second)}) == 3 and len(started) == 3
    assert len(owner) == 0
    owner.close()  # nothing left; a closed loop's gateway is only dropped
