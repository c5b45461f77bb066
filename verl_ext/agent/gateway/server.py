"""OpenAI-compatible HTTP gateway in front of verl's rollout servers, recording token-true agent episodes.

An agent is any program that talks to an OpenAI-style server. It gets a base URL that names its episode,

    http://<host>:<port>/s/<episode_id>/v1        (or http://<host>:<port>/v1 with the header `X-Episode-Id`)

and uses it unchanged (`openai.OpenAI(base_url=...)`, any framework on top of it). The gateway is only the HTTP
server and its routing; what a request means is decided elsewhere:

- `core.EpisodeCore`: sessions, rounds, the token-true prompt of each round (history matching up to client
  re-serialization, drift accounting), the rollout call, the reply's parsing (`toolcall`: reasoning, tool calls);
- `protocols/`: each wire protocol's translation to and from the core's chat form (its fields, reply, events);
- `wire/`: one thin HTTP adapter per wire protocol (`chat_completions`: `POST .../v1/chat/completions`,
  `completions`: `POST .../v1/completions`, `responses`: `POST .../v1/responses`, `messages`:
  `POST .../v1/messages`), registered in `wire.ADAPTERS`;
- here: `GET .../v1/models`, `POST .../scores` (`{"score": float, "acc": float?, "step_metas": [dict|null, ...]?}`
  closes the episode; `step_metas[t]` is the environment's metadata for its reply to assistant turn t), pool mode's
  `GET /tasks/next`, the API key (`Authorization: Bearer <key>` or `x-api-key: <key>`), 503 while shutting down.

Sampling follows the trainer's rollout settings, not the request (the recorded log-probs must be the policy's);
`max_tokens` is honoured but capped by the episode's remaining response budget (`rollout.response_length` over all
rounds).

Errors are in each protocol's shape (OpenAI's: `{"error": {"message", "type", "code"}}`, `code` a string such as
`context_length_exceeded`, which the openai client exposes as `e.code`): 400 malformed JSON / fields / budget
exceeded, 401 wrong key (when one is configured), 404 unknown episode, 409 episode already closed, 429 when more
than `max_inflight` generation requests are queued (back-pressure; the openai client retries 429 by itself), 503
while shutting down.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from typing import Any

from aiohttp import web

from verl_ext.agent.gateway.core import (
    DEFAULT_HOST,
    DEFAULT_MAX_INFLIGHT,
    EpisodeCore,
    GatewayStats,
    GenerateFn,
    RequestError,
    Session,
)
from verl_ext.agent.gateway.wire import ADAPTERS, WireAdapter
from verl_ext.agent.gateway.wire.base import read_json


class Gateway:
    """The HTTP server over one `EpisodeCore`, serving the wire adapters `adapters` (default: all registered)."""

    def __init__(
        self,
        *,
        tokenizer,
        builder,
        generate: GenerateFn,
        model_name: str,
        prompt_length: int,
        response_length: int,
        host: str = DEFAULT_HOST,
        port: int = 0,
        max_inflight: int = DEFAULT_MAX_INFLIGHT,
        api_key: str | None = None,
        tool_parser: str = "hermes",
        reasoning_parser: str = "none",
        adapters: list[str] | None = None,
    ):
        self.core = EpisodeCore(
            tokenizer=tokenizer,
            builder=builder,
            generate=generate,
            prompt_length=prompt_length,
            response_length=response_length,
            max_inflight=max_inflight,
            tool_parser=tool_parser,
            reasoning_parser=reasoning_parser,
        )
        unknown = set(adapters or ()) - set(ADAPTERS)
        if unknown:
            raise ValueError(f"unknown wire adapters {sorted(unknown)}; known: {sorted(ADAPTERS)}")
        self.adapters: list[WireAdapter] = [ADAPTERS[n](self.core, model_name) for n in (adapters or ADAPTERS)]
        self.tokenizer, self.model_name = tokenizer, model_name
        self.host, self.port, self.api_key = host, port, api_key
        self._tasks: asyncio.Queue = asyncio.Queue()  # (episode id, task) offered to pool workers
        self._closing = False
        self._runner: web.AppRunner | None = None
        self._openai = WireAdapter(self.core, model_name)  # error shape of the gateway's own routes

    @property
    def sessions(self) -> dict[str, Session]:
        return self.core.sessions

    @property
    def stats(self) -> GatewayStats:
        return self.core.stats

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        app = web.Application(client_max_size=32 * 1024 * 1024)
        for prefix in ("/s/{sid}", ""):
            app.router.add_get(prefix + "/v1/models", self._wrap(self._openai, self._models))
            app.router.add_post(prefix + "/scores", self._wrap(self._openai, self._scores))
            for adapter in self.adapters:
                for method, path, handler in adapter.routes:
                    app.router.add_route(method, prefix + path, self._wrap(adapter, getattr(adapter, handler)))
        app.router.add_get("/tasks/next", self._wrap(self._openai, self._next_task))
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=5.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, backlog=1024)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # the real port when 0 (ephemeral) was asked for

    async def stop(self) -> None:
        """Refuse new requests (503), then close the listener; in-flight handlers are cancelled by aiohttp."""
        self._closing = True
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def session_url(self, episode_id: str) -> str:
        return f"{self.base_url}/s/{episode_id}"

    # ------------------------------------------------------------------ sessions (called by the agent loop)
    def open_session(self, sampling_params: dict[str, Any], episode_id: str | None = None, **meta) -> Session:
        return self.core.open_session(sampling_params, episode_id or uuid.uuid4().hex, **meta)

    def offer_task(self, episode_id: str, task: dict[str, Any]) -> None:
        """Queue an open episode for the next agent worker that asks `GET /tasks/next` (pool mode)."""
        if episode_id not in self.sessions:
            raise ValueError(f"episode {episode_id} is not open")
        self._tasks.put_nowait((episode_id, task))

    def close_session(self, episode_id: str) -> Session:
        return self.core.close_session(episode_id)

    # ------------------------------------------------------------------ HTTP plumbing
    def _authorized(self, request: web.Request) -> bool:
        if not self.api_key:
            return True
        return (
            request.headers.get("Authorization") == f"Bearer {self.api_key}"
            or request.headers.get("x-api-key") == self.api_key  # the Anthropic SDK's header
        )

    def _wrap(self, adapter: WireAdapter, handler):
        """Shutdown, the key, and every `RequestError` of the handler in the adapter's error shape."""

        async def route(request: web.Request) -> web.StreamResponse:
            try:
                if self._closing:
                    raise RequestError(503, "gateway is shutting down", "unavailable")
                if not self._authorized(request):
                    raise RequestError(401, "invalid API key", "invalid_api_key")
                return await handler(request)
            except RequestError as e:
                if e.status == 400:
                    self.stats.rejected_400 += 1
                return adapter.error_response(e)

        return route

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [{"id": self.model_name, "object": "model", "created": 0, "owned_by": "verl-ext"}],
            }
        )

    # ------------------------------------------------------------------ scores
    async def _scores(self, request: web.Request) -> web.Response:
        s = self.core.session(request.match_info.get("sid") or request.headers.get("X-Episode-Id"))
        body = await read_json(request)
        score = body.get("score")
        if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
            raise RequestError(400, f"score must be a finite number, got {score!r}")
        acc = body.get("acc", score)
        if isinstance(acc, bool) or not isinstance(acc, int | float) or not math.isfinite(acc):
            raise RequestError(400, f"acc must be a finite number, got {acc!r}")
        metas = body.get("step_metas")
        if metas is not None and (
            not isinstance(metas, list) or not all(m is None or isinstance(m, dict) for m in metas)
        ):
            raise RequestError(400, "step_metas must be a list of objects or nulls (one per assistant turn)")
        s.score = {"score": float(score), "acc": float(acc), "step_metas": metas}
        s.scored.set()
        return web.json_response({"episode_id": s.episode_id, "closed": True})

    # ------------------------------------------------------------------ pool mode: long-running agent workers
    async def _next_task(self, request: web.Request) -> web.Response:
        """`GET /tasks/next?wait_s=<s>` (default 30, at most 300): the next open episode for a worker, as
        `{"episode_id", "task", "base_url", "anthropic_base_url", "score_url"}`, or 204 when none came within wait_s
        (poll again). Episodes closed while queued (timed out) are skipped."""
        try:
            wait_s = min(float(request.query.get("wait_s", 30)), 300.0)
        except ValueError:
            raise RequestError(400, f"wait_s must be a number, got {request.query.get('wait_s')!r}") from None
        deadline = asyncio.get_running_loop().time() + max(wait_s, 0.0)
        while True:
            left = deadline - asyncio.get_running_loop().time()
            try:
                eid, task = await asyncio.wait_for(self._tasks.get(), max(left, 0.001))
            except TimeoutError:
                return web.Response(status=204)
            if eid in self.sessions:
                url = self.session_url(eid)
                # anthropic_base_url: the anthropic client appends /v1/messages itself
                return web.json_response(
                    {
                        "episode_id": eid,
                        "task": task,
                        "base_url": f"{url}/v1",
                        "anthropic_base_url": url,
                        "score_url": f"{url}/scores",
                    }
                )
