"""Property test: the reward is never more lenient than math_verify.

A seeded generator writes a few thousand (gold, prediction) pairs of the forms models and datasets use (integers with
and without separators, decimal commas, decimals, leading zeros, percents, units, fractions and LaTeX forms, negative
numbers, sets and tuples, intervals, spacing, trailing periods, assignments, text wrappers, near-misses). The
project's verdict (``compute_score`` on a response ending in ``\\boxed{pred}``) may be 1 only where math_verify,
called directly on the same gold and ``\\boxed{pred}`` (the ``math_verify_accepts`` fixture), says 1 -- or where the
pair is covered by the ``EXCEPTIONS`` below, each a narrow rewriting with its reason (the same list is in
docs/REWARD.md and normalize.py). A pair is covered only when math_verify accepts it after the rewritings are applied
to both sides, so an exception can never excuse a wrong value.

Where the time goes, and how the test stays within seconds: math_verify parses a string in 5-40 ms here (ANTLR in
pure Python), so it cannot check every pair.
- The reward can only differ from math_verify where it decides without it: ``normalize.fast_verdict`` is not None.
  Those pairs are scored through ``compute_score`` (microseconds each, no child process) and grouped into classes by
  shape: every digit run is abstracted to its length (capped at 4) and whether it has a leading zero, the rest of the
  string is kept verbatim, plus the verdict. The fast path's rules are regular expressions over exactly these features
  (digit-run lengths, leading zeros, separators, signs, macros), so a rule that is wrong for one pair is wrong for its
  class; math_verify checks ``EXEMPLARS`` pairs of every class the reward accepts (where leniency could hide), and
  ``REJECT_SAMPLE`` of the classes it rejects (only to measure where it is stricter).
- Pairs the reward hands to math_verify are scored by math_verify itself (the pool's child makes the same call as the
  fixture). ``POOL_SAMPLE`` classes of them are scored end to end through ``compute_score`` and compared.
- math_verify's verdicts are kept in ``.pytest_cache`` keyed by the installed versions (``conftest.py``): a fresh
  checkout computes all of them (~600 pairs), a repeated run on the same machine reuses them.
The counts (pairs, classes, checks, exceptions used, where the reward is stricter) are printed and are part of every
failure message.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from fractions import Fraction

import pytest

from verl_ext.reward.math_reward import compute_score
from verl_ext.reward.normalize import as_rational, fast_verdict, normalize_answer, split_assignment

SEED = 20261123
N_PAIRS = 3000
EXEMPLARS = 1  # math_verify checks of every class the fast path decides (2 doubles the time, found nothing more)
POOL_SAMPLE = 24  # classes of math_verify-bound pairs scored end to end through the verify pool
REJECT_SAMPLE = 60  # classes the fast path rejects, checked to measure strictness


def project_score(gold: str, pred: str) -> dict:
    return compute_score("leniency", f"We work it out. The answer is $\\boxed{{{pred}}}$.", gold)


# ---------------------------------------------------------------------------------------------------------------------
# Documented exceptions (docs/REWARD.md, "Where the reward is more lenient than math_verify"). Each is a rewriting of an
# answer string; the rewritings are applied in this order, and a pair is excused when math_verify accepts the result.

_SI_GROUPS = re.compile(r"^(-?[1-9]\d{0,2})((?:(?:\\,|\\ |~| )\d{3})+)(\.\d+)?$")


def _drop_final_period(s: str) -> str:
    return re.sub(r"(?<=[^.])\.$", "", s.strip())


def _drop_percent(s: str) -> str:
    return re.sub(r"(?<=\d)\s*\\?%$", "", s.strip())


def _degree_sign(s: str) -> str:
    return s.replace("°", "^\\circ").replace("\\degree", "^\\circ")


def _join_si_groups(s: str) -> str:
    m = _SI_GROUPS.match(s.strip())
    return m.group(1) + re.sub(r"\\,|\\ |~| ", "", m.group(2)) + (m.group(3) or "") if m else s


EXCEPTIONS = {
    "final_period": (
        _drop_final_period,
        "One sentence-ending period inside the box (\\boxed{5.}) does not change the value; math_verify finds no "
        "expression in it and scores 0.",
    ),
    "percent": (
        _drop_percent,
        "A trailing percent sign after a number is a unit: 50\\% equals 50 and 12.5\\% equals 12.5. With the ANTLR "
        "runtime pinned here (4.9.3) latex2sympy2_extended cannot parse \\% at all, so math_verify accepts no answer "
        "to or with a percent except the identical string (with ANTLR 4.13 it accepts 50\\% as 50 and as 0.5, but "
        "not 12.5\\% as 12.5).",
    ),
    "degree_sign": (
        _degree_sign,
        "90° and 90\\degree are 90^\\circ, which math_verify accepts as 90; it does not know these two spellings.",
    ),
    "si_thousands": (
        _join_si_groups,
        "Thin-space digit grouping (SI style, 3\\,000 or 3 000: the whole answer, a first group of 1-3 digits not "
        "starting with 0, then groups of exactly three) is the number 3000; math_verify reads it as the product 3*000.",
    ),
}


def excused_by(gold: str, pred: str, math_verify_accepts) -> tuple[str, ...] | None:
    """Names of the exceptions whose rewriting makes math_verify accept the pair; None when none does."""
    used = []
    for name, (rewrite, _reason) in EXCEPTIONS.items():
        g, p = rewrite(gold), rewrite(pred)
        if (g, p) != (gold, pred):
            used.append(name)
            gold, pred = g, p
    return tuple(used) if used and math_verify_accepts(gold, pred) else None


# ---------------------------------------------------------------------------------------------------------------------
# Generator. Each kind returns (gold, prediction, respelling): respelling=True when the prediction was written as the
# same value (a reader would mark it right), False for a near-miss or a different value.


def _sep(n: int, sep: str) -> str:
    return f"{n:,}".replace(",", sep)


def _big(rng: random.Random) -> int:
    return rng.choice([rng.randint(1000, 9999), rng.randint(10_000, 999_999), rng.randint(1_000_000, 99_999_999)])


def gen_int_plain(rng):
    n = rng.randint(0, 999) if rng.random() < 0.5 else _big(rng)
    if rng.random() < 0.55:
        return str(n), rng.choice([str(n), f"{n}.0", f"+{n}", f"\\text{{{n}}}", f"${n}$", f" {n} ", f"{n}.00"]), True
    return str(n), str(n + rng.choice([-10, -1, 1, 2, 100])), False


def gen_int_separators(rng):
    n = _big(rng) * rng.choice([1, 1, 1, -1])
    if rng.random() < 0.5:
        pred = rng.choice([_sep(n, ","), _sep(n, "{,}"), _sep(n, ",\\!"), _sep(n, "{,}\\!"), _sep(n, ",") + ".5"])
        return str(n), pred, not pred.endswith(".5")
    sign, digits = ("-" if n < 0 else ""), str(abs(n))
    if rng.random() < 0.5:
        # Right groups in a context that makes them a list to math_verify, or a leading 0 group (a decimal comma).
        grouped = _sep(n, ",")
        contexts = [
            grouped.replace(",", ", "),
            grouped.replace(",", " ,"),
            f"- {grouped}",
            f"x = {grouped}",
            f"+{grouped}",
            f"0{grouped.lstrip('-')}",
            "0," + digits[-3:],
        ]
        return str(n), rng.choice(contexts), False
    # Misplaced separators: "12,34", "1,2345", "123,45" are not thousands groupings.
    cut = rng.choice([c for c in range(1, len(digits)) if (len(digits) - c) % 3 != 0] or [1])
    return str(n), sign + digits[:cut] + rng.choice([",", "{,}"]) + digits[cut:], False


def gen_decimal_comma(rng):
    frac = "".join(rng.choice("0123456789") for _ in range(rng.choice([1, 2, 3, 3, 3, 4])))
    frac = frac[:-1] + rng.choice("123456789")
    whole = rng.choice(["0", "0", "1", "2", "12", "-0"])
    comma, dot = f"{whole},{frac}", f"{whole}.{frac}"
    r = rng.random()
    if r < 0.35:  # the case: a leading 0 group must not become an integer
        return str(int(frac)), comma, False
    if r < 0.55:
        return str(int(whole + frac)), comma, False
    if r < 0.8:
        return dot, comma, True  # math_verify reads some decimal commas (0,123); the reward defers to it
    return f"{whole}, {frac}", comma, True  # a pair


def gen_decimal(rng):
    value = Fraction(rng.randint(-999, 999), rng.choice([2, 4, 5, 8, 10, 20, 25, 100, 1000]))
    exact = f"{float(value):.6f}".rstrip("0").rstrip(".")
    r = rng.random()
    if r < 0.6:
        pred = rng.choice(
            [
                exact,
                exact + "0",
                exact.replace("0.", ".", 1) if exact.startswith(("0.", "-0.")) else exact,
                "0" + exact if not exact.startswith("-") else exact,
                f"\\frac{{{value.numerator}}}{{{value.denominator}}}",
                f"{value.numerator}/{value.denominator}",
            ]
        )
        return exact, pred, True
    if r < 0.8:
        return exact, f"{float(value) + rng.choice([0.1, -0.01, 1, 0.001]):.4f}".rstrip("0").rstrip("."), False
    third = rng.choice([(Fraction(1, 3), "0.333"), (Fraction(2, 3), "0.667"), (Fraction(1, 7), "0.142857")])
    return f"\\frac{{{third[0].numerator}}}{{{third[0].denominator}}}", third[1], False  # rounded: not equal


def gen_leading_zero(rng):
    n = rng.randint(1, 9999)
    zeros = "0" * rng.randint(1, 3)
    if rng.random() < 0.6:
        return str(n), rng.choice([zeros + str(n), zeros + str(n) + ".0"]), True
    return str(n), zeros + str(n + rng.choice([1, -1, 10])), False


def gen_percent(rng):
    p = rng.choice([rng.randint(1, 100), rng.randint(1, 999) / 10])
    p_str = f"{p:g}"
    gold = rng.choice([f"{p_str}\\%", p_str])
    r = rng.random()
    if r < 0.6:
        return gold, rng.choice([f"{p_str}\\%", p_str, f"{p_str}%", f"{p_str} \\%", f"{p_str}\\text{{ percent}}"]), True
    if r < 0.8:
        return gold, f"{float(p) / 100:g}", False  # a fraction of one is not the percentage
    return gold, rng.choice([f"{float(p) + 1:g}\\%", f"{float(p) * 10:g}"]), False


def gen_units(rng):
    n = rng.randint(1, 5000)
    unit = rng.choice(
        [
            "\\text{ cm}",
            "\\text{cm}",
            "\\mbox{ meters}",
            " \\text{ inches}",
            "\\text{ dollars}",
            "^\\circ",
            "^{\\circ}",
            "°",
            "\\degree",
            "\\text{ degrees}",
        ]
    )
    gold = rng.choice([str(n), f"{n}{unit}"])
    if rng.random() < 0.65:
        return gold, rng.choice([f"{n}{unit}", str(n), f"\\${n}"]), True
    return gold, f"{n + rng.choice([1, -1, 10])}{unit}", False


def gen_fraction_latex(rng):
    a, b = rng.randint(1, 40), rng.randint(2, 40)
    while Fraction(a, b).denominator == 1:
        b += 1
    k = rng.randint(2, 4)
    gold = rng.choice([f"\\frac{{{a}}}{{{b}}}", f"\\dfrac{{{a}}}{{{b}}}", f"{a}/{b}"])
    r = rng.random()
    if r < 0.55:
        forms = [
            f"\\frac{{{a}}}{{{b}}}",
            f"\\dfrac{{{a}}}{{{b}}}",
            f"\\tfrac{{{a}}}{{{b}}}",
            f"{a}/{b}",
            f"\\frac{{{k * a}}}{{{k * b}}}",
            f"\\left(\\frac{{{a}}}{{{b}}}\\right)",
            f"\\frac {{{a}}} {{{b}}}",
        ]
        if a < 10 and b < 10:
            forms.append(f"\\frac{a}{b}")
        return gold, rng.choice(forms), True
    if r < 0.7:
        s = rng.choice([2, 3, 5, 6, 7])
        roots = [f"\\sqrt{{{k * k * s}}}", f"{k} \\sqrt {s}", f"{k}\\sqrt{{{s + 1}}}"]
        return f"{k}\\sqrt{{{s}}}", rng.choice(roots), None
    forms = [
        f"\\frac{{{b}}}{{{a}}}",
        f"\\frac{{{a + 1}}}{{{b}}}",
        f"-\\frac{{{a}}}{{{b}}}",
        f"\\frac{{{a}}}{{{b}}}{{{k}}}",
    ]
    if a < 10 and b < 10:
        forms.append(f"{a}{b}")  # \frac{a}{b} with the macro lost
    return gold, rng.choice(forms), False


def gen_negative(rng):
    n = rng.randint(1, 3000)
    gold = rng.choice([f"-{n}", f"-\\frac{{{n}}}{{7}}"])
    if gold.startswith("-\\frac"):
        same = [f"\\frac{{-{n}}}{{7}}", f"- \\frac{{{n}}}{{7}}", f"-{n}/7", f"\\frac{{{n}}}{{-7}}"]
        other = [f"\\frac{{{n}}}{{7}}", f"--\\frac{{{n}}}{{7}}", f"-\\frac{{{n}}}{{-7}}"]
    else:
        same = [f"-{n}", f"- {n}", f"-({n})", f"−{n}", f"-{n}.0"]
        other = [str(n), f"--{n}", f"+{n}", f"-{n + 1}"]
    return (gold, rng.choice(same), True) if rng.random() < 0.55 else (gold, rng.choice(other), False)


def gen_set_tuple(rng):
    items = [str(v) for v in rng.sample(range(-20, 61), rng.randint(2, 4))]
    shape = rng.choice(["tuple", "set", "bare"])
    wrap = {"tuple": ("(", ")"), "set": ("\\{", "\\}"), "bare": ("", "")}[shape]
    gold = wrap[0] + ", ".join(items) + wrap[1]
    r = rng.random()
    if r < 0.5:
        order = items if shape == "tuple" else rng.sample(items, len(items))
        left, right = ("\\left(", "\\right)") if shape == "tuple" and rng.random() < 0.5 else wrap
        return gold, left + rng.choice([",", ", ", " , "]).join(order) + right, True
    changed = list(items)
    i = rng.randrange(len(changed))
    changed[i] = str(int(changed[i]) + rng.choice([1, -1]))
    forms = [wrap[0] + ",".join(changed) + wrap[1], wrap[0] + ",".join(items[:-1]) + wrap[1]]
    if shape == "tuple":
        forms.append("(" + ",".join(reversed(items)) + ")")
    return gold, rng.choice(forms), False


def gen_interval(rng):
    a, b = sorted(rng.sample(range(-30, 30), 2))
    lo, hi = rng.choice(["(", "["]), rng.choice([")", "]"])
    lo_s = rng.choice([str(a), "-\\infty"]) if lo == "(" else str(a)
    gold = f"{lo}{lo_s}, {b}{hi}"
    if rng.random() < 0.5:
        same = [f"{lo}{lo_s},{b}{hi}", f"\\left{lo}{lo_s}, {b}\\right{hi}", f"{lo} {lo_s} , {b} {hi}"]
        return gold, rng.choice(same), True
    flip = {"(": "[", "[": "(", ")": "]", "]": ")"}
    wrong = [f"{flip[lo]}{lo_s},{b}{hi}", f"{lo}{lo_s},{b}{flip[hi]}", f"{lo}{lo_s},{b + 1}{hi}"]
    return gold, rng.choice(wrong), False


def gen_spacing(rng):
    n = _big(rng) if rng.random() < 0.6 else rng.randint(10, 99)
    digits = str(n)
    if n >= 1000 and rng.random() < 0.6:
        return str(n), _sep(n, rng.choice(["\\,", " ", "~", "\\ "])), True  # SI grouping: an exception
    cut = rng.randint(1, len(digits) - 1)
    pred = digits[:cut] + rng.choice([" ", "\\,", "\\;", "~", "\\:"]) + digits[cut:]
    grouped = (len(digits) - cut) % 3 == 0 and cut <= 3
    return str(n), pred, True if grouped else False


def gen_trailing_period(rng):
    n = rng.randint(0, 5000)
    gold = rng.choice([str(n), f"\\frac{{{n}}}{{3}}", f"({n}, 2)"])
    if rng.random() < 0.6:
        return gold, gold + ".", True
    return gold, rng.choice([f"{n}..", f"{n + 1}.", f"{n}.5", f"0.{n}"]), False


def gen_assignment(rng):
    n = rng.randint(-50, 500)
    var = rng.choice(["x", "y", "n", "a_1", "k"])
    gold = rng.choice([str(n), f"{var} = {n}"])
    r = rng.random()
    if r < 0.5:
        return gold, rng.choice([f"{var}={n}", f"{var} = {n}", str(n)]), True
    if r < 0.7:
        other = rng.choice([v for v in ["x", "y", "z", "t"] if v != var])
        return f"{var} = {n}", f"{other} = {n}", None  # another variable: math_verify's call
    return gold, rng.choice([f"{var} = {n + 1}", f"{var} = -{n}" if n else f"{var} = 1"]), False


def gen_latex_wrappers(rng):
    letter = rng.choice("ABCDE")
    other = rng.choice([c for c in "ABCDE" if c != letter])
    cases = [
        (f"\\text{{({letter})}}", rng.choice([letter, f"({letter})", f"\\textbf{{({letter})}}"]), True),
        (f"\\text{{({letter})}}", rng.choice([other, f"({other})"]), False),
        (f"x \\rightarrow {letter}", f"x \\leftarrow {letter}", False),
        (f"{letter} \\leftrightarrow {other}", f"{letter} \\rightarrow {other}", False),
        (f"\\left| {rng.randint(1, 9)} \\right|", None, None),
        (f"\\mathbf{{{rng.randint(1, 99)}}}", None, True),
        # Wrapped numbers and letters: math_verify reads \text{0.5} and \text{1,234} as names, \mathrm{I} as i.
        (str(n := rng.randint(1, 9999)), rng.choice([f"\\text{{{n}}}", f"\\mathbf{{{n}}}", f"\\text{{{n:,}}}"]), None),
        (f"{n / 8:g}", rng.choice([f"\\text{{{n / 8:g}}}", f"\\mathrm{{{n / 8:g}}}"]), None),
        (letter, rng.choice([f"\\mathrm{{{letter}}}", f"\\text{{{letter}}}", f"\\text{{{letter.lower()}}}"]), None),
        ("I", "\\mathrm{I}", None),
        (f"\\{rng.choice(['cdot', 'sin x', 'pi'])}", f"\\{rng.choice(['cd ot', 'si n x', 'p i'])}", False),
    ]
    gold, pred, same = rng.choice(cases)
    if pred is None:
        pred = gold.replace("\\left", "").replace("\\right", "").replace("\\mathbf", "")
    return gold, pred, same


_OTHER_DIGITS = str.maketrans("0123456789", "\uff10\uff11\uff12\uff13\uff14\uff15\uff16\uff17\uff18\uff19")


def gen_near_miss(rng):
    n = rng.randint(1, 9999)
    return rng.choice(
        [
            (str(n), f"{n}\\text{{ million}}", None),  # math_verify drops any trailing \text{}: its own choice
            (str(n), f"{n}\\text{{ {rng.choice(['and', 'or'])} }}", False),  # a list comma to math_verify
            (str(n), f"{n}\\sqrt{{2}}", False),
            (str(n), f"{n}i", False),
            (str(n), f"{n}\\mathrm{{i}}", None),
            (str(n), f"{n}e", False),
            (str(n), f"{n}^2", False),
            (str(n), f"{n}!", False),
            (str(n), f"\\{{{n}\\}}", None),
            (str(n), f"({n})", None),
            (str(n), f"{n}x", False),
            (str(n), f"{n},{n}", False),
            (str(n), f"{n} or {n + 1}", False),
            (str(n), f"\\pm {n}", False),
            (f"\\sqrt{{{n}}}", str(n), False),
            (str(n), f"\\frac{{{n}}}{{1}}", True),
            (str(n), str(n).translate(_OTHER_DIGITS), None),  # other scripts' digits: not numbers to math_verify
        ]
    )


GENERATORS = {
    "int_plain": gen_int_plain,
    "int_separators": gen_int_separators,
    "decimal_comma": gen_decimal_comma,
    "decimal": gen_decimal,
    "leading_zero": gen_leading_zero,
    "percent": gen_percent,
    "units": gen_units,
    "fraction_latex": gen_fraction_latex,
    "negative": gen_negative,
    "set_tuple": gen_set_tuple,
    "interval": gen_interval,
    "spacing": gen_spacing,
    "trailing_period": gen_trailing_period,
    "assignment": gen_assignment,
    "latex_wrappers": gen_latex_wrappers,
    "near_miss": gen_near_miss,
}


def generate(n: int, seed: int) -> list[tuple[str, str, str, bool | None]]:
    rng = random.Random(seed)
    kinds = list(GENERATORS)
    out = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        gold, pred, respelling = GENERATORS[kind](rng)
        out.append((kind, gold, pred, respelling))
    return out


def shape(s: str) -> str:
    """A string with every digit run replaced by its length (capped at 4) and a mark for a leading zero."""

    def run(m: re.Match) -> str:
        digits = m.group()
        return ("0" if len(digits) > 1 and digits[0] == "0" else "") + f"#{min(len(digits), 4)}"

    return re.sub(r"\d+", run, s)


@pytest.fixture(scope="module")
def survey(math_verify_accepts):
    """Everything the tests below assert on, computed once: see the module docstring."""
    pairs = generate(N_PAIRS, SEED)
    counts = Counter()
    per_kind = Counter()
    classes: dict[tuple, list] = {}
    for kind, gold, pred, respelling in pairs:
        fast = fast_verdict(gold, pred)
        per_kind[kind, fast] += 1
        counts[f"fast={fast}"] += 1
        if fast is not None:
            # The reward's own entry point decides these without the pool: it must agree with fast_verdict.
            score = project_score(gold, pred)
            assert score["score"] == float(fast) and score["timeout"] == 0.0, (gold, pred, fast, score)
        classes.setdefault((shape(gold), shape(pred), fast), []).append((kind, gold, pred, respelling))
    counts["pairs"] = len(pairs)
    counts["distinct pairs"] = len({(g, p) for _k, g, p, _r in pairs})
    counts["classes"] = len(classes)

    lenient, excused, stricter, pool_disagree = [], Counter(), [], []
    checked = []  # (kind, gold, pred, respelling, ours, reference)
    pool_classes = [key for key in classes if key[2] is None]
    reject_classes = [key for key in classes if key[2] is False]
    sample_rng = random.Random(SEED)
    sampled = set(sample_rng.sample(pool_classes, min(POOL_SAMPLE, len(pool_classes))))
    sampled |= set(sample_rng.sample(reject_classes, min(REJECT_SAMPLE, len(reject_classes))))
    for key, members in classes.items():
        fast = key[2]
        if fast is not True and key not in sampled:
            continue
        for kind, gold, pred, respelling in members[: EXEMPLARS if fast else 1]:
            ref = math_verify_accepts(gold, pred)
            if fast is None:
                score = project_score(gold, pred)
                ours = score["score"] == 1.0
                counts["pool pairs scored end to end"] += 1
                if ours != ref and not score["timeout"]:
                    pool_disagree.append((kind, gold, pred, ours, ref))
            else:
                ours = fast
            checked.append((kind, gold, pred, respelling, ours, ref))
            counts[f"checked ours={int(ours)} math_verify={int(ref)}"] += 1
            if ours and not ref:
                names = excused_by(gold, pred, math_verify_accepts)
                if names is None:
                    lenient.append((kind, gold, pred))
                else:
                    excused.update(names)
            if ref and not ours:
                stricter.append((kind, gold, pred))
    report = (
        f"\ncounts: {dict(sorted(counts.items()))}\nexceptions used: {dict(excused)}\n"
        f"stricter than math_verify ({len(stricter)}): {stricter[:8]}\n"
        f"fast verdict per kind: { {k: {v: per_kind[k, v] for v in (True, False, None)} for k in GENERATORS} }"
    )
    print(report)
    return {
        "counts": counts,
        "per_kind": per_kind,
        "checked": checked,
        "lenient": lenient,
        "excused": excused,
        "stricter": stricter,
        "pool_disagree": pool_disagree,
        "report": report,
    }


def test_never_more_lenient_than_math_verify(survey):
    lenient = survey["lenient"]
    assert not lenient, f"{len(lenient)} pairs scored 1 that math_verify rejects, e.g. {lenient[:10]}{survey['report']}"
    # Every documented exception is exercised, so none of them is dead text.
    assert set(survey["excused"]) == set(EXCEPTIONS), survey["report"]


def test_pool_path_is_math_verify(survey):
    # Pairs the fast path leaves alone get math_verify's own verdict, end to end through compute_score and the pool.
    assert survey["counts"]["pool pairs scored end to end"] >= POOL_SAMPLE, survey["report"]
    assert not survey["pool_disagree"], f"{survey['pool_disagree'][:10]}{survey['report']}"


def test_stricter_only_where_documented(survey):
    # The fast path may reject what math_verify accepts only for two different exact numbers (decimals are exact;
    # math_verify rounds to 6 places). Everything else the reward rejects, math_verify rejects too.
    for kind, gold, pred in survey["stricter"]:
        g, p = (as_rational(split_assignment(normalize_answer(x))[1]) for x in (gold, pred))
        assert g is not None and p is not None and g != p, (kind, gold, pred, survey["report"])


def test_survey_is_not_vacuous(survey):
    counts, per_kind, checked = survey["counts"], survey["per_kind"], survey["checked"]
    assert counts["pairs"] == N_PAIRS and counts["distinct pairs"] > N_PAIRS * 0.8, survey["report"]
    for kind in GENERATORS:
        assert per_kind[kind, True] > 0, (kind, survey["report"])  # every kind reaches the fast path's "equal"
        assert per_kind[kind, False] + per_kind[kind, None] > 0, (kind, survey["report"])
    accepted = sum(1 for *_rest, ours, ref in checked if ref)
    rejected = sum(1 for *_rest, ours, ref in checked if not ref)
    assert accepted > 300 and rejected > 100, survey["report"]  # both verdicts of the reference are exercised
    assert counts["fast=True"] > N_PAIRS // 4 and counts["fast=None"] > N_PAIRS // 5, survey["report"]
