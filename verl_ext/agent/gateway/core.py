"""The token-true episode core every wire protocol shares (no HTTP here: `wire/` adapts protocols to it).

A *session* is one episode. Each request is one *round*: a prompt (token ids) sent to verl's rollout and the ids it
sampled, with their log-probs (`trajectory.Round`). The core decides the prompt of each round:

- **extended**: the request's messages continue the session's history (the previous request's messages plus the
  reply it got) up to client re-serialization (`toolcall.assistant_key`: tool-call ids dropped or renamed, JSON
  arguments re-formatted, `content` null vs "", reasoning stripped or kept inline). The prompt is then the previous
  prompt + the *sampled* ids (+ the end-of-turn token when sampling stopped without it: a stop string or the token
  budget) + the new turns rendered alone by verl's Continuous Token builder (`merge_context_tokens`). Model output
  is never re-tokenized, and `trajectory.assemble_segments` joins the rounds into one sample.
- **split**: anything else starts a new segment with a fresh render of all messages, and the reason is counted
  (`SPLIT_REASONS`): `rewrite` (an earlier message edited, dropped or reordered), `reply_changed` (our last reply
  came back with other text or calls), `parse_failure` (the echoed reply's tool-call arguments are not JSON, so it
  cannot be compared), `tools_changed` (another `tools` list: the rendered system prompt differs),
  `template_mismatch` (the builder cannot render the new turns as a suffix). A fresh render that still extends the
  previous tokens (the template re-renders the reply token for token) counts as extended: that is what
  `assemble_segments`, which only looks at tokens, will do with it.

Per session the core records each round's request as the policy saw it (`Session.turns`: the chat request's
messages, after `normalize_message`, its tools as the template rendered them and its tool choice, then the reply the
round got; None for a plain-text round), one entry per round: the conversation up to any turn, which the Composer's
trace replay asks teachers about and whose tool results mark its error sites (`verl_ext/composer/turn_replay.py`,
`tool_errors.py`).

Per session the core counts `drift` (`extended`, `split.<reason>`, `tool_faults.<kind>`); the agent loop puts them
in the batch, the trainer in the step's metrics and the episode ledger.

The reply's text is parsed by `toolcall.ToolCallCodec` (reasoning, tool calls, stop strings). Sampling settings are
the trainer's (`Session.sampling_params`): the recorded log-probs must be the policy's. Per request the core honours
`max_tokens` (capped by the episode's remaining budget), `stop` (passed to the rollout engine, which stops there),
and `logprobs` (asked of the rollout for that round).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from verl_ext.agent.gateway.toolcall import (
    ArgumentsNotJSON,
    ParsedReply,
    ToolCall,
    ToolCallCodec,
    ToolSpecError,
    assistant_key,
    cut_at_stop,
    for_template,
)
from verl_ext.agent.trajectory import Round, extends

# (request_id, prompt_ids, sampling_params) -> (sampled token ids, their log-probs or None[, the rollout's weight
# version (verl's global_steps) or None])
GenerateFn = Callable[[str, list[int], dict[str, Any]], Awaitable[tuple]]

# the gateway's defaults (the `external_agent` settings take theirs from here): loopback only, and back-pressure
# (429) past this many generation requests in flight
DEFAULT_HOST = "127.0.0.1"
DEFAULT_MAX_INFLIGHT = 256
SPLIT_REASONS = ("rewrite", "reply_changed", "parse_failure", "tools_changed", "template_mismatch")
TOOL_FAULTS = ("malformed", "unknown_tool", "choice_unmet")
_NO_TOOLS_SECTION = (
    "{what}: the model's chat template does not render tools or tool calls, so the model would {lost}: give the "
    "run a chat template with a tools section (actor_rollout_ref.model.custom_chat_template, e.g. "
    "${{smollm2:tool_template}} for SmolLM2; docs/AGENT_REAL_MODEL.md)"
)


class RequestError(Exception):
    """A request the core refuses; `status` is the HTTP status, `code` OpenAI's error code string."""

    def __init__(self, status: int, message: str, code: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


@dataclass
class Drift:
    """How the rounds of one episode joined (see module docstring)."""

    extended: int = 0
    split: Counter = field(default_factory=Counter)
    tool_faults: Counter = field(default_factory=Counter)

    def as_dict(self) -> dict:
        return {"extended": self.extended, "split": dict(self.split), "tool_faults": dict(self.tool_faults)}


@dataclass
class Session:
    """One episode's state. `history` / `text` and `runtime_ids` are what the next request must extend."""

    episode_id: str
    sampling_params: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)
    rounds: list[Round] = field(default_factory=list)
    history: list[dict] | None = None  # chat: last request's messages + the reply it got (canonical)
    tools_key: str | None = None  # chat: the last request's tools, as JSON
    text: str | None = None  # completions: last prompt + the completion it got
    runtime_ids: list[int] = field(default_factory=list)
    # per round: {"messages", "tools", "tool_choice", "reply"} of a chat round (None: a plain-text round)
    turns: list[dict | None] = field(default_factory=list)
    first_prompt_len: int = 0
    drift: Drift = field(default_factory=Drift)
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
    render_s: float = 0.0  # chat template rendering (prompt building)
    parse_s: float = 0.0  # decoding the reply: stop strings, reasoning, tool calls
    inflight_at_start_sum: int = 0  # sum over generations of the rollout calls in flight when it started

    def as_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


@dataclass
class ChatTurn:
    """A protocol-neutral chat request: what every wire adapter translates its request into."""

    messages: list[dict]  # OpenAI chat form, each through `normalize_message`
    tools: list[dict] | None = None  # OpenAI function tools, through `toolcall.check_tools`
    tool_choice: str | dict = "auto"  # through `toolcall.check_tool_choice`
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    logprobs: bool = False


@dataclass
class TurnResult:
    """One answered round: what the adapter formats for its protocol."""

    content: str
    reasoning: str | None
    tool_calls: list[ToolCall]
    finish_reason: str  # stop | length | tool_calls
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float] | None  # the policy's log-probs of response_ids (when asked)
    fault: str | None = None  # why tool-call markup came back as plain content
    stop_sequence: str | None = None  # the `stop` string that ended the text, when one did

    def usage(self) -> dict:
        n_p, n_c = len(self.prompt_ids), len(self.response_ids)
        return {"prompt_tokens": n_p, "completion_tokens": n_c, "total_tokens": n_p + n_c}

    def assistant_message(self) -> dict:
        """The reply as an OpenAI chat message (also the canonical form the next request is compared with)."""
        m: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            m["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        return m


_ROLES = ("system", "user", "assistant", "tool")
_MESSAGE_KEYS = ("role", "content", "name", "tool_call_id", "tool_calls")


def normalize_message(m: Any, i: int) -> dict:
    """A chat message reduced to the fields that matter for the template, None-valued fields dropped, content parts
    joined, so that a message the agent echoes back (with e.g. `refusal: null`) compares equal to the one sent."""
    if not isinstance(m, dict):
        raise RequestError(400, f"messages[{i}] must be an object, got {type(m).__name__}")
    role = m.get("role")
    if role == "developer":  # OpenAI's newer name for the system role
        role = "system"
    if role not in _ROLES:
        raise RequestError(400, f"messages[{i}].role must be one of {list(_ROLES)}, got {role!r}")
    content = m.get("content")
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
            raise RequestError(400, f"messages[{i}].content parts must all be text parts")
        content = "".join(p["text"] for p in content)
    if content is None and role == "assistant":
        content = ""
    if not isinstance(content, str):
        raise RequestError(400, f"messages[{i}].content must be a string or a list of text parts")
    out = {k: m[k] for k in _MESSAGE_KEYS if m.get(k) is not None}
    out["role"], out["content"] = role, content
    calls = out.get("tool_calls")
    if calls is not None:
        if role != "assistant" or not isinstance(calls, list):
            raise RequestError(400, f"messages[{i}].tool_calls must be a list on an assistant message")
        for j, tc in enumerate(calls):
            fn = tc.get("function") if isinstance(tc, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise RequestError(400, f"messages[{i}].tool_calls[{j}].function.name must be a string")
        if not calls:
            del out["tool_calls"]
    return out


def _context_key(m: dict) -> tuple:
    # Tool results: the template renders their content only (ids and names are the client's bookkeeping).
    return (m["role"], m["content"]) if m["role"] == "tool" else (m["role"], m["content"], m.get("name"))


def match_history(history: list[dict], messages: list[dict]) -> str | None:
    """None when `messages` continue `history` (our last reply is its last entry) with at least one new message,
    up to client re-serialization; else the split reason (module docstring). Pure."""
    if len(messages) <= len(history):
        return "rewrite"
    last = len(history) - 1
    for i, (h, m) in enumerate(zip(history, messages, strict=False)):
        if h["role"] != m["role"]:
            return "reply_changed" if i == last else "rewrite"
        if h["role"] == "assistant":
            try:
                same = assistant_key(m) == assistant_key(h)
            except ArgumentsNotJSON:
                return "parse_failure"
            if not same:
                return "reply_changed" if i == last else "rewrite"
        elif _context_key(h) != _context_key(m):
            return "rewrite"
    return None


class EpisodeCore:
    """Sessions, rounds, prompts and replies. `tokenizer` renders/decodes, `builder` is verl's Continuous Token
    builder for it, `generate` the rollout call, `codec` the tool-call codec."""

    def __init__(
        self,
        *,
        tokenizer,
        builder,
        generate: GenerateFn,
        prompt_length: int,
        response_length: int,
        max_inflight: int = DEFAULT_MAX_INFLIGHT,
        tool_parser: str = "hermes",
        reasoning_parser: str = "none",
    ):
        if max_inflight < 1:
            raise ValueError(f"max_inflight must be >= 1, got {max_inflight}")
        self.tokenizer, self.builder, self._generate = tokenizer, builder, generate
        self.prompt_length, self.response_length, self.max_inflight = prompt_length, response_length, max_inflight
        self.codec = ToolCallCodec(tokenizer, tool_parser, reasoning_parser)
        self.sessions: dict[str, Session] = {}
        self.stats = GatewayStats()
        self._pending = 0  # generation requests admitted and not yet answered
        self._inflight_gen = 0  # rollout calls in flight
        self._eos = tokenizer.eos_token_id
        self._renders_tools: bool | None = None
        self._renders_tool_calls: bool | None = None

    def check_template_renders_tools(self) -> None:
        """A chat template without a tools section would drop `tools` silently: refuse them instead (checked once
        per core, by rendering a probe with and without a tool)."""
        if self._renders_tools is None:
            probe = [{"role": "user", "content": "x"}]
            tool = [{"type": "function", "function": {"name": "probe_tool", "parameters": {"type": "object"}}}]
            self._renders_tools = self.builder.build_initial_tokens(probe, tools=tool) != (
                self.builder.build_initial_tokens(probe)
            )
        if not self._renders_tools:
            raise RequestError(400, _NO_TOOLS_SECTION.format(what="tools", lost="never see them"))

    def check_template_renders_tool_calls(self) -> None:
        """A chat template that renders an assistant turn's content only (SmolLM2's released one) would turn a tool
        call in the history into an empty turn: refuse such messages instead (checked once per core)."""
        if self._renders_tool_calls is None:
            ask = {"role": "user", "content": "x"}
            call = {"id": "c", "type": "function", "function": {"name": "probe_tool", "arguments": {}}}
            plain = [ask, {"role": "assistant", "content": ""}, ask]
            with_call = [ask, {"role": "assistant", "content": "", "tool_calls": [call]}, ask]
            try:
                self._renders_tool_calls = self.builder.build_initial_tokens(with_call) != (
                    self.builder.build_initial_tokens(plain)
                )
            except Exception:  # a template that cannot render a call at all drops it too
                self._renders_tool_calls = False
        if not self._renders_tool_calls:
            raise RequestError(400, _NO_TOOLS_SECTION.format(what="messages[].tool_calls", lost="lose its calls"))

    def _render(self, messages: list[dict], tools: list[dict] | None) -> list[int]:
        """A fresh render of `messages` (already `for_template`) and `tools` by the chat template."""
        try:
            return self.builder.build_initial_tokens(messages, tools=tools)
        except Exception as e:  # a template that cannot render these messages: the client's to fix
            raise RequestError(400, f"the chat template cannot render the messages: {e}") from None

    def count_tokens(self, turn: ChatTurn) -> int:
        """The prompt tokens of `turn` rendered afresh (what a first round would be; a continuing round reuses the
        sampled ids, which a re-render approximates). Nothing is generated or recorded."""
        return len(self._render([for_template(m) for m in turn.messages], turn.tools))

    # ------------------------------------------------------------------ sessions
    def open_session(self, sampling_params: dict[str, Any], episode_id: str | None = None, **meta) -> Session:
        eid = episode_id or uuid.uuid4().hex
        if eid in self.sessions:
            raise ValueError(f"episode {eid} is already open")
        s = Session(episode_id=eid, sampling_params=dict(sampling_params), meta=meta)
        self.sessions[eid] = s
        return s

    def close_session(self, episode_id: str) -> Session:
        s = self.sessions.pop(episode_id)
        s.closed = True
        return s

    def session(self, episode_id: str | None) -> Session:
        """The open session `episode_id` (404 unknown, 409 already scored)."""
        if not episode_id:
            raise RequestError(400, "no episode: use the URL /s/<episode_id>/v1/... or the header X-Episode-Id")
        s = self.sessions.get(episode_id)
        if s is None:
            raise RequestError(404, f"unknown episode {episode_id!r} (never opened, or already collected)", "not_found")
        if s.score is not None:
            raise RequestError(409, f"episode {episode_id!r} is closed (its score was posted)", "episode_closed")
        return s

    # ------------------------------------------------------------------ admission
    def admit(self) -> None:
        """Back-pressure: at most `max_inflight` generation requests at once, the rest get 429. Pair with `release`."""
        if self._pending >= self.max_inflight:
            self.stats.rejected_429 += 1
            raise RequestError(
                429,
                f"too many requests in flight ({self._pending} >= {self.max_inflight}); retry later",
                "rate_limit_exceeded",
            )
        self._pending += 1

    def release(self) -> None:
        self._pending -= 1

    # ------------------------------------------------------------------ rounds
    def _closed_runtime_ids(self, s: Session) -> list[int]:
        """The previous prompt + sampled ids, with the end-of-turn token the template renders after a reply when
        sampling stopped without it (stop string, token budget): a boundary token, mask 0 like all context."""
        ids = list(s.runtime_ids)
        if ids and ids[-1] != self._eos:
            ids.append(self._eos)
        return ids

    def _count_join(self, s: Session, prompt_ids: list[int], reason: str | None) -> None:
        if not s.rounds:
            return
        if reason is None or extends(s.runtime_ids, prompt_ids):
            s.drift.extended += 1
        else:
            s.drift.split[reason] += 1

    async def _sample(self, s: Session, prompt_ids, start: int, max_tokens, stop, logprobs):
        """One rollout call on `prompt_ids`; `start` = where this segment's first prompt ends. Records the round."""
        if start > self.prompt_length:
            raise RequestError(
                400,
                f"the first prompt has {start} tokens; the limit is {self.prompt_length}",
                "context_length_exceeded",
            )
        budget = self.response_length - (len(prompt_ids) - start)
        if budget < 1:
            raise RequestError(
                400,
                f"the episode's response budget of {self.response_length} tokens is used up",
                "context_length_exceeded",
            )
        params = dict(s.sampling_params)
        params["max_tokens"] = min(budget, max_tokens) if max_tokens else budget
        if stop:
            params["stop"] = list(stop)
        if logprobs:
            params["logprobs"] = True
        t0 = time.perf_counter()
        self.stats.inflight_at_start_sum += self._inflight_gen
        self._inflight_gen += 1
        try:
            # One request id per episode: verl routes it to the same server every round (prefix cache).
            out = await self._generate(s.episode_id, list(prompt_ids), params)
        finally:
            self._inflight_gen -= 1
        ids, lps = list(out[0]), out[1]
        version = out[2] if len(out) > 2 else None
        self.stats.generate_s += time.perf_counter() - t0
        self.stats.generations += 1
        if s.closed:  # the episode ended (agent killed / timed out) while this round was generating: not recorded
            raise RequestError(409, f"episode {s.episode_id!r} was closed during generation", "episode_closed")
        s.rounds.append(
            Round(
                list(prompt_ids), ids, list(lps) if lps is not None else None, None if version is None else int(version)
            )
        )
        s.runtime_ids = list(prompt_ids) + ids
        s.first_prompt_len = start
        return ids, (list(lps) if lps is not None else None)

    def _finish(self, ids: list[int], parsed: ParsedReply) -> str:
        if parsed.tool_calls:
            return "tool_calls"
        if parsed.stopped_by is not None or (ids and ids[-1] == self._eos):
            return "stop"
        return "length"

    async def chat(self, s: Session, turn: ChatTurn) -> TurnResult:
        """One chat round on session `s` (call between `admit` and `release`)."""
        self._check_chat(turn)
        try:
            opening = self.codec.forced_opening(turn.tool_choice) if turn.tools else ""
        except ToolSpecError as e:
            raise RequestError(400, str(e)) from None
        # context the policy continues from, not a sample of it: part of the prompt (mask 0)
        forced = self.tokenizer.encode(opening, add_special_tokens=False) if opening else []
        tools_key = json.dumps(turn.tools, sort_keys=True) if turn.tools else None
        async with s.lock:
            t0 = time.perf_counter()
            history, prompt_ids, start, reason = self._chat_prompt(s, turn, tools_key, len(forced))
            self.stats.render_s += time.perf_counter() - t0
            self._count_join(s, prompt_ids, reason)
            prompt_ids = list(prompt_ids) + forced
            ids, lps = await self._sample(s, prompt_ids, start, turn.max_tokens, turn.stop, turn.logprobs)
            record = {"messages": turn.messages, "tools": turn.tools, "tool_choice": turn.tool_choice, "reply": None}
            s.turns.append(record)  # one entry per recorded round, the reply filled in below
            t1 = time.perf_counter()
            parsed = await self.codec.parse(ids, turn.tools, turn.tool_choice, turn.stop, opening)
            s.drift.tool_faults.update(parsed.faults)
            self.stats.parse_s += time.perf_counter() - t1
            result = TurnResult(
                content=parsed.content,
                reasoning=parsed.reasoning,
                tool_calls=parsed.tool_calls,
                finish_reason=self._finish(ids, parsed),
                prompt_ids=list(prompt_ids),
                response_ids=ids,
                logprobs=lps if turn.logprobs else None,
                fault=parsed.fault_detail,
                stop_sequence=parsed.stopped_by,
            )
            record["reply"] = result.assistant_message()
            s.history, s.tools_key, s.text = history + [result.assistant_message()], tools_key, None
        return result

    def _check_chat(self, turn: ChatTurn) -> None:
        """RequestError (400) for a chat request the gateway cannot serve as asked."""
        messages = turn.messages
        if not messages:
            raise RequestError(400, "messages must be a non-empty list")
        if messages[-1]["role"] == "assistant":
            raise RequestError(400, "the last message must not be the assistant's (prefill is not supported)")
        if turn.tools:
            self.check_template_renders_tools()
        if any(m.get("tool_calls") for m in messages):
            self.check_template_renders_tool_calls()

    def _chat_prompt(
        self, s: Session, turn: ChatTurn, tools_key: str | None, n_forced: int
    ) -> tuple[list[dict], list[int], int, str | None]:
        """(history, prompt ids, where the segment's first prompt ends, why the session was not extended: None when
        it was): the session's history extended by the new messages, else the whole conversation rendered anew."""
        messages = turn.messages
        reason = "rewrite" if s.history is None else None  # after a completions round: another conversation
        if s.history is not None:
            reason = "tools_changed" if tools_key != s.tools_key else match_history(s.history, messages)
            if reason is None:
                new = [for_template(m) for m in messages[len(s.history) :]]
                try:
                    merged = self.builder.merge_context_tokens(
                        s.history, s.history + new, self._closed_runtime_ids(s), tools=turn.tools
                    )
                    return s.history + new, list(merged.token_ids), s.first_prompt_len, None
                except ValueError:
                    reason = "template_mismatch"
        # first round, or a split: a new segment (trajectory.assemble_segments splits)
        history = [for_template(m) for m in messages]
        prompt_ids = self._render(history, turn.tools)
        return history, prompt_ids, len(prompt_ids) + n_forced, reason  # a forced call opening ends the prompt

    async def complete(
        self, s: Session, prompt: str, max_tokens: int | None = None, stop: tuple[str, ...] = (), logprobs=False
    ) -> TurnResult:
        """One plain-text round: extended when `prompt` starts with the previous prompt and completion text."""
        enc = lambda t: self.tokenizer.encode(t, add_special_tokens=False)  # noqa: E731
        async with s.lock:
            t0 = time.perf_counter()
            reason = None
            if s.text is not None and len(prompt) > len(s.text) and prompt.startswith(s.text):
                prompt_ids = s.runtime_ids + enc(prompt[len(s.text) :])
                start = s.first_prompt_len
            else:
                reason = "rewrite"
                prompt_ids = enc(prompt)
                start = len(prompt_ids)
            self.stats.render_s += time.perf_counter() - t0
            self._count_join(s, prompt_ids, reason)
            ids, lps = await self._sample(s, prompt_ids, start, max_tokens, stop, logprobs)
            s.turns.append(None)  # a plain-text round: no chat request to record
            t1 = time.perf_counter()
            text, stopped_by = cut_at_stop(self.tokenizer.decode(ids, skip_special_tokens=True), stop)
            self.stats.parse_s += time.perf_counter() - t1
            # The next prompt must extend what the client saw: the text up to the stop string.
            s.text, s.history, s.tools_key = prompt + text, None, None
        return TurnResult(
            content=text,
            reasoning=None,
            tool_calls=[],
            finish_reason=self._finish(ids, ParsedReply(text, None, [], stopped_by)),
            prompt_ids=list(prompt_ids),
            response_ids=ids,
            logprobs=lps if logprobs else None,
            stop_sequence=stopped_by,
        )
