"""Trace replay on an agent's turns (Composer channel 3 on agent episodes; docs/ALGORITHMS.md section 6, "Agent
traces"). Pure: the requests and the pairs; the network is the teacher pool's (teacher_pool.py).

The Composer's design replays a student's trace to N teachers and turns their disagreement with the student into DPO
pairs (disagreement.py; DPO: Rafailov et al., arXiv 2305.18290). On an agent episode a step of the trace is an
assistant turn, and a teacher must answer it from the state the student answered it in: the gateway recorded that
state (`agent_trace.read_trace`: per turn the request's messages, tools and tool choice), so a teacher's request for
turn t is exactly the student's (`turn_requests`: the same messages, the same tools; `tool_choice` as the student's
request had it). The turns asked are those whose outcome decides the episode: each turn with a tool call, and the
final answer (the last turn, when it calls no tool).

An action is compared by what it does (`action_key`):
- a turn with tool calls: each call's tool and its argument, the argument compared by the calculator's normal form
  (`agent_trace.expression_key`: whitespace and redundant parentheses dropped, one spelling per number, a single
  sum's or product's operands in order), so ``calc: (2*3)+4`` and ``calc: 2 * 3 + 4`` agree;
- a turn without calls: its final answer by the reward's extraction (the last \\boxed{} content,
  `disagreement.answer_key`).

A teacher answers with tool calls (an endpoint that parses them: `TeacherAnswer.tool_calls`) or with text; text is
read in the policy's call format (`tool_parser`: ``line``, the one-line `calc: 12 * 3` calls, or ``hermes``,
`<tool_call>` JSON blocks), so a teacher served with the policy's chat template and no tool parser is read as the
policy's own replies are. Every action is written in the policy's format (`render_action`): the text its chosen or
rejected row trains on. `turn_pairs` then applies the channel's rule (`disagreement.pair_from_step`: majority of
min_agree teachers against the student, or any_differs) per turn: (chosen = the teachers' action, rejected = the
student's). A pair's prompt holds the turn's messages, tools and index.

In training (`episode_turns`, recipe/composer's trainer): an episode's asked turns are those its trained sample holds
(its t-th run of policy tokens, `turn_span`); each pair then also carries the turn's tokens, so its rows are the
student's context as it was sampled: the prompt's ids, the response's tokens before the turn (environment and earlier
turns, no loss) and the action (the student's sampled tokens for the rejected row, the teachers' action tokenized for
the chosen one; `replay.pair_rows`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from verl_ext.composer.agent_trace import TraceTurn, call_argument, expression_key, read_trace
from verl_ext.composer.disagreement import DisagreementConfig, DPOPair, StepRecord, answer_key, pair_from_step
from verl_ext.composer.teacher_pool import TeacherAnswer, TeacherRequest
from verl_ext.formats.line_calls import argument_name, call_line, read_calls

TOOL_PARSERS = ("line", "hermes")
_HERMES = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


@dataclass(frozen=True)
class TurnAction:
    """What a turn does: its text (content) and its tool calls, (tool name, argument) each."""

    content: str
    calls: tuple[tuple[str, str], ...] = ()


def replay_turns(trace: Sequence[TraceTurn]) -> list[int]:
    """The turns teachers are asked about: each turn with a tool call, and the last turn when it has none (the
    final answer)."""
    asked = [t.index for t in trace if t.calls]
    if trace and not trace[-1].calls:
        asked.append(trace[-1].index)
    return asked


def turn_trace_id(turn: TraceTurn) -> str:
    """The teacher cache's key for a turn: the first 16 hex digits of the SHA-1 of its request (messages, tools,
    tool choice) as sorted-key JSON, so the same state asked twice is paid once."""
    state = {"messages": turn.messages, "tools": turn.tools, "tool_choice": turn.tool_choice}
    return hashlib.sha1(json.dumps(state, sort_keys=True).encode()).hexdigest()[:16]


def turn_requests(trace: Sequence[TraceTurn], step: int) -> list[tuple[int, TeacherRequest]]:
    """(turn, the teachers' request) for each turn `replay_turns` asks about: the student's request for that turn
    (its messages, tools and tool choice, unchanged); `step` is the training step (the cache key's step)."""
    by_index = {t.index: t for t in trace}
    return [
        (
            t,
            TeacherRequest(
                turn_trace_id(by_index[t]),
                step,
                json.loads(json.dumps(by_index[t].messages)),  # a copy: the record stays as it was
                json.loads(json.dumps(by_index[t].tools)) if by_index[t].tools else None,
                by_index[t].tool_choice,
            ),
        )
        for t in replay_turns(trace)
    ]


def _tool_names(tools: Sequence[Mapping] | None) -> list[str]:
    return [str((t.get("function") or {}).get("name")) for t in tools or [] if (t.get("function") or {}).get("name")]


def read_text(text: str, tools: Sequence[Mapping] | None, tool_parser: str) -> TurnAction:
    """An action written as text in the policy's call format (module docstring); no call read: plain content."""
    if tool_parser not in TOOL_PARSERS:
        raise ValueError(f"tool_parser must be one of {TOOL_PARSERS}, got {tool_parser!r}")
    names = _tool_names(tools)
    if tool_parser == "line":
        content, calls = read_calls(text, names)
        return TurnAction(content, tuple(calls))
    calls = []
    for m in _HERMES.finditer(text):
        try:
            call = json.loads(m.group(1))
        except ValueError:
            return TurnAction(text)
        if not isinstance(call, dict) or call.get("name") not in names:
            return TurnAction(text)
        calls.append((str(call["name"]), call_argument(call.get("arguments", {}))))
    if not calls:
        return TurnAction(text)
    return TurnAction(_HERMES.sub("", text).strip(), tuple(calls))


def reply_action(reply: Mapping) -> TurnAction:
    """The student's action: the recorded reply (an OpenAI assistant message, its calls as the gateway parsed them)."""
    calls = tuple(
        (str(c["function"]["name"]), call_argument(c["function"].get("arguments", {})))
        for c in reply.get("tool_calls") or []
    )
    return TurnAction(str(reply.get("content") or ""), calls)


def answer_action(answer: TeacherAnswer, tools: Sequence[Mapping] | None, tool_parser: str) -> TurnAction:
    """A teacher's action: its tool calls when the endpoint returned some, else its text read in the policy's format."""
    if answer.tool_calls:
        calls = tuple((str(c["name"]), call_argument(c.get("arguments", {}))) for c in answer.tool_calls)
        return TurnAction(answer.text or "", calls)
    return read_text(answer.text, tools, tool_parser)


def action_key(action: TurnAction) -> str:
    """What an action does (module docstring): its calls, or its final answer."""
    if action.calls:
        return "call:" + ";".join(f"{name}({expression_key(argument)})" for name, argument in action.calls)
    return "answer:" + answer_key(action.content)


def render_action(action: TurnAction, tool_parser: str, tools: Sequence[Mapping] | None = None) -> str:
    """The action as the policy writes it in its call format: the content, then its calls (`line`: one line each,
    `line_calls.call_line`; `hermes`: a `<tool_call>` JSON block each, whose arguments are the call's JSON object,
    or its one argument under the tool's parameter, `line_calls.argument_name` of `tools`' schema)."""
    if tool_parser not in TOOL_PARSERS:
        raise ValueError(f"tool_parser must be one of {TOOL_PARSERS}, got {tool_parser!r}")
    if tool_parser == "line":
        lines = [call_line(name, argument) for name, argument in action.calls]
    else:
        schemas = {str((t.get("function") or {}).get("name")): (t.get("function") or {}) for t in tools or []}
        lines = []
        for name, argument in action.calls:
            arguments = _object(argument)
            if arguments is None:
                key = argument_name((schemas.get(name) or {}).get("parameters"))
                if key is None:
                    raise ValueError(f"tool {name!r}: its schema names no parameter for the argument {argument!r}")
                arguments = {key: argument}
            lines.append("<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>")
    return "\n".join(([action.content] if action.content else []) + lines)


def _object(argument: str) -> dict | None:
    try:
        value = json.loads(argument)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def answer_keys(
    answers: Mapping[str, TeacherAnswer | None], tools: Sequence[Mapping] | None, tool_parser: str
) -> dict[str, str | None]:
    """Each teacher's `action_key` (None where it failed): what the channel's agreement count compares."""
    return {n: (None if a is None else action_key(answer_action(a, tools, tool_parser))) for n, a in answers.items()}


def turn_pairs(
    trace: Sequence[TraceTurn],
    step: int,
    answers: Mapping[int, Mapping[str, TeacherAnswer | None]],
    config: DisagreementConfig,
    tool_parser: str,
    trace_id: str = "",
    tokens: Mapping[int, Mapping] | None = None,
) -> list[DPOPair]:
    """The DPO pairs of one episode's asked turns (`answers`: turn -> teacher name -> answer, None where the teacher
    failed), by `config`'s rule on `action_key`s; chosen and rejected are the actions as the policy writes them. A
    pair's trace_id is `trace_id` (the episode) and the turn; its prompt {"messages", "tools", "turn"}, and the turn's
    `tokens` (`episode_turns`) where given."""
    by_index = {t.index: t for t in trace}
    rule = replace(config, normalize=lambda text: text)  # the records below hold action keys already
    pairs = []
    for t in replay_turns(trace):
        if t not in answers or (tokens is not None and t not in tokens):
            continue  # not asked, or not in the trained sample
        turn = by_index[t]
        student = reply_action(turn.reply)
        teachers = {
            name: (None if a is None else answer_action(a, turn.tools, tool_parser)) for name, a in answers[t].items()
        }
        keys = {name: (None if a is None else action_key(a)) for name, a in teachers.items()}
        record = StepRecord(f"{trace_id}:{t}", step, action_key(student), keys)
        pair = pair_from_step(record, rule)
        if pair is None:
            continue
        chosen = teachers[pair.teachers[0]]
        pairs.append(
            replace(
                pair,
                prompt={"messages": turn.messages, "tools": turn.tools, "turn": t, **dict((tokens or {}).get(t, {}))},
                chosen=render_action(chosen, tool_parser, turn.tools),
                rejected=render_action(student, tool_parser, turn.tools),
                answers={name: (None if a is None else a.text) for name, a in answers[t].items()},
            )
        )
    return pairs


def turn_span(response_mask: Sequence[int], turn: int) -> tuple[int, int] | None:
    """[start, end) of assistant turn `turn` in a trained sample's response: its `turn`-th run of mask 1 (None: the
    sample does not hold it, e.g. cut at the response length)."""
    runs, start = [], None
    for j, m in enumerate(list(response_mask) + [0]):
        if m and start is None:
            start = j
        elif not m and start is not None:
            runs.append((start, j))
            start = None
    return runs[turn] if 0 <= turn < len(runs) else None


@dataclass(frozen=True)
class EpisodeTurns:
    """One trained episode's asked turns: its trace, the teachers' request for each asked turn the sample holds,
    and that turn's tokens ({"ids": the prompt's, "context": the response's before the turn, "rejected_ids": the
    student's sampled tokens of the turn})."""

    episode: str
    trace: list[TraceTurn]
    requests: dict[int, TeacherRequest]
    tokens: dict[int, dict]


def episode_turns(
    episode: str,
    record,
    step: int,
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    response_mask: Sequence[int],
) -> EpisodeTurns | None:
    """The asked turns (`replay_turns`) of an episode from the gateway's record (`record`, list or JSON) and its
    trained sample (unpadded prompt and response ids, the response's mask); None without a chat record."""
    trace = read_trace(record)
    if not trace:
        return None
    requests, tokens = {}, {}
    for t, request in turn_requests(trace, step):
        span = turn_span(response_mask, t)
        if span is None:
            continue
        requests[t] = request
        tokens[t] = {
            "ids": [int(x) for x in prompt_ids],
            "context": [int(x) for x in response_ids[: span[0]]],
            "rejected_ids": [int(x) for x in response_ids[span[0] : span[1]]],
        }
    return EpisodeTurns(episode, trace, requests, tokens)
