"""Pull the final answer out of a model response.

Two ways, chosen by the caller:
- the last ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces and escaped ``\\{ \\}`` handled), or the brace-less
  ``\\boxed 5`` form that some models write;
- the last match of a caller-given regular expression (group 1 if the pattern has a group, else the whole match).

Both run in time linear in the input, which the caller bounds (see ``math_reward.MathRewardConfig``).
A truncated final box (no closing brace) counts as no answer: falling back to an earlier box would reward an
intermediate value the model did not commit to.
"""

from __future__ import annotations

import re
from functools import lru_cache

_BOX_COMMANDS = ("\\boxed", "\\fbox")


def _last_box_start(text: str) -> tuple[int, str] | None:
    """Position and command name of the last box command, or None."""
    best: tuple[int, str] | None = None
    for cmd in _BOX_COMMANDS:
        pos = text.rfind(cmd)
        # "\boxedfoo" is another macro, not a box: the command must end at a non-letter.
        while pos >= 0 and pos + len(cmd) < len(text) and text[pos + len(cmd)].isalpha():
            pos = text.rfind(cmd, 0, pos)
        if pos >= 0 and (best is None or pos > best[0]):
            best = (pos, cmd)
    return best


def _braced_content(text: str, open_pos: int) -> str | None:
    """Content of the brace group opening at ``open_pos``; None when it never closes."""
    depth = 0
    i = open_pos
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2  # an escaped char (\{ \} \\) never opens or closes a group
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[open_pos + 1 : i]
        i += 1
    return None


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}``/``\\fbox{...}`` (or ``\\boxed 5``); None when absent or unclosed."""
    found = _last_box_start(text)
    if found is None:
        return None
    pos, cmd = found
    i = pos + len(cmd)
    while i < len(text) and text[i] in " \t":
        i += 1
    if i < len(text) and text[i] == "{":
        return _braced_content(text, i)
    if i > pos + len(cmd):
        # "\boxed 5": the argument runs to the next whitespace or math delimiter.
        match = re.match(r"[^\s$]+", text[i:])
        return match.group(0) if match else None
    return None


@lru_cache(maxsize=64)
def compile_answer_pattern(pattern: str) -> re.Pattern:
    """Compile once per pattern; a bad pattern is a configuration error, reported with the pattern."""
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid answer_pattern {pattern!r}: {exc}") from exc


def last_pattern_match(text: str, pattern: str) -> str | None:
    """Group 1 (or the whole match) of the last match of ``pattern``; None when nothing matches."""
    compiled = compile_answer_pattern(pattern)
    last = None
    for last in compiled.finditer(text):
        pass
    if last is None:
        return None
    return last.group(1) if compiled.groups else last.group(0)
