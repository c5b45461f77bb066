"""Prompt groups: verl's `index` (one uid per response, the G responses of a prompt share it) as group ids.

All per-group statistics in this package are computed for the whole batch at once from these ids with
`index_add_` / `scatter_reduce_`, never by looping over groups in Python. Their outputs are on the input's device
and of its dtype (`new_zeros` / `new_full`), never torch's default device; the group ids (from `group_ids`, on the
CPU) are moved to the values' device.
"""

from __future__ import annotations

import numpy as np
import torch


def group_ids(index, batch_size: int) -> tuple[torch.Tensor, int]:
    """(LongTensor (bs,) of group ids 0..G-1, G) from an array of uids (strings, ints, anything sortable)."""
    if index is None:
        raise ValueError("advantage estimators need `index` (the uid of each response's prompt), got None")
    uids = np.asarray(index)
    if uids.ndim != 1 or uids.shape[0] != batch_size:
        raise ValueError(f"index must be a 1-D array with one uid per response ({batch_size}), got shape {uids.shape}")
    _, inverse = np.unique(uids, return_inverse=True)
    inverse = inverse.reshape(-1).astype(np.int64)
    return torch.from_numpy(inverse), int(inverse.max()) + 1 if batch_size else 0


def group_mean(values: torch.Tensor, gid: torch.Tensor, n_groups: int) -> torch.Tensor:
    """(G,) mean of `values` (bs,) within each group."""
    gid = gid.to(values.device)
    sums = values.new_zeros(n_groups).index_add_(0, gid, values)
    counts = values.new_zeros(n_groups).index_add_(0, gid, torch.ones_like(values))
    return sums / counts


def group_range(values: torch.Tensor, gid: torch.Tensor, n_groups: int) -> torch.Tensor:
    """(G,) max - min of `values` (bs,) within each group."""
    gid = gid.to(values.device)
    high = values.new_full((n_groups,), -torch.inf).scatter_reduce_(0, gid, values, "amax")
    low = values.new_full((n_groups,), torch.inf).scatter_reduce_(0, gid, values, "amin")
    return high - low


def group_mean_std(values: torch.Tensor, gid: torch.Tensor, n_groups: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(G,) mean and unbiased std of `values` (bs,) within each group, verl's `grpo` convention: a group of one gets
    mean 0 and std 1 (its advantage is then its own reward)."""
    gid = gid.to(values.device)
    count = values.new_zeros(n_groups)
    count.index_add_(0, gid, torch.ones_like(values))
    total = torch.zeros_like(count).index_add_(0, gid, values)
    mean = total / count
    sq_dev = torch.zeros_like(count).index_add_(0, gid, (values - mean[gid]) ** 2)
    std = (sq_dev / (count - 1).clamp(min=1)).sqrt()
    single = count == 1
    return torch.where(single, torch.zeros_like(mean), mean), torch.where(single, torch.ones_like(std), std)
