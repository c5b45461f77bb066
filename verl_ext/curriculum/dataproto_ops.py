"""DataProto padding for two-phase curriculum sampling (SPEED-RL, arXiv 2506.09016; docs/ALGORITHMS.md section 4).

The SPEED-RL code patched ``truncate`` and ``interleave_by_uid`` into verl's ``DataProto``; this project needs
neither (the controller keeps prompts and responses apart and groups rows itself) and never patches verl's classes.

- ``pad_to_multiple(batch, k)``: verl's agent-loop manager splits the generation batch with ``DataProto.chunk(k)``,
  which needs ``len % k == 0``. Pad rows are copies of real rows marked ``non_tensor_batch[PAD_KEY] = True`` so the
  consumer (``DataController.update``) drops them before any bookkeeping.
"""

from __future__ import annotations

import numpy as np
from tensordict import TensorDict
from verl import DataProto

PAD_KEY = "__is_pad__"


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
