"""Cheap answer normalisation and the exact-number fast path, run before any symbolic parsing.

The fast path must never be more lenient than math_verify (the verifier it short-cuts): a pair it calls equal
must be one math_verify accepts too, apart from the listed exceptions below. Every rule here was checked against
math_verify 0.9.0 (latex2sympy2_extended 1.11.0) on the exact strings in ``tests/reward/test_normalize.py``, and
``tests/reward/test_leniency.py`` checks the whole reward against math_verify on a few thousand generated pairs.

``normalize_answer`` removes notation that math_verify also ignores: math delimiters, ``\\left``/``\\right``,
``\\dfrac``/``\\tfrac`` (to ``\\frac``), ``^\\circ``, unit words in ``\\text{}`` after a number (not a lone
``and``/``or``, which math_verify reads as a list comma), ``{,}`` and ``\\!`` inside numbers, and whitespace.
``\\text{}``/``\\mathrm{}`` wrappers stay: math_verify reads ``\\text{0.5}`` as a name, not 0.5, ``\\mathrm{I}``
is not ``I`` and ``2\\mathbf{x}`` is 2, so only math_verify decides those. Commas and spaces between digits are where
a wrong rule turns a wrong answer into a right one, so they are handled narrowly:

- ``1,234`` / ``-12,345.5`` (the whole answer; first group ``1``-``999`` without a leading zero, then groups of
  exactly three digits, no spaces) is a thousands grouping, as math_verify reads it;
- ``0,123`` and ``01,234`` are decimal commas to math_verify (0.123, 1.234), never thousands; ``1,5``, ``1,50``,
  ``12,3456``, ``+1,234`` and ``1, 234`` are pairs/sets to math_verify. None of these is rewritten: they stay
  non-numbers here and math_verify decides. A comma between digits keeps whether it had whitespace around it
  (``1,2`` and ``1, 2`` can mean different things to math_verify), and whitespace between two digits stays one
  space (``12 34`` is never the number 1234).

``as_rational`` reads plain numbers (integers with optional sign and leading zeros, decimals, ``.5``, ``a/b``,
``\\frac{a}{b}``, ``\\frac12``) as exact fractions, so DAPO-Math-17k (integer answers) almost never reaches
math_verify. ``5.`` is not a number here (math_verify cannot parse it either); a single sentence-ending period is
removed earlier by ``normalize_answer``.

``fast_verdict`` combines both. A leading assignment (``x = 5``) is dropped, except that two different variables
(``x = 5`` vs ``y = 5``) are left to math_verify, which rejects them.

Where the fast path is deliberately MORE lenient than math_verify (each listed in docs/REWARD.md and excused by
name in the leniency test):

- ``percent``: a trailing percent sign after a number is a unit, ``50\\%`` equals ``50`` and ``12.5\\%`` equals
  ``12.5``. What math_verify really does: with the ANTLR runtime this project must pin (4.9.3, verl's
  hydra/omegaconf pin), latex2sympy2_extended cannot parse ``\\%`` at all, so math_verify rejects every percent
  answer except the identical string (``verify(parse("50"), parse("\\\\boxed{50\\\\%}"))`` is False). With ANTLR
  4.13.2 it accepts ``50\\%`` as both ``50`` and ``0.5``, but rejects ``12.5\\%`` vs ``12.5``. The reward keeps
  one rule for all numbers and does not accept ``0.5`` for ``50\\%`` (stricter there).
- ``final_period``: ``\\boxed{5.}`` is 5 (one sentence-ending period); math_verify finds no expression.
- ``degree_sign``: ``90°`` and ``90\\degree`` are ``90^\\circ`` (math_verify accepts that as 90, but does not know
  the other two spellings).
- ``si_thousands``: ``3\\,000``, ``3~000``, ``3\\ 000``, ``3 000`` (whole answer, first group ``1``-``999``, groups of
  three) are 3000; math_verify reads ``3\\,000`` as the product ``3*000``.

Where it is stricter (never a false positive): decimals compare exactly (``0.333333`` is not ``1/3``; math_verify
rounds floats to 6 places and accepts it), and a percentage is not its fraction of one.
"""

from __future__ import annotations

import re
from fractions import Fraction

# Every pattern is ASCII-only: "\d" must not match other scripts' digits ("٣", "１２"), which Python's int() and
# Fraction() would read as numbers but math_verify does not.
_DELIMITERS = re.compile(r"^\$+|\$+$|^\\\(|\\\)$|^\\\[|\\\]$", re.ASCII)
_DROP = re.compile(r"\\left(?![a-zA-Z])|\\right(?![a-zA-Z])|\\displaystyle|\\limits|\\!", re.ASCII)
_BRACED_COMMA = re.compile(r"\{,\}", re.ASCII)
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°|\\degree(?![a-zA-Z])", re.ASCII)
_PERCENT = re.compile(r"(?<=\d)\s*\\?%$", re.ASCII)
_FRAC_ALIASES = re.compile(r"\\[dt]frac", re.ASCII)
# Unit words after a number: "10\text{ cm}", "5 \mbox{meters}". Only letters and spaces, so \text{(A)} stays; not a
# lone "and"/"or", which math_verify turns into a list comma ("3\text{ or }" is "3,", not 3).
_UNIT_TEXT = re.compile(
    r"(?<=[\d}])\s*\\(?:text|mbox|mathrm)\{(?!\s*(?:and|or)\s*\})\s*[A-Za-z][A-Za-z ]*\}$", re.ASCII
)
_FINAL_PERIOD = re.compile(r"(?<=[^.])\.$", re.ASCII)
_LEAD_ASSIGN = re.compile(r"^([A-Za-z](?:_\{?\w+\}?)?)\s*=\s*(?=[^=])", re.ASCII)
_THOUSANDS = re.compile(r"^-?[1-9]\d{0,2}(?:,\d{3})+(?:\.\d+)?$", re.ASCII)
_SI_THOUSANDS = re.compile(r"^-?[1-9]\d{0,2}(?:(?:\\,|\\ |~| )\d{3})+(?:\.\d+)?$", re.ASCII)
_SPACING = re.compile(r"\\[,;: ]|~|\s+", re.ASCII)
_DIGIT_COMMA = re.compile(r"(?<=\d) ?, ?(?=\d)", re.ASCII)  # after _SPACING: at most one space each side
_DIGIT_SPACE = re.compile(r"(?<=\d) (?=\d)", re.ASCII)
_COMMAND_SPACE = re.compile(r"(\\[A-Za-z]+) (?=[A-Za-z])", re.ASCII)

_INT_OR_DEC = re.compile(r"^[+-]?(?:\d+(?:\.\d+)?|\.\d+)$", re.ASCII)
_SLASH = re.compile(r"^([+-]?\d+)/(\d+)$", re.ASCII)
_FRAC = re.compile(r"^([+-]?)\\frac(?:\{([+-]?\d+)\}\{(\d+)\}|(\d)(\d))$", re.ASCII)


def normalize_answer(text: str) -> str:
    """Canonical spelling of an answer string (see the module docstring for what is removed and what is kept)."""
    s = text.strip()
    s = _DELIMITERS.sub("", s).strip()
    s = _DROP.sub("", s)
    s = _BRACED_COMMA.sub(",", s)
    s = _FRAC_ALIASES.sub(r"\\frac", s)
    s = _FINAL_PERIOD.sub("", s.strip()).strip()
    s = _DEGREES.sub("", s).strip()
    s = _PERCENT.sub("", s)
    s = _UNIT_TEXT.sub("", s).strip()
    # Digit groupings are judged on the whole answer before any space is touched: "1,234" is 1234 but "- 1,234",
    # "x = 1,234" and "1, 234" are not numbers to math_verify.
    if _THOUSANDS.match(s):
        return s.replace(",", "")
    if _SI_THOUSANDS.match(s):
        return _SPACING.sub("", s)
    s = _SPACING.sub(" ", s).strip()
    # The only spaces that survive (marked \0 while the rest go): a digit comma that had whitespace keeps one
    # ("1, 234"), whitespace between two digits stays one space ("12 34"), and so does a space after a command name
    # before a letter ("\cd ot" is not "\cdot").
    s = _DIGIT_COMMA.sub(lambda m: "," if m.group(0) == "," else ",\0", s)
    s = _DIGIT_SPACE.sub("\0", s)
    s = _COMMAND_SPACE.sub("\\1\0", s)
    return s.replace(" ", "").replace("\0", " ")


def split_assignment(normalized: str) -> tuple[str | None, str]:
    """``("x", "5")`` for ``x=5``; ``(None, s)`` when the answer does not start with a single-variable assignment."""
    match = _LEAD_ASSIGN.match(normalized)
    if match is None:
        return None, normalized
    return match.group(1), normalized[match.end() :]


def as_rational(normalized: str) -> Fraction | None:
    """Exact value of a plain number in normalised form, else None (anything symbolic goes to math_verify)."""
    if _INT_OR_DEC.match(normalized):
        return Fraction(normalized)
    match = _SLASH.match(normalized)
    if match:
        den = int(match.group(2))
        return Fraction(int(match.group(1)), den) if den else None
    match = _FRAC.match(normalized)
    if match:
        sign = -1 if match.group(1) == "-" else 1
        num, den = (match.group(2), match.group(3)) if match.group(2) is not None else (match.group(4), match.group(5))
        return sign * Fraction(int(num), int(den)) if int(den) else None
    return None


def fast_verdict(gold: str, pred: str) -> bool | None:
    """True/False when normalisation settles the pair, None when math_verify has to decide.

    True only for pairs math_verify accepts too (or one of the module docstring's listed exceptions); False only
    for an empty answer or two different exact numbers.
    """
    gold_var, gold_norm = split_assignment(normalize_answer(gold))
    pred_var, pred_norm = split_assignment(normalize_answer(pred))
    if not pred_norm:
        return False
    if gold_var is not None and pred_var is not None and gold_var != pred_var:
        return None  # "x = 5" vs "y = 5": math_verify compares the equations and rejects
    if gold_norm == pred_norm:
        return True
    gold_value, pred_value = as_rational(gold_norm), as_rational(pred_norm)
    if gold_value is not None and pred_value is not None:
        return gold_value == pred_value
    return None
