"""OpenAI's Responses API (`POST /v1/responses`) over the episode core: the HTTP side of
`verl_ext.agent.gateway.protocols.responses` (which fields, items and events mean what; see there).

Served as `/s/<episode_id>/v1/responses` (base URL `.../s/<episode_id>/v1`, what `OPENAI_BASE_URL` names) and as
`/v1/responses` with the header `X-Episode-Id`. `previous_response_id` names the episode's last response: the
adapter holds that response's conversation (input + output, instructions apart) per open episode.
"""

from __future__ import annotations

import time

from aiohttp import web

from verl_ext.agent.gateway.protocols import responses as proto
from verl_ext.agent.gateway.protocols.fields import token_logprobs
from verl_ext.agent.gateway.wire.base import WireAdapter, register_adapter, reply_headers, write_sse


@register_adapter
class Responses(WireAdapter):
    name = "responses"
    routes = (("POST", "/v1/responses", "create"),)

    def __init__(self, core, model_name: str):
        super().__init__(core, model_name)
        self._held: dict[str, tuple[str, list[dict]]] = {}  # episode id -> (last response id, its conversation)

    async def create(self, request: web.Request) -> web.StreamResponse:
        t0, s, body, ignored = await self.begin(request, proto.check_fields)
        turn, conversation = proto.to_chat_turn(body, self._held.get(s.episode_id))
        r = await self.chat(s, turn)
        lps = token_logprobs(self.sampled_tokens(r), r.logprobs)
        response = proto.build_response(body, r, model=self.model_name, created_at=time.time(), token_logprobs=lps)
        for eid in [e for e in self._held if e not in self.core.sessions]:  # episodes collected since
            del self._held[eid]
        self._held[s.episode_id] = (response["id"], conversation + proto.output_to_messages(response))
        headers = reply_headers(ignored, r.fault)
        self.core.stats.handler_s += time.perf_counter() - t0
        if body.get("stream"):
            return await write_sse(request, list(proto.stream_events(response)), headers, named=True, done=False)
        return web.json_response(response, headers=headers)
