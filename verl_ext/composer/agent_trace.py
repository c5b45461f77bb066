"""An agent episode as the gateway recorded it, read for the Composer (pure: no torch, no verl; docs/ALGORITHMS.md
section 6, "Agent traces").

The gateway records, per round of an episode, the chat request the policy answered and the reply it got
(`verl_ext.agent.gateway.core.Session.turns`; a transcript's `turns`, `verl_ext/agent/transcript.py`): the request's
messages after `normalize_message`, its tools as the chat template rendered them, its tool choice, and the reply as
an OpenAI assistant message (content, and the tool calls the gateway parsed). Round t is the policy's assistant turn
t, the t-th run of trained tokens in the episode's sample (`hints.assistant_turn_index`). From them:

- `read_trace` gives each turn its request, its reply, its tool calls and each call's result: the tool message the
  agent sent back in the next request (matched by the echoed call's id, else by order). The last turn's calls, and a
  turn whose next request does not continue the conversation (the agent rewrote it), have no results.
- `question`: the task's question, the last user message of the first request, without the task's instruction.
- `expression_key`: a calculator expression compared by what it computes as written: parsed as the project's
  calculator parses it (`verl_ext.mathgen.calculator`: ``×`` and ``÷`` read as ``*`` and ``/``), printed back without
  redundant parentheses (``(2*3)+4`` is ``2 * 3 + 4``), then the generator's canonical form
  (`verl_ext.mathgen.canonical.meaning_key`: spaces dropped, one spelling per number, the operands of a single sum
  or product sorted). An expression the calculator cannot parse keeps its text with whitespace dropped.
- `operations`: the operations (add, sub, mul, div) a calculator expression applies; `question_operations` those a
  generated arithmetic question names (from its canonical form).
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from verl_ext.mathgen.canonical import canonical_form, meaning_key
from verl_ext.mathgen.prompts import INSTRUCTION

_BINARY_OPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div"}
OPERATION_NOUNS = {"add": "addition", "sub": "subtraction", "mul": "multiplication", "div": "division"}


@dataclass(frozen=True)
class ToolCall:
    """One call of a turn: the tool, its arguments as sent (a JSON string), the call's one argument when the tool
    takes one (a calculator's expression), and the result the agent sent back (None: none came back)."""

    name: str
    arguments: str
    argument: str
    result: str | None


@dataclass(frozen=True)
class TraceTurn:
    """Assistant turn `index` of an episode: the request it answered (messages, tools, tool choice), its reply and
    the reply's calls with their results."""

    index: int
    messages: list[dict]
    tools: list[dict] | None
    tool_choice: Any
    reply: dict
    calls: tuple[ToolCall, ...]

    @property
    def content(self) -> str:
        return str(self.reply.get("content") or "")


def call_argument(arguments: Any) -> str:
    """A call's one argument (the value of a one-key object) as text, else its arguments as sorted-key JSON."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return arguments
    if isinstance(arguments, Mapping) and len(arguments) == 1:
        (value,) = arguments.values()
        return value if isinstance(value, str) else json.dumps(value)
    return json.dumps(arguments, sort_keys=True)


def _results(turn: Mapping, following: Mapping | None) -> list[str | None]:
    """The content of each call's tool message in the next request, in call order (None where none came back)."""
    calls = (turn.get("reply") or {}).get("tool_calls") or []
    if not calls or following is None:
        return [None] * len(calls)
    asked, later = list(turn["messages"]), list(following["messages"])
    if len(later) <= len(asked) or [m.get("role") for m in later[: len(asked)]] != [m.get("role") for m in asked]:
        return [None] * len(calls)  # the next request does not continue this one
    echo = later[len(asked)]
    echoed_ids = [c.get("id") for c in (echo.get("tool_calls") or [])] if echo.get("role") == "assistant" else []
    tool_messages = []
    for m in later[len(asked) + 1 :]:
        if m.get("role") != "tool":
            break
        tool_messages.append(m)
    out: list[str | None] = [None] * len(calls)
    unmatched = []
    for m in tool_messages:
        cid = m.get("tool_call_id")
        if cid is not None and cid in echoed_ids and echoed_ids.index(cid) < len(calls):
            out[echoed_ids.index(cid)] = str(m.get("content") or "")
        else:
            unmatched.append(m)
    free = [i for i, r in enumerate(out) if r is None]
    for i, m in zip(free, unmatched, strict=False):
        out[i] = str(m.get("content") or "")
    return out


def read_trace(turns: Sequence[Mapping | None] | str | None) -> list[TraceTurn] | None:
    """The episode's turns from the gateway's record (a list, or its JSON); None when there is none, or a round was
    not a chat round (a plain-text completion: no messages to read)."""
    if isinstance(turns, str):
        turns = json.loads(turns)
    if not turns or any(t is None for t in turns):
        return None
    out = []
    for i, turn in enumerate(turns):
        following = turns[i + 1] if i + 1 < len(turns) else None
        reply = dict(turn.get("reply") or {"role": "assistant", "content": ""})
        calls = []
        for call, result in zip(reply.get("tool_calls") or [], _results(turn, following), strict=True):
            fn = call.get("function") or {}
            raw = fn.get("arguments", "{}")
            arguments = raw if isinstance(raw, str) else json.dumps(raw)
            calls.append(ToolCall(str(fn.get("name", "")), arguments, call_argument(raw), result))
        out.append(
            TraceTurn(i, list(turn["messages"]), turn.get("tools"), turn.get("tool_choice"), reply, tuple(calls))
        )
    return out


def question(trace: Sequence[TraceTurn]) -> str:
    """The task's question: the last user message of the first request, without the task's instruction."""
    users = [m for m in trace[0].messages if m.get("role") == "user"] if trace else []
    text = str(users[-1].get("content") or "") if users else ""
    return text.removesuffix(INSTRUCTION).strip()


def _tree(expr: str) -> ast.Expression | None:
    try:
        return ast.parse(expr.strip().replace("×", "*").replace("÷", "/"), mode="eval")
    except SyntaxError:
        return None


def expression_key(expr: str) -> str:
    """The comparison key of a calculator expression (module docstring)."""
    tree = _tree(expr)
    if tree is None:
        return "".join(expr.split())
    key = meaning_key(ast.unparse(tree))
    return key[1] if key[0] in ("expr", "text") else "{}({})".format(key[0], ",".join(key[1:]))


def operations(expr: str) -> frozenset[str] | None:
    """The binary operations an expression applies (None: not an expression the calculator parses)."""
    tree = _tree(expr)
    if tree is None:
        return None
    ops = (type(n.op) for n in ast.walk(tree) if isinstance(n, ast.BinOp))
    return frozenset(_BINARY_OPS[op] for op in ops if op in _BINARY_OPS)


def question_operations(text: str) -> frozenset[str] | None:
    """The operations a generated arithmetic question names: its canonical form's computation (``the distance
    between a and b`` is a subtraction), or a written expression's operations; None for any other question."""
    try:
        form = canonical_form(text)
    except ValueError:
        return None
    if form[0] in OPERATION_NOUNS:
        return frozenset({form[0]})
    if form[0] == "expr":
        return operations(form[1])
    return None
