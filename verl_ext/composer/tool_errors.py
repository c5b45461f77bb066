"""Error sites from an agent's tool results, the agent unchanged (Composer channel 2, SDPO; docs/ALGORITHMS.md
section 6, "Agent traces"). Pure: no torch, no verl.

SDPO (Huebotter et al., arXiv 2601.20802) distils the policy towards itself given a hint, at the turns where the
environment said something went wrong. An agent may say so itself (`step_metas` posted with its score, docs/AGENT.md);
most agents do not. The gateway records every request, so the tool's own answers are there to read
(`agent_trace.read_trace`): a `ToolErrorRule` turns a tool result into an error site at the next assistant turn,
t + 1, where the hint goes before the turn that reads the result (hints.py).

A rule (`composer.sdpo.tool_error_rules`, recipe/composer/config/composer.yaml) matches a call of turn t when

- `source: tool_result`: its `result` regex is found in the tool's answer (None: any answer), its `call` regex in the
  call's argument (None: any call), and its `check` (None, or one of `CHECKS`) holds; or
- `source: no_call`: the episode made no tool call at all; the site is then the first turn (its answer, given without
  the tool), and no regex applies;

and, with `when: failed`, only in an episode whose accuracy is 0 (unknown accuracy: never). The site's error kind is
the rule's `kind`, its hint the template `template` (default: the kind), filled with the match's fields: `tool_name`,
`expr` (the call's argument), `result` and `error_message` (the tool's answer), `question` (the task's question), the
regexes' named groups and the check's fields. Never the reference answer: a hint says what went wrong with the
student's own call, not what the answer is.

One site per targeted turn: the first rule that matches, in the rules' order, at the first call that matches; a
site for a turn the episode does not have (the error was in its last turn) is dropped. Where the agent posted an
explicit step_meta with an `error_kind` for the same turn, that one wins (hints.error_sites_for_batch).

Checks (what a regex cannot see), from the failures SmolLM2-135M-Instruct makes through the calculator agent
(docs/AGENT_REAL_MODEL.md):
- `answer_is_part`: the call's result is a fraction (the rule's `result` regex names its `numerator` and
  `denominator`) and the next turn's final answer (its last \\boxed{}) is one of them alone, not the fraction: the
  tool returned ``16/5`` and the answer was ``\\boxed{16}``. Fields: `answer`, `part` (numerator / denominator).
- `operation_not_named`: the call applies an operation the question does not name ("the distance between 0.4 and
  0.03" called as ``0.4 + 0.03``; ``78*-0.4`` as ``78 - 0.4``), read from the question's canonical form
  (`agent_trace.question_operations`). Fields: `operation` (the call's, as a noun: "addition"), `named` (the
  question's).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from string import Formatter
from typing import Any, Literal

from verl_ext.composer.agent_trace import (
    OPERATION_NOUNS,
    ToolCall,
    TraceTurn,
    operations,
    question,
    question_operations,
)
from verl_ext.config.fields import check_declared, setting
from verl_ext.mathgen.calculator import same_number
from verl_ext.reward.answer_extraction import last_boxed

SOURCES = ("tool_result", "no_call")
WHENS = ("always", "failed")
# the fields each source gives a template, before the regexes' groups and the check's fields
BASE_FIELDS = {
    "tool_result": frozenset({"tool_name", "expr", "result", "error_message", "question"}),
    "no_call": frozenset({"question"}),
}


def _answer_is_part(call: ToolCall, fields: dict, later: TraceTurn | None, text: str) -> dict | None:
    if later is None or later.calls or "numerator" not in fields or "denominator" not in fields:
        return None
    answer = last_boxed(later.content)
    if answer is None or same_number(answer, call.result or ""):
        return None
    for part in ("numerator", "denominator"):
        if same_number(answer, str(fields[part])):
            return {"answer": answer, "part": part}
    return None


def _operation_not_named(call: ToolCall, fields: dict, later: TraceTurn | None, text: str) -> dict | None:
    named, used = question_operations(text), operations(call.argument)
    if not named or used is None or not used - named:
        return None
    order = list(OPERATION_NOUNS)
    return {
        "operation": " and ".join(OPERATION_NOUNS[o] for o in sorted(used - named, key=order.index)),
        "named": " and ".join(OPERATION_NOUNS[o] for o in sorted(named, key=order.index)),
    }


# name -> (check(call, fields so far, the next turn or None, the question) -> its fields or None, the fields it gives)
CHECKS: dict[str, tuple[Callable[..., dict | None], frozenset[str]]] = {
    "answer_is_part": (_answer_is_part, frozenset({"answer", "part"})),
    "operation_not_named": (_operation_not_named, frozenset({"operation", "named"})),
}


def _regex(value: str | None, name: str) -> re.Pattern | None:
    if value is None:
        return None
    try:
        return re.compile(str(value))
    except re.error as e:
        raise ValueError(f"{name}: not a regular expression ({e}): {value!r}") from None


@dataclass(frozen=True)
class ToolErrorRule:
    """One rule of `composer.sdpo.tool_error_rules` (module docstring). Defaults are the fields' own."""

    kind: str = setting(help="the site's error_kind")
    hint: str | None = setting(None, help="the hint's template text; null: `template` names one the run already has")
    template: str | None = setting(None, help="the hint template's key; null: the kind")
    source: Literal[SOURCES] = setting(
        "tool_result", help="tool_result: a tool's answer; no_call: an episode without any tool call"
    )
    result: str | None = setting(None, help="regex searched in the tool's answer; null: any answer")
    call: str | None = setting(None, help="regex searched in the call's argument; null: any call")
    check: Literal[tuple(CHECKS)] | None = setting(None, help="a check of the call against the question; null: none")
    when: Literal[WHENS] = setting("always", help="always, or failed: only in an episode whose accuracy is 0")

    def __post_init__(self):
        check_declared(self)  # built directly too (tests, code), not only by read_settings
        if not self.kind:
            raise ValueError(f"kind must be a non-empty string, got {self.kind!r}")
        if self.source == "no_call" and (self.result is not None or self.call is not None or self.check is not None):
            raise ValueError("source no_call reads no tool result: result, call and check must be null")
        object.__setattr__(self, "_result", _regex(self.result, "result"))
        object.__setattr__(self, "_call", _regex(self.call, "call"))

    @property
    def template_key(self) -> str:
        return self.template or self.kind

    @property
    def fields(self) -> frozenset[str]:
        """The fields this rule's sites carry (what its template may use)."""
        groups = set()
        for pattern in (self._result, self._call):
            if pattern is not None:
                groups |= set(pattern.groupindex)
        check = CHECKS[self.check][1] if self.check else frozenset()
        return BASE_FIELDS[self.source] | groups | check

    def match(self, call: ToolCall, later: TraceTurn | None, text: str) -> dict | None:
        """The site's fields when this (source tool_result) rule matches `call`, else None; `later` is the next turn
        (None: there is none), `text` the question. The `when` condition is the caller's."""
        if self.source != "tool_result" or call.result is None:
            return None
        fields: dict[str, Any] = {
            "tool_name": call.name,
            "expr": call.argument,
            "result": call.result,
            "error_message": call.result,
            "question": text,
        }
        for pattern, value in ((self._result, call.result), (self._call, call.argument)):
            if pattern is None:
                continue
            m = pattern.search(value)
            if m is None:
                return None
            fields.update({k: v for k, v in m.groupdict().items() if v is not None})
        if self.check is not None:
            extra = CHECKS[self.check][0](call, fields, later, text)
            if extra is None:
                return None
            fields.update(extra)
        return fields


@dataclass(frozen=True)
class ToolErrorSite:
    """An error site a rule found: the assistant turn its hint targets, the error kind, the template key, the
    template's fields (hints.ErrorSite's shape)."""

    turn: int
    error_kind: str
    template_key: str
    fields: dict


def rule_templates(rules: Sequence[ToolErrorRule]) -> dict[str, str]:
    """The hint templates the rules bring (template key -> text), for the rules that write theirs out."""
    return {r.template_key: r.hint for r in rules if r.hint is not None}


def check_templates(rules: Sequence[ToolErrorRule], templates: Mapping[str, str]) -> None:
    """ValueError naming the rule when its template is unknown, two rules give one key two texts, or a template asks
    for a field the rule's sites do not carry (the reference answer among them: a hint never gives it)."""
    own: dict[str, str] = {}
    for i, rule in enumerate(rules):
        if rule.hint is not None:
            if own.setdefault(rule.template_key, rule.hint) != rule.hint:
                raise ValueError(f"[{i}] ({rule.kind}): template {rule.template_key!r} is given two different hints")
            text = rule.hint
        elif rule.template_key in templates:
            text = templates[rule.template_key]
        else:
            raise ValueError(
                f"[{i}] ({rule.kind}): no hint and no template {rule.template_key!r}; known: {sorted(templates)}"
            )
        try:
            needed = {name for _, name, _, _ in Formatter().parse(text) if name}
        except ValueError as e:
            raise ValueError(f"[{i}] ({rule.kind}): hint is not a template ({e}): {text!r}") from None
        missing = needed - rule.fields
        if missing:
            raise ValueError(
                f"[{i}] ({rule.kind}): hint uses {sorted(missing)}, which its sites do not carry; they carry "
                f"{sorted(rule.fields)}"
            )


def tool_error_sites(
    trace: Sequence[TraceTurn] | None, rules: Sequence[ToolErrorRule], failed: bool | None
) -> list[ToolErrorSite]:
    """The error sites the rules find in one recorded episode (module docstring), by turn; `failed`: whether the
    episode's accuracy is 0 (None: unknown, so `when: failed` rules never match)."""
    if not trace or not rules:
        return []
    live = [r for r in rules if r.when == "always" or failed is True]
    text = question(trace)
    sites: dict[int, ToolErrorSite] = {}
    for t, turn in enumerate(trace):
        target = t + 1
        if target >= len(trace):
            break  # the episode has no turn for the hint to target
        later = trace[target]
        for call in turn.calls:
            if target in sites:
                break
            for rule in live:
                fields = rule.match(call, later, text)
                if fields is not None:
                    sites[target] = ToolErrorSite(target, rule.kind, rule.template_key, fields)
                    break
    if not any(turn.calls for turn in trace):
        for rule in live:
            if rule.source == "no_call":
                sites.setdefault(0, ToolErrorSite(0, rule.kind, rule.template_key, {"question": text}))
                break
    return [sites[t] for t in sorted(sites)]
