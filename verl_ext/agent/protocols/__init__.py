"""Wire protocols beyond chat completions, as thin translations to and from the gateway's chat form (pure: no I/O).

The gateway's episode core speaks one language: OpenAI chat messages (`role`, `content`, `tool_calls`,
`tool_call_id`, `reasoning_content`) and chat function tools, which is also what the tokenizer's chat template
renders. Each protocol here only translates:

- `responses`: OpenAI's Responses API (`POST /v1/responses`: input items, function calls, the Responses event
  stream);
- `messages`: Anthropic's Messages API (`POST /v1/messages`: content blocks, `tool_use` / `tool_result`, Anthropic's
  event stream and error shape).

A request becomes a `ChatTurn` (what the core generates one round for); the core's reply, an assistant chat message,
becomes the protocol's reply object and, for `stream: true`, its event sequence. Nothing here tokenizes: the token
ids stay the core's, so every round of an episode extends the same token prefix whichever protocol carried it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class InvalidRequest(ValueError):
    """A request the protocol cannot serve faithfully; the gateway answers 400 with this message (`param` names
    the offending field, as both APIs' error objects do)."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.message, self.param = message, param


@dataclass
class ChatTurn:
    """One generation request in the core's terms (OpenAI chat vocabulary)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None  # chat function tools: {"type": "function", "function": {...}}
    tool_choice: str | dict[str, Any] | None = None  # "auto" | "none" | "required" | {"type": "function", ...}
    max_tokens: int | None = None
    stop: list[str] | None = None
    stream: bool = False
    extra: dict[str, Any] = field(default_factory=dict)  # protocol-specific values the reply needs (echoed fields)


def positive_int(body: dict, key: str, *, required: bool = False) -> int | None:
    v = body.get(key)
    if v is None:
        if required:
            raise InvalidRequest(f"{key}: field required (a positive integer)", key)
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise InvalidRequest(f"{key} must be a positive integer, got {v!r}", key)
    return v


def text_parts(content: Any, where: str, kinds: tuple[str, ...]) -> str:
    """A string, or a list of text parts of the given `type`s joined; anything else (images, files) is a 400."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidRequest(f"{where} must be a string or a list of text parts, got {type(content).__name__}", where)
    out = []
    for j, p in enumerate(content):
        kind = p.get("type") if isinstance(p, dict) else None
        if kind not in kinds or not isinstance(p.get("text"), str):
            raise InvalidRequest(
                f"{where}[{j}]: content part type {kind!r} is not supported (text parts only: {', '.join(kinds)})",
                where,
            )
        out.append(p["text"])
    return "".join(out)
