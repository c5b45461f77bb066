"""OpenAI-compatible HTTP gateway in front of verl's rollout servers, recording token-true agent episodes.

An agent is any program that talks to an OpenAI-style server. It gets a base URL that names its episode,

    http://<host>:<port>/s/<episode_id>/v1        (or http://<host>:<port>/v1 with the header `X-Episode-Id`)

and uses it unchanged (`openai.OpenAI(base_url=...)`). Endpoints:

- `POST .../v1/chat/completions`: the gateway renders the messages with the tokenizer's chat template itself,
  generates token-in/token-out through verl's `LLMServerClient` (so batching, weight sync and sleep/wake stay
  verl's), records the round (prompt ids, sampled ids, their log-probs) and answers with the decoded text.
  When the messages extend the episode's previous request plus the reply it got (append-only), the prompt is built
  incrementally with verl's Continuous Token builder from the *recorded* token ids: model output is never
  re-tokenized. Otherwise (history rewritten) the prompt is rendered afresh and `trajectory` splits the episode.
  `stream: true` is answered as server-sent events (one content chunk, then `[DONE]`).
- `POST .../v1/completions`: the same for a plain-text prompt (extended when it starts with the previous prompt and
  completion text, else re-tokenized as a new segment).
- `GET .../v1/models`: the one served model.
- `POST /s/<episode_id>/scores` (or `/scores` with the header): `{"score": float, "acc": float?,
  "step_metas": [dict|null, ...]?}` closes the episode (the seed's notify_score). `step_metas[t]` is the
  environment's metadata for its reply to assistant turn t (an `error_kind` there feeds the Composer's hints).

Sampling follows the trainer's rollout settings, not the request: temperature/top_p/top_k from the request are
ignored (the recorded log-probs must be the policy's sampling distribution); `max_tokens` is honoured but capped by
the episode's remaining response budget (`rollout.response_length` over all rounds). `n > 1` and tool schemas are
rejected with 400.

Errors are OpenAI-shaped `{"error": {"message", "type", "code"}}` (`code` a string such as
`context_length_exceeded`, which the openai client exposes as `e.code`): 400 malformed JSON / fields / budget exceeded,
401 wrong key (when one is configured), 404 unknown episode, 409 episode already closed, 429 when more than
`max_inflight` generation requests are queued (back-pressure; the openai client retries 429 by itself), 503 while
shutting down.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from verl_ext.agent.trajectory import Round

# (request_id, prompt_ids, sampling_params) -> (sampled token ids, their log-probs or None[, the rollout's weight
# version (verl's global_steps) or None])
GenerateFn = Callable[[str, list[int], dict[str, Any]], Awaitable[tuple]]

_ROLES = ("system", "user", "assistant", "tool")
_MESSAGE_KEYS = ("role", "content", "name", "tool_call_id", "tool_calls")


class RequestError(Exception):
    def __init__(self, status: int, message: str, code: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


@dataclass
class Session:
    """One episode's state. `messages` / `text` and `runtime_ids` are what the next request must extend."""

    episode_id: str
    sampling_params: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)
    rounds: list[Round] = field(default_factory=list)
    messages: list[dict] | None = None  # chat: last request's messages + the reply it got
    text: str | None = None  # completions: last prompt + the completion it got
    runtime_ids: list[int] = field(default_factory=list)
    first_prompt_len: int = 0
    score: dict[str, Any] | None = None
    closed: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    scored: asyncio.Event = field(default_factory=asyncio.Event)  # set by POST /scores (ends a pool episode)


@dataclass
class GatewayStats:
    requests: int = 0
    generations: int = 0
    rejected_400: int = 0
    rejected_429: int = 0
    generate_s: float = 0.0  # time inside the rollout call
    handler_s: float = 0.0  # total time in generation handlers (handler_s - generate_s = the gateway's overhead)
    inflight_at_start_sum: int = 0  # sum over generations of the rollout calls in flight when it started

    def as_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


def normalize_message(m: Any, i: int) -> dict:
    """A chat message reduced to the fields that matter for the template, None-valued fields dropped, so that a
    message the agent echoes back (with e.g. `refusal: null`) compares equal to the one the gateway sent."""
    if not isinstance(m, dict):
        raise RequestError(400, f"messages[{i}] must be an object, got {type(m).__name__}")
    role = m.get("role")
    if role not in _ROLES:
        raise RequestError(400, f"messages[{i}].role must be one of {list(_ROLES)}, got {role!r}")
    content = m.get("content")
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
            raise RequestError(400, f"messages[{i}].content parts must all be text parts")
        content = "".join(p["text"] for p in content)
    if content is None and role == "assistant" and m.get("tool_calls"):
        content = ""
    if not isinstance(content, str):
        raise RequestError(400, f"messages[{i}].content must be a string or a list of text parts")
    out = {k: m[k] for k in _MESSAGE_KEYS if m.get(k) is not None}
    out["content"] = content
    return out


def _positive_int(body: dict, key: str) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise RequestError(400, f"{key} must be a positive integer, got {v!r}")
    return v


class Gateway:
    """The HTTP server. `tokenizer` renders/decodes, `builder` is verl's Continuous Token builder for it."""

    def __init__(
        self,
        *,
        tokenizer,
        builder,
        generate: GenerateFn,
        model_name: str,
        prompt_length: int,
        response_length: int,
        host: str = "127.0.0.1",
        port: int = 0,
        max_inflight: int = 256,
        api_key: str | None = None,
    ):
        if max_inflight < 1:
            raise ValueError(f"max_inflight must be >= 1, got {max_inflight}")
        self.tokenizer, self.builder, self._generate = tokenizer, builder, generate
        self.model_name, self.prompt_length, self.response_length = model_name, prompt_length, response_length
        self.host, self.port, self.max_inflight, self.api_key = host, port, max_inflight, api_key
        self.sessions: dict[str, Session] = {}
        self._tasks: asyncio.Queue = asyncio.Queue()  # (episode id, task) offered to pool workers
        self.stats = GatewayStats()
        self._pending = 0  # generation requests admitted and not yet answered
        self._inflight_gen = 0  # rollout calls in flight
        self._closing = False
        self._runner: web.AppRunner | None = None
        self._eos = tokenizer.eos_token_id

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        app = web.Application(middlewares=[self._errors], client_max_size=32 * 1024 * 1024)
        for prefix in ("/s/{sid}", ""):
            app.router.add_get(prefix + "/v1/models", self._models)
            app.router.add_post(prefix + "/v1/chat/completions", self._chat)
            app.router.add_post(prefix + "/v1/completions", self._completions)
            app.router.add_post(prefix + "/scores", self._scores)
        app.router.add_get("/tasks/next", self._next_task)
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
        eid = episode_id or uuid.uuid4().hex
        if eid in self.sessions:
            raise ValueError(f"episode {eid} is already open")
        s = Session(episode_id=eid, sampling_params=dict(sampling_params), meta=meta)
        self.sessions[eid] = s
        return s

    def offer_task(self, episode_id: str, task: dict[str, Any]) -> None:
        """Queue an open episode for the next agent worker that asks `GET /tasks/next` (pool mode)."""
        if episode_id not in self.sessions:
            raise ValueError(f"episode {episode_id} is not open")
        self._tasks.put_nowait((episode_id, task))

    def close_session(self, episode_id: str) -> Session:
        s = self.sessions.pop(episode_id)
        s.closed = True
        return s

    # ------------------------------------------------------------------ HTTP plumbing
    @web.middleware
    async def _errors(self, request: web.Request, handler):
        try:
            if self._closing:
                raise RequestError(503, "gateway is shutting down", "unavailable")
            if self.api_key and request.headers.get("Authorization") != f"Bearer {self.api_key}":
                raise RequestError(401, "invalid API key", "invalid_api_key")
            return await handler(request)
        except RequestError as e:
            if e.status == 400:
                self.stats.rejected_400 += 1
            kind = "invalid_request_error" if e.status == 400 else e.code
            return web.json_response({"error": {"message": e.message, "type": kind, "code": e.code}}, status=e.status)

    def _session(self, request: web.Request) -> Session:
        sid = request.match_info.get("sid") or request.headers.get("X-Episode-Id")
        if not sid:
            raise RequestError(400, "no episode: use the URL /s/<episode_id>/v1/... or the header X-Episode-Id")
        s = self.sessions.get(sid)
        if s is None:
            raise RequestError(404, f"unknown episode {sid!r} (never opened, or already collected)", "not_found")
        if s.score is not None:
            raise RequestError(409, f"episode {sid!r} is closed (its score was posted)", "episode_closed")
        return s

    @staticmethod
    async def _json(request: web.Request) -> dict:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise RequestError(400, f"request body is not valid JSON: {e}") from None
        if not isinstance(body, dict):
            raise RequestError(400, "request body must be a JSON object")
        return body

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [{"id": self.model_name, "object": "model", "created": 0, "owned_by": "verl-ext"}],
            }
        )

    # ------------------------------------------------------------------ generation
    def _check_common(self, body: dict) -> int | None:
        if body.get("n", 1) != 1:
            raise RequestError(400, f"n must be 1 (one sampled continuation per round), got {body.get('n')!r}")
        if body.get("tools") or body.get("functions"):
            raise RequestError(400, "tool schemas are not supported: describe tools in the messages")
        return _positive_int(body, "max_tokens") or _positive_int(body, "max_completion_tokens")

    async def _admit(self):
        """Back-pressure: at most `max_inflight` generation requests are admitted at once, the rest get 429."""
        if self._pending >= self.max_inflight:
            self.stats.rejected_429 += 1
            raise RequestError(
                429,
                f"too many requests in flight ({self._pending} >= {self.max_inflight}); retry later",
                "rate_limit_exceeded",
            )
        self._pending += 1

    async def _run_round(self, s: Session, prompt_ids: list[int], response_start: int, max_tokens: int | None):
        """Generate one round on `prompt_ids`; `response_start` = where this segment's first prompt ends."""
        if response_start > self.prompt_length:
            raise RequestError(
                400,
                f"the first prompt has {response_start} tokens; the limit is {self.prompt_length}",
                "context_length_exceeded",
            )
        budget = self.response_length - (len(prompt_ids) - response_start)
        if budget < 1:
            raise RequestError(
                400,
                f"the episode's response budget of {self.response_length} tokens is used up",
                "context_length_exceeded",
            )
        params = dict(s.sampling_params)
        params["max_tokens"] = min(budget, max_tokens) if max_tokens else budget
        t0 = time.perf_counter()
        self.stats.inflight_at_start_sum += self._inflight_gen
        self._inflight_gen += 1
        try:
            # One request id per episode: verl routes it to the same server every round (prefix cache).
            out = await self._generate(s.episode_id, prompt_ids, params)
        finally:
            self._inflight_gen -= 1
        ids, logprobs = out[0], out[1]
        version = out[2] if len(out) > 2 else None
        self.stats.generate_s += time.perf_counter() - t0
        self.stats.generations += 1
        if s.closed:  # the episode ended (agent killed / timed out) while this round was generating: not recorded
            raise RequestError(409, f"episode {s.episode_id!r} was closed during generation", "episode_closed")
        s.rounds.append(
            Round(
                list(prompt_ids),
                list(ids),
                list(logprobs) if logprobs is not None else None,
                None if version is None else int(version),
            )
        )
        s.runtime_ids = list(prompt_ids) + list(ids)
        s.first_prompt_len = response_start
        finish = "stop" if ids and ids[-1] == self._eos else "length"
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return ids, text, finish

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        t0 = time.perf_counter()
        self.stats.requests += 1
        s = self._session(request)
        body = await self._json(request)
        max_tokens = self._check_common(body)
        raw = body.get("messages")
        if not isinstance(raw, list) or not raw:
            raise RequestError(400, "messages must be a non-empty list")
        messages = [normalize_message(m, i) for i, m in enumerate(raw)]
        if messages[-1]["role"] == "assistant":
            raise RequestError(400, "the last message must not be the assistant's (prefill is not supported)")
        await self._admit()
        try:
            async with s.lock:
                prev = s.messages
                # Rendering runs inline on the event loop: ~1 ms of CPU-bound work that a thread hop would only
                # delay (the GIL gives it no parallelism), measured by scripts/bench_agent.py.
                if prev is not None and len(messages) > len(prev) and messages[: len(prev)] == prev:
                    merged = self.builder.merge_context_tokens(prev, messages, s.runtime_ids)
                    prompt_ids, start = merged.token_ids, s.first_prompt_len
                else:  # first round, or history rewritten: a new segment (trajectory.assemble_segments splits)
                    prompt_ids = self.builder.build_initial_tokens(messages)
                    start = len(prompt_ids)
                ids, text, finish = await self._run_round(s, prompt_ids, start, max_tokens)
                s.messages, s.text = messages + [{"role": "assistant", "content": text}], None
        finally:
            self._pending -= 1
        usage = _usage(prompt_ids, ids)
        rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        self.stats.handler_s += time.perf_counter() - t0
        if body.get("stream"):
            return await self._sse(
                request,
                rid,
                created,
                [
                    {"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None},
                    {"index": 0, "delta": {}, "finish_reason": finish},
                ],
                "chat.completion.chunk",
                usage,
            )
        return web.json_response(
            {
                "id": rid,
                "object": "chat.completion",
                "created": created,
                "model": self.model_name,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": finish,
                        "logprobs": None,
                    }
                ],
                "usage": usage,
            }
        )

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        t0 = time.perf_counter()
        self.stats.requests += 1
        s = self._session(request)
        body = await self._json(request)
        max_tokens = self._check_common(body)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str) or not prompt:
            raise RequestError(400, "prompt must be a non-empty string")
        await self._admit()
        try:
            async with s.lock:
                enc = lambda t: self.tokenizer.encode(t, add_special_tokens=False)
                loop = asyncio.get_running_loop()
                if s.text is not None and len(prompt) > len(s.text) and prompt.startswith(s.text):
                    delta = prompt[len(s.text) :]
                    prompt_ids = s.runtime_ids + await loop.run_in_executor(None, enc, delta)
                    start = s.first_prompt_len
                else:
                    prompt_ids = await loop.run_in_executor(None, enc, prompt)
                    start = len(prompt_ids)
                ids, text, finish = await self._run_round(s, prompt_ids, start, max_tokens)
                s.text, s.messages = prompt + text, None
        finally:
            self._pending -= 1
        usage = _usage(prompt_ids, ids)
        rid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        self.stats.handler_s += time.perf_counter() - t0
        choice = {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}
        if body.get("stream"):
            return await self._sse(request, rid, created, [choice], "text_completion", usage)
        return web.json_response(
            {
                "id": rid,
                "object": "text_completion",
                "created": created,
                "model": self.model_name,
                "choices": [choice],
                "usage": usage,
            }
        )

    async def _sse(self, request, rid, created, choices, obj, usage) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        for i, choice in enumerate(choices):
            chunk = {"id": rid, "object": obj, "created": created, "model": self.model_name, "choices": [choice]}
            if i == len(choices) - 1:
                chunk["usage"] = usage
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    # ------------------------------------------------------------------ scores
    async def _scores(self, request: web.Request) -> web.Response:
        s = self._session(request)
        body = await self._json(request)
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
        `{"episode_id", "task", "base_url", "score_url"}`, or 204 when none came within wait_s (poll again).
        Episodes closed while queued (timed out) are skipped."""
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
                return web.json_response(
                    {"episode_id": eid, "task": task, "base_url": f"{url}/v1", "score_url": f"{url}/scores"}
                )


def _usage(prompt_ids, ids) -> dict:
    """OpenAI's `usage` block of a reply."""
    return {"prompt_tokens": len(prompt_ids), "completion_tokens": len(ids), "total_tokens": len(prompt_ids) + len(ids)}
