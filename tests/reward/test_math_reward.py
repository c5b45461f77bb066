"""compute_score on tables of equivalent / non-equivalent answers, malformed input, verl integration."""

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from verl_ext.reward.math_reward import MathRewardConfig, compute_score

KEYS = {"score", "acc", "no_answer", "timeout", "pred"}


def boxed(answer: str) -> str:
    return f"We work it out carefully.\nSo the final answer is $\\boxed{{{answer}}}$."


EQUIVALENT = [
    # (ground truth, model answer)
    ("42", "42"),
    ("42", "42.0"),
    ("42", "042"),
    ("-3", "-3"),
    ("1000", "1,000"),
    ("0.5", "\\frac{1}{2}"),
    ("\\frac{1}{2}", "0.5"),
    ("\\frac{1}{2}", "\\dfrac{1}{2}"),
    ("\\frac12", "\\tfrac{1}{2}"),
    ("\\dfrac{3}{4}", "3/4"),
    ("\\frac{14}{3}", "\\frac{28}{6}"),
    ("\\frac{\\sqrt{3}}{2}", "\\dfrac{\\sqrt3}{2}"),
    ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}"),
    ("2\\sqrt{2}", "\\sqrt{8}"),
    ("10", "10\\text{ cm}"),
    ("10\\text{ inches}", "10"),
    ("5", "5 \\mbox{meters}"),
    ("90^\\circ", "90"),
    ("50\\%", "50"),
    ("25", "25\\%"),
    ("[1,2)", "[1, 2)"),
    ("(-\\infty, 3]", "(-\\infty,3]"),
    ("\\{1,2,3\\}", "\\{3,2,1\\}"),
    ("\\text{Evelyn}", "Evelyn"),
    ("\\text{(A)}", "A"),
    ("x^2+7x+10", "(x+5)(x+2)"),
    ("6 - 5i", "6-5i"),
    ("\\pi", "\\pi"),
    ("2\\pi", "\\pi \\cdot 2"),
    ("x = 5", "5"),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})"),
    ("1/3", "\\frac{1}{3}"),
    ("10^{10}", "10000000000"),
]

NOT_EQUIVALENT = [
    ("42", "43"),
    ("42", "-42"),
    ("0.5", "\\frac{1}{3}"),
    ("\\frac{1}{3}", "0.333"),  # decimals are exact
    ("\\frac{1}{3}", "0.333333"),  # exact here; math_verify alone would accept (6-place rounding)
    ("\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt{2}}{2}"),
    ("50\\%", "0.5"),  # a percentage compares by its number
    ("[1,2)", "(1,2]"),
    ("[1,2]", "[1,2)"),
    ("\\{1,2,3\\}", "\\{1,2\\}"),
    ("10", "100\\text{ cm}"),
    ("\\text{Evelyn}", "Bob"),
    ("\\text{(A)}", "B"),
    ("x^2+7x+10", "(x+5)(x+3)"),
    ("\\pi", "3.14159"),
    ("6 - 5i", "6+5i"),
    ("1000", "100"),
    ("(1,2)", "(2,1)"),
]


@pytest.mark.parametrize("gold, pred", EQUIVALENT)
def test_equivalent_pairs(gold, pred):
    result = compute_score("t", boxed(pred), gold)
    assert result["score"] == result["acc"] == 1.0, result
    assert result["timeout"] == 0.0 and result["no_answer"] == 0.0


@pytest.mark.parametrize("gold, pred", NOT_EQUIVALENT)
def test_non_equivalent_pairs(gold, pred):
    result = compute_score("t", boxed(pred), gold)
    assert result["score"] == result["acc"] == 0.0, result
    assert result["timeout"] == 0.0 and result["no_answer"] == 0.0


@pytest.mark.parametrize(
    "response",
    [
        "",
        "I give up.",
        "The answer is 42.",  # no box
        "\\boxed{}",
        "\\boxed{   }",
        "cut off: \\boxed{\\frac{1}{",
        "\\boxed",
        boxed("\\frac{"),  # the box never closes
        boxed("}{"),  # an empty box followed by braces
    ],
)
def test_missing_answer(response):
    result = compute_score("t", response, "42")
    assert result == {"score": 0.0, "acc": 0.0, "no_answer": 1.0, "timeout": 0.0, "pred": ""}


@pytest.mark.parametrize(
    "pred",
    ["\\sqrt", "1++", "\\left(", "$$", "\\begin{matrix}", "\\\\", "((((", "\\frac{1}{0}", "1/0"],
)
def test_malformed_answers_score_zero_without_error(pred):
    result = compute_score("t", boxed(pred), "42")
    assert result["score"] == 0.0 and result["no_answer"] == 0.0 and result["timeout"] == 0.0


def test_same_keys_every_call():
    # verl builds its extra-info arrays from the first result's keys and indexes every other result by them.
    responses = [boxed("42"), "nothing", boxed("x+"), boxed("9^{9^{9^{9}}}"), boxed("4" * 1000)]
    for response in responses:
        assert set(compute_score("t", response, "42", timeout_s=1.0)) == KEYS
        assert set(compute_score("t", response, "42", timeout_s=1.0, return_pred=False)) == KEYS - {"pred"}


def test_answer_and_response_bounds():
    long_answer = "1" * 401
    result = compute_score("t", boxed(long_answer), long_answer)
    assert result["score"] == 0.0 and len(result["pred"]) == 400  # rejected unparsed, even when identical
    assert compute_score("t", boxed(long_answer), long_answer, max_answer_chars=500)["score"] == 1.0
    # The answer sits beyond the searched tail: not found.
    response = boxed("42") + " and then" + " blah" * 10000
    assert compute_score("t", response, "42")["no_answer"] == 1.0
    assert compute_score("t", response, "42", max_response_chars=len(response))["score"] == 1.0


def test_answer_pattern():
    response = "reasoning...\nAnswer: 17\n"
    assert compute_score("t", response, "17")["no_answer"] == 1.0
    result = compute_score("t", response, "17", answer_pattern=r"(?i)Answer:\s*([^\n]+)")
    assert result["score"] == 1.0 and result["pred"] == "17"
    with pytest.raises(ValueError, match="invalid answer_pattern"):
        compute_score("t", response, "17", answer_pattern="(")


def test_ground_truth_forms():
    assert compute_score("t", boxed("27"), 27.0)["score"] == 1.0  # AMC-style float
    assert compute_score("t", boxed("27"), 27)["score"] == 1.0
    assert compute_score("t", boxed("b"), ["a", "b"])["score"] == 1.0  # any of several
    assert compute_score("t", boxed("b"), np.array(["a", "b"], dtype=object))["score"] == 1.0
    assert compute_score("t", boxed("c"), ["a", "b"])["score"] == 0.0
    for empty in ("", "  ", None, [], float("nan")):
        with pytest.raises(ValueError, match="empty ground truth"):
            compute_score("t", boxed("1"), empty)


def test_bad_options_fail_early():
    with pytest.raises(TypeError, match="timout_s"):
        compute_score("t", boxed("1"), "1", timout_s=2)
    with pytest.raises(ValueError, match="timeout_s"):
        compute_score("t", boxed("1"), "1", timeout_s=0)
    with pytest.raises(ValueError, match="pool_size"):
        MathRewardConfig(pool_size=0)
    with pytest.raises(TypeError, match="solution_str"):
        compute_score("t", None, "1")
    # kwargs verl's reward managers pass are accepted.
    assert compute_score("t", boxed("1"), "1", reward_router_address=None, reward_model_tokenizer=None)["score"] == 1.0


def _warm_pool(limit: float) -> None:
    # Start-up of a pool child (importing sympy) is not charged to any call's limit, but would be to a stopwatch.
    assert compute_score("t", boxed("\\sqrt{4}"), "2", timeout_s=limit)["score"] == 1.0


def test_pathological_answer_returns_within_time_limit():
    from verl_ext.reward.verify_pool import shared_pool

    limit = 1.5
    _warm_pool(limit)
    kills = shared_pool(1, limit).kills
    for i, pred in enumerate(["9^{9^{9^{9}}}", "(10^{7})!", "10^{10^{8}}"]):
        start = time.perf_counter()
        result = compute_score("t", boxed(pred), "5", timeout_s=limit)
        elapsed = time.perf_counter() - start
        assert result["score"] == 0.0 and result["timeout"] == 1.0, (pred, result)
        # The first call finds a ready child. Back-to-back kills may outrun the background restart (~1-3 s,
        # longer on a loaded machine): then a call waits for a child before its own limit starts.
        assert elapsed < (limit + 0.5 if i == 0 else limit + 15.0), (pred, elapsed)
    assert shared_pool(1, limit).kills == kills + 3
    # The pool recovers: a normal symbolic check right after works.
    assert compute_score("t", boxed("\\frac{\\sqrt{3}}{2}"), "\\frac{\\sqrt3}{2}", timeout_s=limit)["score"] == 1.0


def test_pathological_answer_off_the_main_thread():
    # verl runs reward functions in executor threads, where math_verify's signal-based timeout cannot work.
    limit = 1.5
    _warm_pool(limit)
    with ThreadPoolExecutor(max_workers=4) as ex:
        start = time.perf_counter()
        futures = [
            ex.submit(compute_score, "t", boxed(p), g, timeout_s=limit)
            for g, p in [("5", "9^{9^{9^{9}}}"), ("\\frac{1}{2}", "\\dfrac{2}{4}"), ("[1,2)", "[1, 2)"), ("3", "4")]
        ]
        results = [f.result() for f in futures]
        elapsed = time.perf_counter() - start
    assert threading.current_thread() is threading.main_thread()
    assert [r["score"] for r in results] == [0.0, 1.0, 1.0, 0.0]
    assert results[0]["timeout"] == 1.0
    assert elapsed < 2 * limit + 3.0  # one pool child: the slow call delays the others at most once, plus restart


def _math_verify_reference(gold: str, pred: str) -> bool:
    """math_verify alone, in this (main) thread with its own timeouts: the slow reference for the fast paths."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    g = parse("\\boxed{" + gold + "}", (LatexExtractionConfig(),))
    p = parse("\\boxed{" + pred + "}", (LatexExtractionConfig(), ExprExtractionConfig()))
    return bool(g and p and verify(g, p))


def _random_number_spelling(rng: random.Random, value_num: int, value_den: int) -> str:
    from math import gcd

    g = gcd(value_num, value_den)
    num, den = value_num // g, value_den // g
    forms = [f"\\frac{{{num}}}{{{den}}}", f"\\dfrac{{{num}}}{{{den}}}", f"{num}/{den}"]
    if den == 1:
        forms += [str(num), f"{num}.0", f"{num:,}" if abs(num) >= 1000 else str(num)]
    if 10_000 % den == 0:
        forms.append(f"{num / den:.4f}")
    form = rng.choice(forms)
    return form.replace("\\frac{-", "-\\frac{") if form.startswith("\\frac{-") else form


def test_fast_paths_agree_with_math_verify_on_random_numbers():
    rng = random.Random(3)
    checked = 0
    for _ in range(150):
        den = rng.choice([1, 1, 2, 4, 5, 8, 3, 7])
        num = rng.randint(-2000, 2000)
        gold = _random_number_spelling(rng, num, den)
        if rng.random() < 0.5:
            pred = _random_number_spelling(rng, num, den)
        else:
            pred = _random_number_spelling(rng, num + rng.choice([-1, 1]) * rng.randint(1, 3), den)
        ours = compute_score("t", boxed(pred), gold)["score"] == 1.0
        assert ours == _math_verify_reference(gold, pred), (gold, pred)
        checked += 1
    assert checked == 150


def test_symbolic_table_agrees_with_math_verify_where_documented():
    # Pairs neither fast path decides go to math_verify unchanged, so the two must agree.
    for gold, pred in EQUIVALENT + NOT_EQUIVALENT:
        if (gold, pred) in {("\\frac{1}{3}", "0.333333"), ("50\\%", "50"), ("25", "25\\%")}:
            continue  # the documented differences: exact decimals, percentages compare by their number
        ours = compute_score("t", boxed(pred), gold)["score"] == 1.0
        assert ours == _math_verify_reference(gold, pred), (gold, pred)


MULTI_BOX_RESPONSES = [
    "The answers are $\\boxed{1}, \\boxed{2}$.",
    "$\\boxed{1}$ and $\\boxed{2}$",
    "\\boxed{2}, \\boxed{1}",
    "\\boxed{1}\n\n\\boxed{2}",
    "First $\\boxed{3}$. Then the final answer is $\\boxed{5}$.",
    "So $x = \\boxed{1}$ or $x = \\boxed{-2}$.",
    "\\boxed{1}\n$\\boxed{2}$.",  # math_verify takes only the last here; a string-joining rule would not
    "$\\boxed{4}$ , and also $\\boxed{6}$.",
]
MULTI_BOX_GOLDS = ["(1, 2)", "1, 2", "\\{1, 2\\}", "(2, 1)", "1", "2", "5", "\\{1, -2\\}", "-2", "4, 6", "6"]
_SEPARATORS = [
    ", ",
    " and ",
    " or ",
    "; ",
    "\n",
    " then ",
    ". So the final answer is ",
    " , and also ",
    " ",
    "$ and $",
    "$, $",
    "\n\nPart (b): ",
]


def _whole_response_verdicts(response: str, golds: list[str]) -> list[bool]:
    import logging

    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    logging.disable(logging.WARNING)
    whole = parse(response, (LatexExtractionConfig(), ExprExtractionConfig()))
    return [bool(verify(parse("\\boxed{" + g + "}", (LatexExtractionConfig(),)), whole)) for g in golds]


def _generated_multi_box(n: int, seed: int) -> list[tuple[str, list[str]]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        values = [str(rng.randint(-5, 12)) for _ in range(rng.randint(2, 3))]
        parts = []
        for i, v in enumerate(values):
            parts.append(rng.choice(["\\boxed{%s}", "$\\boxed{%s}$"]) % v)
            if i < len(values) - 1:
                parts.append(rng.choice(_SEPARATORS))
        response = "We compute. " + "".join(parts) + rng.choice(["", ".", " $.", "\n"])
        golds = [values[-1], ", ".join(values), "(" + ", ".join(values) + ")", values[0]]
        out.append((response, golds))
    return out


@pytest.mark.parametrize(
    "response, golds",
    [(r, MULTI_BOX_GOLDS) for r in MULTI_BOX_RESPONSES] + _generated_multi_box(24, 11),
)
def test_multi_box_scores_as_math_verify_scores_the_response(response, golds):
    # Several boxes: the reward's verdict is math_verify's on the same response, for every gold; neither a
    # last-box rule nor a string-joining rule gets all of these right (see answer_extraction's docstring).
    reference = _whole_response_verdicts(response, golds)
    ours = [compute_score("t", response, g)["score"] == 1.0 for g in golds]
    assert ours == reference, list(zip(golds, ours, reference))


def test_multi_box_decision():
    # The documented decision (docs/REWARD.md): boxes written as a list answer a list question, not its last part.
    response = "The answers are $\\boxed{1}, \\boxed{2}$."
    for gold in ("(1, 2)", "1, 2", "\\{1, 2\\}"):
        assert compute_score("t", response, gold)["score"] == 1.0, gold
    assert compute_score("t", response, "2")["score"] == 0.0
    result = compute_score("t", "We get $\\boxed{3}$. So the final answer is $\\boxed{5}$.", "5")
    assert result["score"] == 1.0 and result["pred"] == "5"
    assert compute_score("t", response, "(1, 2)")["pred"] == "1, 2"


def test_multi_box_context_keeps_the_last_box_and_starts_at_a_line():
    from verl_ext.reward.math_reward import MULTI_BOX_CONTEXT_CHARS, multi_box_context

    short = "a\n\\boxed{1}, \\boxed{2}"
    assert multi_box_context(short) == short
    filler = "\n".join(f"line {i} with $x_{i}$" for i in range(2000))
    long = "\\boxed{7} early\n" + filler + "\nSo \\boxed{1}, \\boxed{2} done."
    context = multi_box_context(long)
    assert context.endswith("\\boxed{1}, \\boxed{2} done.")
    assert long[len(long) - len(context) - 1] == "\n" and context.startswith("line ")  # a whole line
    assert MULTI_BOX_CONTEXT_CHARS <= len(context) < MULTI_BOX_CONTEXT_CHARS + 200
    assert "\\boxed{7}" not in context
    # A long tail after the last box stays whole: the context is measured from the last box.
    after = long + " blah" * 3000
    assert multi_box_context(after).endswith(" blah") and "\\boxed{1}" in multi_box_context(after)
