"""DataProto helpers for two-phase curriculum sampling (SPEED-RL, arXiv 2506.09016; docs/ALGORITHMS.md).

verl 0.9.1's ``DataProto`` has no ``truncate`` and no ``interleave_by_uid``. The SPEED-RL code patched them into
``verl/protocol.py``; this project never edits or patches verl's classes: they are plain functions taking a
``DataProto``, called directly.

- ``truncate(data, start, end)``: column slice ``[:, start:end]`` of every 2-D tensor in ``data.batch`` (e.g. cut a
  ``prompt+response`` row back to its left-padded prompt: ``truncate(rows.select(["input_ids", "attention_mask",
  "position_ids"]), 0, prompt_len)``). 1-D tensors are per-row scalars and are kept; tensors of 3 or more dims have
  no single column axis and are rejected (select the keys to cut first).
- ``interleave_by_uid(data, key)``: a stable permutation that makes the rows of each uid contiguous, groups in the
  order their uid is first seen, rows of a group in their original order: what group-wise estimators (GRPO, RLOO)
  and sequence-balanced splits expect of rows that arrive in any order (the ``DataController`` already knows each
  row's prompt position and sorts by it, which keeps FIFO order of prompts rather than first-seen order).
- ``pad_to_multiple(batch, k)``: verl's agent-loop manager splits the generation batch with ``DataProto.chunk(k)``,
  which needs ``len % k == 0``. Pad rows are copies of real rows marked ``non_tensor_batch[PAD_KEY] = True`` so the
  consumer (``DataController.update``) drops them before any bookkeeping.
"""

from __future__ import annotations

import numpy as np
from tensordict import TensorDict
from verl import DataProto

PAD_KEY = "__is_pad__"


def truncate(data: DataProto, start: int, end: int) -> DataProto:
    """Columns ``[start, end)`` of every 2-D tensor; non-tensor columns and meta_info are shared, not copied.

    Returned tensors are contiguous (a column slice would otherwise keep the whole wide tensor alive).
    """
    if data.batch is None:
        raise ValueError("truncate needs tensors in data.batch; this DataProto has none")
    if not (isinstance(start, int | np.integer) and isinstance(end, int | np.integer)):
        raise TypeError(f"start and end must be ints, got {type(start).__name__} and {type(end).__name__}")
    if start < 0 or end <= start:
        raise ValueError(f"truncate needs 0 <= start < end, got start={start}, end={end}")
    sliced = {}
    for key, tensor in data.batch.items():
        if tensor.dim() == 1:
            sliced[key] = tensor
        elif tensor.dim() == 2:
            if end > tensor.shape[1]:
                raise ValueError(f"truncate end={end} exceeds the {tensor.shape[1]} columns of '{key}'")
            sliced[key] = tensor[:, start:end].contiguous()
        else:
            raise ValueError(
                f"truncate slices 2-D tensors only; '{key}' has shape {tuple(tensor.shape)}. "
                "Select the keys to cut with data.select(batch_keys=[...]) first."
            )
    batch = TensorDict(sliced, batch_size=data.batch.batch_size, device=data.batch.device)
    return type(data)(batch=batch, non_tensor_batch=dict(data.non_tensor_batch), meta_info=data.meta_info)


def uid_group_order(uids: np.ndarray) -> np.ndarray:
    """Permutation making equal uids contiguous: groups in first-seen order, stable within a group."""
    uids = np.asarray(uids)
    if len(uids) == 0:
        return np.zeros(0, dtype=np.int64)
    _, first_index, inverse = np.unique(uids, return_index=True, return_inverse=True)
    # np.unique numbers groups in sorted-uid order; re-rank them by where each uid first appears.
    rank_of_group = np.empty(len(first_index), dtype=np.int64)
    rank_of_group[np.argsort(first_index, kind="stable")] = np.arange(len(first_index))
    return np.argsort(rank_of_group[inverse.reshape(-1)], kind="stable")


def interleave_by_uid(data: DataProto, key: str = "uid") -> DataProto:
    """Rows regrouped so each ``key`` value's rows are contiguous (first-seen group order, stable)."""
    if key not in data.non_tensor_batch:
        raise ValueError(
            f"interleave_by_uid: no non_tensor_batch column '{key}'; available: {sorted(data.non_tensor_batch)}"
        )
    if len(data) == 0:
        return data
    return data.select_idxs(uid_group_order(data.non_tensor_batch[key]))


def pad_to_multiple(batch: DataProto, k: int) -> tuple[DataProto, int]:
    """Pad ``batch`` to a multiple of ``k`` rows with copies of its first rows (cycled) marked as padding.

    Every row of the result carries ``non_tensor_batch[PAD_KEY]`` (True for pad rows). The input is not modified,
    and the result has its own containers (adding columns to it leaves the input as it was).
    Returns ``(padded, n_pad)`` with ``0 <= n_pad < k``.
    """
    if not isinstance(k, int | np.integer) or k < 1:
        raise ValueError(f"pad_to_multiple needs an int k >= 1 (number of workers), got {k!r}")
    if len(batch) == 0:
        raise ValueError("pad_to_multiple: cannot pad an empty batch (no row to copy)")
    existing = batch.non_tensor_batch.get(PAD_KEY)
    is_pad = np.zeros(len(batch), dtype=bool) if existing is None else np.asarray(existing, dtype=bool)
    # A new TensorDict container (same tensors): a later union() onto the result must not add keys to `batch`.
    tensors = None if batch.batch is None else batch.batch.clone(recurse=False)
    marked = type(batch)(
        batch=tensors, non_tensor_batch={**batch.non_tensor_batch, PAD_KEY: is_pad}, meta_info=dict(batch.meta_info)
    )
    n_pad = int(-len(batch) % k)
    if n_pad == 0:
        return marked, 0
    pad = marked.select_idxs(np.arange(n_pad) % len(batch))
    pad.non_tensor_batch[PAD_KEY] = np.ones(n_pad, dtype=bool)
    return DataProto.concat([marked, pad]), n_pad
