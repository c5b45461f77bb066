"""A pool of N external teachers (OpenAI-compatible chat endpoints) for the Composer trace-replay channel.

For each (trace_id, step) the pool asks every teacher for its action in parallel (threads) and returns
{teacher name: TeacherAnswer or None}. It never raises into training: a teacher that times out, answers 429/5xx
after its retries, answers malformed JSON, or is stopped by the spend cap yields None for that step, and the
failure is counted by kind.

- Retries: 429, 5xx, timeouts and connection errors are retried up to `max_retries` times with exponential backoff
  (backoff_base_s * 2**attempt, at most backoff_max_s; a numeric Retry-After header raises the wait up to that cap).
  Other 4xx and malformed answers are not retried. The worst-case time of one teacher query is therefore
  (max_retries + 1) * timeout_s plus the backoffs.
- Spend cap: `max_calls` counts HTTP requests sent (retries included); `max_total_tokens` counts the usage field's
  total_tokens (prompt + completion when total is absent; `max_tokens` when usage is absent, to stay on the safe
  side). A call slot is reserved under a lock before each request, so the call cap is exact; the token cap is
  checked before each request, so calls already in flight may overshoot it by at most max_workers answers. Once
  reached, no request is sent again, a warning is logged once, and `stats()["budget_exhausted"]` is True. Neither
  cap has a default: None (no cap) must be written out (`TeacherPoolConfig`).
- Cache: successful answers are appended to a JSONL file keyed by (trace_id, step, teacher name) and reloaded at
  start, so a restart does not pay twice. An entry whose stored model differs from the teacher's model is ignored.
  A torn last line (crash mid-write) is skipped.
- Agent turns: a request may carry the policy's `tools` and `tool_choice` (a turn of an agent episode, asked as the
  policy saw it: verl_ext/composer/turn_replay.py); they go in the body as given (`tool_choice` only when it is not
  "auto", the API's default with tools). A teacher may then answer with tool calls instead of text: `tool_calls`
  holds them (name and arguments as the API returned them), cached with the text.
- Secrets: a teacher's config holds the *name* of the environment variable with its key (`api_key_env`); the key
  is read from the environment at each request and never stored on any object, logged, cached or saved.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

import httpx

from verl_ext.config.fields import check_declared, setting
from verl_ext.config.settings import read_settings

logger = logging.getLogger(__name__)

RETRYABLE_KINDS = frozenset({"timeout", "connection", "http_429", "http_5xx"})
# A query that ended in one of these after every retry leaves its teacher down until it answers again.
DOWN_KINDS = frozenset({"timeout", "connection"})


class TeacherDown(RuntimeError):
    """A teacher stopped answering and the pool's `on_teacher_down` is `fail`."""


def check_teachers_up(stats: dict[str, Any], on_teacher_down: str) -> None:
    """Raise TeacherDown naming every teacher down (`stats`: `TeacherPool.stats()`) when the pool is set to fail."""
    if on_teacher_down == "fail" and stats["down"]:
        named = "; ".join(f"{name} ({why})" for name, why in sorted(stats["down"].items()))
        raise TeacherDown(
            f"teacher stopped answering: {named}; composer.replay.teacher_pool.on_teacher_down=fail (continue: go on "
            "with the other teachers)"
        )


@dataclass(frozen=True)
class TeacherConfig:
    """One teacher endpoint.

    name: unique label, used in the cache key and in pair provenance.
    base_url: OpenAI-compatible API root, e.g. "https://api.openai.com/v1"; requests go to {base_url}/chat/completions.
    model: model name sent in the request.
    api_key_env: name of the environment variable holding the API key (None: send no Authorization header, e.g.
        a local vLLM server). The key itself never appears in config, logs or files.
    timeout_s: per-request timeout (recommended 60 for frontier APIs; keep small for local servers).
    max_tokens: completion cap per request (recommended: enough for one action, e.g. 256-1024).
    temperature: sampling temperature (recommended 0.0, so teachers answer their best action).
    tool_choice: with tools in the request (an agent's turn), the tool choice sent instead of the student's (None: the
        student's). "none" asks a server that parses no tool calls (vLLM without --enable-auto-tool-choice, which
        refuses tools otherwise) to answer in text: its chat template still renders the tools, and the text is read
        in the policy's call format (turn_replay.py).
    """

    name: str = setting(help="unique label, in the cache key and the pairs' provenance")
    base_url: str = setting(help="OpenAI-compatible API root; requests go to {base_url}/chat/completions")
    model: str = setting(help="model name sent in the request")
    api_key_env: str | None = setting(None, help="the environment variable holding the API key; null: no key")
    timeout_s: float = setting(60.0, gt=0.0, help="per-request timeout in seconds")
    max_tokens: int = setting(512, ge=1, help="completion cap per request")
    temperature: float = setting(0.0, ge=0.0, help="sampling temperature (0: the teacher's best action)")
    tool_choice: str | None = setting(None, help="with tools in the request, sent instead of the student's")

    def __post_init__(self):
        check_declared(self)
        if not self.name:
            raise ValueError("teacher name must be non-empty")
        parsed = urlparse(self.base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"teacher {self.name!r}: base_url must be an http(s) URL, got {self.base_url!r}")
        if not self.model:
            raise ValueError(f"teacher {self.name!r}: model must be non-empty")


@dataclass(frozen=True, kw_only=True)
class TeacherPoolConfig:
    """The pool. Every field is required, keyword-only: no defaults here.

    A spend cap left out would silently be "no cap", a trap when the teachers are paid APIs, and a cache left out
    would pay twice after a restart. So the caller writes each one out: `max_calls=None` / `max_total_tokens=None`
    (no cap) and `cache_path=None` (no cache) are allowed, but only explicitly. The recommended values (a finite
    `max_calls`, a cache in the run's directory, the retry and worker settings) are the Composer recipe's
    `composer.replay.teacher_pool` in recipe/composer/config/composer.yaml, the one place they are set; the recipe's
    config check fills a key a run config leaves out from there (the library never reads a recipe's YAML).

    teachers: the N teachers (recommended 3, so that "2 of 3 agree" is meaningful).
    cache_path: JSONL answer cache (None: no cache; not recommended for paid APIs).
    max_calls: cap on HTTP requests sent, retries included (None: no cap).
    max_total_tokens: cap on total tokens from the usage fields (None: no cap).
    max_retries: retries per teacher query on 429/5xx/timeout/connection errors.
    backoff_base_s, backoff_max_s: exponential backoff.
    max_workers: parallel requests (recommended N teachers x a few steps).
    on_teacher_down: what a teacher that stopped answering does to the run: `continue` (its queries count as
        failures, the others' answers still make pairs) or `fail` (the run stops, naming it: `check_teachers_up`).
        A teacher is down while its latest query ended in a connection error or a timeout after every retry.
    """

    teachers: tuple = setting(help="the N teachers (TeacherConfig or their keys)")
    cache_path: str | None = setting(help="JSONL answer cache; null: none")
    max_calls: int | None = setting(ge=0, help="cap on HTTP requests sent, retries included; null: no cap")
    max_total_tokens: int | None = setting(ge=0, help="cap on total tokens from the usage fields; null: no cap")
    max_retries: int = setting(ge=0, help="retries per teacher query on 429/5xx/timeout/connection errors")
    backoff_base_s: float = setting(ge=0.0, help="exponential backoff's first wait")
    backoff_max_s: float = setting(ge=0.0, help="exponential backoff's longest wait")
    max_workers: int = setting(ge=1, help="parallel requests")
    on_teacher_down: Literal["continue", "fail"] = setting(help="a teacher that stopped answering: go on, or fail")

    def __post_init__(self):
        check_declared(self)
        teachers = tuple(_teacher(t) for t in self.teachers)
        object.__setattr__(self, "teachers", teachers)
        if not teachers:
            raise ValueError("teacher pool needs at least one teacher")
        names = [t.name for t in teachers]
        if len(set(names)) != len(names):
            raise ValueError(f"teacher names must be unique, got {names}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TeacherPoolConfig:
        """Build from a plain dict (e.g. OmegaConf.to_container of the run config); unknown keys are an error, and
        so is a missing one (null is how a cap or the cache is switched off)."""
        note = (
            ", null to switch a spend cap or the cache off (the recipe's values: composer.replay.teacher_pool in "
            "recipe/composer/config/composer.yaml)"
        )
        if "teachers" in data:  # a bad teacher is named before a missing key
            data = {**data, "teachers": [_teacher(t) for t in data["teachers"]]}
        return read_settings(cls, data, "teacher pool config", required_note=note)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, safe to save: holds env-variable names, never keys."""
        return asdict(self)


def _teacher(t: TeacherConfig | dict[str, Any]) -> TeacherConfig:
    return t if isinstance(t, TeacherConfig) else read_settings(TeacherConfig, t, "teacher config")


@dataclass(frozen=True)
class TeacherRequest:
    trace_id: str
    step: int
    messages: list[dict]  # OpenAI chat messages: the state the student saw at this step
    tools: list[dict] | None = None  # OpenAI function tools the student was offered (None: none)
    tool_choice: Any = None  # the student's request's tool choice (None or "auto": the API's default)


@dataclass(frozen=True)
class TeacherAnswer:
    teacher: str
    text: str
    tokens: int
    cached: bool = False
    tool_calls: tuple[dict, ...] = ()  # {"name", "arguments"} of each tool call the teacher answered with


@dataclass
class _Counters:
    calls: int = 0  # HTTP requests sent
    successes: int = 0  # teacher queries answered over HTTP
    cache_hits: int = 0
    retries: int = 0
    tokens: int = 0
    missing_usage: int = 0
    failures: Counter = field(default_factory=Counter)  # final outcome of a query, by kind (incl. "budget")
    failures_by_teacher: Counter = field(default_factory=Counter)  # the same, by teacher name
    down: dict = field(default_factory=dict)  # teacher name -> why its latest query got no answer (DOWN_KINDS)
    attempt_errors: Counter = field(default_factory=Counter)  # every failed request, by kind
    budget_exhausted: bool = False


class TeacherPool:
    """Parallel, cached, capped, fault-tolerant queries to N teachers. Use as a context manager or call close()."""

    def __init__(self, config: TeacherPoolConfig):
        for t in config.teachers:
            if t.api_key_env is not None and not os.environ.get(t.api_key_env):
                raise ValueError(f"teacher {t.name!r}: environment variable {t.api_key_env} is not set")
        self.config = config
        self._lock = threading.Lock()
        self._counters = _Counters()
        self._cache = _AnswerCache(config.cache_path) if config.cache_path else None
        self._client = httpx.Client()
        self._workers = ThreadPoolExecutor(max_workers=config.max_workers, thread_name_prefix="teacher")
        self._dispatcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="teacher-dispatch")

    def __repr__(self) -> str:
        names = [t.name for t in self.config.teachers]
        return f"TeacherPool(teachers={names}, cache={self.config.cache_path!r}, stats={self.stats()})"

    def __enter__(self) -> TeacherPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._dispatcher.shutdown(wait=True)
        self._workers.shutdown(wait=True)
        self._client.close()
        if self._cache is not None:
            self._cache.close()

    def query(self, request: TeacherRequest) -> dict[str, TeacherAnswer | None]:
        return self.query_many([request])[0]

    def query_many(self, requests: list[TeacherRequest]) -> list[dict[str, TeacherAnswer | None]]:
        """Ask every teacher about every request in parallel; blocks until all are answered or have failed."""
        futures = [{t.name: self._workers.submit(self._ask, t, r) for t in self.config.teachers} for r in requests]
        return [{name: fut.result() for name, fut in per_request.items()} for per_request in futures]

    def submit_many(self, requests: list[TeacherRequest]) -> Future:
        """Non-blocking query_many: returns a Future, so the trainer can collect the answers at a later step."""
        return self._dispatcher.submit(self.query_many, list(requests))

    def stats(self) -> dict[str, Any]:
        with self._lock:
            c = self._counters
            return {
                "calls": c.calls,
                "successes": c.successes,
                "cache_hits": c.cache_hits,
                "retries": c.retries,
                "tokens": c.tokens,
                "missing_usage": c.missing_usage,
                "failures": dict(c.failures),
                "failures_by_teacher": dict(c.failures_by_teacher),
                "down": dict(c.down),
                "attempt_errors": dict(c.attempt_errors),
                "budget_exhausted": c.budget_exhausted,
            }

    # -- one teacher, one request ------------------------------------------------------------------------------

    def _ask(self, teacher: TeacherConfig, request: TeacherRequest) -> TeacherAnswer | None:
        try:
            return self._ask_unguarded(teacher, request)
        except Exception as exc:  # never let a teacher break training; the message is ours or httpx's, no headers
            logger.warning(
                "teacher %s: unexpected %s; no answer for step %s", teacher.name, type(exc).__name__, request.step
            )
            self._count_failure("unexpected", teacher)
            return None

    def _ask_unguarded(self, teacher: TeacherConfig, request: TeacherRequest) -> TeacherAnswer | None:
        if self._cache is not None:
            cached = self._cache.get(request.trace_id, request.step, teacher)
            if cached is not None:
                with self._lock:
                    self._counters.cache_hits += 1
                return cached
        headers = _headers(teacher)
        if headers is None:
            logger.warning("teacher %s: environment variable %s is empty; no answer", teacher.name, teacher.api_key_env)
            self._count_failure("missing_key", teacher)
            return None
        for attempt in range(self.config.max_retries + 1):
            if not self._reserve_call():
                self._count_failure("budget", teacher)
                return None
            kind, answer, retry_after = self._post(teacher, request, headers)
            if answer is not None:
                self._record_success(teacher, request, answer)
                return answer
            with self._lock:
                self._counters.attempt_errors[kind] += 1
            if kind in RETRYABLE_KINDS and attempt < self.config.max_retries:
                with self._lock:
                    self._counters.retries += 1
                time.sleep(self._backoff(attempt, retry_after))
                continue
            logger.warning(
                "teacher %s: no answer for trace %s step %s (%s after %d attempts)",
                teacher.name,
                request.trace_id,
                request.step,
                kind,
                attempt + 1,
            )
            self._count_failure(kind, teacher)
            return None
        raise AssertionError("unreachable")

    def _post(
        self, teacher: TeacherConfig, request: TeacherRequest, headers: dict[str, str]
    ) -> tuple[str, TeacherAnswer | None, float | None]:
        """One HTTP request. Returns (failure kind or "ok", answer or None, Retry-After seconds or None)."""
        body = {
            "model": teacher.model,
            "messages": request.messages,
            "max_tokens": teacher.max_tokens,
            "temperature": teacher.temperature,
        }
        if request.tools:
            body["tools"] = request.tools
            choice = request.tool_choice if teacher.tool_choice is None else teacher.tool_choice
            if choice not in (None, "auto"):
                body["tool_choice"] = choice
        url = teacher.base_url.rstrip("/") + "/chat/completions"
        try:
            resp = self._client.post(url, json=body, headers=headers, timeout=teacher.timeout_s)
        except httpx.TimeoutException:
            return "timeout", None, None
        except httpx.TransportError:
            return "connection", None, None
        if resp.status_code == 429:
            return "http_429", None, _retry_after(resp)
        if resp.status_code >= 500:
            return "http_5xx", None, _retry_after(resp)
        if resp.status_code != 200:
            return "http_4xx", None, None
        parsed = _parse_completion(resp.content, teacher)
        if parsed is None:
            return "malformed", None, None
        text, tokens, has_usage, calls = parsed
        if not has_usage:
            with self._lock:
                self._counters.missing_usage += 1
        return "ok", TeacherAnswer(teacher=teacher.name, text=text, tokens=tokens, tool_calls=calls), None

    # -- bookkeeping -------------------------------------------------------------------------------------------

    def _reserve_call(self) -> bool:
        cfg = self.config
        with self._lock:
            c = self._counters
            over_calls = cfg.max_calls is not None and c.calls >= cfg.max_calls
            over_tokens = cfg.max_total_tokens is not None and c.tokens >= cfg.max_total_tokens
            if over_calls or over_tokens:
                if not c.budget_exhausted:
                    c.budget_exhausted = True
                    logger.warning(
                        "teacher pool spend cap reached (calls %d/%s, tokens %d/%s): no more teacher calls",
                        c.calls,
                        cfg.max_calls,
                        c.tokens,
                        cfg.max_total_tokens,
                    )
                return False
            c.calls += 1
            return True

    def _record_success(self, teacher: TeacherConfig, request: TeacherRequest, answer: TeacherAnswer) -> None:
        with self._lock:
            self._counters.down.pop(teacher.name, None)  # it answers again
            self._counters.successes += 1
            self._counters.tokens += answer.tokens
        if self._cache is not None:
            self._cache.put(request.trace_id, request.step, teacher, answer)

    def _count_failure(self, kind: str, teacher: TeacherConfig) -> None:
        with self._lock:
            self._counters.failures[kind] += 1
            self._counters.failures_by_teacher[teacher.name] += 1
            if kind in DOWN_KINDS:
                self._counters.down[teacher.name] = f"{kind} at {teacher.base_url}"

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        delay = self.config.backoff_base_s * (2**attempt)
        if retry_after is not None:
            delay = max(delay, retry_after)
        return min(delay, self.config.backoff_max_s)


def _headers(teacher: TeacherConfig) -> dict[str, str] | None:
    """Request headers, with the key read from the environment now (None if its variable is empty)."""
    headers = {"Content-Type": "application/json"}
    if teacher.api_key_env is not None:
        key = os.environ.get(teacher.api_key_env)
        if not key:
            return None
        headers["Authorization"] = f"Bearer {key}"
    return headers


def _retry_after(resp: httpx.Response) -> float | None:
    try:
        return float(resp.headers["retry-after"])
    except (KeyError, ValueError):
        return None  # absent, or an HTTP date: fall back to our own backoff


def _tool_calls(message: dict) -> tuple[dict, ...] | None:
    """The message's tool calls as {"name", "arguments" (a string)}; None if they are malformed."""
    calls = message.get("tool_calls") or []
    out = []
    for call in calls if isinstance(calls, list) else [None]:
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            return None
        arguments = fn.get("arguments", "{}")
        arguments = arguments if isinstance(arguments, str) else json.dumps(arguments)
        out.append({"name": fn["name"], "arguments": arguments})
    return tuple(out)


def _parse_completion(content: bytes, teacher: TeacherConfig) -> tuple[str, int, bool, tuple[dict, ...]] | None:
    """(text, tokens charged, usage present, tool calls) from an OpenAI chat completion body, or None if malformed.
    The text may be null only beside tool calls (it is "" then)."""
    try:
        data = json.loads(content)
        message = data["choices"][0]["message"]
        text = message["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    calls = _tool_calls(message) if isinstance(message, dict) else None
    if calls is None:
        return None
    if text is None and calls:
        text = ""
    if not isinstance(text, str):
        return None
    usage = data.get("usage") if isinstance(data, dict) else None
    if isinstance(usage, dict):
        total = usage.get("total_tokens")
        if not isinstance(total, int):
            parts = [usage.get("prompt_tokens"), usage.get("completion_tokens")]
            total = sum(parts) if all(isinstance(p, int) for p in parts) else None
        if isinstance(total, int) and total >= 0:
            return text, total, True, calls
    return text, teacher.max_tokens, False, calls


class _AnswerCache:
    """Append-only JSONL of successful answers, keyed by (trace_id, step, teacher)."""

    def __init__(self, path: str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, int, str], dict[str, Any]] = {}
        if self.path.exists():
            with self.path.open("r", encoding="utf-8") as f:
                for line in f:
                    try:
                        rec = json.loads(line)
                        self._entries[(str(rec["trace_id"]), int(rec["step"]), rec["teacher"])] = rec
                    except (ValueError, KeyError, TypeError):
                        continue  # torn or foreign line
        self._file = self.path.open("a", encoding="utf-8")

    def get(self, trace_id: str, step: int, teacher: TeacherConfig) -> TeacherAnswer | None:
        with self._lock:
            rec = self._entries.get((str(trace_id), int(step), teacher.name))
        if rec is None or rec.get("model") != teacher.model:
            return None
        calls = tuple(rec.get("tool_calls") or ())
        return TeacherAnswer(
            teacher=teacher.name, text=rec["text"], tokens=int(rec.get("tokens", 0)), cached=True, tool_calls=calls
        )

    def put(self, trace_id: str, step: int, teacher: TeacherConfig, answer: TeacherAnswer) -> None:
        rec = {
            "trace_id": str(trace_id),
            "step": int(step),
            "teacher": teacher.name,
            "model": teacher.model,
            "text": answer.text,
            "tokens": answer.tokens,
        }
        if answer.tool_calls:
            rec["tool_calls"] = list(answer.tool_calls)
        with self._lock:
            self._entries[(rec["trace_id"], rec["step"], rec["teacher"])] = rec
            self._file.write(json.dumps(rec) + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()
