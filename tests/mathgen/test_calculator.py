"""The exact calculator the example framework agents' `calc` tool runs (`verl_ext.mathgen.calculator`): results
written as the generator writes its answers, and graded right by the project's math reward."""

from __future__ import annotations

import pytest

from verl_ext.mathgen.calculator import calculate, same_number


def test_results_are_written_as_the_generators_answers():
    cases = {
        "2 - -2": "4", "-4 + -2 - (-1 - 0)": "-5", "-3.1 * 0.2": "-0.62", "-1 / -2": "1/2", "0.1 + 0.2": "0.3",
        "16 / 5": "16/5", "22 / 11": "2", "0.006 * 4": "0.024", "-41+-0.4": "-41.4", "2 * (3 + 4) - -1": "15",
        "0.5 / 2": "0.25", "3 × 4 ÷ 6": "2",
    }  # fmt: skip
    for expr, want in cases.items():
        assert calculate(expr) == want, expr


def test_anything_else_is_a_value_error():
    for bad in ("2 ** 3", "x + 1", "open('f')", "1 +", "2 - 2 = 0", "1 / 0", "", "True + 1"):
        with pytest.raises(ValueError):
            calculate(bad)


def test_same_number_and_the_math_reward_agree_with_the_written_results():
    from verl_ext.reward.math_reward import compute_score

    assert same_number("0.5", "1/2") and same_number(" -4 ", "-4") and not same_number("x", "1")
    for expr, gold in (("-1 / -2", "1/2"), ("-3.1 * 0.2", "-0.62"), ("16 / 5", "16/5")):
        assert compute_score("mathgen", f"\\boxed{{{calculate(expr)}}}", gold)["score"] == 1.0
