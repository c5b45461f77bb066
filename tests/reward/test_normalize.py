import random
from fractions import Fraction

import pytest

from verl_ext.reward.normalize import as_rational, normalize_answer


@pytest.mark.parametrize(
    "raw, normalized",
    [
        ("$42$", "42"),
        ("\\(42\\)", "42"),
        (" 42. ", "42"),
        ("\\dfrac{1}{2}", "\\frac{1}{2}"),
        ("\\tfrac12", "\\frac12"),
        ("\\left( 1, 2 \\right)", "(1,2)"),
        ("90^\\circ", "90"),
        ("90^{\\circ}", "90"),
        ("50\\%", "50"),
        ("10\\text{ cm}", "10"),
        ("5 \\mbox{meters}", "5"),
        ("\\text{(A)}", "(A)"),
        ("\\text{Evelyn}", "Evelyn"),
        ("x = 5", "5"),
        ("a_1=3", "3"),
        ("1,000,000", "1000000"),
        ("2,3", "2,3"),  # a pair, not a thousands separator
        ("3\\,000", "3000"),
        ("x^2 + 2x", "x^2+2x"),
    ],
)
def test_normalize_table(raw, normalized):
    assert normalize_answer(raw) == normalized


@pytest.mark.parametrize(
    "text, value",
    [
        ("42", Fraction(42)),
        ("-7", Fraction(-7)),
        ("+3", Fraction(3)),
        ("0.5", Fraction(1, 2)),
        (".25", Fraction(1, 4)),
        ("5.", Fraction(5)),
        ("3/4", Fraction(3, 4)),
        ("-3/4", Fraction(-3, 4)),
        ("\\frac{3}{4}", Fraction(3, 4)),
        ("-\\frac{3}{4}", Fraction(-3, 4)),
        ("\\frac{-3}{4}", Fraction(-3, 4)),
        ("\\frac34", Fraction(3, 4)),
        ("1/0", None),
        ("\\frac{1}{0}", None),
        ("\\sqrt{2}", None),
        ("1e5", None),
        ("x", None),
        ("(1,2)", None),
        ("", None),
    ],
)
def test_as_rational_table(text, value):
    assert as_rational(text) == value


def test_as_rational_random_against_fraction():
    # Reference: Python's Fraction on the plain decimal / a-b spelling of the same number.
    rng = random.Random(1)
    for _ in range(2000):
        num, den = rng.randint(-10**6, 10**6), rng.randint(1, 10**4)
        assert as_rational(f"{num}/{den}") == Fraction(num, den)
        sign = "-" if num < 0 else ""
        assert as_rational(f"{sign}\\frac{{{abs(num)}}}{{{den}}}") == Fraction(num, den)
        places = rng.randint(0, 6)
        dec = f"{num / 10**places:.{places}f}" if places else str(num)
        assert as_rational(dec) == Fraction(dec)
