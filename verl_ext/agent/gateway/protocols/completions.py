"""OpenAI (legacy) completions (`POST /v1/completions`) over the episode core's text rounds (pure: no I/O, no
tokenizer).

A plain-text prompt, which the core extends when it starts with the previous prompt and the completion it got (see
`core.EpisodeCore.complete`). `stop`, `max_tokens`, `logprobs` (an integer, 0 or 1: the sampled token's log-prob)
and `stream` are honoured; the other fields as in chat completions (`chat.IGNORED`, `chat.AT_DEFAULT`), and `echo`,
`best_of`, `suffix` only at their defaults. A stream is the reply as its one event.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from verl_ext.agent.gateway.core import TurnResult
from verl_ext.agent.gateway.protocols import chat
from verl_ext.agent.gateway.protocols.fields import bad, positive_int, stop_strings
from verl_ext.agent.gateway.protocols.fields import check_fields as _check_fields

HONOURED = {"model", "prompt", "stop", "max_tokens", "logprobs", "stream", "stream_options"}
AT_DEFAULT = {**chat.AT_DEFAULT, "echo": (False,), "best_of": (1,), "suffix": ()}


@dataclass(frozen=True)
class TextTurn:
    """A completions request as the core's `complete` takes it."""

    prompt: str
    max_tokens: int | None
    stop: tuple[str, ...]
    logprobs: bool


def check_fields(body: dict) -> list[str]:
    """Nothing silently ignored (`fields.check_fields`): the ignored fields present (for the reply's header)."""
    return _check_fields(body, HONOURED, chat.IGNORED, AT_DEFAULT)


def to_text_turn(body: dict) -> TextTurn:
    """The request as a `TextTurn` (400 naming the field on anything wrong)."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str) or not prompt:
        raise bad("prompt must be a non-empty string")
    lp = body.get("logprobs")
    if lp is not None and (isinstance(lp, bool) or not isinstance(lp, int) or lp not in (0, 1)):
        raise bad(f"logprobs must be 0 or 1 (the sampled token's log-prob only), got {lp!r}")
    return TextTurn(prompt, positive_int(body, "max_tokens"), stop_strings(body.get("stop")), lp is not None)


def build_completion(r: TurnResult, *, model: str, created: int, tokens: list[str] | None = None) -> dict:
    """The `text_completion` object for the core's result; `tokens`: the sampled tokens, each decoded alone (when
    the request asked for log-probs)."""
    logprobs = None
    if r.logprobs is not None:
        logprobs = {"tokens": tokens, "token_logprobs": r.logprobs, "top_logprobs": None, "text_offset": None}
    choice = {"index": 0, "text": r.content, "finish_reason": r.finish_reason, "logprobs": logprobs}
    base = {"id": f"cmpl-{uuid.uuid4().hex}", "created": created, "model": model}
    return {**base, "object": "text_completion", "choices": [choice], "usage": r.usage()}
