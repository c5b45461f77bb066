"""The fixture generators and their command line; the full-size file reproduces the published data set's counts."""

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from data_preprocess.dapo17k import preprocess_dapo17k
from data_preprocess.fixtures import MATH_SET_NAMES, make_dapo17k

REPO = Path(__file__).resolve().parents[2]


def test_real_dapo_schema(tmp_path):
    path = str(tmp_path / "d.parquet")
    facts = make_dapo17k(path, n_unique=10, copies=4)
    table = pq.read_table(path)
    assert table.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    prompt_type = table.schema.field("prompt").type
    assert pa.types.is_list(prompt_type)
    assert prompt_type.value_type == pa.struct([("content", pa.string()), ("role", pa.string())])
    assert str(table.schema.field("reward_model").type) == "struct<ground_truth: string, style: string>"
    assert str(table.schema.field("extra_info").type) == "struct<index: string>"
    rows = table.to_pylist()
    assert len(rows) == facts.rows == facts.ids * 4
    assert {r["data_source"] for r in rows} == {"math_dapo"} and {r["ability"] for r in rows} == {"MATH"}
    assert {r["reward_model"]["style"] for r in rows} == {"rule-lighteval/MATH_v2"}
    # Each id appears exactly `copies` times, shuffled (not in blocks).
    ids = [r["extra_info"]["index"] for r in rows]
    assert all(ids.count(i) == 4 for i in set(ids))
    assert ids != sorted(ids, key=ids.index)


def test_full_size_file_gives_the_seed_counts(tmp_path):
    path = str(tmp_path / "full.parquet")
    facts = make_dapo17k(path, full_size=True)
    assert facts.rows == 1_791_700 and facts.ids == 17_917
    result = preprocess_dapo17k(path, str(tmp_path / "out"), test_size=1000, seed=42)
    assert result.stats.kept == 17_398
    assert (result.n_train, result.n_test) == (16_398, 1_000)


def test_make_fixtures_script(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "make_fixtures.py"), "--out-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    for name in ("dapo17k_small", *MATH_SET_NAMES):
        assert (tmp_path / f"{name}.parquet").exists(), out
        assert name in out
