"""The group statistics (verl_ext/advantage/groups.py) follow their input's device and dtype: a batch on the GPU
gets its statistics on the GPU, whatever torch's default device is."""

from __future__ import annotations

import pytest
import torch

from verl_ext.advantage.groups import group_mean, group_mean_std, group_range

VALUES = [1.0, 2.0, 3.0, 5.0, 4.0]
GIDS = [0, 0, 1, 1, 2]


def _stats(values: torch.Tensor, gid: torch.Tensor) -> dict[str, torch.Tensor]:
    mean, std = group_mean_std(values, gid, 3)
    return {
        "group_mean": group_mean(values, gid, 3),
        "group_range": group_range(values, gid, 3),
        "group_mean_std.mean": mean,
        "group_mean_std.std": std,
    }


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_the_statistics_are_on_the_inputs_device_not_the_default_one(dtype):
    """On the "meta" device (no data, as a CUDA tensor on a CPU-only machine: only the device differs), and with the
    default device pointing elsewhere than the input."""
    values = torch.tensor(VALUES, dtype=dtype, device="meta")
    gid = torch.tensor(GIDS, device="meta")
    for name, out in _stats(values, gid).items():
        assert (out.device.type, out.dtype, tuple(out.shape)) == ("meta", dtype, (3,)), name
    with torch.device("meta"):  # the default device is not the input's
        cpu = _stats(torch.tensor(VALUES, dtype=dtype, device="cpu"), torch.tensor(GIDS, device="cpu"))
    for name, out in cpu.items():
        assert (out.device.type, out.dtype) == ("cpu", dtype), name
    assert cpu["group_mean"].float().tolist() == [1.5, 4.0, 4.0]
    assert cpu["group_range"].float().tolist() == [1.0, 2.0, 0.0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("gid_device", ["cuda", "cpu"])  # group_ids gives CPU ids
def test_the_statistics_of_a_cuda_batch_are_computed_on_cuda(gid_device):
    values = torch.tensor(VALUES, device="cuda")
    gid = torch.tensor(GIDS, device=gid_device)
    stats = _stats(values, gid)
    for name, out in stats.items():
        assert out.device.type == "cuda", name
    assert stats["group_mean"].tolist() == [1.5, 4.0, 4.0]
    assert stats["group_range"].tolist() == [1.0, 2.0, 0.0]
    assert stats["group_mean_std.std"].cpu().tolist() == pytest.approx([0.70710678, 1.41421356, 1.0])
