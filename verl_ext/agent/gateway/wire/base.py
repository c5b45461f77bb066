"""What a wire protocol implements to be served by the gateway, and the HTTP helpers the adapters share.

An adapter is the HTTP side of one protocol: it reads the request, has its translation module in `protocols/` turn
it into the core's protocol-neutral call (`EpisodeCore.chat` with a `ChatTurn`, or `EpisodeCore.complete`), and
sends the `TurnResult` back as that module builds it. It never touches token ids, templates or sessions' history
itself: that is the core's, so every protocol gets the same token-true trajectories, drift accounting and tool-call
parsing. Fields, shapes and events are the translation's: nothing protocol-specific is decided here.

    @register_adapter
    class MyProtocol(WireAdapter):
        name = "my_protocol"
        routes = (("POST", "/v1/my/endpoint", "create"),)   # served under /s/<episode_id> and under / + header

        async def create(self, request: web.Request) -> web.StreamResponse:
            t0, s, body, ignored = await self.begin(request, proto.check_fields)
            result = await self.chat(s, proto.to_chat_turn(body))   # protocols/my_protocol.py
            return web.json_response(proto.build_reply(result), headers=reply_headers(ignored, result.fault))

        def error_response(self, e: RequestError) -> web.Response:   # optional: the protocol's error shape
            ...

The gateway wraps every route: a `RequestError` raised anywhere in the handler becomes `error_response(e)`.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from typing import ClassVar

from aiohttp import web

from verl_ext.agent.gateway.core import ChatTurn, EpisodeCore, RequestError, Session, TurnResult

ADAPTERS: dict[str, type[WireAdapter]] = {}


def register_adapter(cls: type[WireAdapter]) -> type[WireAdapter]:
    if not cls.name or cls.name in ADAPTERS:
        raise ValueError(f"wire adapter name {cls.name!r} is empty or taken")
    ADAPTERS[cls.name] = cls
    return cls


class WireAdapter:
    name: ClassVar[str] = ""
    # (HTTP method, path, name of the handler method); each path is served as /s/<episode_id><path> and as <path>
    # with the header X-Episode-Id.
    routes: ClassVar[tuple[tuple[str, str, str], ...]] = ()

    def __init__(self, core: EpisodeCore, model_name: str):
        self.core, self.model_name = core, model_name

    def session(self, request: web.Request) -> Session:
        return self.core.session(request.match_info.get("sid") or request.headers.get("X-Episode-Id"))

    async def begin(
        self, request: web.Request, check_fields: Callable[[dict], list[str]]
    ) -> tuple[float, Session, dict, list[str]]:
        """A generation request's start: the handler clock (for `stats.handler_s`), the count, its session, its
        JSON body, and the ignored fields present in it (`check_fields`: the protocol's; 400 on a refused one)."""
        t0 = time.perf_counter()
        self.core.stats.requests += 1
        s, body = self.session(request), await read_json(request)
        return t0, s, body, check_fields(body)

    @contextlib.asynccontextmanager
    async def admitted(self):
        """Back-pressure around one generation (429 beyond `max_inflight`)."""
        self.core.admit()
        try:
            yield
        finally:
            self.core.release()

    async def chat(self, s: Session, turn: ChatTurn) -> TurnResult:
        """One chat round of session `s`, admitted under back-pressure."""
        async with self.admitted():
            return await self.core.chat(s, turn)

    def sampled_tokens(self, r: TurnResult) -> list[str] | None:
        """The sampled tokens, each decoded alone, for a reply's log-prob entries (None when none were asked)."""
        return None if r.logprobs is None else [self.core.tokenizer.decode([i]) for i in r.response_ids]

    def error_response(self, e: RequestError) -> web.Response:
        """OpenAI's error shape `{"error": {"message", "type", "code"}}` (the openai client exposes `e.code`)."""
        kind = "invalid_request_error" if e.status == 400 else e.code
        return web.json_response({"error": {"message": e.message, "type": kind, "code": e.code}}, status=e.status)


async def read_json(request: web.Request) -> dict:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RequestError(400, f"request body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise RequestError(400, "request body must be a JSON object")
    return body


def reply_headers(ignored: list[str], fault: str | None = None) -> dict[str, str]:
    """The headers every adapter's reply carries: the ignored fields present, and why tool-call markup came back as
    plain content."""
    headers = {"X-Verl-Ext-Ignored": ",".join(ignored)} if ignored else {}
    if fault:
        headers["X-Verl-Ext-Tool-Call-Fault"] = fault
    return headers


async def write_sse(
    request: web.Request, events: list[dict], headers: dict | None = None, *, named: bool = False, done: bool = True
) -> web.StreamResponse:
    """Server-sent events: each dict as `data: <json>` (`named`: preceded by `event: <its type>`, as the Responses
    and Anthropic streams send them), then `data: [DONE]` (`done`: chat and completions streams only)."""
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", **(headers or {})}
    )
    await resp.prepare(request)
    for ev in events:
        name = f"event: {ev['type']}\n" if named else ""
        await resp.write(f"{name}data: {json.dumps(ev)}\n\n".encode())
    if done:
        await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp
