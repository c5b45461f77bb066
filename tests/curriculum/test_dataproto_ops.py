"""DataProto helpers against slow plain-python references on random and edge inputs (real verl DataProto)."""

import numpy as np
import pytest
import torch
from verl import DataProto

from verl_ext.curriculum.dataproto_ops import (
    PAD_KEY,
    interleave_by_uid,
    pad_to_multiple,
    truncate,
    uid_group_order,
)


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


# ---------------------------------------------------------------- truncate


def reference_truncate_rows(tensor: torch.Tensor, start: int, end: int) -> list[list[int]]:
    return [[int(tensor[r, c]) for c in range(start, end)] for r in range(tensor.shape[0])]


@pytest.mark.parametrize("seed", range(6))
def test_truncate_matches_column_loop(seed):
    rng = np.random.default_rng(seed)
    data = random_proto(rng, rows=int(rng.integers(1, 9)))
    start = int(rng.integers(0, 6))
    end = int(rng.integers(start + 1, 8))
    out = truncate(data, start, end)
    for key in ("input_ids", "attention_mask"):
        assert out.batch[key].tolist() == reference_truncate_rows(data.batch[key], start, end)
        assert out.batch[key].is_contiguous()
    assert torch.equal(out.batch["row_id"], data.batch["row_id"])  # 1-D: per-row scalars stay
    assert out.non_tensor_batch["tag"] is data.non_tensor_batch["tag"]
    assert out.meta_info == {"note": "kept"}
    assert data.batch["input_ids"].shape[1] == 7  # input untouched


def test_truncate_full_width_is_identity():
    data = random_proto(np.random.default_rng(0), rows=3)
    assert torch.equal(truncate(data, 0, 7).batch["input_ids"], data.batch["input_ids"])


@pytest.mark.parametrize(
    ("start", "end", "match"),
    [
        (-1, 3, "0 <= start < end"),
        (3, 3, "0 <= start < end"),
        (4, 2, "0 <= start < end"),
        (0, 8, "exceeds the 7 columns"),
    ],
)
def test_truncate_bad_ranges(start, end, match):
    with pytest.raises(ValueError, match=match):
        truncate(random_proto(np.random.default_rng(0), rows=2), start, end)


def test_truncate_rejects_3d_tensors_and_missing_batch():
    data = DataProto.from_dict(tensors={"position_ids": torch.zeros(2, 3, 5, dtype=torch.long)})
    with pytest.raises(ValueError, match="position_ids"):
        truncate(data, 0, 2)
    with pytest.raises(ValueError, match="no"):
        truncate(DataProto.from_dict(non_tensors={"uid": np.array(["a"], dtype=object)}), 0, 1)
    with pytest.raises(TypeError):
        truncate(random_proto(np.random.default_rng(0), rows=2), 0.0, 2)


# ---------------------------------------------------------------- interleave_by_uid


def reference_group_order(uids: list) -> list[int]:
    groups: dict = {}
    for i, u in enumerate(uids):
        groups.setdefault(u, []).append(i)  # dicts keep first-seen order
    return [i for rows in groups.values() for i in rows]


@pytest.mark.parametrize("seed", range(20))
def test_interleave_matches_reference(seed):
    rng = np.random.default_rng(seed)
    rows = int(rng.integers(1, 40))
    n_groups = int(rng.integers(1, rows + 1))
    uids = [f"g{int(g)}" for g in rng.integers(0, n_groups, size=rows)]
    data = random_proto(rng, rows, uids=uids)
    out = interleave_by_uid(data)
    expected = reference_group_order(uids)
    assert out.batch["row_id"].tolist() == expected  # whole rows moved together
    assert out.non_tensor_batch["uid"].tolist() == [uids[i] for i in expected]
    assert [t["i"] for t in out.non_tensor_batch["tag"]] == expected
    assert torch.equal(out.batch["input_ids"], data.batch["input_ids"][torch.tensor(expected)])


@pytest.mark.parametrize("uids", [["a"], ["a", "a", "a"], ["c", "b", "a"], ["b", "a", "b", "a"], ["x", "y", "x", "x"]])
def test_interleave_edge_cases(uids):
    assert uid_group_order(np.array(uids, dtype=object)).tolist() == reference_group_order(uids)


def test_interleave_other_key_empty_and_missing():
    rng = np.random.default_rng(1)
    data = random_proto(rng, 4)
    data.non_tensor_batch["prompt"] = np.array(["p2", "p1", "p2", "p1"], dtype=object)
    assert interleave_by_uid(data, key="prompt").batch["row_id"].tolist() == [0, 2, 1, 3]
    assert len(interleave_by_uid(data.select_idxs(np.zeros(0, dtype=np.int64)))) == 0
    with pytest.raises(ValueError, match=r"no non_tensor_batch column 'group'.*prompt"):
        interleave_by_uid(data, key="group")


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

    code = (
        "import verl_ext.plugin, verl_ext.curriculum; from verl import DataProto; "
        "print(hasattr(DataProto, 'truncate'), hasattr(DataProto, 'interleave_by_uid'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
