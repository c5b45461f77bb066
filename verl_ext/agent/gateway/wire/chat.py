"""OpenAI chat completions (`POST /v1/chat/completions`) over the episode core: the HTTP side of
`verl_ext.agent.gateway.protocols.chat` (which fields, messages and chunks mean what; see there)."""

from __future__ import annotations

import time

from aiohttp import web

from verl_ext.agent.gateway.protocols import chat as proto
from verl_ext.agent.gateway.wire.base import WireAdapter, register_adapter, reply_headers, write_sse


@register_adapter
class ChatCompletions(WireAdapter):
    name = "chat_completions"
    routes = (("POST", "/v1/chat/completions", "create"),)

    async def create(self, request: web.Request) -> web.StreamResponse:
        t0, s, body, ignored = await self.begin(request, proto.check_fields)
        r = await self.chat(s, proto.to_chat_turn(body))
        headers, created = reply_headers(ignored, r.fault), int(time.time())
        self.core.stats.handler_s += time.perf_counter() - t0
        if body.get("stream"):
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            events = proto.stream_events(r, model=self.model_name, created=created, include_usage=usage)
            return await write_sse(request, events, headers)
        completion = proto.build_completion(r, model=self.model_name, created=created, tokens=self.sampled_tokens(r))
        return web.json_response(completion, headers=headers)
