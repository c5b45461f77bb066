"""The tool-call codec: what the policy sampled -> (reasoning, content, tool calls), and back to a canonical form
that a client's re-serialized copy of the same turn compares equal to (no Ray, no HTTP).

Decoding a reply (`ToolCallCodec.parse`), in this order:

1. the sampled ids are decoded (special tokens dropped) and cut at the first `stop` string (OpenAI's semantics: the
   text ends before it; the recorded ids stay exactly what was sampled);
2. the reasoning parser (`external_agent.reasoning_parser`: `think` or `none`) takes `<think>...</think>` out as
   `reasoning_content`. Tool calls are looked for only in what follows it: text inside a reasoning block is never a
   call;
3. when the request has `tools` and `tool_choice` is not `none`, verl's own `ToolParser` registry
   (`verl.experimental.agent_loop.tool_parser`, `external_agent.tool_parser`, default `hermes`; the project's own
   parsers, such as `line`, register there from `tool_parsers`) extracts the calls, given the request's tools as
   verl's tool schemas (a parser that needs them, `line`, fills the arguments from them; `hermes` ignores them).
   Every call must name a tool of the request (the one `tool_choice` names, if any) and carry a JSON object as
   arguments. A malformed call (bad JSON, an unclosed call, an unknown tool) turns the whole reply into plain
   content (the text as sampled, markup included) and is counted; `required` / a named tool_choice with no valid
   call is counted too. Constrained decoding is never used: it would sample from another distribution than the
   policy's, and the recorded log-probs would be wrong.

`required` and a named tool_choice are met by a forced opening instead (`ToolCallCodec.forced_opening`): the episode
core appends the parser's call opening (hermes: `<tool_call>\n`, or up to the arguments for a named function) to the
prompt, as context the policy did not sample (mask 0), and the policy samples the rest, so every sampled token keeps
its own log-prob and the reply starts as a call. Parsers whose call opening is not known here get a 400 naming the
choice and the parser.

Comparing turns (`assistant_key`): a client that sends our reply back may drop or rename tool-call ids, re-format
the JSON arguments, send `content` null instead of "", or strip/keep the reasoning. The key is (content without
reasoning, stripped; [(tool name, arguments as sorted compact JSON)]), so all of these compare equal while a real
edit of the text or of a call does not.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

REASONING_PARSERS = ("none", "think")
TOOL_CHOICES = ("auto", "none", "required")
# Per tool parser: the text a reply starts with when a call is required, and when a named function is. Both are what
# the parser reads and what a Qwen2.5-style template renders before a call's arguments (tests/agent/test_toolcall.py
# renders one to check). Each ends where the template's own tokens of a call have a boundary, so that the prompt +
# the opening, tokenized alone, is a token prefix of the rendered call: the named opening stops before the space in
# `"arguments": {`, which a byte-level BPE (SmolLM2's, Qwen's) merges into one token ` {"` with what follows
# (tests/pretrained/test_smollm2_tools.py); ending on a lone space would make the policy continue from a token
# boundary it never sees in rendered calls.
FORCED_CALL_OPENINGS = {"hermes": ("<tool_call>\n", '<tool_call>\n{{"name": {name}, "arguments":')}


class ToolSpecError(ValueError):
    """A `tools` / `tool_choice` value the gateway cannot use; the message names the field."""


class ArgumentsNotJSON(ValueError):
    """A client echoed a tool call whose arguments are not JSON: the turn cannot be compared (a parse failure)."""


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # a JSON object, as OpenAI's `function.arguments`
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")

    def to_openai(self) -> dict:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class ParsedReply:
    content: str
    reasoning: str | None
    tool_calls: list[ToolCall]
    stopped_by: str | None = None  # the stop string that ended the text
    faults: Counter = field(default_factory=Counter)  # malformed / unknown_tool / choice_unmet -> count
    fault_detail: str | None = None  # why the calls came back as content


# ---------------------------------------------------------------------------------------------- request checks
def check_tools(tools: Any) -> list[dict] | None:
    """OpenAI function tools, checked (a clear error naming the field) and reduced to what the template renders."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise ToolSpecError(f"tools must be a list of function tools, got {type(tools).__name__}")
    out, names = [], set()
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(t.get("function"), dict):
            raise ToolSpecError(f'tools[{i}] must be {{"type": "function", "function": {{...}}}}')
        fn = t["function"]
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise ToolSpecError(f"tools[{i}].function.name must be a non-empty string")
        if name in names:
            raise ToolSpecError(f"tools[{i}].function.name {name!r} is defined twice")
        params = fn.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict):
            raise ToolSpecError(f"tools[{i}].function.parameters must be a JSON schema object")
        names.add(name)
        f = {"name": name}
        if fn.get("description") is not None:
            f["description"] = str(fn["description"])
        f["parameters"] = params
        out.append({"type": "function", "function": f})
    return out or None


def check_tool_choice(choice: Any, tools: list[dict] | None) -> str | dict:
    """`auto` (default), `none`, `required` or {"type": "function", "function": {"name": ...}} naming a tool."""
    if choice is None:
        return "auto"
    if isinstance(choice, str):
        if choice not in TOOL_CHOICES:
            raise ToolSpecError(f"tool_choice must be one of {list(TOOL_CHOICES)} or a named function, got {choice!r}")
        if choice == "required" and not tools:
            raise ToolSpecError("tool_choice 'required' needs tools")
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        name = (choice.get("function") or {}).get("name")
        known = [t["function"]["name"] for t in tools or []]
        if name not in known:
            raise ToolSpecError(f"tool_choice names function {name!r}, which is not in tools ({known})")
        return {"type": "function", "function": {"name": name}}
    raise ToolSpecError(f"tool_choice must be one of {list(TOOL_CHOICES)} or a named function, got {choice!r}")


# ---------------------------------------------------------------------------------------------- reasoning
def split_reasoning(text: str, parser: str) -> tuple[str | None, str]:
    """(reasoning, the rest). `think`: the first `<think>...</think>` block; a text with `</think>` but no opening
    tag (templates whose generation prompt opens the block) is reasoning up to it; an unclosed block (cut by the
    token budget) is all reasoning."""
    if parser == "none":
        return None, text
    if parser != "think":
        raise ValueError(f"reasoning_parser must be one of {REASONING_PARSERS}, got {parser!r}")
    start, end = text.find("<think>"), text.find("</think>")
    if start != -1 and (end == -1 or end < start):
        return text[start + len("<think>") :].strip(), text[:start]
    if end != -1:
        body_start = start + len("<think>") if start != -1 else 0
        return text[body_start:end].strip(), text[: max(start, 0)] + text[end + len("</think>") :]
    return None, text


def strip_reasoning_text(content: str) -> str:
    """Content a client echoed with the reasoning block kept inline: the block removed."""
    _, rest = split_reasoning(content, "think") if "</think>" in content else (None, content)
    return rest


# ---------------------------------------------------------------------------------------------- canonical turns
def canonical_arguments(arguments: Any) -> str:
    """Arguments as sorted compact JSON: re-formatted JSON compares equal. Raises ArgumentsNotJSON."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as e:
            raise ArgumentsNotJSON(f"tool-call arguments are not JSON: {e}") from None
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def assistant_key(message: dict) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The comparison key of an assistant turn (see the module docstring). Raises ArgumentsNotJSON."""
    content = strip_reasoning_text(message.get("content") or "").strip()
    calls = []
    for tc in message.get("tool_calls") or []:
        fn = tc.get("function", tc) if isinstance(tc, dict) else {}
        calls.append((str(fn.get("name")), canonical_arguments(fn.get("arguments", {}))))
    return content, tuple(calls)


def for_template(message: dict) -> dict:
    """A message as chat templates expect it: tool-call arguments as objects (templates `tojson` them)."""
    if message.get("role") != "assistant" or not message.get("tool_calls"):
        return message
    calls = []
    for tc in message["tool_calls"]:
        fn = dict(tc.get("function", {}))
        try:
            fn["arguments"] = json.loads(canonical_arguments(fn.get("arguments", {})))
        except ArgumentsNotJSON:
            pass  # rendered as the string it is
        calls.append({**tc, "function": fn})
    return {**message, "tool_calls": calls}


# ---------------------------------------------------------------------------------------------- the codec
def verl_tool_schemas(tools: list[dict]) -> list | None:
    """The request's tools (`check_tools`' form) as verl's `OpenAIFunctionToolSchema`s, what verl's parsers are
    handed; None when one does not fit verl's schema (a parameter without a `type`, say): the parsers then get no
    tools, as in verl's own loop without them. A missing description is verl's required field, given as ""."""
    from pydantic import ValidationError
    from verl.tools.schemas import OpenAIFunctionToolSchema

    try:
        return [
            OpenAIFunctionToolSchema.model_validate({**t, "function": {"description": "", **t["function"]}})
            for t in tools
        ]
    except ValidationError:
        return None


def cut_at_stop(text: str, stop: tuple[str, ...]) -> tuple[str, str | None]:
    best = None
    for s in stop:
        i = text.find(s)
        if i != -1 and (best is None or i < best[0]):
            best = (i, s)
    return (text, None) if best is None else (text[: best[0]], best[1])


def _checked_calls(calls: list, names: set[str], attempted: int | None) -> tuple[list[ToolCall], Counter]:
    """The parser's calls that name one of `names` with a JSON object of arguments (re-serialised), and the rest
    counted by fault: `unknown_tool`, `malformed` (with the `attempted` call blocks the parser could not read)."""
    problems = Counter()
    if attempted is not None and attempted > len(calls):
        problems["malformed"] += attempted - len(calls)
    valid = []
    for c in calls:
        if c.name not in names:
            problems["unknown_tool"] += 1
            continue
        try:
            args = json.loads(c.arguments)
        except json.JSONDecodeError:
            args = None
        if not isinstance(args, dict):
            problems["malformed"] += 1
            continue
        valid.append(ToolCall(c.name, json.dumps(args, ensure_ascii=False)))
    return valid, problems


class ToolCallCodec:
    """Parses replies with verl's ToolParser `tool_parser` and the reasoning parser `reasoning_parser`."""

    def __init__(self, tokenizer, tool_parser: str = "hermes", reasoning_parser: str = "none"):
        from verl.experimental.agent_loop.tool_parser import ToolParser

        from verl_ext.agent.gateway import tool_parsers  # noqa: F401  registers the project's parsers (`line`)

        if reasoning_parser not in REASONING_PARSERS:
            raise ValueError(f"reasoning_parser must be one of {REASONING_PARSERS}, got {reasoning_parser!r}")
        self.tokenizer, self.reasoning_parser, self.parser_name = tokenizer, reasoning_parser, tool_parser
        self.parser = ToolParser.get_tool_parser(tool_parser, tokenizer)

    def forced_opening(self, tool_choice: str | dict) -> str:
        """The text the reply is made to start with: "" for `auto` / `none`, the parser's call opening for `required`,
        the opening up to the arguments for a named function. Raises ToolSpecError for parsers without one."""
        if tool_choice in ("auto", "none"):
            return ""
        if self.parser_name not in FORCED_CALL_OPENINGS:
            raise ToolSpecError(
                f"tool_choice {tool_choice!r} is met by forcing the call's opening, known for tool_parser "
                f"{sorted(FORCED_CALL_OPENINGS)} only; this gateway parses with {self.parser_name!r} "
                "(send tool_choice 'auto')"
            )
        required, named = FORCED_CALL_OPENINGS[self.parser_name]
        if tool_choice == "required":
            return required
        return named.format(name=json.dumps(tool_choice["function"]["name"], ensure_ascii=False))

    def _call_blocks(self, text: str, tools: list[dict]) -> int | None:
        """How many calls the text attempts (so calls the parser dropped can be counted), None if unknown."""
        count = getattr(self.parser, "count_attempts", None)  # a parser of ours that knows (tool_parsers)
        if count is not None:
            return count(text, tools)
        regex = getattr(self.parser, "tool_call_regex", None)
        start = getattr(self.parser, "tool_call_start_token", None)
        if regex is not None and start is not None:
            closed = len(regex.findall(text))
            return max(closed, text.count(start))  # an unclosed call (cut by stop or length) is an attempt too
        return text.count(start) if start else None

    async def parse(
        self,
        response_ids: list[int],
        tools: list[dict] | None,
        tool_choice: str | dict,
        stop: tuple[str, ...] = (),
        opening: str = "",
    ) -> ParsedReply:
        """`opening`: the forced text the sampled ids continue (`forced_opening`); stop strings apply to the sampled
        text only."""
        text = self.tokenizer.decode(response_ids, skip_special_tokens=True)
        text, stopped_by = cut_at_stop(text, stop)
        text = opening + text
        reasoning, rest = split_reasoning(text, self.reasoning_parser)
        out = ParsedReply(content=rest, reasoning=reasoning, tool_calls=[], stopped_by=stopped_by)
        if not tools or tool_choice == "none":
            return out
        attempted = self._call_blocks(rest, tools)
        calls: list = []
        content = rest
        if attempted != 0:
            ids = self.tokenizer.encode(rest, add_special_tokens=False)
            content, calls = await self.parser.extract_tool_calls(ids, verl_tool_schemas(tools))
        names = {t["function"]["name"] for t in tools}
        if isinstance(tool_choice, dict):
            names = {tool_choice["function"]["name"]}
        valid, problems = _checked_calls(calls, names, attempted)
        if problems:
            out.faults.update(problems)
            out.fault_detail = ", ".join(f"{k}: {v}" for k, v in sorted(problems.items()))
            return out  # the whole reply as plain content, as sampled
        if not valid and tool_choice != "auto":
            out.faults["choice_unmet"] += 1
            out.fault_detail = f"tool_choice {tool_choice!r} but the model made no call"
            return out
        if valid:
            out.content, out.tool_calls = content.strip(), valid
        return out
