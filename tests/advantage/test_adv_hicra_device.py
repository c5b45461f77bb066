"""HICRA's in-place factor stays on its input's device: a CPU scalar beside CUDA tensors made `torch.addcmul` fail
on every GPU batch of `gtpo_hicra` (found by scripts/gpu_check.py on an H200). The "meta" device stands in for CUDA
here: it refuses the same cross-device mix."""

from __future__ import annotations

import pytest
import torch

from verl_ext.advantage.hicra import hicra, hicra_factor_


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_factor_is_computed_on_the_inputs_device(dtype):
    planning = torch.zeros(3, 4, dtype=dtype, device="meta")
    episode = torch.zeros(3, dtype=dtype, device="meta")
    out = hicra_factor_(planning, episode, 0.2)
    assert (out.device.type, out.dtype, tuple(out.shape)) == ("meta", dtype, (3, 4))


def test_the_factor_times_a_same_signed_advantage_is_hicra():
    g = torch.Generator().manual_seed(0)
    episode = torch.tensor([1.5, -0.5, 0.0])
    token = episode[:, None] * torch.rand(3, 5, generator=g)  # each token's sign is its response's (as after GTPO)
    plan = torch.rand(3, 5, generator=g) < 0.4
    factor = hicra_factor_(plan.to(torch.float32), episode, 0.2)
    torch.testing.assert_close(token * factor, hicra(token, plan, 0.2))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_factor_on_cuda_matches_cpu():
    planning = (torch.rand(8, 16) < 0.3).float()
    episode = torch.randn(8)
    cpu = hicra_factor_(planning.clone(), episode, 0.2)
    gpu = hicra_factor_(planning.cuda(), episode.cuda(), 0.2)
    assert gpu.device.type == "cuda"
    torch.testing.assert_close(gpu.cpu(), cpu)
