"""Evaluation sets (AIME 2024, AIME 2025, AMC 2023, MATH-500) and extra training sets (NuminaMath,
OpenMathReasoning) -> verl parquet, with the same prompt rule as ``dapo17k`` and a stable ``data_source`` per set
(verl reports validation metrics per data_source: ``val-core/<data_source>/acc/mean@N``).

Column names differ between the hub copies of each set; every spec lists the names seen in the common copies,
first match wins, and a missing column is an error that lists what the file has:

- aime2024  HuggingFaceH4/aime_2024: id, problem, solution, answer, url, year (Maxwell-Jia/AIME_2024: ID, Problem,
  Solution, Answer)
- aime2025  MathArena/aime_2025: problem_idx, problem, answer (opencompass/AIME2025: question, answer;
  yentinglin/aime_2025: id, problem, solution, answer, url, year)
- amc2023   math-ai/amc23: id, question, answer (AI-MO/aimo-validation-amc and copies: id, problem, answer as
  float64, url)
- math500   HuggingFaceH4/MATH-500: problem, solution, answer, subject, level, unique_id
- numina_math  AI-MO/NuminaMath-1.5: problem, solution, answer ('proof'/'notfound' for no answer), problem_type,
  question_type, source, synthetic, ... (NuminaMath-CoT has no answer column: the last \\boxed{} of the solution)
- open_math_reasoning  nvidia/OpenMathReasoning: problem, expected_answer, generated_solution, problem_type,
  problem_source, ... (several solutions per problem: deduplicated to one row per problem)

    python -m data_preprocess.math_sets --set math500 --input HuggingFaceH4/MATH-500 --out-dir ~/data/eval
"""

from __future__ import annotations

import argparse
import hashlib
import os
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from data_preprocess.dedup import DedupStats, dedup_problems, problem_key
from data_preprocess.sources import pick_column, read_source
from data_preprocess.verl_schema import parse_on_off, verl_table, write_table
from verl_ext.reward.answer_extraction import last_boxed


@dataclass(frozen=True)
class MathSetSpec:
    data_source: str
    hub_id: str
    hub_split: str
    split: str  # written to extra_info.split: 'test' for evaluation sets, 'train' for training sets
    problem_columns: tuple[str, ...] = ("problem", "Problem", "question", "Question")
    answer_columns: tuple[str, ...] = ("answer", "Answer", "expected_answer")
    id_columns: tuple[str, ...] = ("id", "ID", "unique_id", "problem_idx", "uuid")
    solution_columns: tuple[str, ...] = ()  # answer fallback: last \boxed{} of the solution
    invalid_answers: tuple[str, ...] = ()  # answer values that mean "no answer"


SPECS: dict[str, MathSetSpec] = {
    "aime2024": MathSetSpec("aime2024", "HuggingFaceH4/aime_2024", "train", "test"),
    "aime2025": MathSetSpec("aime2025", "MathArena/aime_2025", "train", "test"),
    "amc2023": MathSetSpec("amc2023", "math-ai/amc23", "test", "test"),
    "math500": MathSetSpec("math500", "HuggingFaceH4/MATH-500", "test", "test"),
    "numina_math": MathSetSpec(
        "numina_math",
        "AI-MO/NuminaMath-1.5",
        "train",
        "train",
        solution_columns=("solution",),
        invalid_answers=("proof", "notfound", "none"),
    ),
    "open_math_reasoning": MathSetSpec(
        "open_math_reasoning",
        "nvidia/OpenMathReasoning",
        "cot",
        "train",
        answer_columns=("expected_answer", "answer"),
        solution_columns=("generated_solution",),
    ),
}


def _answers_with_fallback(table: pa.Table, spec: MathSetSpec) -> pa.ChunkedArray:
    """The answer column, with the solution's last \\boxed{} where the answer is missing (or no answer column)."""
    answer_col = pick_column(table, spec.answer_columns, "answer", required=not spec.solution_columns)
    solution_col = None
    if spec.solution_columns:
        solution_col = pick_column(table, spec.solution_columns, "solution", required=False)
    if answer_col is None and solution_col is None:
        raise KeyError(
            f"no answer column: looked for {list(spec.answer_columns + spec.solution_columns)}, "
            f"the table has {table.column_names}"
        )
    if solution_col is None:
        return table[answer_col]
    if answer_col is None:
        return pa.chunked_array([pa.array([_boxed_or_none(s) for s in table[solution_col].to_pylist()], pa.string())])
    answers = pc.cast(table[answer_col], pa.string())
    missing = pc.fill_null(pc.equal(pc.utf8_trim_whitespace(answers), ""), True)
    if spec.invalid_answers:
        lowered = pc.utf8_lower(pc.utf8_trim_whitespace(answers))
        missing = pc.or_(missing, pc.fill_null(pc.is_in(lowered, pa.array(spec.invalid_answers)), False))
    if not pc.any(missing).as_py():
        return answers
    # Only the rows that need it pay for the python-level \boxed{} scan.
    filled = answers.to_pylist()
    solutions = table[solution_col]
    for i in pc.indices_nonzero(missing).to_pylist():
        filled[i] = _boxed_or_none(solutions[i].as_py())
    return pa.chunked_array([pa.array(filled, pa.string())])


def _boxed_or_none(solution: str | None) -> str | None:
    return last_boxed(solution) if solution else None


def _sample(rows: list, max_rows: int, seed: int) -> list:
    """The ``max_rows`` rows with the lowest seeded hash, in input order (for very large training sets)."""
    if max_rows <= 0 or len(rows) <= max_rows:
        return rows
    keyed = sorted(
        range(len(rows)), key=lambda i: hashlib.sha256(f"{seed}\x00{problem_key(rows[i].problem)}".encode()).digest()
    )
    keep = sorted(keyed[:max_rows])
    return [rows[i] for i in keep]


def preprocess_math_set(
    name: str,
    source: str | None,
    out_dir: str,
    *,
    use_chat_template: bool = True,
    max_rows: int = 0,
    seed: int = 42,
    hub_split: str | None = None,
) -> tuple[str, int, DedupStats]:
    """Write ``<out_dir>/<data_source>.parquet``; returns (path, rows written, stats)."""
    if name not in SPECS:
        raise KeyError(f"unknown set {name!r}; known: {sorted(SPECS)}")
    spec = SPECS[name]
    table = read_source(source or spec.hub_id, split=hub_split or spec.hub_split)
    problem_col = pick_column(table, spec.problem_columns, "problem")
    id_col = pick_column(table, spec.id_columns, "id", required=False)
    problems = pc.cast(table[problem_col], pa.string())
    answers = _answers_with_fallback(table, spec)
    ids = pc.cast(table[id_col], pa.string()) if id_col else None
    rows, stats = dedup_problems(problems, answers, ids, invalid_answers=spec.invalid_answers)
    rows = _sample(rows, max_rows, seed)
    table = verl_table(rows, spec.data_source, spec.split, use_chat_template)
    path = write_table(table, os.path.join(out_dir, f"{spec.data_source}.parquet"))
    return path, len(rows), stats


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", required=True, choices=sorted(SPECS), help="which set (names the data_source)")
    parser.add_argument("--input", default=None, help="local file/dir or hub id; default: the spec's hub id")
    parser.add_argument("--hub-split", default=None, help="hub split; default: the spec's")
    parser.add_argument("--out-dir", required=True)
    parser.add_argument(
        "--use-chat-template", type=parse_on_off, default=True, help="on (chat messages) / off (raw string)"
    )
    parser.add_argument("--max-rows", type=int, default=0, help="keep at most this many problems (seeded); 0 = all")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    path, n, stats = preprocess_math_set(
        args.set,
        args.input,
        os.path.expanduser(args.out_dir),
        use_chat_template=args.use_chat_template,
        max_rows=args.max_rows,
        seed=args.seed,
        hub_split=args.hub_split,
    )
    print(stats.report(args.set))
    print(f"[{args.set}] wrote {n} rows -> {path}")


if __name__ == "__main__":
    main()
