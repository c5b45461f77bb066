"""OpenAI (legacy) completions (`POST /v1/completions`) over the episode core: the HTTP side of
`verl_ext.agent.gateway.protocols.completions` (which fields mean what; see there)."""

from __future__ import annotations

import time

from aiohttp import web

from verl_ext.agent.gateway.protocols import completions as proto
from verl_ext.agent.gateway.wire.base import WireAdapter, register_adapter, reply_headers, write_sse


@register_adapter
class Completions(WireAdapter):
    name = "completions"
    routes = (("POST", "/v1/completions", "create"),)

    async def create(self, request: web.Request) -> web.StreamResponse:
        t0, s, body, ignored = await self.begin(request, proto.check_fields)
        turn = proto.to_text_turn(body)
        async with self.admitted():
            r = await self.core.complete(s, turn.prompt, turn.max_tokens, turn.stop, logprobs=turn.logprobs)
        completion = proto.build_completion(
            r, model=self.model_name, created=int(time.time()), tokens=self.sampled_tokens(r)
        )
        headers = reply_headers(ignored)
        self.core.stats.handler_s += time.perf_counter() - t0
        if body.get("stream"):
            return await write_sse(request, [completion], headers)
        return web.json_response(completion, headers=headers)
