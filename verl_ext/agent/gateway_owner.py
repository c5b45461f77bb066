"""The owner of the gateways an agent-loop worker process starts: one `Gateway` per asyncio event loop (verl's
AgentLoopWorker runs one), started on first use under that loop's lock, and stopped by its owner.

Why an owner: a gateway holds a listening port and aiohttp's tasks; one kept in a module global and never stopped
leaks both for the life of the process, and one left behind by a closed event loop would be handed to the next loop
(which cannot serve it). Here a closed loop's gateway is dropped before a new one is started, and `close()` stops
every gateway whose loop can still run it (registered with `atexit` by `external_loop`, and called by tests).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable

from verl_ext.agent.gateway.server import Gateway

_STOP_TIMEOUT_S = 10.0


class LoopGateways:
    def __init__(self) -> None:
        self._gateways: dict[asyncio.AbstractEventLoop, Gateway] = {}
        self._locks: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}

    def __len__(self) -> int:
        return len(self._gateways)

    async def get(self, start: Callable[[], Awaitable[Gateway]]) -> Gateway:
        """The running loop's gateway; `start()` makes and starts it the first time (once, even when many
        trajectories ask at once)."""
        loop = asyncio.get_running_loop()
        self._drop_closed_loops()
        lock = self._locks.setdefault(loop, asyncio.Lock())
        async with lock:
            gw = self._gateways.get(loop)
            if gw is None:
                gw = self._gateways[loop] = await start()
            return gw

    def _drop_closed_loops(self) -> None:
        for loop in [lp for lp in self._gateways if lp.is_closed()]:
            # its listener went with the loop's selector; nothing can be awaited on a closed loop
            del self._gateways[loop]
            self._locks.pop(loop, None)

    async def aclose(self) -> None:
        """Stop the running loop's gateway (from inside that loop)."""
        loop = asyncio.get_running_loop()
        gw = self._gateways.pop(loop, None)
        self._locks.pop(loop, None)
        if gw is not None:
            await gw.stop()

    def close(self) -> None:
        """Stop every gateway from outside its loop: on the loop's own thread when it runs, else by running the
        loop until the gateway stopped. A closed loop's gateway is only dropped."""
        for loop, gw in list(self._gateways.items()):
            del self._gateways[loop]
            self._locks.pop(loop, None)
            if loop.is_closed():
                continue
            if loop.is_running():
                fut = asyncio.run_coroutine_threadsafe(gw.stop(), loop)
                try:
                    fut.result(_STOP_TIMEOUT_S)
                except (concurrent.futures.TimeoutError, RuntimeError):
                    pass  # the loop is going away on its own thread: the process is ending
            else:
                loop.run_until_complete(gw.stop())
