"""The shared row schema: the columns verl's RLHFDataset reads, chat or plain-string prompts, and no empty tables."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from verl_ext.dataset.schema import MESSAGES, REWARD_MODEL, rl_table, write_table


def test_rows_round_trip_through_parquet_with_the_schema_verl_reads(tmp_path):
    chat = [[{"role": "user", "content": "1+1?"}], [{"role": "user", "content": "2+2?"}]]
    table = rl_table(["a", "b"], chat, ["2", "4"], [{"split": "train", "index": 0}, {"split": "train", "index": 1}])
    back = pq.read_table(write_table(table, tmp_path / "sub" / "t.parquet"))
    assert back.schema.field("prompt").type == MESSAGES and back.schema.field("reward_model").type == REWARD_MODEL
    assert back.column("extra_info").type == pa.struct([("split", pa.string()), ("index", pa.int64())])
    rows = back.to_pylist()
    assert rows[1]["prompt"] == chat[1] and rows[1]["reward_model"] == {"style": "rule", "ground_truth": "4"}
    assert [r["ability"] for r in rows] == ["math", "math"]
    plain = rl_table(["a"], ["Question: 1+1?"], ["2"], [{}])
    assert plain.schema.field("prompt").type == pa.string()


def test_no_rows_and_ragged_columns_are_errors():
    with pytest.raises(ValueError, match="no rows"):
        rl_table([], [], [], [])
    with pytest.raises(ValueError, match="one entry per row"):
        rl_table(["a"], ["q1", "q2"], ["1", "2"], [{}, {}])
