"""The project's own tool-call parsers, registered in verl's ToolParser registry (`ToolParser.register`, the way verl
registers `hermes`) when this module is imported, so `external_agent.tool_parser` selects them by name like verl's
own. verl's files are not touched. `toolcall.ToolCallCodec` and the settings' check import this module first.

- `line`: the one-line format of `line_calls` (``calc: 12 * 3``), for a model that writes no JSON calls
  (SmolLM2-135M-Instruct; docs/AGENT_REAL_MODEL.md). Each call's arguments are a JSON object filling the tool's
  one parameter (`line_calls.argument_name`) from the request's tool schema, which the codec passes in.
"""

from __future__ import annotations

import json

from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolParser

from verl_ext.formats import line_calls


def _field(obj, name: str):
    """A schema field from verl's pydantic tool schema or the same as a plain dict."""
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def _parameters(function) -> dict:
    params = _field(function, "parameters")
    if params is None or isinstance(params, dict):
        return params or {}
    return params.model_dump()


@ToolParser.register("line")
class LineToolParser(ToolParser):
    """Reads `line_calls`' calls of the request's tools; without tools nothing is a call."""

    def _arguments(self, tools) -> dict[str, str | None]:
        """tool name -> the parameter its argument fills."""
        out = {}
        for tool in tools or []:
            fn = _field(tool, "function")
            if fn is not None and _field(fn, "name"):
                out[_field(fn, "name")] = line_calls.argument_name(_parameters(fn))
        return out

    def count_attempts(self, text: str, tools) -> int:
        """Calls `text` tries (the codec counts the ones not read as `malformed`)."""
        return line_calls.count_attempts(text, list(self._arguments(tools)))

    async def extract_tool_calls(self, responses_ids: list[int], tools=None) -> tuple[str, list[FunctionCall]]:
        text = self.tokenizer.decode(responses_ids, skip_special_tokens=True)
        arguments = {name: arg for name, arg in self._arguments(tools).items() if arg is not None}
        content, calls = line_calls.read_calls(text, list(arguments))
        return content, [
            FunctionCall(name=name, arguments=json.dumps({arguments[name]: argument}, ensure_ascii=False))
            for name, argument in calls
        ]


def parser_names() -> list[str]:
    """Every tool parser `external_agent.tool_parser` may name: verl's and this module's."""
    return sorted(ToolParser._registry)
