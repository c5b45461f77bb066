"""Synthetic stand-ins for the real data files (no hub access here), with the real schemas and quirks.

``make_dapo17k`` mimics BytedTsinghua-SIA/DAPO-Math-17k: columns data_source='math_dapo', prompt = one user
message {content, role} wrapping the problem in DAPO's instruction, ability='MATH',
reward_model={ground_truth, style='rule-lighteval/MATH_v2'}, extra_info={index: uuid string}; every id repeated
``copies`` times (100 in the real file) and the rows shuffled. Quirks, each counted in the returned
``DapoFixtureFacts``: ids whose problem text repeats another id's (with different whitespace: the real file has
about 17.9k ids but 17,398 distinct problems), ids with an empty or null ground truth, ids with an empty prompt
list, a problem given two different answers under two ids, prompts without DAPO's wrapper, odd LaTeX and unicode.
With the defaults of ``full_size=True`` the file has 1,791,700 rows and 17,398 distinct usable problems, like
the real one.

``make_math_set`` writes a small file in one of the real column layouts of each evaluation/training set
(see ``math_sets``), with their quirks: float answers (AMC), int answers (AIME at MathArena), LaTeX answers
(MATH-500), 'proof'/'notfound' answers and answers only inside the solution (NuminaMath), several solutions per
problem (OpenMathReasoning).
"""

from __future__ import annotations

import json
import os
import random
import uuid
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

DAPO_HEAD = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_TAIL = '\n\nRemember to put your answer on its own line after "Answer:".'

_TEMPLATES = [
    "Let $f(x) = {a}x^2 + {b}x + {c}$. Find the value of $f({d})$ modulo ${m}$.",
    "A sequence satisfies $a_1 = {a}$ and $a_{{n+1}} = a_n + {b}n$. Compute $a_{{{d}}} - {c}$.",
    "How many positive integers $n \\le {m}{a}$ satisfy $\\gcd(n, {b}) = 1$ and $n \\equiv {c} \\pmod{{{d}}}$?",
    "In triangle $ABC$, $AB = {a}$, $BC = {b}$, and $\\angle ABC = 90^\\circ$. If the area is $\\dfrac{{{c}}}{{{d}}}$ "
    "times the perimeter, find ${m}$ times the answer rounded down.",
    "Evaluate $\\sum_{{k=1}}^{{{a}}} \\left\\lfloor \\frac{{k^2}}{{{b}}} \\right\\rfloor + {c}{d}$.",
    "The polynomial $x^3 - {a}x^2 + {b}x - {c}$ has roots $r, s, t$. Find $r^2 + s^2 + t^2 + {d}$. "
    "(Express the answer as an integer; the result is known to be in the form $\\frac{{m}}{{n}}$ with $n = 1$.)",
    "Ein Würfel hat Kantenlänge ${a}$ cm — wie viele Einheitswürfel berühren die Oberfläche, plus ${b}$?",
    "Let $S = \\{{ {a}, {b}, {c} \\}}$ and $T = \\{{x^{{{d}}} : x \\in S\\}}$. Find $\\max T \\bmod {m}$.",
]


@dataclass(frozen=True)
class DapoFixtureFacts:
    """What the generator put in the file, for tests to compare with the preprocessing report."""

    rows: int
    ids: int
    usable_problems: int  # distinct problems with one answer and a parseable prompt
    text_duplicate_ids: int  # ids whose problem repeats an earlier id's (whitespace may differ)
    missing_answer_rows: int
    empty_prompt_rows: int
    conflicting_answer_rows: int  # rows of the two ids that give one problem two answers
    unwrapped_ids: int  # ids whose prompt lacks DAPO's instruction wrapper


def _problem(rng: random.Random, i: int) -> str:
    template = rng.choice(_TEMPLATES)
    values = {k: rng.randint(2, 97) for k in "abcdm"}
    # The id number makes every generated problem distinct even when the template and numbers repeat.
    return template.format(**values) + f" (Problem {i}.)"


def _respace(text: str) -> str:
    """The same problem with different whitespace, as in copies of one problem under two ids."""
    return "  " + text.replace(" ", "  ", 3) + "\n"


def make_dapo17k(
    path: str,
    *,
    n_unique: int = 60,
    copies: int = 100,
    text_duplicate_ids: int = 5,
    missing_answer_ids: int = 3,
    empty_prompt_ids: int = 2,
    unwrapped_ids: int = 2,
    seed: int = 0,
    full_size: bool = False,
) -> DapoFixtureFacts:
    """Write the fixture to ``path`` (.parquet or .jsonl). ``full_size``: 17,398 problems, 17,917 ids, 100 copies."""
    if full_size:
        n_unique, copies, text_duplicate_ids = 17398, 100, 17917 - 17398 - missing_answer_ids - empty_prompt_ids - 2
    rng = random.Random(seed)
    problems = [_problem(rng, i) for i in range(n_unique)]
    answers = [str(rng.randint(-50, 100000)) for _ in range(n_unique)]
    unwrapped = set(rng.sample(range(n_unique), unwrapped_ids))

    # (problem, answer, prompt_is_empty, wrapped) per id.
    ids: list[tuple[str | None, str | None, bool, bool]] = []
    for i in range(n_unique):
        ids.append((problems[i], answers[i], False, i not in unwrapped))
    for j in rng.sample(range(n_unique), text_duplicate_ids):  # distinct originals: each copy is one near-duplicate
        ids.append((_respace(problems[j]), answers[j], False, j not in unwrapped))
    for k in range(missing_answer_ids):
        ids.append((f"A problem whose answer was lost, number {k}.", "" if k % 2 == 0 else None, False, True))
    for _ in range(empty_prompt_ids):
        ids.append((None, "7", True, True))
    conflict = "Find the number of lattice points on the circle $x^2 + y^2 = 2025$."
    ids.append((conflict, "12", False, True))
    ids.append((_respace(conflict), "20", False, True))

    prompts, truths = [], []
    for problem, answer, empty, wrapped in ids:
        if empty:
            prompts.append([])
        else:
            content = DAPO_HEAD + problem + DAPO_TAIL if wrapped else problem
            prompts.append([{"content": content, "role": "user"}])
        truths.append({"ground_truth": answer, "style": "rule-lighteval/MATH_v2"})
    uuids = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in ids]
    unique_table = pa.table(
        {
            "data_source": pa.array(["math_dapo"] * len(ids)),
            "prompt": pa.array(prompts, pa.list_(pa.struct([("content", pa.string()), ("role", pa.string())]))),
            "ability": pa.array(["MATH"] * len(ids)),
            "reward_model": pa.array(truths, pa.struct([("ground_truth", pa.string()), ("style", pa.string())])),
            "extra_info": pa.array([{"index": u} for u in uuids], pa.struct([("index", pa.string())])),
        }
    )
    order = np.random.default_rng(seed).permutation(np.repeat(np.arange(len(ids)), copies))
    table = unique_table.take(pa.array(order))
    _write(table, path)
    return DapoFixtureFacts(
        rows=table.num_rows,
        ids=len(ids),
        usable_problems=n_unique,
        text_duplicate_ids=text_duplicate_ids,
        missing_answer_rows=missing_answer_ids * copies,
        empty_prompt_rows=empty_prompt_ids * copies,
        conflicting_answer_rows=2 * copies,
        unwrapped_ids=len(unwrapped),
    )


def _write(table: pa.Table, path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if path.endswith(".parquet"):
        pq.write_table(table, path)
    elif path.endswith(".jsonl"):
        with open(path, "w") as f:
            for row in table.to_pylist():
                f.write(json.dumps(row) + "\n")
    else:
        raise ValueError(f"fixture path must end in .parquet or .jsonl: {path}")


# Answers in the style of each set. MATH-500 mixes numbers and LaTeX.
_MATH500_ANSWERS = [
    "\\frac{14}{3}",
    "\\left( 3, \\frac{\\pi}{2} \\right)",
    "p - q",
    "\\text{Evelyn}",
    "[-2,7]",
    "6 - 5i",
    "\\sqrt{2}",
    "90^\\circ",
    "10\\%",
    "x^2+7x+10",
    "\\{1,2,3\\}",
    "3",
]


def _math_set_rows(name: str, n: int, rng: random.Random) -> list[dict]:
    rows = []
    for i in range(n):
        problem = _problem(rng, 10_000 + i)
        integer = rng.randint(0, 999)
        if name == "aime2024":
            rows.append(
                {
                    "id": 60 + i,
                    "problem": problem,
                    "solution": f"... so \\boxed{{{integer}}}",
                    "answer": str(integer),
                    "url": f"https://artofproblemsolving.com/wiki/{i}",
                    "year": "2024",
                }
            )
        elif name == "aime2025":
            rows.append({"problem_idx": i + 1, "problem": problem, "answer": integer})
        elif name == "amc2023":
            rows.append({"id": i, "question": problem, "answer": float(integer), "url": f"https://aops.com/{i}"})
        elif name == "math500":
            rows.append(
                {
                    "problem": problem,
                    "solution": "...",
                    "answer": rng.choice(_MATH500_ANSWERS),
                    "subject": "Algebra",
                    "level": rng.randint(1, 5),
                    "unique_id": f"test/algebra/{i}.json",
                }
            )
        elif name == "numina_math":
            answer = str(integer)
            solution = f"Therefore the answer is $\\boxed{{{integer}}}$."
            if i % 7 == 3:
                answer = "proof"
                solution = "The claim follows. $\\blacksquare$"
            elif i % 7 == 5:
                answer = ""  # answer only inside the solution
            rows.append(
                {
                    "problem": problem,
                    "solution": solution,
                    "answer": answer,
                    "problem_type": "Algebra",
                    "question_type": "proof" if answer == "proof" else "math-word-problem",
                    "problem_is_valid": "Yes",
                    "solution_is_valid": "Yes",
                    "source": "olympiads",
                    "synthetic": False,
                }
            )
        elif name == "open_math_reasoning":
            for k in range(3):  # several generated solutions per problem
                rows.append(
                    {
                        "expected_answer": str(integer),
                        "problem_type": "has_answer_extracted",
                        "problem_source": "aops_c4_high_school_math",
                        "generation_model": "DeepSeek-R1",
                        "pass_rate_72b_tir": "0.5",
                        "problem": problem,
                        "generated_solution": f"<think>attempt {k}</think> \\boxed{{{integer}}}",
                        "inference_mode": "cot",
                    }
                )
        else:
            raise KeyError(f"no fixture layout for {name!r}")
    return rows


def make_math_set(name: str, path: str, *, n: int = 20, duplicate_rows: int = 2, seed: int = 0) -> int:
    """Write ``n`` problems (+ ``duplicate_rows`` exact copies) in ``name``'s real layout; returns rows written."""
    rng = random.Random(f"{name}-{seed}")
    rows = _math_set_rows(name, n, rng)
    rows += [dict(rows[rng.randrange(len(rows))]) for _ in range(duplicate_rows)]
    _write(pa.Table.from_pylist(rows), path)
    return len(rows)


MATH_SET_NAMES = ("aime2024", "aime2025", "amc2023", "math500", "numina_math", "open_math_reasoning")
