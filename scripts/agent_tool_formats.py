"""The tool-call formats `probe_agent_tools.py` asks SmolLM2-135M-Instruct in: the calculator tools, each format's chat
template and the gateway's parser for it (SmolLM2's own APIGen function-calling prompt among them), the forced call
openings, the chat with or without one worked tool-call exchange, the tool turn after a call, and a lenient reading of
a reply's first call. Only the tokenizer renders these; no model is loaded.
"""

from __future__ import annotations

import json
import re

from verl_ext.agent.gateway.toolcall import FORCED_CALL_OPENINGS
from verl_ext.mathgen.prompts import CALC_EXCHANGES, DEMONSTRATION, INSTRUCTION, calc_exchange
from verl_ext.pretrained.smollm2 import DEFAULT_SYSTEM, LINE_TOOL_CHAT_TEMPLATE, TOOL_CHAT_TEMPLATE

# `calculator`: the tool of the first runs; `calc`: the example framework agents' tool as the Agents SDK sends it
# (scripts/probe_agent_frameworks.py), the one the agent preset's prompts call
_PARAMS = {"type": "object", "required": ["expression"], "properties": {"expression": {"type": "string"}}}
TOOLS = {
    "calculator": ("calculator", "expression", "Evaluate an arithmetic expression (+ - * / and parentheses, integers "
                   "and decimals).", _PARAMS),
    "calc": ("calc", "expr", "Evaluate arithmetic: + - * / and parentheses, on integers and decimals.",
             {"properties": {"expr": {"title": "Expr", "type": "string"}}, "required": ["expr"], "title": "calc_args",
              "type": "object", "additionalProperties": False}),
}  # fmt: skip

# SmolLM2's own function-calling prompt (the APIGen format of its SFT data, as the public Ollama template for SmolLM2
# renders it): a JSON list of calls inside one <tool_call> block; without tools, the released template.
_APIGEN_SYSTEM = (
    "You are an expert in composing functions. You are given a question and a set of possible functions.\\n"
    "Based on the question, you will need to make one or more function/tool calls to achieve the purpose.\\n"
    "If none of the functions can be used, point it out and refuse to answer.\\n"
    "If the given question lacks the parameters required by the function, also point it out.\\n\\n"
    "You have access to the following tools:\\n<tools>"
)
_APIGEN_FORMAT = (
    "</tools>\\n\\nThe output MUST strictly adhere to the following format, and NO other text MUST be included.\\n"
    "The example format is as follows. Please make sure the parameter type is correct. If no function call is "
    "needed, please make the tool calls an empty list \\'[]\\'.\\n<tool_call>[\\n"
    '{\\"name\\": \\"func_name1\\", \\"arguments\\": '
    '{\\"argument1\\": \\"value1\\", \\"argument2\\": \\"value2\\"}},\\n'
    "(more tool calls as required)\\n]</tool_call>"
)
APIGEN_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}{%- set system = messages[0]['content'] %}{%- set rest = messages[1:] %}"
    "{%- else %}{%- set system = '" + DEFAULT_SYSTEM + "' %}{%- set rest = messages %}{%- endif %}"
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0]['role'] == 'system' %}{{- system + '\\n\\n' }}"
    "{%- endif %}{{- '" + _APIGEN_SYSTEM + "' + (tools | tojson) + '" + _APIGEN_FORMAT + "<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\n' + system + '<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in rest %}{%- if message['role'] == 'assistant' and message['tool_calls'] %}"
    "{{- '<|im_start|>assistant\\n' + (message['content'] or '') + '<tool_call>[' }}"
    "{%- for tc in message['tool_calls'] %}{%- set f = tc['function'] %}{%- if not loop.first %}{{- ',' }}{%- endif %}"
    "{{- '\\n{\"name\": \"' + f['name'] + '\", \"arguments\": ' + (f['arguments'] | tojson) + '}' }}{%- endfor %}"
    "{{- '\\n]</tool_call><|im_end|>\\n' }}{%- elif message['role'] == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message['content'] + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
# format -> (chat template, the gateway's tool parser); `none`: the released template, no tool, and (with a demo)
# the task's own worked exchange: the prompt of the 0.167 greedy baseline
FORMATS = {
    "hermes": (TOOL_CHAT_TEMPLATE, "hermes"),
    "apigen": (APIGEN_TEMPLATE, "hermes"),
    "line": (LINE_TOOL_CHAT_TEMPLATE, "line"),
    "none": (None, "hermes"),
}
# A call forced as the gateway meets tool_choice: the opening is appended to the prompt and the model writes the
# rest. `+required` / `+named`: the gateway's own openings; `+named_space`: the named opening as it was before it
# stopped ending in a lone space token; `line+forced`: the line format's `<tool>: `.
OPENINGS = {"required": "{required}", "named": "{named}", "named_space": "{named} ", "forced": "{tool}: "}


def split_format(name: str, tool: str) -> tuple[str, str]:
    """(format, forced opening) of a --formats entry."""
    fmt, _, forced = name.partition("+")
    if fmt not in FORMATS or (forced and forced not in OPENINGS):
        raise SystemExit(f"unknown format {name!r}: {list(FORMATS)}, optionally +{'/+'.join(OPENINGS)}")
    required, named = FORCED_CALL_OPENINGS["hermes"]
    fill = {"required": required, "named": named.format(name=json.dumps(tool)), "tool": tool}
    return fmt, OPENINGS[forced].format(**fill) if forced else ""


def tool_schema(tool: str) -> dict:
    name, _, description, params = TOOLS[tool]
    return {"type": "function", "function": {"name": name, "description": description, "parameters": params}}


# The worked tool exchanges before the question, by name: (the expression the question asks for (`What is ...?`), its
# result, the answer after the result). `sum`: the task's DEMONSTRATION with a call in between (its answer writes the
# sum again; the agent preset's first exchange); `box`: the answer only boxes the result; `copy`: a result the model
# could not have worked out, boxed as the tool gave it; `two`: `box`, then `copy` (mathgen's CALC_EXCHANGES, the
# agent preset's LINE_CALL_DEMONSTRATION).
_BOXED = [(expr, result, calc_exchange(expr, result)[-1]["content"]) for expr, result in CALC_EXCHANGES]
DEMO_EXCHANGES = {"sum": [("2 + 2", "4", DEMONSTRATION[1]["content"])], "box": _BOXED[:1], "copy": _BOXED[1:],
                  "two": _BOXED}  # fmt: skip


def conversation(fmt: str, demo: bool, question: str, tool: str, exchange: str = "sum") -> list[dict]:
    """The chat: the worked exchanges `DEMO_EXCHANGES[exchange]` (a question -> a call -> its result -> the answer;
    for `none` the task's own DEMONSTRATION) when `demo`, then the question."""
    ask = [{"role": "user", "content": question}]
    if not demo:
        return ask
    if fmt == "none":
        return [dict(m) for m in DEMONSTRATION] + ask
    chat = []
    for expr, result, answer in DEMO_EXCHANGES[exchange]:
        chat += [{"role": "user", "content": f"What is {expr}? {INSTRUCTION}"},
                 {"role": "assistant", "content": "", "tool_calls": [call_message(expr, tool)]},
                 {"role": "tool", "tool_call_id": "call_0", "content": result},
                 {"role": "assistant", "content": answer}]  # fmt: skip
    return chat + ask


def call_message(expr: str, tool: str) -> dict:
    name, param = TOOLS[tool][:2]
    return {"id": "call_0", "type": "function", "function": {"name": name, "arguments": {param: expr}}}


def render(tok, fmt: str, messages: list[dict], tool: str, generation: bool = True) -> str:
    template = FORMATS[fmt][0]
    if template is None:  # the released template, no tools
        return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation)
    return tok.apply_chat_template(messages, tools=[tool_schema(tool)], chat_template=template, tokenize=False,
                                   add_generation_prompt=generation)  # fmt: skip


def after_call(tok, fmt: str, messages: list[dict], expr: str, result: str, tool: str) -> str:
    """What the template adds after an assistant call for the tool's result, up to the generation prompt."""
    call = {"role": "assistant", "content": "", "tool_calls": [call_message(expr, tool)]}
    before = render(tok, fmt, messages + [call], tool, generation=False)
    after = render(tok, fmt, messages + [call, {"role": "tool", "tool_call_id": "call_0", "content": result}], tool)
    assert after.startswith(before), "the template does not render a tool turn as a suffix"
    return after[len(before) :]


def parse_reply(fmt: str, text: str, tool: str) -> tuple[str | None, int | None, bool]:
    """(expression, end of the call in `text`, attempted) of the first call, read leniently: hermes and apigen any
    `<tool_call>` JSON block naming the tool (a list or an object), line any line `<tool>: ...` in any case."""
    if fmt == "line":
        m = re.search(rf"^\s*{re.escape(tool)}\s*:\s*(.+?)\s*$", text, re.MULTILINE | re.IGNORECASE)
        return (m.group(1), m.end(), True) if m else (None, None, False)
    m = re.search(r"<tool_call>(.*?)</tool_call>", text, re.DOTALL) if fmt != "none" else None
    if not m:
        return None, None, fmt != "none" and "<tool_call>" in text
    try:
        calls = json.loads(m.group(1))
    except json.JSONDecodeError:
        return None, m.end(), True
    for c in calls if isinstance(calls, list) else [calls]:
        args = c.get("arguments") if isinstance(c, dict) and c.get("name") == tool else None
        if isinstance(args, dict) and args and isinstance(v := next(iter(args.values())), str | int | float):
            return str(v), m.end(), True
    return None, m.end(), True
