"""What a wire protocol implements to be served by the gateway, and the request helpers they share.

An adapter translates its protocol's request into the core's protocol-neutral calls (`EpisodeCore.chat` with a
`ChatTurn`, or `EpisodeCore.complete`) and the `TurnResult` back into its protocol's reply. It never touches token
ids, templates or sessions' history itself: that is the core's, so every protocol gets the same token-true
trajectories, drift accounting and tool-call parsing.

    @register_adapter
    class MyProtocol(WireAdapter):
        name = "my_protocol"
        routes = (("POST", "/v1/my/endpoint", "create"),)   # served under /s/<episode_id> and under / + header

        async def create(self, request: web.Request) -> web.StreamResponse:
            s = self.session(request)
            body = await read_json(request)
            turn = ChatTurn(messages=[...], tools=check_tools(...), ...)
            async with self.admitted():
                result = await self.core.chat(s, turn)
            return web.json_response({...})

        def error_response(self, e: RequestError) -> web.Response:   # optional: the protocol's error shape
            ...

The gateway wraps every route: a `RequestError` raised anywhere in the handler becomes `error_response(e)`.
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any, ClassVar

from aiohttp import web

from verl_ext.agent.core import EpisodeCore, RequestError, Session

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

    async def begin(self, request: web.Request) -> tuple[float, Session, dict]:
        """A generation request's start: the handler clock (for `stats.handler_s`), the count, its session, its
        JSON body."""
        t0 = time.perf_counter()
        self.core.stats.requests += 1
        return t0, self.session(request), await read_json(request)

    @contextlib.asynccontextmanager
    async def admitted(self):
        """Back-pressure around one generation (429 beyond `max_inflight`)."""
        self.core.admit()
        try:
            yield
        finally:
            self.core.release()

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


def positive_int(body: dict, key: str) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise RequestError(400, f"{key} must be a positive integer, got {v!r}")
    return v


def stop_strings(value: Any, key: str = "stop") -> tuple[str, ...]:
    """`stop`: a string or a list of non-empty strings (honoured by the rollout engine, cut as OpenAI does)."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise RequestError(400, f"{key} must be a non-empty string or a list of non-empty strings, got {value!r}")
    return tuple(value)


def check_fields(body: dict, honoured: set[str], ignored: set[str], rejected: dict[str, Any]) -> list[str]:
    """Nothing silently ignored: every field is honoured, documented as ignored (returned, for the reply's
    `X-Verl-Ext-Ignored` header), accepted only at its default (`rejected`: field -> the default values allowed),
    or refused with a 400 naming it."""
    ignored_present = []
    for k, v in body.items():
        if k in honoured:
            continue
        if k in ignored:
            if v is not None:
                ignored_present.append(k)
            continue
        if k in rejected:
            if v is None or v in rejected[k]:
                continue
            raise RequestError(400, f"{k}={v!r} is not supported by the training gateway ({_WHY.get(k, 'see docs')})")
        raise RequestError(400, f"unknown field {k!r} (the training gateway refuses what it would otherwise ignore)")
    return ignored_present


_WHY = {
    "seed": "sampling is the trainer's; a fixed seed would make a task's episodes identical",
    "n": "one sampled continuation per round: run n episodes instead",
    "logit_bias": "it would change the policy's distribution, and the recorded log-probs with it",
    "presence_penalty": "it would change the policy's distribution, and the recorded log-probs with it",
    "frequency_penalty": "it would change the policy's distribution, and the recorded log-probs with it",
    "response_format": "constrained decoding would sample from another distribution than the policy's",
    "top_logprobs": "verl's rollout returns the sampled token's log-prob only",
    "parallel_tool_calls": "calls are parsed as the policy wrote them; a single call cannot be enforced",
    "reasoning_effort": "the chat template decides reasoning",
    "functions": "the legacy functions API: use tools",
    "function_call": "the legacy functions API: use tool_choice",
    "echo": "the prompt is not echoed",
    "best_of": "one sampled continuation per round",
    "suffix": "insertion is not supported",
}


def reply_headers(ignored: list[str], fault: str | None = None) -> dict[str, str]:
    """The headers every adapter's reply carries: the ignored fields present, and why tool-call markup came back as
    plain content."""
    headers = {"X-Verl-Ext-Ignored": ",".join(ignored)} if ignored else {}
    if fault:
        headers["X-Verl-Ext-Tool-Call-Fault"] = fault
    return headers


def logprobs_block(tokenizer, ids: list[int], lps: list[float] | None) -> dict | None:
    """OpenAI chat `logprobs`: one entry per sampled token (the policy's log-prob; no alternatives)."""
    if lps is None:
        return None
    return {
        "content": [
            {
                "token": (t := tokenizer.decode([i])),
                "logprob": float(lp),
                "bytes": list(t.encode()),
                "top_logprobs": [],
            }
            for i, lp in zip(ids, lps, strict=True)
        ]
    }


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
