"""OpenAI (legacy) completions (`POST /v1/completions`) over the episode core: a plain-text prompt, extended when
it starts with the previous prompt and the completion it got (the delta is tokenized and appended to the recorded
ids), else a new segment (split, counted as `rewrite`). `stop`, `max_tokens`, `logprobs` (an integer, 0 or 1: the
sampled token's log-prob) and `stream` are honoured; the other fields as in chat completions."""

from __future__ import annotations

import time
import uuid

from aiohttp import web

from verl_ext.agent.core import RequestError
from verl_ext.agent.wire.base import (
    WireAdapter,
    check_fields,
    positive_int,
    register_adapter,
    reply_headers,
    stop_strings,
    write_sse,
)
from verl_ext.agent.wire.chat import AT_DEFAULT, IGNORED

HONOURED = {"model", "prompt", "stop", "max_tokens", "logprobs", "stream", "stream_options"}
AT_DEFAULT_TEXT = {**AT_DEFAULT, "echo": (False,), "best_of": (1,), "suffix": ()}


@register_adapter
class Completions(WireAdapter):
    name = "completions"
    routes = (("POST", "/v1/completions", "create"),)

    async def create(self, request: web.Request) -> web.StreamResponse:
        t0, s, body = await self.begin(request)
        ignored = check_fields(body, HONOURED, IGNORED, AT_DEFAULT_TEXT)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str) or not prompt:
            raise RequestError(400, "prompt must be a non-empty string")
        lp = body.get("logprobs")
        if lp is not None and (isinstance(lp, bool) or not isinstance(lp, int) or lp not in (0, 1)):
            raise RequestError(400, f"logprobs must be 0 or 1 (the sampled token's log-prob only), got {lp!r}")
        max_tokens, stop = positive_int(body, "max_tokens"), stop_strings(body.get("stop"))
        async with self.admitted():
            r = await self.core.complete(s, prompt, max_tokens, stop, logprobs=lp is not None)
        logprobs = None
        if r.logprobs is not None:
            toks = [self.core.tokenizer.decode([i]) for i in r.response_ids]
            logprobs = {"tokens": toks, "token_logprobs": r.logprobs, "top_logprobs": None, "text_offset": None}
        choice = {"index": 0, "text": r.content, "finish_reason": r.finish_reason, "logprobs": logprobs}
        base = {"id": f"cmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": self.model_name}
        headers = reply_headers(ignored)
        self.core.stats.handler_s += time.perf_counter() - t0
        if body.get("stream"):
            events = [{**base, "object": "text_completion", "choices": [choice], "usage": r.usage()}]
            return await write_sse(request, events, headers)
        return web.json_response(
            {**base, "object": "text_completion", "choices": [choice], "usage": r.usage()}, headers=headers
        )
