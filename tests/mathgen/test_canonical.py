"""The canonical form of a generated question: the rewordings found in the real splits are one form, different
questions are not, every question the task's modules generate has a form, and on generated questions the form
agrees with a slow reference that enumerates every way the generator (its templates, copied below) could write the
same computation."""

import functools
import itertools
import re
import string
from collections import defaultdict
from fractions import Fraction

import pytest

from verl_ext.mathgen import task
from verl_ext.mathgen.canonical import DPS_WORDS, ROUND_TO_WORDS, canonical_form, meaning_key, number

SAME = [
    # rewordings that were held out while their twin was trained on (arithmetic and steps splits, DATA_VERSION 1)
    ("What is 0 divided by 8?", "0 divided by 8"),
    ("Divide -12 by 3.", "-12 divided by 3"),
    ("What is 1 divided by 5?", "Divide 1 by 5."),
    ("Calculate -1 divided by -4.", "Divide -1 by -4."),
    ("Calculate 0.1*-0.2.", "Work out -0.2 * 0.1."),
    ("-4*-0.1", "Multiply -4 and -0.1."),
    ("3 * 0", "Calculate 3*0."),
    ("Multiply -5 and 3.", "What is -5 times 3?"),
    ("Product of 0.5 and -2.", "0.5*-2"),
    ("Total of -0.5 and 0.1.", "What is 0.1 + -0.5?"),
    ("Calculate -3 - -4.", "What is -3 minus -4?"),
    ("What is the value of -4 + -2 - (-1 - 0)?", "-4 + -2 - (-1 - 0)"),
    ("Solve 3*k + 2 = 8 for k.", "Solve 3*x + 2 = 8 for x."),
    ("Solve m = 3*m - 10 for m.", "Solve r = 3*r - 10 for r."),
    ("Solve -4*g + g - 15 = 0 for g.", "Solve -4*j + j - 15 = 0 for j."),
    ("Solve 0 = 2*t + t for t.", "Solve 2*h + h = 0 for h."),  # the sides swapped
    # subtraction names its numbers in either order
    ("Subtract 3 from 5.", "5 - 3"),
    ("What is 3 less than 5?", "What is 5 take away 3?"),
    ("What is the difference between 3 and 5?", "Calculate 5 - 3."),
    ("What is the distance between 5 and 3?", "Work out 5 - 3."),
    ("What is the distance between -0.5 and -0.321?", "-0.321 - -0.5"),
    # the same computation in two modules
    ("What is 3 + 5?", "Evaluate 5 + 3."),
    ("(-1)/2", "Divide -1 by 2."),
    ("What is 3*(-4)?", "3 times -4"),
    # precisions in words, digits, dp or integer
    ("Round 2800 to the nearest one thousand.", "What is 2800 rounded to the nearest 1000?"),
    ("What is 17 rounded to the nearest integer?", "Round 17 to zero dps."),
    ("Round -0.0025 to 3 decimal places.", "What is -0.0025 rounded to three dps?"),
    ("Round 0.5 to 1 dp.", "Round 0.5 to one decimal place."),
    # a sort's order of listing and its direction's word
    ("Sort -3, 10, 4.", "Put 10, 4, -3 in increasing order."),
    ("Sort 2, 1, -3/7 in decreasing order.", "Put 1, -3/7, 2 in descending order."),
    # how a number is written
    ("Divide 0.50 by 2.", "Divide .5 by 2."),
    ("What is -0 times 3?", "0*3"),
    ("What is  0   divided by 8?", "What is 0 divided by 8?"),
]
DIFFERENT = [
    ("0 divided by 8", "8 divided by 0"),
    ("5 - 3", "3 - 5"),
    ("Subtract 3 from 5.", "Subtract 5 from 3."),
    ("5 + 0", "5 - 0"),  # one answer, two computations
    ("5 - -3", "5 + 3"),
    ("Multiply -3 and 4.", "Multiply 3 and -4."),
    ("Solve 3*k + 2 = 8 for k.", "Solve 3*k + 2 = 9 for k."),
    ("Solve 3*k + 2 = 8 for k.", "Solve 3*k - 2 = 8 for k."),
    ("1 + 2 + 3", "3 + 2 + 1"),  # other partial sums
    ("What is 6/3 - 1?", "What is 6/(3 - 1)?"),
    ("Round 2850 to the nearest 100.", "Round 2850 to the nearest 1000."),
    ("Round 0.25 to 1 dp.", "Round 0.25 to 2 dps."),
    ("Sort 1, 2, 3.", "Sort 1, 2, 3 in decreasing order."),
    ("Sort 1/2, 3, 4.", "Sort 0.5, 3, 4."),  # a fraction and a decimal are different written numbers
    ("What is the tens digit of 25?", "What is the units digit of 25?"),
    ("What is the tens digit of 25?", "What is the tens digit of 52?"),
]


@pytest.mark.parametrize("a,b", SAME)
def test_rewordings_have_one_form(a, b):
    assert canonical_form(a) == canonical_form(b)


@pytest.mark.parametrize("a,b", DIFFERENT)
def test_different_questions_have_different_forms(a, b):
    assert canonical_form(a) != canonical_form(b)


def test_the_form_names_the_computation_and_its_numbers():
    assert canonical_form("What is 0 divided by 8?") == ("div", "0", "8")
    assert canonical_form("Subtract 3 from 5.") == ("sub", "5", "3")
    assert canonical_form("Solve 8 = 3*k + 2 for k.") == ("solve", "3*x+2", "8")
    assert canonical_form("What is 2800 rounded to the nearest one thousand?") == ("round", "2800", 3)
    assert canonical_form("Sort 3, -1/2, 0.25 in descending order.") == ("sort", ("-1/2", "0.25", "3"), False)
    assert canonical_form("Evaluate (-2 - (-4 - 0)) + 0.") == ("expr", "(-2-(-4-0))+0")
    assert [number(x) for x in ("0.50", ".5", "-0", "-0.0", "100", "1.000", "3/4", "-6/08")] == [
        "0.5", "0.5", "0", "0", "100", "1", "3/4", "-6/8"]  # fmt: skip


@pytest.mark.parametrize("text", ["Result: 4", "What is the capital of France?", "Solve 2*x + y = 3 for x.",
                                  "What is 3 4?", "Round 5 to the nearest 30.", "Put 1, 2, 3."])  # fmt: skip
def test_a_text_no_template_matches_has_no_form_and_is_excluded_as_written(text):
    with pytest.raises(ValueError):
        canonical_form(text)
    assert meaning_key(text) == ("text", text)
    assert meaning_key("What is 0 divided by 8?") == canonical_form("0 divided by 8")


def test_the_word_tables_are_the_generators_spellings():
    task.generators(0.0)  # imports the generator through its compat shims
    from mathematics_dataset.util.display import StringNumber

    assert ROUND_TO_WORDS == {
        str(StringNumber(10**k, join_number_words_with_hyphens=False)): 10**k for k in range(1, 7)
    }
    assert DPS_WORDS == {str(StringNumber(d)): d for d in range(8)}


# --- the slow reference: every wording the generator could give a computation -------------------------------------
# mathematics_dataset 1.0.1 modules/arithmetic.py (_add_question_or_entity, _sub_question_or_entity, mul, div,
# _calculate), numbers.py (round_number), comparison.py (sort), algebra.py (_solve_linear_system), verbatim.
ADD = [
    "{p} + {q}",
    "{p}+{q}",
    "Work out {p} + {q}.",
    "Add {p} and {q}.",
    "Put together {p} and {q}.",
    "Sum {p} and {q}.",
    "Total of {p} and {q}.",
    "Add together {p} and {q}.",
    "What is {p} plus {q}?",
    "Calculate {p} + {q}.",
    "What is {p} + {q}?",
]
SUB = [
    "{p} - {q}",
    "Work out {p} - {q}.",
    "What is {p} minus {q}?",
    "What is {p} take away {q}?",
    "What is {q} less than {p}?",
    "Subtract {q} from {p}.",
    "Calculate {p} - {q}.",
    "What is {p} - {q}?",
]
SUB_WHEN_P_GE_Q = [
    f"What is the {a} between {pair}?" for a in ["distance", "difference"] for pair in ["{p} and {q}", "{q} and {p}"]
]
MUL = [
    "{p}*{q}",
    "{p} * {q}",
    "Calculate {p}*{q}.",
    "Work out {p} * {q}.",
    "Multiply {p} and {q}.",
    "Product of {p} and {q}.",
    "What is the product of {p} and {q}?",
    "{p} times {q}",
    "What is {p} times {q}?",
]
DIV = ["Divide {p} by {q}.", "{p} divided by {q}", "What is {p} divided by {q}?", "Calculate {p} divided by {q}."]
EXPRESSION = ["{op}", "What is {op}?", "Evaluate {op}.", "Calculate {op}.", "What is the value of {op}?"]
BINARY = {"add": (ADD, " + "), "sub": (SUB, " - "), "mul": (MUL, "*"), "div": (DIV, "/")}
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _spellings(x: str) -> list[str]:
    """How an expression module writes a number: a negative one may be bracketed (``3*(-4)``)."""
    return [x, f"({x})"] if x.startswith("-") else [x]


@functools.cache
def binary_wordings(op: str, p: str, q: str) -> frozenset[str]:
    templates, symbol = BINARY[op]
    pairs = [(p, q), (q, p)] if op in ("add", "mul") else [(p, q)]
    out = set()
    for a, b in pairs:
        out |= {t.format(p=a, q=b) for t in templates}
        if op == "sub" and Fraction(a) >= Fraction(b):
            out |= {t.format(p=a, q=b) for t in SUB_WHEN_P_GE_Q}
        for x, y in itertools.product(_spellings(a), _spellings(b)):
            out |= {t.format(op=x + symbol + y) for t in EXPRESSION}
    return frozenset(out)


def _descriptions(power: int) -> list[str]:
    from mathematics_dataset.util.display import StringNumber

    if power > 0:
        return [
            f"the nearest {10**power}",
            f"the nearest {StringNumber(10**power, join_number_words_with_hyphens=False)}",
        ]
    plural = "" if power == -1 else "s"
    words = [
        f"{d} {unit}{plural}" for d in (str(-power), str(StringNumber(-power))) for unit in ("decimal place", "dp")
    ]
    return words + (["the nearest integer"] if power == 0 else [])


def round_wordings(value: str, power: int) -> set[str]:
    return {t.format(input=value, description=d) for d in _descriptions(power)
            for t in ("Round {input} to {description}.", "What is {input} rounded to {description}?")}  # fmt: skip


def sort_wordings(values: list[str], ascending: bool) -> set[str]:
    directions = ["ascending", "increasing"] if ascending else ["descending", "decreasing"]
    out = set()
    for order in itertools.permutations(values):
        listed = ", ".join(order)
        out |= {f"{verb} {listed} in {d} order." for verb in ("Sort", "Put") for d in directions}
        if ascending:
            out.add(f"Sort {listed}.")
    return out


def solve_wordings(equation: str, variable: str) -> set[str]:
    left, right = equation.split(" = ")
    return {f"Solve {a.replace(variable, letter)} = {b.replace(variable, letter)} for {letter}."
            for a, b in ((left, right), (right, left)) for letter in string.ascii_lowercase}  # fmt: skip


def wordings(question: str) -> set[str]:
    """Every question the generator could write for the computation ``question`` asks (found by trying every template
    on every pair of its numbers, or by the module's one fixed shape): the reference's meaning."""
    numbers = set(NUMBER.findall(question))
    found = [
        binary_wordings(op, p, q)
        for op in BINARY
        for p, q in itertools.product(numbers, repeat=2)
        if question in binary_wordings(op, p, q)
    ]
    if found:
        return set().union(*found)
    if question.startswith("Solve "):
        equation, variable = question.removeprefix("Solve ").removesuffix(".").rsplit(" for ", 1)
        return solve_wordings(equation, variable)
    for value, power in itertools.product(numbers, range(-7, 7)):
        if question in round_wordings(value, power):
            return round_wordings(value, power)
    if question.startswith(("Sort ", "Put ")):
        listed = question.split(" ", 1)[1].removesuffix(".").split(" in ")[0]
        ascending = not question.endswith(("descending order.", "decreasing order."))
        return sort_wordings(listed.split(", "), ascending)
    if question.startswith("What is the ") and " digit of " in question:
        return {question}
    ops = {t.split("{op}")[0]: t for t in EXPRESSION}
    for prefix, t in sorted(ops.items(), key=lambda kv: -len(kv[0])):
        suffix = t.split("{op}")[1]
        if question.startswith(prefix) and question.endswith(suffix):
            op = question[len(prefix) : len(question) - len(suffix)]
            if not re.search(r"[A-Za-z]", op):
                return {w.format(op=op) for w in EXPRESSION}
    raise AssertionError(f"the reference knows no wording of {question!r}")


@pytest.fixture(scope="module")
def generated():
    """Questions of every module the task uses, at the default difficulty and at train-easy (larger numbers), with
    repeats of a meaning left in (as a training split draws them)."""
    items = []
    for difficulty, per_module in ((task.DEFAULT_DIFFICULTY, 200), (0.0, 30)):
        items += task.sample_items(
            per_module * len(task.MODULES), seed=3, difficulty=difficulty, distinct_meanings=False
        )
    return items


def test_every_generated_question_has_a_form_and_one_form_has_one_answer(generated):
    answers = defaultdict(set)
    for it in generated:
        answers[canonical_form(it.question)].add(it.answer)
    assert {form: a for form, a in answers.items() if len(a) > 1} == {}
    assert len(answers) < len(generated)  # some questions were rewordings: the check above compared something


def test_the_form_agrees_with_the_reference_on_generated_questions(generated):
    """Each wording of a question's computation has its form (so different forms are never one computation), and
    two generated questions with one form are wordings of each other (so one form is never two computations)."""
    groups = defaultdict(set)
    for it in generated:
        groups[canonical_form(it.question)].add(it.question)
    checked_pairs = 0
    for form, questions in groups.items():
        first, *others = sorted(questions)
        same = wordings(first)
        assert first in same
        assert {canonical_form(w) for w in same} == {form}, first
        for other in others:
            assert other in same, (first, other)
            checked_pairs += 1
    assert checked_pairs > 30  # 37 pairs of rewordings in this sample
