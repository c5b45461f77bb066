"""The meaning of a generated question: ``canonical_form(question)``, equal for two questions exactly when they ask
for the same computation on the same numbers, however the generator worded them.

Why: the task's splits were disjoint only as strings, so a held-out ``What is 0 divided by 8?`` could be a training
``0 divided by 8`` reworded (31 of the 144 arithmetic validation questions at seed 0 were). ``task.sample_items``
redraws a held-out row whose canonical form was excluded (the training split's) or drawn already, which makes a
task's train and held-out splits disjoint by meaning.

The rule. A question is parsed against the templates of the nine generator modules the task uses
(mathematics_dataset 1.0.1, ``task.MODULES``) and reduced to a tuple whose first entry names the computation:

- ``("add", a, b)`` and ``("mul", a, b)``: a sum or product of two numbers, the operands sorted (``Add 3 and 5.``,
  ``What is 5 plus 3?``, ``3+5`` are one question; ``Multiply -2 and 4.``, ``4 times -2``, ``-2*4`` another).
- ``("sub", p, q)``: ``p - q`` in the order the value is computed, whatever order the words name the numbers in:
  ``Subtract 3 from 5.``, ``What is 3 less than 5?``, ``5 - 3`` and ``What is the difference (or distance) between
  3 and 5?`` (which the generator asks only when the answer is the larger minus the smaller) are one question.
- ``("div", p, q)``: ``p / q`` (``Divide 6 by 3.``, ``What is 6 divided by 3?``, ``6/3``).
- ``("expr", text)``: a longer expression (``add_sub_multiple``, ``mixed``), with whichever of the wrappers
  ``What is ...?``, ``Evaluate ....``, ``Calculate ....``, ``What is the value of ...?``, ``Work out ....`` or none,
  as written but without spaces and without the brackets around a lone number (``(-1)/2`` is ``-1/2``). Its terms
  are not reordered: ``1 + 2 + 3`` and ``3 + 2 + 1`` ask for different partial sums. An expression of exactly two
  numbers is the binary computation above, so ``What is 3 + 5?`` is the same question in ``add_sub_multiple`` as
  in ``add_or_sub``, and ``(-1)/2`` in ``mixed`` the same as ``Divide -1 by 2.``: the form names the computation,
  not the module (the module is implied by it, or does not matter).
- ``("solve", side, side)``: a linear equation with its variable written ``x`` and its two sides sorted:
  ``Solve 3*k + 2 = 8 for k.`` and ``Solve 8 = 3*x + 2 for x.`` are one question.
- ``("round", number, power)``: round to ``10**power``, however the precision is written: ``the nearest 1000`` and
  ``the nearest one thousand`` (power 3), ``the nearest integer``, ``0 decimal places`` and ``zero dps`` (0),
  ``2 dps`` and ``two decimal places`` (-2).
- ``("place", integer, place)``: ``What is the tens digit of 25?`` (one wording only).
- ``("sort", values, ascending)``: the values in increasing order of value and the direction (``Sort 3, 1, 2.``,
  ``Put 1, 2, 3 in increasing order.`` and ``Sort 2, 3, 1 in ascending order.`` are one question).

Every number is written in one way: its sign kept, decimals without trailing zeros or a missing leading zero
(``0.50``, ``.5`` are ``0.5``), ``-0`` is ``0``; a fraction stays a fraction (``1/2`` and ``0.5`` are different
written numbers, and converting is part of the work). Numbers written as words appear only in rounding precisions
(``ROUND_TO_WORDS``, ``DPS_WORDS``, the generator's own spellings). The answer is not part of the form: the
computation determines it. Two computations that merely share an answer stay different (``5 + 0`` and ``5 - 0``,
``5 - -3`` and ``5 + 3``): each asks for its own step. A question no template matches raises ValueError.
"""

from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction

_UNSIGNED = r"(?:\d+(?:\.\d*)?|\.\d+)"
_SIGNED = rf"-?{_UNSIGNED}"
_VALUE = rf"{_SIGNED}(?:/{_UNSIGNED})?"  # a sort value may be a fraction

# The generator's worded templates of a binary computation ({p}, {q} are the numbers of ``p op q``). The symbolic
# ones (``{p} + {q}``, ``Work out {p} * {q}.``, ...) are expressions in a wrapper (_EXPRESSION_WRAPPERS).
_WORDED: dict[str, tuple[str, ...]] = {
    "add": (
        "Add {p} and {q}.",
        "Put together {p} and {q}.",
        "Sum {p} and {q}.",
        "Total of {p} and {q}.",
        "Add together {p} and {q}.",
        "What is {p} plus {q}?",
    ),
    "sub": (
        "What is {p} minus {q}?",
        "What is {p} take away {q}?",
        "What is {q} less than {p}?",
        "Subtract {q} from {p}.",
    ),
    "mul": (
        "Multiply {p} and {q}.",
        "Product of {p} and {q}.",
        "What is the product of {p} and {q}?",
        "{p} times {q}",
        "What is {p} times {q}?",
    ),
    "div": (
        "Divide {p} by {q}.",
        "{p} divided by {q}",
        "What is {p} divided by {q}?",
        "Calculate {p} divided by {q}.",
    ),
}
_EXPRESSION_WRAPPERS = ("{op}", "What is {op}?", "Evaluate {op}.", "Calculate {op}.", "What is the value of {op}?",
                        "Work out {op}.")  # fmt: skip
_SYMBOLS = {"+": "add", "-": "sub", "*": "mul", "/": "div"}
_COMMUTATIVE = frozenset({"add", "mul"})
# How the generator writes rounding precisions in words (display.StringNumber; tests/mathgen check these spellings).
ROUND_TO_WORDS = {"ten": 10, "one hundred": 100, "one thousand": 1000, "ten thousand": 10_000,
                  "one hundred thousand": 100_000, "one million": 1_000_000}  # fmt: skip
DPS_WORDS = {w: i for i, w in enumerate(("zero", "one", "two", "three", "four", "five", "six", "seven"))}
_PERIODS = ("thousands", "millions", "billions", "trillions", "quadrillions", "quintillions", "sextillions",
            "septillions", "octillions", "nonillions", "decillions")  # fmt: skip
PLACE_NAMES = ("units", "tens", "hundreds") + tuple(first + p for p in _PERIODS for first in ("", "ten ", "hundred "))


def _template_regex(template: str, names: dict[str, str]) -> re.Pattern:
    pattern = re.escape(template)
    for name, group in names.items():
        pattern = pattern.replace(re.escape("{" + name + "}"), group)
    return re.compile(pattern)


_WORDED_REGEXES = tuple(
    (op, _template_regex(t, {"p": rf"(?P<p>{_SIGNED})", "q": rf"(?P<q>{_SIGNED})"}))
    for op, templates in _WORDED.items()
    for t in templates
)
_DISTANCE = re.compile(rf"What is the (?:distance|difference) between ({_SIGNED}) and ({_SIGNED})\?")
_EXPRESSION = r"(?P<op>[-+*/().\d\s]*\d[-+*/().\d\s]*)"  # digits, operators, brackets
_WRAPPER_REGEXES = tuple(_template_regex(t, {"op": _EXPRESSION}) for t in _EXPRESSION_WRAPPERS)
_SOLVE = re.compile(r"Solve (?P<eq>[^=]+=[^=]+) for (?P<var>[A-Za-z])\.")
_ROUND = re.compile(rf"(?:Round (?P<a>{_SIGNED}) to (?P<da>.+)\.|What is (?P<b>{_SIGNED}) rounded to (?P<db>.+)\?)")
_PLACE = re.compile(r"What is the (?P<place>[a-z ]+) digit of (?P<n>\d+)\?")
# "Sort {values}." (increasing), "Sort {values} in {direction} order.", "Put {values} in {direction} order."
_SORT = re.compile(rf"(?:Sort|Put) (?P<values>{_VALUE}(?:, {_VALUE})*)(?: in (?P<dir>\w+) order)?\.")
_ASCENDING = {None: True, "ascending": True, "increasing": True, "descending": False, "decreasing": False}
_BINARY = re.compile(rf"({_SIGNED})([-+*/])({_SIGNED})")
_LONE_NUMBER = re.compile(rf"\(({_SIGNED})\)")


def number(text: str) -> str:
    """A number as one spelling: ``0.50``, ``.5`` -> ``0.5``; ``-0`` -> ``0``; ``3/4`` stays ``3/4`` (each part
    normalised)."""
    if "/" in text:
        numerator, denominator = text.split("/")
        return f"{number(numerator)}/{number(denominator)}"
    value = Decimal(text)
    return "0" if value == 0 else format(value.normalize(), "f")


def _value(text: str) -> Fraction:
    return Fraction(number(text))


def _binary(op: str, p: str, q: str) -> tuple:
    p, q = number(p), number(q)
    if op in _COMMUTATIVE:
        p, q = sorted((p, q))
    return (op, p, q)


def _expression(op: str) -> tuple:
    text = re.sub(r"\s+", "", op)
    while True:  # (-1) -> -1, ((2)) -> 2
        unwrapped = _LONE_NUMBER.sub(r"\1", text)
        if unwrapped == text:
            break
        text = unwrapped
    binary = _BINARY.fullmatch(text)
    if binary:
        return _binary(_SYMBOLS[binary.group(2)], binary.group(1), binary.group(3))
    return ("expr", re.sub(_UNSIGNED, lambda m: number(m.group()), text))


def _power(description: str) -> int:
    if description == "the nearest integer":
        return 0
    if description.startswith("the nearest "):
        to = description.removeprefix("the nearest ")
        value = ROUND_TO_WORDS[to] if to in ROUND_TO_WORDS else int(to)
        power = len(str(value)) - 1
        if value != 10**power:
            raise ValueError(f"not a power of ten: {description!r}")
        return power
    m = re.fullmatch(r"(\w+) (?:decimal places?|dps?)", description)
    if not m:
        raise ValueError(f"unknown rounding precision {description!r}")
    dps = m.group(1)
    return -(DPS_WORDS[dps] if dps in DPS_WORDS else int(dps))


def _solve(equation: str, variable: str) -> tuple:
    if set(re.findall(r"[A-Za-z]", equation)) != {variable}:
        raise ValueError(f"more than one variable in {equation!r}")
    text = re.sub(r"\s+", "", equation.replace(variable, "x"))
    left, right = text.split("=")
    norm = [re.sub(_UNSIGNED, lambda m: number(m.group()), side) for side in (left, right)]
    return ("solve", *sorted(norm))


def canonical_form(question: str) -> tuple:
    """The computation a generated question asks for (the rule: the module docstring). Two questions have equal
    forms exactly when they ask for the same computation on the same numbers. ValueError if no template of the
    task's modules matches."""
    q = " ".join(question.split())
    for op, regex in _WORDED_REGEXES:
        m = regex.fullmatch(q)
        if m:
            return _binary(op, m.group("p"), m.group("q"))
    m = _DISTANCE.fullmatch(q)
    if m:
        a, b = m.groups()
        return _binary("sub", *sorted((a, b), key=_value, reverse=True))
    m = _SOLVE.fullmatch(q)
    if m:
        return _solve(m.group("eq"), m.group("var"))
    m = _ROUND.fullmatch(q)
    if m:
        value, description = (
            (m.group("a"), m.group("da")) if m.group("a") is not None else (m.group("b"), m.group("db"))
        )
        return ("round", number(value), _power(description))
    m = _PLACE.fullmatch(q)
    if m and m.group("place") in PLACE_NAMES:
        return ("place", number(m.group("n")), m.group("place"))
    m = _SORT.fullmatch(q)
    if m and m.group("dir") in _ASCENDING and not (m.group("dir") is None and q.startswith("Put")):
        values = tuple(sorted((number(v) for v in m.group("values").split(", ")), key=_value))
        return ("sort", values, _ASCENDING[m.group("dir")])
    for regex in _WRAPPER_REGEXES:
        m = regex.fullmatch(q)
        if m and not re.search(r"[\d.]\s+[\d.]", m.group("op")):  # two numbers side by side: not an expression
            return _expression(m.group("op"))
    raise ValueError(f"no template of the task's modules matches {question!r}")


def meaning_key(text: str) -> tuple:
    """``canonical_form(text)``, or for a string no template matches (a demonstration's turn that is not a question,
    such as the calculator's ``Result: 4``) ``("text", text)`` with its spaces collapsed: what a split excludes."""
    try:
        return canonical_form(text)
    except ValueError:
        return ("text", " ".join(text.split()))
