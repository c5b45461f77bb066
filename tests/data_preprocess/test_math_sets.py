"""Evaluation / extra training sets from fixtures in each set's real column layout."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from data_preprocess.fixtures import MATH_SET_NAMES, make_math_set
from data_preprocess.math_sets import SPECS, preprocess_math_set
from data_preprocess.verl_schema import INSTRUCTION


def _source_rows(path):
    return pq.read_table(path).to_pylist()


def _reference(name, rows):
    """Slow reference: first answer per problem, per each set's documented rules."""
    spec = SPECS[name]
    out = {}
    for r in rows:
        problem = next(r[c] for c in spec.problem_columns if c in r)
        answer = next((r[c] for c in spec.answer_columns if c in r), None)
        if isinstance(answer, float) and answer.is_integer():
            answer = int(answer)
        answer = "" if answer is None else str(answer).strip()
        if answer.lower() in spec.invalid_answers:
            continue
        if not answer and spec.solution_columns:
            solution = r[spec.solution_columns[0]]
            if "\\boxed{" in solution:
                answer = solution.rsplit("\\boxed{", 1)[1].split("}", 1)[0]
        if answer:
            out.setdefault(" ".join(problem.split()), answer)
    return out


@pytest.mark.parametrize("name", MATH_SET_NAMES)
def test_each_set(name, tmp_path):
    src = str(tmp_path / f"{name}.parquet")
    make_math_set(name, src, n=14, duplicate_rows=3)
    path, n, stats = preprocess_math_set(name, src, str(tmp_path / "out"))
    assert path.endswith(f"{SPECS[name].data_source}.parquet")
    rows = pq.read_table(path).to_pylist()
    assert n == len(rows) == stats.kept
    assert stats.accounted() == stats.rows_read
    expected = _reference(name, _source_rows(src))
    assert {" ".join(r["extra_info"]["problem"].split()): r["reward_model"]["ground_truth"] for r in rows} == expected
    for r in rows:
        assert r["data_source"] == SPECS[name].data_source
        assert r["extra_info"]["split"] == SPECS[name].split
        assert r["prompt"] == [{"role": "user", "content": f"{r['extra_info']['problem']} {INSTRUCTION}"}]


def test_quirks_are_counted(tmp_path):
    src = str(tmp_path / "numina.parquet")
    make_math_set("numina_math", src, n=14, duplicate_rows=0)
    _, n, stats = preprocess_math_set("numina_math", src, str(tmp_path / "o"))
    assert stats.missing_answer == 2  # rows 3 and 10 are proofs; rows 5 and 12 have the answer only in \boxed{}
    assert n == 12

    src = str(tmp_path / "omr.parquet")
    make_math_set("open_math_reasoning", src, n=5, duplicate_rows=0)
    _, n, stats = preprocess_math_set("open_math_reasoning", src, str(tmp_path / "o"))
    assert stats.rows_read == 15 and n == 5  # three solutions per problem -> one row

    src = str(tmp_path / "amc.parquet")
    make_math_set("amc2023", src, n=5, duplicate_rows=0)
    path, _, _ = preprocess_math_set("amc2023", src, str(tmp_path / "o"))
    truths = [r["reward_model"]["ground_truth"] for r in pq.read_table(path).to_pylist()]
    assert all(t.isdigit() for t in truths)  # 27.0 -> "27"


def test_raw_string_prompts_and_sampling(tmp_path):
    src = str(tmp_path / "m.parquet")
    make_math_set("math500", src, n=30, duplicate_rows=0)
    path, n, _ = preprocess_math_set("math500", src, str(tmp_path / "a"), use_chat_template=False, max_rows=10, seed=3)
    rows = pq.read_table(path).to_pylist()
    assert n == 10 and all(isinstance(r["prompt"], str) and r["prompt"].endswith(INSTRUCTION) for r in rows)
    again, _, _ = preprocess_math_set("math500", src, str(tmp_path / "b"), use_chat_template=False, max_rows=10, seed=3)
    other, _, _ = preprocess_math_set("math500", src, str(tmp_path / "c"), use_chat_template=False, max_rows=10, seed=4)
    problems = lambda p: [r["extra_info"]["problem"] for r in pq.read_table(p).to_pylist()]  # noqa: E731
    assert problems(path) == problems(again) != problems(other)


def test_alternative_layouts_and_errors(tmp_path):
    # Maxwell-Jia/AIME_2024 capitalises its columns; opencompass/AIME2025 uses question/answer.
    src = str(tmp_path / "aime.jsonl")
    table = pa.table({"ID": ["2024-I-1"], "Problem": ["Find $n$."], "Answer": [33]})
    pq.write_table(table, str(tmp_path / "x.parquet"))
    path, n, _ = preprocess_math_set("aime2024", str(tmp_path / "x.parquet"), str(tmp_path / "o"))
    row = pq.read_table(path).to_pylist()[0]
    assert n == 1 and row["reward_model"]["ground_truth"] == "33" and row["extra_info"]["source_id"] == "2024-I-1"
    with open(src, "w") as f:
        f.write('{"question": "Find $m$.", "answer": "7"}\n')
    _, n, _ = preprocess_math_set("aime2025", src, str(tmp_path / "o"))
    assert n == 1

    pq.write_table(pa.table({"text": ["x"], "answer": ["1"]}), str(tmp_path / "bad.parquet"))
    with pytest.raises(KeyError, match="problem column"):
        preprocess_math_set("math500", str(tmp_path / "bad.parquet"), str(tmp_path / "o"))
    with pytest.raises(KeyError, match="unknown set"):
        preprocess_math_set("gsm8k", src, str(tmp_path / "o"))
    with pytest.raises(FileNotFoundError):
        preprocess_math_set("math500", str(tmp_path / "nope.parquet"), str(tmp_path / "o"))


def test_eval_file_loads_in_verl(tmp_path, tiny_tokenizer):
    from verl.utils.dataset.rl_dataset import RLHFDataset

    src = str(tmp_path / "m.parquet")
    make_math_set("math500", src, n=8, duplicate_rows=0)
    path, n, _ = preprocess_math_set("math500", src, str(tmp_path / "o"))
    cfg = OmegaConf.create(
        {
            "prompt_key": "prompt",
            "max_prompt_length": 4096,
            "filter_overlong_prompts": True,
            "filter_overlong_prompts_workers": 1,
            "cache_dir": str(tmp_path / "cache"),
        }
    )
    ds = RLHFDataset(path, tiny_tokenizer, cfg)
    assert len(ds) == n
    assert {ds[i]["data_source"] for i in range(n)} == {"math500"}
