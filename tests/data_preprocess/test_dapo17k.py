"""DAPO-Math-17k preprocessing on fixtures built like the real file."""

import random
import re
import unicodedata

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_preprocess.dapo17k import preprocess_dapo17k, strip_dapo_wrapper
from data_preprocess.fixtures import DAPO_HEAD, DAPO_TAIL, make_dapo17k
from data_preprocess.verl_schema import INSTRUCTION
from tests.conftest import dataset_config


@pytest.fixture(scope="module")
def fixture_file(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("dapo") / "dapo-math-17k.parquet")
    facts = make_dapo17k(path, n_unique=80, copies=100, seed=1)
    return path, facts


def _reference(path):
    """Slow, obviously-correct dedup: plain loops over every row of the file."""
    groups: dict[str, set[str]] = {}
    for row in pq.read_table(path).to_pylist():
        messages = row["prompt"] or []
        answer = (row["reward_model"] or {}).get("ground_truth")
        if not messages or not messages[0]["content"] or answer is None or not answer.strip():
            continue
        text = messages[0]["content"]
        if text.startswith(DAPO_HEAD):
            text = text[len(DAPO_HEAD) :]
        if text.endswith(DAPO_TAIL):
            text = text[: -len(DAPO_TAIL)]
        key = " ".join(unicodedata.normalize("NFKC", text).split())
        groups.setdefault(key, set()).add(answer.strip())
    return {k: next(iter(v)) for k, v in groups.items() if len(v) == 1}


def _read(path):
    return pq.read_table(path).to_pylist()


def test_counts_match_generator_and_reference(fixture_file, tmp_path):
    path, facts = fixture_file
    result = preprocess_dapo17k(path, str(tmp_path), test_size=10, seed=0)
    stats = result.stats
    assert facts.rows == 80 * 100 + (facts.ids - 80) * 100
    assert stats.rows_read == facts.rows
    assert stats.malformed == facts.empty_prompt_rows
    assert stats.missing_answer == facts.missing_answer_rows
    assert stats.normalized_duplicates == facts.text_duplicate_ids
    assert stats.conflicting_answers == 2
    assert stats.accounted() == stats.rows_read
    assert stats.kept == facts.usable_problems == result.n_train + result.n_test
    assert result.n_test == 10

    reference = _reference(path)
    rows = _read(result.train_path) + _read(result.test_path)
    got = {" ".join(r["extra_info"]["problem"].split()): r["reward_model"]["ground_truth"] for r in rows}
    assert got == reference


def test_output_schema_and_prompt(fixture_file, tmp_path):
    path, _ = fixture_file
    result = preprocess_dapo17k(path, str(tmp_path), test_size=10, seed=0)
    for split, out in (("train", result.train_path), ("test", result.test_path)):
        rows = _read(out)
        assert [r["extra_info"]["index"] for r in rows] == list(range(len(rows)))
        for r in rows:
            assert set(r) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
            assert r["data_source"] == "dapo17k" and r["ability"] == "math"
            assert r["reward_model"]["style"] == "rule" and r["reward_model"]["ground_truth"]
            assert r["extra_info"]["split"] == split
            (message,) = r["prompt"]
            assert message["role"] == "user"
            assert message["content"] == f"{r['extra_info']['problem']} {INSTRUCTION}"
            assert "Answer:" not in message["content"]  # DAPO's own instruction is gone
            assert re.fullmatch(r"[0-9a-f-]{36}", r["extra_info"]["source_id"])


def test_split_is_seeded_and_order_independent(fixture_file, tmp_path):
    path, _ = fixture_file

    def test_problems(src, seed, out):
        res = preprocess_dapo17k(src, str(tmp_path / out), test_size=15, seed=seed)
        return {r["extra_info"]["problem"] for r in _read(res.test_path)}, res

    a, res_a = test_problems(path, 7, "a")
    b, _ = test_problems(path, 7, "b")
    c, _ = test_problems(path, 8, "c")
    assert a == b and a != c
    train = {r["extra_info"]["problem"] for r in _read(res_a.train_path)}
    assert not a & train

    shuffled = str(tmp_path / "shuffled.parquet")
    table = pq.read_table(path)
    order = list(range(table.num_rows))
    random.Random(5).shuffle(order)
    pq.write_table(table.take(pa.array(order)), shuffled)
    d, _ = test_problems(shuffled, 7, "d")
    assert {" ".join(p.split()) for p in d} == {" ".join(p.split()) for p in a}


def test_bad_test_size(fixture_file, tmp_path):
    path, facts = fixture_file
    with pytest.raises(ValueError, match="test_size"):
        preprocess_dapo17k(path, str(tmp_path), test_size=facts.usable_problems)


def test_jsonl_input_gives_the_same_rows(tmp_path):
    pq_path, jl_path = str(tmp_path / "d.parquet"), str(tmp_path / "d.jsonl")
    make_dapo17k(pq_path, n_unique=12, copies=3, seed=2)
    make_dapo17k(jl_path, n_unique=12, copies=3, seed=2)
    a = preprocess_dapo17k(pq_path, str(tmp_path / "a"), test_size=3)
    b = preprocess_dapo17k(jl_path, str(tmp_path / "b"), test_size=3)
    assert _read(a.train_path) == _read(b.train_path) and _read(a.test_path) == _read(b.test_path)


def test_missing_column_is_a_clear_error(tmp_path):
    path = str(tmp_path / "bad.parquet")
    pq.write_table(pa.table({"prompt": [[{"role": "user", "content": "x"}]]}), path)
    with pytest.raises(KeyError, match="reward_model"):
        preprocess_dapo17k(path, str(tmp_path / "o"), test_size=0)


@pytest.mark.parametrize(
    "content, problem, wrapped",
    [
        (DAPO_HEAD + "Find $x$." + DAPO_TAIL, "Find $x$.", True),
        (DAPO_HEAD + "Find $x$.", "Find $x$.", True),
        ("Find $x$." + DAPO_TAIL, "Find $x$.", True),
        ("  Find $x$.  ", "Find $x$.", False),
    ],
)
def test_strip_wrapper(content, problem, wrapped):
    assert strip_dapo_wrapper(content) == (problem, wrapped)


@pytest.mark.parametrize("chat", [True, False])
def test_loads_in_verl_rlhf_dataset(fixture_file, tmp_path, tiny_tokenizer, chat):
    from verl.utils.dataset.rl_dataset import collate_fn

    from verl_ext.dataset.prompt_ids import prompt_token_ids
    from verl_ext.dataset.raw_prompt import RawPromptRLHFDataset

    path, _ = fixture_file
    result = preprocess_dapo17k(path, str(tmp_path), test_size=10, seed=0, use_chat_template=chat)
    rows = _read(result.test_path)
    ds = RawPromptRLHFDataset(result.test_path, tiny_tokenizer, dataset_config(tmp_path, 4096))
    assert len(ds) == len(rows) == 10
    items = [ds[i] for i in range(len(ds))]
    for item, row in zip(items, rows):
        assert item["reward_model"]["ground_truth"] == row["reward_model"]["ground_truth"]
        assert item["index"] == row["extra_info"]["index"]
        assert item["dummy_tensor"].shape == (1,)
        ids = prompt_token_ids(tiny_tokenizer, item["raw_prompt"])
        text = tiny_tokenizer.decode(ids)
        if chat:
            assert item["raw_prompt"] == row["prompt"]
            assert text == tiny_tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
            assert text.startswith("<|im_start|>user\n")
        else:
            assert item["raw_prompt"] == row["prompt"] and text == row["prompt"]  # no template at all
            assert text.endswith(INSTRUCTION)
    batch = collate_fn(items)
    assert batch["dummy_tensor"].shape == (10, 1) and len(batch["raw_prompt"]) == 10

    # The length filter counts what the rollout will tokenize: a limit just under the longest prompt drops it.
    lengths = sorted(len(prompt_token_ids(tiny_tokenizer, it["raw_prompt"])) for it in items)
    short = RawPromptRLHFDataset(result.test_path, tiny_tokenizer, dataset_config(tmp_path, lengths[-1] - 1))
    assert len(short) == sum(n <= lengths[-1] - 1 for n in lengths)
