"""Anthropic's Messages API (`POST /v1/messages`) over the episode core: the HTTP side of
`verl_ext.agent.gateway.protocols.messages` (which fields, blocks and events mean what; see there).

Served as `/s/<episode_id>/v1/messages` (base URL `.../s/<episode_id>`, what `ANTHROPIC_BASE_URL` names: the
`anthropic` client appends `/v1/messages`) and as `/v1/messages` with the header `X-Episode-Id`. The key comes as
`x-api-key` (the `anthropic` client's header; the gateway accepts it for every route), `anthropic-version` is
accepted whatever its value, and every error, the gateway's own included, is in Anthropic's shape.
`POST .../v1/messages/count_tokens` answers `{"input_tokens"}` (a fresh render; nothing is generated or recorded).
"""

from __future__ import annotations

import time

from aiohttp import web

from verl_ext.agent.gateway.core import RequestError
from verl_ext.agent.gateway.protocols import messages as proto
from verl_ext.agent.gateway.wire.base import WireAdapter, read_json, register_adapter, reply_headers, write_sse


@register_adapter
class Messages(WireAdapter):
    name = "messages"
    routes = (("POST", "/v1/messages", "create"), ("POST", "/v1/messages/count_tokens", "count_tokens"))

    async def create(self, request: web.Request) -> web.StreamResponse:
        t0, s, body, ignored = await self.begin(request, proto.check_fields)
        r = await self.chat(s, proto.to_chat_turn(body))
        stopped_by = r.stop_sequence if r.finish_reason == "stop" else None  # Anthropic reports the stop string
        message = proto.build_message(r, stop_sequence=stopped_by, model=self.model_name)
        headers = reply_headers(ignored, r.fault)
        self.core.stats.handler_s += time.perf_counter() - t0
        if body.get("stream"):
            return await write_sse(request, list(proto.stream_events(message)), headers, named=True, done=False)
        return web.json_response(message, headers=headers)

    async def count_tokens(self, request: web.Request) -> web.Response:
        """`{"input_tokens": n}`: the request's messages and tools rendered afresh (`EpisodeCore.count_tokens`).
        Claude-Code style harnesses ask this to track their context window."""
        self.session(request)
        body = await read_json(request)
        proto.check_fields(body)
        turn = proto.to_chat_turn(body, count_only=True)
        return web.json_response({"input_tokens": self.core.count_tokens(turn)})

    def error_response(self, e: RequestError) -> web.Response:
        # A closed episode stays closed: the anthropic client would otherwise retry a 409.
        headers = {"x-should-retry": "false"} if e.status == 409 else None
        return web.json_response(proto.error_body(e.status, e.message), status=e.status, headers=headers)
