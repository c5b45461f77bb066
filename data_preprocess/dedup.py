"""Clean, deduplicate and split (problem, answer) rows; every dropped row is counted.

Pipeline, vectorised where the row count is large:
1. (arrow, all rows) drop rows whose problem or answer is null/empty or in the set's list of non-answers
   ("proof", "notfound" in NuminaMath);
2. (arrow, all rows) exact deduplication on (problem text, answer) with a hash group-by, keeping the first row;
3. (python, distinct rows only: ~18k for DAPO's 1.79M) optional per-problem transform (DAPO: strip DAPO's
   instruction wrapper; None = malformed), then deduplication on the normalised problem text (NFKC, whitespace
   collapsed). A normalised problem seen with two different answers is ambiguous and dropped whole (counted).

``split_by_hash`` picks the test set by the lowest sha256(seed, problem) values: deterministic for a seed and
independent of the input's row order.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

_WS = re.compile(r"\s+")


def problem_key(problem: str) -> str:
    """Deduplication key: NFKC, whitespace collapsed, trimmed. Case is kept: LaTeX variables differ by case."""
    return _WS.sub(" ", unicodedata.normalize("NFKC", problem)).strip()


def answer_to_text(value) -> str:
    """A ground truth as text; AMC-style floats 27.0 become '27'."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


@dataclass
class DedupStats:
    rows_read: int = 0
    malformed: int = 0  # null/empty problem, or not recognised by the set's transform
    missing_answer: int = 0
    exact_duplicates: int = 0
    normalized_duplicates: int = 0
    conflicting_answers: int = 0  # distinct rows dropped because their problem has several answers
    kept: int = 0
    notes: dict[str, int] = field(default_factory=dict)  # set-specific counters (e.g. prompts without wrapper)

    def accounted(self) -> int:
        """Every input row lands in exactly one bucket: this equals ``rows_read``."""
        return (
            self.malformed
            + self.missing_answer
            + self.exact_duplicates
            + self.normalized_duplicates
            + self.conflicting_answers
            + self.kept
        )

    def report(self, name: str) -> str:
        lines = [
            f"[{name}] rows read: {self.rows_read}",
            f"[{name}] malformed rows dropped: {self.malformed}",
            f"[{name}] rows with no answer dropped: {self.missing_answer}",
            f"[{name}] exact duplicates removed: {self.exact_duplicates}",
            f"[{name}] duplicates after problem normalisation removed: {self.normalized_duplicates}",
            f"[{name}] distinct rows dropped for conflicting answers: {self.conflicting_answers}",
        ]
        lines += [f"[{name}] {k}: {v}" for k, v in self.notes.items()]
        lines.append(f"[{name}] unique problems kept: {self.kept}")
        return "\n".join(lines)


@dataclass(frozen=True)
class ProblemRow:
    problem: str
    answer: str
    source_id: str  # the input's own id of the first occurrence ('' when the set has none)
    first_row: int  # row number of the first occurrence in the input, for a stable output order


def _is_blank(arr: pa.ChunkedArray | pa.Array) -> pa.Array:
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        return pc.fill_null(pc.equal(pc.utf8_trim_whitespace(arr), ""), True)
    return pc.is_null(arr)


def dedup_problems(
    problems: pa.ChunkedArray | pa.Array,
    answers: pa.ChunkedArray | pa.Array,
    source_ids: pa.ChunkedArray | pa.Array | None = None,
    to_problem: Callable[[str], str | None] | None = None,
    invalid_answers: tuple[str, ...] = (),
    stats: DedupStats | None = None,
) -> tuple[list[ProblemRow], DedupStats]:
    """Steps 1-3 of the module docstring. ``problems`` must be a string array (null allowed)."""
    stats = stats or DedupStats()
    n = len(problems)
    stats.rows_read = n
    if source_ids is None:
        source_ids = pa.nulls(n, pa.string())
    table = pa.table({"p": problems, "a": answers, "id": source_ids, "row": pa.array(range(n), pa.int64())})
    table = _drop_invalid(table, invalid_answers, stats)

    # Exact duplicates: group by the raw text, keep the first row of each group.
    firsts = table.group_by(["p", "a"], use_threads=True).aggregate([("row", "min")])["row_min"]
    stats.exact_duplicates = table.num_rows - len(firsts)
    distinct = table.filter(pc.is_in(table["row"], firsts)).sort_by("row")

    kept = _dedup_normalized(distinct, to_problem, stats)
    stats.kept = len(kept)
    return kept, stats


def _drop_invalid(table: pa.Table, invalid_answers: tuple[str, ...], stats: DedupStats) -> pa.Table:
    """Step 1: the rows whose problem and answer are both present (and the answer not a listed non-answer)."""
    bad_problem = _is_blank(table["p"])
    bad_answer = _is_blank(table["a"])
    if invalid_answers and (pa.types.is_string(table["a"].type) or pa.types.is_large_string(table["a"].type)):
        trimmed = pc.utf8_lower(pc.utf8_trim_whitespace(table["a"]))
        bad_answer = pc.or_(bad_answer, pc.fill_null(pc.is_in(trimmed, pa.array(invalid_answers)), False))
    stats.malformed += pc.sum(bad_problem).as_py() or 0
    stats.missing_answer += pc.sum(pc.and_(bad_answer, pc.invert(bad_problem))).as_py() or 0
    return table.filter(pc.invert(pc.or_(bad_problem, bad_answer)))


def _dedup_normalized(
    distinct: pa.Table, to_problem: Callable[[str], str | None] | None, stats: DedupStats
) -> list[ProblemRow]:
    """Step 3, on the exactly distinct rows: one row per normalised problem, in first-row order; a problem seen with
    two different answers is dropped whole."""
    by_key: dict[str, list[ProblemRow]] = {}
    for p, a, sid, row in zip(
        distinct["p"].to_pylist(), distinct["a"].to_pylist(), distinct["id"].to_pylist(), distinct["row"].to_pylist()
    ):
        problem = to_problem(p) if to_problem is not None else p
        if problem is None or not problem.strip():
            stats.malformed += 1
            continue
        answer = answer_to_text(a)
        by_key.setdefault(problem_key(problem), []).append(
            ProblemRow(problem.strip(), answer, "" if sid is None else str(sid), row)
        )

    kept = []
    for rows in by_key.values():
        if len({r.answer for r in rows}) > 1:
            stats.conflicting_answers += len(rows)
            continue
        stats.normalized_duplicates += len(rows) - 1
        kept.append(rows[0])
    kept.sort(key=lambda r: r.first_row)
    return kept


def split_by_hash(rows: list[ProblemRow], test_size: int, seed: int) -> tuple[list[ProblemRow], list[ProblemRow]]:
    """(train, test): test = the ``test_size`` rows with the lowest sha256(seed, problem key); order kept."""
    if not 0 <= test_size < len(rows):
        raise ValueError(f"test_size must be in [0, {len(rows)}) for {len(rows)} unique problems, got {test_size}")
    digests = [hashlib.sha256(f"{seed}\x00{problem_key(r.problem)}".encode()).digest() for r in rows]
    order = sorted(range(len(rows)), key=digests.__getitem__)
    test_ids = set(order[:test_size])
    train = [r for i, r in enumerate(rows) if i not in test_ids]
    test = [r for i, r in enumerate(rows) if i in test_ids]
    return train, test
