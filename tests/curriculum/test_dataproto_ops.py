"""pad_to_multiple on random and edge inputs (real verl DataProto); verl's DataProto class is never patched."""

import numpy as np
import pytest
import torch
from verl import DataProto

from verl_ext.curriculum.dataproto_ops import PAD_KEY, pad_to_multiple


def random_proto(rng: np.random.Generator, rows: int, uids=None, width: int = 7) -> DataProto:
    gen = torch.Generator().manual_seed(int(rng.integers(1 << 30)))
    return DataProto.from_dict(
        tensors={
            "input_ids": torch.randint(0, 1000, (rows, width), generator=gen),
            "attention_mask": torch.randint(0, 2, (rows, width), generator=gen),
            "row_id": torch.arange(rows),
        },
        non_tensors={
            "uid": np.array(uids if uids is not None else [f"u{i}" for i in range(rows)], dtype=object),
            "tag": np.array([{"i": i} for i in range(rows)], dtype=object),
        },
        meta_info={"note": "kept"},
    )


# ---------------------------------------------------------------- pad_to_multiple


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("k", [1, 2, 3, 4, 7])
def test_pad_to_multiple(rows, k):
    data = random_proto(np.random.default_rng(rows * 10 + k), rows)
    padded, n_pad = pad_to_multiple(data, k)
    assert len(padded) % k == 0 and 0 <= n_pad < k and len(padded) == rows + n_pad
    is_pad = padded.non_tensor_batch[PAD_KEY]
    assert is_pad.tolist() == [False] * rows + [True] * n_pad
    assert padded.batch["row_id"][:rows].tolist() == list(range(rows))
    # pad rows are copies of real rows (cycled from the first)
    assert padded.batch["row_id"][rows:].tolist() == [i % rows for i in range(n_pad)]
    assert PAD_KEY not in data.non_tensor_batch  # input not modified
    chunks = padded.chunk(k)  # verl's own even split, as the agent-loop manager does it
    assert sum(len(c) for c in chunks) == len(padded)


def test_pad_keeps_existing_marks_and_rejects_bad_input():
    data = random_proto(np.random.default_rng(0), 3)
    once, _ = pad_to_multiple(data, 2)
    twice, n_pad = pad_to_multiple(once, 3)
    assert n_pad == 2 and twice.non_tensor_batch[PAD_KEY].tolist() == [False, False, False, True, True, True]
    with pytest.raises(ValueError, match="k >= 1"):
        pad_to_multiple(data, 0)
    with pytest.raises(ValueError, match="empty"):
        pad_to_multiple(data.select_idxs(np.zeros(0, dtype=np.int64)), 2)


def test_union_onto_padded_result_leaves_input_alone():
    data = random_proto(np.random.default_rng(0), 4)
    padded, n_pad = pad_to_multiple(data, 2)
    assert n_pad == 0
    padded.union(DataProto.from_dict(tensors={"responses": torch.zeros(4, 2)}))
    assert "responses" not in data.batch.keys()


def test_verls_dataproto_class_is_not_patched():
    """Loading the project (the verl.plugins entry point included) adds no methods to verl's DataProto."""
    import subprocess
    import sys

    code = ("import verl_ext.plugin, verl_ext.curriculum; from verl import DataProto; "
            "print(hasattr(DataProto, 'truncate'), hasattr(DataProto, 'interleave_by_uid'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
