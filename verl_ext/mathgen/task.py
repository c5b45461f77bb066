"""A generated math task for a small pretrained instruct model, from DeepMind's ``mathematics_dataset`` 1.0.1.

What: short school-arithmetic questions (``What is -3 + 5?``, ``Solve -4*s - 5 + 21 = 0 for s.``) from nine of the
generator's modules (``MODULES``), balanced round-robin, written as verl RLHFDataset parquet (a one-shot chat prompt,
prompts.py: ``DEMONSTRATION``, one worked exchange, then a user message with the question, one space,
``INSTRUCTION``), graded by the project's math reward (``verl_ext.reward.math_reward``) against the generator's own
answer. ``data_source`` is ``mathgen/<module>__<submodule>``, so verl's validation metrics come out per module.

Why: a 135M instruct model (SmolLM2-135M-Instruct) scores 0/144 on the generator's ``train-easy`` setting, so a
run from it has no prompt with a mixed pass rate and RL has no signal. The task needs one- and two-digit questions,
where such a model is sometimes right, next to harder ones it never gets, so the starting pass-rate distribution
holds all-wrong, mixed and all-right prompts.

The knob, ``difficulty`` in [-1, 1]: each generator module draws an entropy (about log10 of how many values a
number is drawn from) uniformly from a range; its ``train`` split spans (lo, hi) (e.g. (3, 10) for ``mul``,
(4, 16) for ``add_or_sub``) and ``train-easy/medium/hard`` are its thirds. Here the range is a band of the same
width (a third of hi - lo) starting at ``lo + difficulty * (hi - lo)``: difficulty 0, 1/3 and 2/3 are exactly
train-easy, -medium and -hard, 1 is a third beyond the train range, and negative values shift the band below
train-easy. Both ends are clipped at ``MIN_ENTROPY`` = 1 (one decimal digit), the generator's own floor: every
module raises each number's entropy to at least 1 (``max(1, ...)``), so below 1 only ``place_value`` would still
change, to a handful of distinct one-digit questions. Difficulty -1 is therefore the floor for every module.
Nothing crashes anywhere in [-1, 1] (checked over 100 draws per module at entropies -1 to 20).

``DEFAULT_DIFFICULTY`` = -1/3, the band just below train-easy (it ends where train-easy starts): entropy 1 to 3
for most modules, 1 to 4 for ``add_or_sub``. Questions average 27 characters (``Calculate -1 + 2.``, ``Divide 4 by
4.``, ``What is the units digit of 18?``, ``Solve -2*q - 6 = 2 for q.``) and about 84% of the integer answers are
one-digit (76% at train-easy, 46% at train-medium). Some modules stay hard for a 135M model at any setting
(``mixed`` chains fractions, ``round_number`` rounds to 10**-7 .. 10**6 whatever the entropy, ``div`` answers
non-integer quotients as fractions, ``add_or_sub``/``mul`` use decimals half the time), which supplies the
all-wrong prompts next to the one-digit ones. Lower settings run out of distinct questions: at -1/3 ``place_value``
yields 2,400 to 2,800 distinct questions (train splits up to 18,000 rows work), at -0.5 fewer than 200 (a 2048-row
split then raises ValueError).

Ground truth: ``str(answer)`` of the generator (``-2676``, ``-4/5``, ``0.000002``), except ``comparison__sort``,
whose answer list is written as a tuple ``(-4, -0.5, -0.01)``: math_verify reads a bare ``-4, -0.5, -0.01`` as a
set, so the wrongly ordered list would score 1 (checked: ``5, -2/9, -2`` scored 1 against gold ``-2, -2/9, 5``).
Against the tuple, the bare list in the right order still scores 1 and any other order 0. No module had to be
dropped for its answers (tests/mathgen/test_task.py checks every gold and a wrong answer per item with the real
reward). Questions or answers longer than the generator's own limits (160 / 30 characters) are redrawn, as its
``generate.py`` does.

Baselines: the best constant answer (``constant_answer_baseline``) at the default, seed 0: ``1`` passes 5.3% of
the 2048-row train split, ``0`` 7.0% of the 256-row validation split (4.5% of train at difficulty 0); a policy that
ignores the question cannot do better.

Held-out by meaning: no validation question asks the computation of a training one in other words (``canonical``:
``Divide 6 by 3.`` is ``6 divided by 3``; ``Solve 3*k + 2 = 8 for k.`` is ``Solve 8 = 3*x + 2 for x.``), nor
repeats an earlier validation one's (``sample_items``, docs/MATHGEN.md). A large held-out split of
``LARGE_HELDOUT_SIZE`` rows, disjoint by meaning from both, comes from ``write_large_heldout``.

Regenerate: ``python -m verl_ext.mathgen.task OUT_DIR [--train-size N --val-size N --seed S --difficulty D --mix M]``
(default D = -1/3) writes ``OUT_DIR/train.parquet`` and ``OUT_DIR/val.parquet`` (with ``--heldout-large [N]`` also
``OUT_DIR/heldout_large.parquet``, ``write_large_heldout``) and prints per-module counts and the baselines. Output
is identical for identical arguments (in any process: see ``compat``'s ``symbol_order``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from verl_ext.dataset.baselines import constant_answer_baseline  # noqa: F401  (re-exported: the task's baseline)
from verl_ext.mathgen.canonical import meaning_key
from verl_ext.mathgen.prompts import (
    DEMONSTRATION,
    INSTRUCTION,
    LINE_CALL_DEMONSTRATION,
    WORKED_DEMONSTRATION,
    demonstration_questions,
    prompt_messages,
)

# (module, submodule) of mathematics_dataset's `train` generators, in the round-robin order of the rows.
MODULES: tuple[tuple[str, str], ...] = (
    ("arithmetic", "add_or_sub"),
    ("arithmetic", "add_sub_multiple"),
    ("arithmetic", "mul"),
    ("arithmetic", "div"),
    ("arithmetic", "mixed"),
    ("numbers", "place_value"),
    ("numbers", "round_number"),
    ("comparison", "sort"),
    ("algebra", "linear_1d"),
)
DATA_SOURCE_PREFIX = "mathgen/"


@dataclass(frozen=True)
class Mix:
    """A named task: which generator modules, and the demonstration every prompt starts with."""

    modules: tuple[tuple[str, str], ...]
    demonstration: tuple[dict[str, str], ...] = DEMONSTRATION


# Named mixes (the resolver's and the CLI's --mix): "all" is every module; "arithmetic" the four arithmetic generators
# on which the released SmolLM2-135M-Instruct is right on 10-28% of validation questions (greedy), where "all" adds
# five on which it is right on 0-4% (mixed fractions, place value, rounding, sorting, linear equations). "steps":
# linear equations and bracketed sums after WORKED_DEMONSTRATION, where the model's replies are worked steps (at T 0.6,
# 8 samples of 32 questions each: pass@1 0.074 on linear_1d and 0.102 on add_sub_multiple, a third of the questions
# mixed), the task on which the advantage pipeline's planning-token stages have text to act on (docs/ADVANTAGE_REAL.md).
# "arithmetic_calc": the arithmetic questions (the same rows) after LINE_CALL_DEMONSTRATION, for the calculator agent.
ARITHMETIC = (
    ("arithmetic", "add_or_sub"),
    ("arithmetic", "add_sub_multiple"),
    ("arithmetic", "mul"),
    ("arithmetic", "div"),
)
MIXES: dict[str, Mix] = {
    "all": Mix(MODULES),
    "arithmetic": Mix(ARITHMETIC),
    "arithmetic_calc": Mix(ARITHMETIC, LINE_CALL_DEMONSTRATION),
    "steps": Mix((("algebra", "linear_1d"), ("arithmetic", "add_sub_multiple")), WORKED_DEMONSTRATION),
}
DIFFICULTY_RANGE = (-1.0, 1.0)
DEFAULT_DIFFICULTY = -1 / 3  # the third just below train-easy: ends where train-easy starts
BAND_WIDTH = 1 / 3  # of the module's train range: the generator's easy / medium / hard thirds
MIN_ENTROPY = 1.0  # the generator's own per-number floor (see the module docstring)
LARGE_HELDOUT_SIZE = 1024  # rows of write_large_heldout: a pass rate to +-0.03 at 95% (144 validation rows: +-0.08)
MAX_DRAWS_PER_ROW = 1000  # draws for one new distinct question before giving up on a module
_TUPLE_ANSWERS = frozenset({("comparison", "sort")})
DATA_VERSION = 2  # bump when the rows change for the same parameters and mix (2: held-out disjoint by meaning)


@dataclass(frozen=True)
class TaskSpec:
    """The generated task's parameters: the defaults of the ``${mathgen:...}`` resolver, ``cache.ensure_task`` and
    this module's CLI."""

    train_size: int = 2048  # training rows
    val_size: int = 144  # validation rows (disjoint questions): 16 per module of the "all" mix
    seed: int = 0  # train rows from seed 2*seed, validation from 2*seed + 1
    difficulty: float = DEFAULT_DIFFICULTY  # the entropy band, in [-1, 1]; 0 = the generator's train-easy
    mix: str = "all"  # which modules: a name of MIXES

    def key(self) -> str:
        """A hash of every parameter, what the prompts are made of (the mix's modules and demonstration, the
        instruction: an edited demonstration is a new task) and DATA_VERSION: the cache directory's name."""
        mix = get_mix(self.mix)
        params = {**asdict(self), "modules": mix.modules, "demonstration": mix.demonstration,
                  "instruction": INSTRUCTION, "data_version": DATA_VERSION}  # fmt: skip
        return hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Item:
    """One generated question: the (module, submodule) it came from, the question text, the ground truth."""

    module: tuple[str, str]
    question: str
    answer: str


def module_name(module: tuple[str, str]) -> str:
    """``arithmetic__add_or_sub``: the generator's own flattened name (its ``generate.py``)."""
    return f"{module[0]}__{module[1]}"


def data_source(module: tuple[str, str]) -> str:
    return DATA_SOURCE_PREFIX + module_name(module)


def check_difficulty(difficulty: float) -> float:
    """The difficulty as a float, or ValueError naming the argument (out of range, not finite, not a number)."""
    if isinstance(difficulty, bool) or not isinstance(difficulty, (int, float)):
        raise ValueError(f"difficulty must be a number in {list(DIFFICULTY_RANGE)}, got {difficulty!r}")
    lo, hi = DIFFICULTY_RANGE
    if not (math.isfinite(difficulty) and lo <= difficulty <= hi):
        raise ValueError(f"difficulty must be in {list(DIFFICULTY_RANGE)}, got {difficulty!r}")
    return float(difficulty)


def check_modules(modules: Iterable[Sequence[str]]) -> tuple[tuple[str, str], ...]:
    """The modules as a tuple of (module, submodule) pairs, or ValueError naming the argument: only the generators
    in MODULES are known to import, run and be graded correctly here."""
    out = tuple(tuple(m) for m in modules)
    if not out:
        raise ValueError("modules must name at least one (module, submodule) pair")
    unknown = [m for m in out if m not in MODULES]
    if unknown:
        raise ValueError(f"modules: unknown {unknown}; choose from {list(MODULES)}")
    if len(set(out)) != len(out):
        raise ValueError(f"modules: each (module, submodule) at most once, got {list(out)}")
    return out  # type: ignore[return-value]


def entropy_band(train_range: tuple[float, float], difficulty: float) -> tuple[float, float]:
    """The entropy range a generator draws from at this difficulty (see the module docstring)."""
    lo, hi = train_range
    start = lo + difficulty * (hi - lo)
    return max(MIN_ENTROPY, start), max(MIN_ENTROPY, start + BAND_WIDTH * (hi - lo))


def generators(difficulty: float, modules: Sequence[tuple[str, str]] = MODULES) -> dict[tuple[str, str], Callable]:
    """The zero-argument problem generators for these modules at this difficulty."""
    from verl_ext.mathgen.compat import import_modules

    difficulty = check_difficulty(difficulty)
    modules = check_modules(modules)
    tree = import_modules().train(lambda train_range: entropy_band(train_range, difficulty))
    return {m: tree[m[0]][m[1]] for m in modules}


def ground_truth(module: tuple[str, str], answer) -> str:
    """The reward's ground truth for a generator answer (a tuple for sort answers: see the module docstring)."""
    text = str(answer).strip()
    return f"({text})" if module in _TUPLE_ANSWERS else text


def _within_limits(question: str, answer: str) -> bool:
    from mathematics_dataset import generate_settings

    return len(question) <= generate_settings.MAX_QUESTION_LENGTH and len(answer) <= generate_settings.MAX_ANSWER_LENGTH


def sample_items(
    size: int,
    seed: int,
    difficulty: float,
    modules: Sequence[tuple[str, str]] = MODULES,
    exclude: Iterable[str] = (),
    distinct_meanings: bool = True,
) -> list[Item]:
    """``size`` items, row i from ``modules[i % len(modules)]``: no question twice, none with the meaning
    (``canonical.meaning_key``) of a question in ``exclude``, and with ``distinct_meanings`` no two with one meaning.

    Two passes over one random stream: the rows are drawn as distinct questions (skipping the strings in
    ``exclude``: the rows of DATA_VERSION 1), then, in row order, a row whose meaning is taken (excluded, or an
    earlier row's) is redrawn from its module. Every other row stays as it was, so the meaning rule changes only the
    rows it must. A training split is drawn without ``distinct_meanings``: its rows are the ones every preset
    trained on before the rule.

    Deterministic for a seed: python's ``random`` and ``np.random`` (the generator's only randomness) are seeded
    here and restored to their previous state afterwards, so callers' random streams are untouched. A seed of
    2**32 or more (``large_heldout_seed``) seeds both from its two 32-bit words, a stream no smaller seed gives."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError(f"size must be an integer >= 0, got {size!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
        raise ValueError(f"seed must be an integer in [0, 2**64), got {seed!r}")
    gens = generators(difficulty, modules)
    order = list(gens)
    exclude = list(exclude)
    seen = set(exclude)
    taken = {meaning_key(q) for q in exclude}
    items: list[Item] = []
    py_state, np_state = random.getstate(), np.random.get_state()
    try:
        random.seed(seed)  # python splits an int into 32-bit words itself; numpy is given them
        np.random.seed(seed if seed < 2**32 else [seed & 0xFFFFFFFF, seed >> 32])
        for i in range(size):
            module = order[i % len(order)]
            items.append(_draw_new(gens[module], module, seen.__contains__, difficulty))
            seen.add(items[-1].question)
        for i, item in enumerate(items):
            if meaning_key(item.question) in taken:
                item = items[i] = _draw_new(
                    gens[item.module], item.module, lambda q: q in seen or meaning_key(q) in taken, difficulty
                )
                seen.add(item.question)
            if distinct_meanings:
                taken.add(meaning_key(item.question))
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)
    return items


def _draw_new(generate: Callable, module: tuple[str, str], taken: Callable[[str], bool], difficulty: float) -> Item:
    """The generator's next question within the limits for which ``taken(question)`` is False."""
    for _ in range(MAX_DRAWS_PER_ROW):
        problem = generate()
        question, answer = str(problem.question).strip(), ground_truth(module, problem.answer)
        if _within_limits(question, answer) and not taken(question):
            return Item(module, question, answer)
    raise ValueError(
        f"size: {module_name(module)} gave no new question in {MAX_DRAWS_PER_ROW} draws at difficulty "
        f"{difficulty}; ask for fewer rows or a higher difficulty"
    )


def items_table(items: Sequence[Item], split: str, demonstration: Sequence[dict[str, str]] = DEMONSTRATION):
    """The rows in verl's RLHFDataset schema (verl_ext/dataset/schema.py)."""
    from verl_ext.dataset.schema import rl_table

    return rl_table(
        [data_source(it.module) for it in items],
        [prompt_messages(it.question, demonstration) for it in items],
        [it.answer for it in items],
        [
            {"split": split, "index": i, "module": module_name(it.module), "question": it.question}
            for i, it in enumerate(items)
        ],
    )


def write_split(
    path,
    size: int,
    seed: int,
    split: str,
    difficulty: float = DEFAULT_DIFFICULTY,
    modules: Sequence[tuple[str, str]] = MODULES,
    exclude: Iterable[str] = (),
    demonstration: Sequence[dict[str, str]] = DEMONSTRATION,
    distinct_meanings: bool = True,
) -> str:
    """Write one split (``sample_items`` as parquet, nothing with the meaning of a demonstration's question) and
    return its path."""
    from verl_ext.dataset.schema import write_table

    exclude = [*exclude, *demonstration_questions(demonstration)]
    items = sample_items(size, seed, difficulty, modules, exclude, distinct_meanings)
    return write_table(items_table(items, split, demonstration), path)


def split_seeds(seed: int) -> tuple[int, int]:
    """Train and validation seeds: 2*seed and 2*seed + 1, disjoint for every task seed, not only this one."""
    return 2 * seed, 2 * seed + 1


def large_heldout_seed(seed: int) -> int:
    """The large held-out split's seed: 2**32 + seed, which seeds ``random`` and ``np.random`` from the two words
    (seed, 1), a stream no train or validation seed (one word, below 2**32) of any task seed gives."""
    return 2**32 + seed


def questions(path) -> list[str]:
    import pandas as pd

    return [info["question"] for info in pd.read_parquet(path, columns=["extra_info"])["extra_info"]]


def get_mix(mix: str) -> Mix:
    if mix not in MIXES:
        raise ValueError(f"mix must be one of {sorted(MIXES)}, got {mix!r}")
    return MIXES[mix]


def write_task(
    out_dir,
    train_size: int,
    val_size: int,
    seed: int = 0,
    difficulty: float = DEFAULT_DIFFICULTY,
    modules: Sequence[tuple[str, str]] = MODULES,
    demonstration: Sequence[dict[str, str]] = DEMONSTRATION,
) -> tuple[str, str]:
    """``out_dir/train.parquet`` and ``out_dir/val.parquet`` -> their paths. Validation is drawn from its own seed
    and skips every question with the meaning (``canonical.canonical_form``) of a train question or of an earlier
    validation one, drawing another in its place, so it keeps its size and its round-robin balance: the two files
    are disjoint by meaning, not only as strings. Train is distinct as strings only (a reworded question may occur
    twice in it, as it did before the meaning rule: the rows presets trained on are unchanged). Skipping removes the
    most probable questions (``What is 1 + 2?``) from validation more often than the rare ones, so validation is
    slightly harder than train; the constant-answer baselines of both are printed by the CLI."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**31:
        raise ValueError(f"seed must be an integer in [0, 2**31), got {seed!r}")
    train_seed, val_seed = split_seeds(seed)
    train_path = write_split(
        os.path.join(out_dir, "train.parquet"),
        train_size,
        train_seed,
        "train",
        difficulty,
        modules,
        demonstration=demonstration,
        distinct_meanings=False,
    )
    val_path = write_split(
        os.path.join(out_dir, "val.parquet"),
        val_size,
        val_seed,
        "val",
        difficulty,
        modules,
        exclude=questions(train_path),
        demonstration=demonstration,
    )
    return train_path, val_path


def write_large_heldout(
    path,
    train_path,
    val_path,
    size: int = LARGE_HELDOUT_SIZE,
    seed: int = 0,
    difficulty: float = DEFAULT_DIFFICULTY,
    modules: Sequence[tuple[str, str]] = MODULES,
    demonstration: Sequence[dict[str, str]] = DEMONSTRATION,
) -> str:
    """Write the large held-out split (``extra_info.split`` ``heldout_large``) of the task whose splits
    ``write_task`` wrote to ``train_path`` and ``val_path`` with the same seed, difficulty, modules and
    demonstration, and return its path: ``size`` rows, round-robin over the modules like the others, drawn from
    ``large_heldout_seed(seed)``, none with the meaning (``canonical``) of a train, validation or demonstration
    question and no meaning twice. Deterministic for its arguments."""
    exclude = [*questions(train_path), *questions(val_path)]
    return write_split(
        path, size, large_heldout_seed(seed), "heldout_large", difficulty, modules, exclude, demonstration
    )


def module_counts(path) -> Counter:
    import pandas as pd

    return Counter(pd.read_parquet(path, columns=["data_source"])["data_source"])


def main(argv: Sequence[str] | None = None) -> None:
    import argparse
    from dataclasses import fields

    defaults = {f.name: f.default for f in fields(TaskSpec)}
    p = argparse.ArgumentParser(description="Write the mathgen task (train.parquet, val.parquet) to OUT_DIR.")
    p.add_argument("out_dir")
    p.add_argument("--train-size", type=int, default=defaults["train_size"])
    p.add_argument("--val-size", type=int, default=defaults["val_size"])
    p.add_argument("--seed", type=int, default=defaults["seed"])
    p.add_argument("--difficulty", type=float, default=defaults["difficulty"], help="in [-1, 1]; 0 = train-easy")
    p.add_argument("--mix", default=defaults["mix"], choices=sorted(MIXES), help="which modules (MIXES)")
    p.add_argument(
        "--heldout-large",
        type=int,
        nargs="?",
        const=LARGE_HELDOUT_SIZE,
        metavar="N",
        help=f"also write heldout_large.parquet (write_large_heldout), N rows ({LARGE_HELDOUT_SIZE} without N)",
    )
    args = p.parse_args(argv)
    mix = get_mix(args.mix)
    paths = write_task(
        args.out_dir, args.train_size, args.val_size, args.seed, args.difficulty, mix.modules, mix.demonstration
    )
    splits = ["train", "val"]
    if args.heldout_large is not None:
        path = os.path.join(args.out_dir, "heldout_large.parquet")
        splits.append("heldout_large")
        paths = (*paths, write_large_heldout(path, *paths, args.heldout_large, args.seed, args.difficulty,
                                             mix.modules, mix.demonstration))  # fmt: skip
    for split, path in zip(splits, paths):
        counts = module_counts(path)
        print(f"{split}: {path} ({sum(counts.values())} rows)")
        for source in sorted(counts):
            print(f"  {source:40s} {counts[source]}")
        answer, acc = constant_answer_baseline(path)
        print(f"  best constant answer {answer!r}: accuracy {acc:.4f}")


if __name__ == "__main__":
    main()
