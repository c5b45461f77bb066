"""Wire protocols beyond chat completions, as pure translations to and from the episode core's chat form.

The episode core (`verl_ext.agent.core`) speaks one language: OpenAI chat messages (`role`, `content`,
`tool_calls`, `tool_call_id`) and chat function tools, which is also what the tokenizer's chat template renders.
Each module here only translates (no HTTP, no tokenizer; the thin HTTP adapters are in `verl_ext.agent.wire`):

- `responses`: OpenAI's Responses API (`POST /v1/responses`: input items, function calls, the Responses event
  stream);
- `messages`: Anthropic's Messages API (`POST /v1/messages`: content blocks, `tool_use` / `tool_result`, Anthropic's
  event stream and error shape).

A request becomes a `core.ChatTurn`; the core's `TurnResult` becomes the protocol's reply object and, for
`stream: true`, its event sequence. Nothing here tokenizes: the token ids stay the core's, so every round of an
episode extends the same token prefix whichever protocol carried it. Bad input raises `core.RequestError` (400)
with a message that names the field.
"""

from __future__ import annotations

from typing import Any

from verl_ext.agent.core import RequestError
from verl_ext.agent.toolcall import ToolSpecError, check_tool_choice, check_tools


def bad(message: str) -> RequestError:
    return RequestError(400, message)


def text_parts(content: Any, where: str, kinds: tuple[str, ...]) -> str:
    """A string, or a list of text parts of the given `type`s joined; anything else (images, files) is a 400."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad(f"{where} must be a string or a list of text parts, got {type(content).__name__}")
    out = []
    for j, p in enumerate(content):
        kind = p.get("type") if isinstance(p, dict) else None
        if kind not in kinds or not isinstance(p.get("text"), str):
            raise bad(f"{where}[{j}]: content part type {kind!r} is not supported (only {', '.join(kinds)})")
        out.append(p["text"])
    return "".join(out)


def function_tool(name: str, parameters: dict, description: Any = None) -> dict:
    """A chat function tool (the form the chat template renders)."""
    fn = {"name": name, "parameters": parameters}
    if description:
        fn["description"] = description
    return {"type": "function", "function": fn}


def checked_tools(tools: list[dict]) -> list[dict] | None:
    """`toolcall.check_tools` with its error as a 400."""
    try:
        return check_tools(tools)
    except ToolSpecError as e:
        raise bad(str(e)) from None


def checked_tool_choice(choice: Any, tools: list[dict] | None, prefix: str = "") -> str | dict:
    """`toolcall.check_tool_choice` on a choice already in the chat form, with its error as a 400."""
    try:
        return check_tool_choice(choice, tools)
    except ToolSpecError as e:
        raise bad(f"{prefix}{e}") from None
