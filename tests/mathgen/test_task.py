"""The generated math task: determinism, disjoint splits, the verl schema, round-robin balance, the difficulty knob,
argument checks, the constant-answer baseline, the CLI, and every gold answer graded by the project's real reward."""

import math
import random
import re
from collections import Counter
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from data_preprocess.dedup import ProblemRow
from data_preprocess.verl_schema import verl_table
from verl_ext.mathgen import prompts, task
from verl_ext.mathgen.canonical import meaning_key
from verl_ext.reward.math_reward import compute_score

NUM = len(task.MODULES)


def test_same_seed_same_rows_other_seed_other_rows_and_callers_random_state_is_kept(tmp_path):
    random.seed(123)
    np.random.seed(123)
    expected_py, expected_np = random.random(), np.random.random()
    random.seed(123)
    np.random.seed(123)
    a = task.write_split(tmp_path / "a.parquet", size=90, seed=5, split="train")
    assert (random.random(), np.random.random()) == (expected_py, expected_np)
    random.seed(7)  # another caller state: the rows must not depend on it
    np.random.seed(7)
    b = task.write_split(tmp_path / "b.parquet", size=90, seed=5, split="train")
    c = task.write_split(tmp_path / "c.parquet", size=90, seed=6, split="train")
    assert pd.read_parquet(a).to_json() == pd.read_parquet(b).to_json()
    assert task.questions(a) != task.questions(c)


def test_train_and_validation_are_disjoint_full_size_and_balanced(tmp_path):
    # At -0.5 the question pool is small enough that validation, drawn alone from its seed, repeats train questions.
    train, val = task.write_task(tmp_path, train_size=270, val_size=45, seed=0, difficulty=-0.5)
    train_q, val_q = task.questions(train), task.questions(val)
    assert len(train_q) == len(set(train_q)) == 270 and len(val_q) == len(set(val_q)) == 45
    assert not set(train_q) & set(val_q)
    assert set(task.module_counts(val).values()) == {45 // NUM}
    alone = task.sample_items(45, seed=task.split_seeds(0)[1], difficulty=-0.5)
    assert set(train_q) & {it.question for it in alone}  # so the disjointness above was work, not luck
    # The skip itself: questions in `exclude` are never drawn, others are drawn in their place.
    seen = {it.question for it in alone}
    redrawn = task.sample_items(45, seed=task.split_seeds(0)[1], difficulty=-0.5, exclude=seen)
    assert len({it.question for it in redrawn} - seen) == 45


def test_schema_matches_verl_rows_and_reads_back_with_the_expected_types(tmp_path):
    path = task.write_split(tmp_path / "t.parquet", size=20, seed=1, split="val")
    reference = verl_table([ProblemRow("1+1", "2", "", 0)], "x", "val", use_chat_template=True).schema
    schema = pq.read_schema(path)
    assert schema.names == reference.names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    for name in ("data_source", "prompt", "ability", "reward_model"):
        assert schema.field(name).type == reference.field(name).type, name
    df = pd.read_parquet(path)
    for i, row in df.iterrows():
        info = row["extra_info"]
        assert set(info) == {"split", "index", "module", "question"}
        assert info["split"] == "val" and info["index"] == i and isinstance(info["index"], int)
        assert row["data_source"] == "mathgen/" + info["module"]
        assert row["ability"] == "math"
        *shown, message = row["prompt"]
        assert [dict(m) for m in shown] == [dict(m) for m in prompts.DEMONSTRATION]
        assert [m["role"] for m in shown] == ["user", "assistant"] and "\\boxed{4}" in shown[1]["content"]
        assert message["role"] == "user"
        assert message["content"] == info["question"] + " " + prompts.INSTRUCTION
        assert info["question"] not in shown[0]["content"]
        assert row["reward_model"]["style"] == "rule"
        assert isinstance(row["reward_model"]["ground_truth"], str) and row["reward_model"]["ground_truth"]


def test_modules_come_round_robin_in_the_given_order(tmp_path):
    path = task.write_split(tmp_path / "t.parquet", size=2 * NUM + 4, seed=2, split="train")
    sources = list(pd.read_parquet(path)["data_source"])
    assert sources == [task.data_source(task.MODULES[i % NUM]) for i in range(len(sources))]
    counts = Counter(sources).values()
    assert max(counts) - min(counts) <= 1
    chosen = (("numbers", "place_value"), ("arithmetic", "mul"))
    items = task.sample_items(5, seed=0, difficulty=0.0, modules=chosen)
    assert [it.module for it in items] == [chosen[0], chosen[1], chosen[0], chosen[1], chosen[0]]


def test_difficulty_bands_are_the_generators_thirds_shifted_and_floored():
    from mathematics_dataset.generate import _make_entropy_fn  # the generator's own easy / medium / hard

    for level, difficulty in enumerate((0, 1 / 3, 2 / 3)):
        for train_range in ((3, 10), (4, 16)):
            assert task.entropy_band(train_range, difficulty) == pytest.approx(_make_entropy_fn(level, 3)(train_range))
    assert task.entropy_band((3, 10), task.DEFAULT_DIFFICULTY) == pytest.approx((1, 3))
    assert task.entropy_band((4, 16), task.DEFAULT_DIFFICULTY) == pytest.approx((1, 4))
    assert task.entropy_band((3, 10), -1) == task.entropy_band((4, 16), -1) == (1, 1)


def _mean_abs_integer_answer(difficulty: float) -> float:
    arithmetic = [m for m in task.MODULES if m[0] in ("arithmetic", "algebra")]
    items = task.sample_items(60 * len(arithmetic), seed=0, difficulty=difficulty, modules=arithmetic)
    ints = [abs(int(it.answer)) for it in items if it.answer.lstrip("-").isdigit()]
    return sum(ints) / len(ints)


def _mean_question_length(difficulty: float) -> float:
    items = task.sample_items(30 * NUM, seed=0, difficulty=difficulty)
    return sum(len(it.question) for it in items) / len(items)


def test_answers_and_questions_grow_with_difficulty():
    grid = (-0.5, task.DEFAULT_DIFFICULTY, 0.0, 1 / 3)
    sizes = [_mean_abs_integer_answer(d) for d in grid]
    lengths = [_mean_question_length(d) for d in grid]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes), sizes
    assert lengths == sorted(lengths) and len(set(lengths)) == len(lengths), lengths


def test_the_default_has_short_small_number_questions():
    items = task.sample_items(20 * NUM, seed=0, difficulty=task.DEFAULT_DIFFICULTY)
    by_module = {m: [it.question for it in items if it.module == m] for m in task.MODULES}
    assert any(q.startswith("Calculate") and len(q) < 20 for q in by_module[("arithmetic", "add_or_sub")])
    assert sum(len(it.question) for it in items) / len(items) < 40
    ints = [abs(int(it.answer)) for it in items if it.answer.lstrip("-").isdigit()]
    assert sum(i < 10 for i in ints) / len(ints) > 0.75  # mostly one-digit integer answers


SORT = ("comparison", "sort")


def _plus_one(number: str) -> str:
    if "/" in number:
        return str(Fraction(number) + 1)
    return str(Decimal(number) + 1)


def _right_and_wrong(item: task.Item) -> tuple[list[str], list[str]]:
    """Answers that must score 1 and answers that must score 0. A number: itself / itself + 1. A sorted list: the
    gold and the bare list a model would write / the reversed list and the list with its first entry + 1."""
    if item.module != SORT:
        return [item.answer], [_plus_one(item.answer)]
    parts = item.answer.strip("()").split(", ")
    assert len(parts) >= 3
    return [item.answer, ", ".join(parts)], [", ".join(reversed(parts)), ", ".join([_plus_one(parts[0])] + parts[1:])]


@pytest.mark.parametrize("difficulty", [task.DEFAULT_DIFFICULTY, 0.0])
def test_every_gold_answer_is_graded_right_and_a_wrong_one_wrong_by_the_real_reward(difficulty):
    items = task.sample_items(20 * NUM, seed=11, difficulty=difficulty)
    failures = []
    for it in items:
        right, wrong = _right_and_wrong(it)
        for answer, expected in [(a, 1.0) for a in right] + [(a, 0.0) for a in wrong]:
            got = compute_score(task.data_source(it.module), f"So \\boxed{{{answer}}}", it.answer)
            if got["score"] != expected or got["timeout"]:
                failures.append((it.question, it.answer, answer, got))
    assert not failures, failures[:5]


@pytest.mark.parametrize("bad", [1.5, -1.01, math.nan, math.inf, "0", None, True])
def test_bad_difficulty_is_refused_naming_the_argument(bad, tmp_path):
    with pytest.raises(ValueError, match="difficulty"):
        task.write_split(tmp_path / "t.parquet", size=3, seed=0, split="train", difficulty=bad)
    assert not (tmp_path / "t.parquet").exists()


@pytest.mark.parametrize(
    "modules", [(("polynomials", "expand"),), (("arithmetic", "mul"), ("nope", "x")), (), (("arithmetic", "mul"),) * 2]
)
def test_unknown_or_malformed_modules_are_refused_naming_the_argument(modules, tmp_path):
    with pytest.raises(ValueError, match="modules"):
        task.write_split(tmp_path / "t.parquet", size=3, seed=0, split="train", difficulty=0.0, modules=modules)


def test_bad_size_and_seed_and_an_exhausted_module_are_refused():
    with pytest.raises(ValueError, match="size"):
        task.sample_items(-1, seed=0, difficulty=0.0)
    with pytest.raises(ValueError, match="seed"):
        task.sample_items(3, seed=-1, difficulty=0.0)
    # At the floor, place_value knows only a dozen questions ("What is the units digit of 7?").
    with pytest.raises(ValueError, match="numbers__place_value"):
        task.sample_items(40, seed=0, difficulty=-1.0, modules=[("numbers", "place_value")])


def test_constant_answer_baseline_is_the_most_frequent_truth_and_no_constant_beats_it(tmp_path):
    path = task.write_split(tmp_path / "t.parquet", size=90, seed=3, split="val")
    truths = [r["ground_truth"] for r in pd.read_parquet(path)["reward_model"]]
    counts = Counter(truths)
    top = max(counts.values())
    answer, acc = task.constant_answer_baseline(path)
    assert acc == top / len(truths) and answer == min(t for t, c in counts.items() if c == top)
    assert top > 1  # small answers repeat across modules: the baseline is not trivially 1/len


def test_cli_writes_both_splits_and_prints_counts_and_baselines(tmp_path, capsys):
    task.main([str(tmp_path / "out"), "--train-size", "27", "--val-size", "9", "--seed", "1", "--difficulty", "0"])
    out = capsys.readouterr().out
    assert (tmp_path / "out" / "train.parquet").exists() and (tmp_path / "out" / "val.parquet").exists()
    assert "mathgen/arithmetic__add_or_sub" in out and out.count("best constant answer") == 2
    assert len(pd.read_parquet(tmp_path / "out" / "val.parquet")) == 9


def test_the_steps_mix_starts_every_prompt_with_the_worked_demonstration_and_never_asks_its_questions(tmp_path):
    mix = task.get_mix("steps")
    asked = prompts.demonstration_questions(mix.demonstration)
    assert asked == ["Solve 3*x + 2 = 14 for x.", "What is 7 - (2 + 3)?"]
    # a split drawn with the demonstration's questions already "seen" is what write_split draws: none of them
    train, val = task.write_task(tmp_path, 64, 16, seed=0, modules=mix.modules, demonstration=mix.demonstration)
    for path in (train, val):
        df = pd.read_parquet(path)
        assert set(df["data_source"]) == {"mathgen/algebra__linear_1d", "mathgen/arithmetic__add_sub_multiple"}
        for _, row in df.iterrows():
            *shown, message = row["prompt"]
            assert [dict(m) for m in shown] == [dict(m) for m in prompts.WORKED_DEMONSTRATION]
            assert row["extra_info"]["question"] not in asked
    with pytest.raises(ValueError, match="mix must be one of"):
        task.get_mix("nope")


def test_a_draw_with_the_meaning_of_a_demonstration_question_is_redrawn():
    """The exclusion is what keeps the demonstration out: a generator whose first draw rewords the demonstration's
    question (another letter) gives the next one instead, as sample_items asks (by meaning)."""
    module = ("algebra", "linear_1d")
    draws = iter(["Solve 3*k + 2 = 14 for k.", "Solve 2*y = 4 for y."])

    class Problem:
        def __init__(self, q):
            self.question, self.answer = q, 2

    shown = {meaning_key(q) for q in prompts.demonstration_questions(prompts.WORKED_DEMONSTRATION)}
    item = task._draw_new(lambda: Problem(next(draws)), module, lambda q: meaning_key(q) in shown, 0.0)
    assert item.question == "Solve 2*y = 4 for y."


def test_the_cache_key_changes_with_what_the_prompts_are_made_of(monkeypatch):
    """A cached task is served by its key: an edited demonstration, module list or instruction must be a new key,
    and the same parameters the same key."""
    spec = task.TaskSpec(mix="arithmetic_calc")
    before = spec.key()
    assert task.TaskSpec(mix="arithmetic_calc").key() == before and task.TaskSpec(mix="arithmetic").key() != before
    calc = task.MIXES["arithmetic_calc"]
    edited = calc.demonstration[:-1] + ({"role": "assistant", "content": "\\boxed{-2.22}"},)
    monkeypatch.setitem(task.MIXES, "arithmetic_calc", task.Mix(calc.modules, edited))
    assert spec.key() != before
    monkeypatch.setitem(task.MIXES, "arithmetic_calc", task.Mix(calc.modules[:-1], calc.demonstration))
    assert spec.key() != before
    monkeypatch.setitem(task.MIXES, "arithmetic_calc", calc)
    monkeypatch.setattr(task, "INSTRUCTION", "Box it.")
    assert spec.key() != before
    monkeypatch.undo()
    assert spec.key() == before


def test_a_row_is_redrawn_only_when_its_meaning_is_taken():
    """distinct_meanings redraws exactly the rows whose meaning an earlier row has; every other row is the one drawn
    without the rule (so the rule changed only the rows it had to)."""
    mix = task.get_mix("arithmetic")
    plain = task.sample_items(
        400, seed=1, difficulty=task.DEFAULT_DIFFICULTY, modules=mix.modules, distinct_meanings=False
    )
    ruled = task.sample_items(400, seed=1, difficulty=task.DEFAULT_DIFFICULTY, modules=mix.modules)
    assert [it.module for it in ruled] == [it.module for it in plain]
    assert len({meaning_key(it.question) for it in ruled}) == 400
    redrawn = []
    for i, (a, b) in enumerate(zip(plain, ruled)):
        earlier = {meaning_key(it.question) for it in ruled[:i]}
        assert (a != b) == (meaning_key(a.question) in earlier), (i, a, b)
        redrawn += [i] * (a != b)
    assert 0 < len(redrawn) < 100


REPO = Path(__file__).resolve().parents[2]
MATHGEN_INTERPOLATION = re.compile(r"\$\{mathgen:\w+(?:,(\w+))?(?:,(\d+))?\}")


def shipped_task_specs() -> set:
    """Every task a shipped config asks for (``${mathgen:WHAT[,MIX[,VAL_SIZE]]}`` in a preset, a real config or a
    campaign), and every mix at its defaults."""
    specs = {task.TaskSpec(mix=mix) for mix in task.MIXES}
    for folder in ("recipe", "verl_ext/config", "configs"):
        for path in (REPO / folder).rglob("*.yaml"):
            for mix, val_size in MATHGEN_INTERPOLATION.findall(path.read_text()):
                spec = task.TaskSpec(mix=mix or "all")
                specs.add(task.TaskSpec(mix=spec.mix, val_size=int(val_size)) if val_size else spec)
    return specs


def test_every_shipped_task_has_no_held_out_question_with_the_meaning_of_a_training_one(tmp_path):
    """For every shipped task, from the project cache (ensure_task, ensure_large_heldout): validation and the large
    held-out split share no meaning with train, with each other or with the demonstration, and repeat none."""
    from verl_ext.mathgen.cache import ensure_large_heldout, ensure_task

    specs = shipped_task_specs()
    assert task.TaskSpec(mix="steps", val_size=64) in specs and task.TaskSpec(mix="arithmetic") in specs  # presets read
    for spec in sorted(specs, key=repr):
        mix = task.get_mix(spec.mix)
        root = ensure_task(spec, tmp_path)
        large = ensure_large_heldout(spec, cache_dir=tmp_path)
        train = [meaning_key(q) for q in task.questions(root / "train.parquet")]
        val = [meaning_key(q) for q in task.questions(root / "val.parquet")]
        held = [meaning_key(q) for q in task.questions(large)]
        shown = {meaning_key(q) for q in prompts.demonstration_questions(mix.demonstration)}
        assert len(train) == spec.train_size, spec
        assert len(val) == len(set(val)) == spec.val_size, spec
        assert len(held) == len(set(held)) == task.LARGE_HELDOUT_SIZE >= 1024, spec
        assert not set(train) & set(val) and not (set(train) | set(val)) & set(held), spec
        assert not shown & (set(train) | set(val) | set(held)), spec
        assert {i["split"] for i in pd.read_parquet(large)["extra_info"]} == {"heldout_large"}
        sources = [task.data_source(mix.modules[i % len(mix.modules)]) for i in range(task.LARGE_HELDOUT_SIZE)]
        assert list(pd.read_parquet(large)["data_source"]) == sources, spec  # round-robin over the mix's modules
        assert ensure_large_heldout(spec, cache_dir=tmp_path) == large  # served from the cache the second time


def test_the_large_held_out_split_is_deterministic_and_its_own_stream(tmp_path):
    mix = task.get_mix("steps")
    train, val = task.write_task(tmp_path, 64, 16, seed=0, modules=mix.modules, demonstration=mix.demonstration)
    args = dict(size=48, seed=0, modules=mix.modules, demonstration=mix.demonstration)
    a = task.write_large_heldout(tmp_path / "a.parquet", train, val, **args)
    b = task.write_large_heldout(tmp_path / "b.parquet", train, val, **args)
    assert pd.read_parquet(a).to_json() == pd.read_parquet(b).to_json()
    other_seed = task.write_large_heldout(tmp_path / "c.parquet", train, val, **{**args, "seed": 1})
    assert task.questions(a) != task.questions(other_seed)
    # 2**32 + seed is another stream than every one-word seed, the task seed's train and validation ones included
    assert task.large_heldout_seed(0) == 2**32 and task.large_heldout_seed(3) not in task.split_seeds(3)
    wide = task.sample_items(24, seed=task.large_heldout_seed(0), difficulty=0.0, distinct_meanings=False)
    for narrow_seed in (0, 1, *task.split_seeds(0)):
        narrow = task.sample_items(24, seed=narrow_seed, difficulty=0.0, distinct_meanings=False)
        assert [it.question for it in wide] != [it.question for it in narrow]


def test_cli_writes_the_large_held_out_split_on_request(tmp_path, capsys):
    task.main([str(tmp_path), "--train-size", "18", "--val-size", "9", "--mix", "all", "--heldout-large", "27"])
    out = capsys.readouterr().out
    assert "heldout_large: " in out and out.count("best constant answer") == 3
    held = task.questions(tmp_path / "heldout_large.parquet")
    assert len(held) == 27
    taken = {
        meaning_key(q) for q in task.questions(tmp_path / "train.parquet") + task.questions(tmp_path / "val.parquet")
    }
    assert not taken & {meaning_key(q) for q in held}
