import random

import pytest

from verl_ext.reward.answer_extraction import boxed_answer, last_boxed, last_boxed_span, last_pattern_match


@pytest.mark.parametrize(
    "text, expected",
    [
        ("so the answer is \\boxed{42}.", "42"),
        ("\\boxed{1} then \\boxed{2}", "2"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("$\\boxed{\\left(3, \\frac{\\pi}{2}\\right)}$", "\\left(3, \\frac{\\pi}{2}\\right)"),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # escaped braces do not close the box
        ("\\boxed{a\\}b}", "a\\}b"),
        ("\\fbox{7}", "7"),
        ("\\boxed{3} and finally \\fbox{8}", "8"),
        ("\\boxed 5$ done", "5"),
        ("\\boxed  {12}", "12"),
        ("\\boxed{}", ""),
        ("no box here", None),
        ("truncated \\boxed{\\frac{1}{2", None),  # an unclosed last box is no answer, not the previous box
        ("\\boxed{1} then \\boxed{2", None),
        ("\\boxedfoo{3}", None),  # another macro
        ("\\boxedfoo{3} \\boxed{4}", "4"),
        ("\\boxed{4} \\boxedfoo{3}", "4"),
        ("", None),
    ],
)
def test_last_boxed_table(text, expected):
    assert last_boxed(text) == expected


def _balanced(rng: random.Random, depth: int) -> str:
    """A random brace-balanced LaTeX-ish string (escaped braces included) without any box command."""
    parts = []
    for _ in range(rng.randint(0, 4)):
        kind = rng.random()
        if kind < 0.3 and depth < 5:
            parts.append("{" + _balanced(rng, depth + 1) + "}")
        elif kind < 0.4:
            parts.append(rng.choice(["\\{", "\\}", "\\\\"]))
        else:
            parts.append(rng.choice(["x", "1", "+", "\\frac", "\\sqrt", " ", "^", "_", "(", ")", ","]))
    return "".join(parts)


def test_last_boxed_random_nesting_against_construction():
    # Reference by construction: the text is noise + \boxed{content} + box-free tail, so the answer is `content`.
    rng = random.Random(0)
    for _ in range(500):
        content = _balanced(rng, 0)
        noise = _balanced(rng, 0) + rng.choice(["", "\\boxed{9}", "\\fbox{zz}"])
        tail = rng.choice(["", ".", " $.", " So done.", "}}"])
        assert last_boxed(f"{noise} \\boxed{{{content}}}{tail}") == content


def test_pattern_last_match_and_groups():
    text = "Answer: 3\nwait\nAnswer: 17\n"
    assert last_pattern_match(text, r"Answer:\s*([^\n]+)") == "17"
    assert last_pattern_match(text, r"Answer:\s*\d+") == "Answer: 17"
    assert last_pattern_match("nothing", r"Answer:\s*(\S+)") is None
    with pytest.raises(ValueError, match="invalid answer_pattern"):
        last_pattern_match(text, r"Answer:(")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("so the answer is \\boxed{42}.", "42"),
        ("The answers are $\\boxed{1}, \\boxed{2}$.", "1, 2"),
        ("$\\boxed{1}$ and $\\boxed{2}$", "1, 2"),
        ("\\boxed{1}\n\n\\boxed{2}", "1, 2"),  # close together: joined even without a separator
        ("\\boxed{2}, \\boxed{1}", "2, 1"),
        ("\\boxed{1, 2}, \\boxed{3}", "1, 2, 3"),
        ("\\boxed{3}, \\boxed{3}", "3"),  # equal neighbours count once
        ("(a) $\\boxed{4}$; for part (b) the value is $\\boxed{7}$", "4, 7"),  # a separator within 70 characters
        ("First $\\boxed{3}$. Then the final answer is $\\boxed{5}$.", "5"),  # far, no separator: intermediate
        ("\\boxed{3}" + " " * 80 + ", \\boxed{5}", "5"),  # 70 characters or more apart: not joined
        ("\\boxed{x}, \\boxed 5", "x, 5"),
        ("\\boxed 4, \\boxed{5}", "5"),  # a brace-less earlier box ends the run, as in math_verify
        ("\\boxed{1} then \\boxed{2", None),  # the last box is unclosed: no answer
        ("no box here", None),
    ],
)
def test_boxed_answer_joins_final_boxes(text, expected):
    assert boxed_answer(text) == expected


def test_last_boxed_span_locates_last_boxed():
    texts = [
        "so the answer is \\boxed{42}.",
        "\\boxed{1} then \\boxed{2}",
        "\\boxed{\\{1, 2\\}}",
        "\\boxed 5$ done",
        "\\boxed  {12}",
        "\\boxed{}",
        "no box here",
        "\\boxed{1} then \\boxed{2",
        "\\boxed{4} \\boxedfoo{3}",
        "5 \\boxed 5",
    ]
    rng = random.Random(1)
    for _ in range(300):
        texts.append(f"{_balanced(rng, 0)} \\boxed{{{_balanced(rng, 0)}}}{rng.choice(['', '.', ' $.', '}}'])}")
    for text in texts:
        span = last_boxed_span(text)
        if last_boxed(text) is None:
            assert span is None, text
        else:
            assert text[span[0] : span[1]] == last_boxed(text), text
            assert text.rfind("\\boxed", 0, span[0] + 1) >= 0 or text.rfind("\\fbox", 0, span[0] + 1) >= 0
    assert last_boxed_span("5 \\boxed 5") == (9, 10)  # the argument, not the earlier 5
