"""Cheap answer normalisation and the exact-number fast path, run before any symbolic parsing.

``normalize_answer`` removes notation that never changes a value: math delimiters, spacing macros,
``\\left``/``\\right``, ``\\dfrac``/``\\tfrac`` (to ``\\frac``), degree marks, percent signs, unit words in
``\\text{}`` after a number, thousands separators, a trailing period, a leading ``x =``. Two answers equal after
normalisation are equivalent without calling math_verify.

``as_rational`` reads plain numbers (integers, decimals, ``a/b``, ``\\frac{a}{b}``, ``\\frac12``) as exact
fractions. When both sides are plain numbers the comparison is decided exactly here, so DAPO-Math-17k (integer
answers) almost never reaches math_verify. Assumption, stated because math_verify differs: decimals compare
exactly (``0.333333`` is not ``1/3``; math_verify rounds to 6 places and would accept it), and a percentage
compares by its number (``50\\%`` equals ``50``, not ``0.5``).
"""

from __future__ import annotations

import re
from fractions import Fraction

_DELIMITERS = re.compile(r"^\$+|\$+$|^\\\(|\\\)$|^\\\[|\\\]$")
_DROP = re.compile(r"\\left|\\right|\\displaystyle|\\!|\\,|\\;|\\:|\\ |~|\\limits")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°|\\degree")
_PERCENT = re.compile(r"\\?%")
_FRAC_ALIASES = re.compile(r"\\[dt]frac")
# Unit words after a number: "10\text{ cm}", "5 \mbox{meters}". Only letters and spaces, so \text{(A)} stays.
_UNIT_TEXT = re.compile(r"(?<=[\d}])\s*\\(?:text|mbox|mathrm)\{\s*[A-Za-z][A-Za-z ]*\}\s*$")
_TEXT_WRAP = re.compile(r"\\(?:text|textbf|mbox|mathrm|mathbf)\{([^{}]*)\}")
_LEAD_ASSIGN = re.compile(r"^[A-Za-z](?:_\{?\w+\}?)?\s*=\s*(?=[^=])")
_THOUSANDS = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_SPACE = re.compile(r"\s+")

_INT_OR_DEC = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)$")
_SLASH = re.compile(r"^([+-]?\d+)/(\d+)$")
_FRAC = re.compile(r"^([+-]?)\\frac(?:\{([+-]?\d+)\}\{(\d+)\}|(\d)(\d))$")


def normalize_answer(text: str) -> str:
    """Canonical spelling of an answer string (see module docstring for what is removed)."""
    s = text.strip()
    s = _DELIMITERS.sub("", s).strip()
    s = _DROP.sub("", s)
    s = _FRAC_ALIASES.sub(r"\\frac", s)
    s = _DEGREES.sub("", s)
    s = _PERCENT.sub("", s)
    s = _UNIT_TEXT.sub("", s)
    s = _TEXT_WRAP.sub(r"\1", s)
    s = s.strip().rstrip(".").strip()
    s = _LEAD_ASSIGN.sub("", s)
    s = _SPACE.sub("", s)
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    return s


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
