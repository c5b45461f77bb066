"""Pull the final answer out of a model response.

Two ways, chosen by the caller:
- the final ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces and escaped ``\\{ \\}`` handled), or the brace-less
  ``\\boxed 5`` form that some models write;
- the last match of a caller-given regular expression (group 1 if the pattern has a group, else the whole match).

Several boxes (``\\boxed{1}, \\boxed{2}`` for a multi-part question): ``boxed_answer`` joins the final run of boxes
into one list answer ``1, 2`` (for the ``pred`` a reward reports and verl's majority vote), by the rule of
latex2sympy2_extended's ``extract_boxed_content``: walking back from the last box, an earlier box joins when the text
between the two is shorter than 10 characters, or shorter than 70 and contains ``and``, ``or``, a comma or a
semicolon and the two contents differ; equal neighbours count once. math_verify's full extraction has more rules
(``$...$`` environments joined only by ``,``/``and``/``or``, every box inside one environment joined), so the
reward does not score this string: a response with two or more boxes is scored by math_verify on the response
itself (``math_reward``), and ``box_count`` tells when.

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


def _box_argument(text: str, pos: int, cmd: str) -> tuple[str | None, int | None]:
    """(content, index of the closing brace) of the box command at ``pos``; the index is None for ``\\boxed 5``."""
    i = pos + len(cmd)
    while i < len(text) and text[i] in " \t":
        i += 1
    if i < len(text) and text[i] == "{":
        content = _braced_content(text, i)
        return content, (None if content is None else i + 1 + len(content))
    if i > pos + len(cmd):
        # "\boxed 5": the argument runs to the next whitespace or math delimiter.
        match = re.match(r"[^\s$]+", text[i:])
        return (match.group(0) if match else None), None
    return None, None


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}``/``\\fbox{...}`` (or ``\\boxed 5``); None when absent or unclosed."""
    found = _last_box_start(text)
    return None if found is None else _box_argument(text, *found)[0]


def last_boxed_span(text: str) -> tuple[int, int] | None:
    """Where ``last_boxed``'s content lies in ``text``: ``(start, end)`` with ``text[start:end] == last_boxed(text)``;
    None when it returns None."""
    found = _last_box_start(text)
    if found is None:
        return None
    content, close = _box_argument(text, *found)
    if content is None:
        return None
    if close is not None:
        return close - len(content), close
    start = text.index(content, found[0] + len(found[1]))  # "\boxed 5": after the command and its blanks
    return start, start + len(content)


_SEPARATOR = re.compile(r"\b(?:and|or)\b|,|;")


def final_boxes(text: str) -> list[str] | None:
    """Contents of the final run of boxes, in order (see the module docstring); None when the last box is absent
    or unclosed."""
    found = _last_box_start(text)
    if found is None:
        return None
    content, _ = _box_argument(text, *found)
    if content is None:
        return None
    boxes = [content.strip()]
    later_start = found[0]
    while True:
        found = _last_box_start(text[:later_start])
        if found is None:
            break
        content, close = _box_argument(text[:later_start], *found)
        if content is None or close is None or not content.strip():
            break  # math_verify stops at a brace-less or unclosed box, and so does this
        content = content.strip()
        between = text[close + 1 : later_start]
        near = len(between) < 10
        separated = content != boxes[-1] and len(between) < 70 and _SEPARATOR.search(between) is not None
        if not (near or separated):
            break
        if content != boxes[-1]:
            boxes.append(content)
        later_start = found[0]
    return boxes[::-1]


_BOX_COMMAND = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")


def box_count(text: str) -> int:
    """Number of box commands in ``text``."""
    return len(_BOX_COMMAND.findall(text))


def boxed_answer(text: str) -> str | None:
    """The answer in the final box(es): one box's content, or several joined as ``a, b`` (a list to math_verify)."""
    boxes = final_boxes(text)
    return None if boxes is None else ", ".join(boxes)


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
    for match in compiled.finditer(text):
        last = match
    if last is None:
        return None
    return last.group(1) if compiled.groups else last.group(0)
