"""The one-line tool-call format (pure, no verl): a call is a line ``<tool name>: <argument>`` at the end of the
assistant's reply, and the tool's result comes back as a user turn ``Result: <result>``.

Why a format of our own: SmolLM2-135M-Instruct as released makes no hermes JSON call in 90 samples even after a
worked exchange, while after one worked exchange in this format it writes ``calculator: ...`` in 11 of 30 greedy
replies (docs/AGENT_REAL_MODEL.md); RL can only reinforce calls the model sometimes makes. The chat template that
renders it is ``smollm2.LINE_TOOL_CHAT_TEMPLATE``; verl's ToolParser ``line`` (`tool_parsers.LineToolParser`) reads
it behind the gateway's codec.

A call is read only in the exact form the template writes it: the tool's own name, ``": "``, the argument without
surrounding whitespace, each call alone on its line, the calls the reply's last lines (text before them is the
reply's content). So a call the gateway hands the agent renders back, in the next request, as the very text the
policy sampled. A line that starts with a tool's name and a colon in any other form (``Calc: 4*8``, ``calc:4*8``, a
call followed by more text) is an attempt that failed: the codec counts it ``malformed`` and the reply stays plain
content. The argument fills the tool's one parameter (``argument_name``), so the format suits tools of one string
argument, such as a calculator's expression.
"""

from __future__ import annotations

import re

SEPARATOR = ": "  # between the tool's name and its argument
RESULT_PREFIX = "Result: "  # a tool result's user turn: RESULT_PREFIX + the result
EXAMPLE_ARGUMENT = "12 * 3"  # the system line's example call: `<first tool's name>: 12 * 3`


def call_line(name: str, argument: str) -> str:
    """A call as the template renders it (and the parser reads it)."""
    return f"{name}{SEPARATOR}{argument}"


def argument_name(parameters: dict | None) -> str | None:
    """The parameter a line call's argument fills: the first required one, else the first property (None: a tool
    without parameters, which the format cannot call)."""
    properties = list((parameters or {}).get("properties") or {})
    required = [r for r in (parameters or {}).get("required") or [] if r in properties]
    return (required or properties or [None])[0]


def _is_attempt(line: str, names: list[str]) -> bool:
    return any(re.match(rf"\s*{re.escape(n)}\s*:", line, re.IGNORECASE) for n in names)


def count_attempts(text: str, names: list[str]) -> int:
    """Lines of `text` that start with one of the tool `names` (any case) and a colon: calls tried, well-formed or
    not."""
    return sum(_is_attempt(line, names) for line in text.split("\n"))


def read_calls(text: str, names: list[str]) -> tuple[str, list[tuple[str, str]]]:
    """(content, [(tool name, argument)]): the well-formed calls at the end of `text` and the text before them
    (stripped). No calls unless every attempt in `text` is a well-formed call among its last lines."""
    lines = text.rstrip("\n").split("\n")
    calls: list[tuple[str, str]] = []
    while lines:
        call = _well_formed(lines[-1], names)
        if call is None:
            break
        calls.insert(0, call)
        lines.pop()
    content = "\n".join(lines)
    if not calls or count_attempts(content, names):
        return text, []
    return content.strip(), calls


def _well_formed(line: str, names: list[str]) -> tuple[str, str] | None:
    for name in names:
        prefix = name + SEPARATOR
        if line.startswith(prefix):
            argument = line[len(prefix) :]
            if argument and argument == argument.strip():
                return name, argument
    return None
