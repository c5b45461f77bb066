"""How far did training move the policy? The distance of actor checkpoints from the model they started from.

    .venv/bin/python scripts/policy_drift.py plain=outputs/.../plain_s2/global_step_16/actor \
        fast=outputs/.../fast_s1/global_step_16/actor [--base MODEL_DIR]   # base: SmolLM2-135M-Instruct's cache

For each checkpoint (verl's FSDP actor directory, `model_world_size_1_rank_0.pt`) prints, over the parameters it
shares with the base model (a Hugging Face directory of safetensors): the relative distance ||theta - theta0|| /
||theta0|| and the root-mean-square change per parameter element. Adam's step is about lr per element whatever the
gradient's scale, so two arms at the same learning rate and step whose gradients differ in scale (a training batch
whose uniform groups dilute the loss) move the policy about as far when their steps point the same way, and less
when the steps' directions disagree from one step to the next (noise averaging out in the moments).
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
from pathlib import Path

import torch

MODEL_FILE = "model_world_size_1_rank_0.pt"  # verl's FSDP checkpoint at world size 1


def load_actor(actor_dir: str | Path) -> dict[str, torch.Tensor]:
    """Full tensors of a verl FSDP actor checkpoint saved at world size 1 (its DTensors hold the whole tensor)."""
    path = Path(actor_dir) / MODEL_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not a verl actor checkpoint at world size 1")
    # unpickling the DTensors' device mesh without a process group warns about torch.compile, which is not used here
    logging.getLogger("torch.distributed.device_mesh").setLevel(logging.ERROR)
    state = torch.load(path, map_location="cpu", weights_only=False)
    return {k: (v.to_local() if hasattr(v, "to_local") else v).float() for k, v in state.items()}


def load_base(model_dir: str | Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{model_dir}: no *.safetensors files")
    base: dict[str, torch.Tensor] = {}
    for f in files:
        base.update({k: v.float() for k, v in load_file(f).items()})
    return base


def drift(state: dict[str, torch.Tensor], base: dict[str, torch.Tensor]) -> dict[str, float]:
    """Relative L2 distance and RMS change per element over the parameters both hold (same name and shape)."""
    shared = [k for k in state if k in base and state[k].shape == base[k].shape]
    if not shared:
        raise ValueError("the checkpoint and the base model share no parameter (name and shape)")
    diff_sq = sum(float((state[k] - base[k]).double().pow(2).sum()) for k in shared)
    base_sq = sum(float(base[k].double().pow(2).sum()) for k in shared)
    numel = sum(base[k].numel() for k in shared)
    return {
        "relative_l2": math.sqrt(diff_sq / base_sq),
        "rms_change": math.sqrt(diff_sq / numel),
        "params": float(numel),
        "tensors": float(len(shared)),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoints", nargs="+", metavar="LABEL=ACTOR_DIR")
    p.add_argument("--base", help="the starting model's directory (default: SmolLM2-135M-Instruct's cached copy)")
    args = p.parse_args(argv)
    pairs = []
    for item in args.checkpoints:
        label, sep, path = item.partition("=")
        if not sep or not label or not path:
            raise SystemExit(f"{item!r}: give LABEL=ACTOR_DIR")
        pairs.append((label, path))
    if args.base is None:
        from verl_ext.pretrained.smollm2 import ensure_smollm2

        args.base = ensure_smollm2()
    base = load_base(args.base)
    print(f"{'checkpoint':<24} {'||d|| / ||theta0||':>20} {'rms change':>12} {'params':>12}")
    for label, path in pairs:
        d = drift(load_actor(path), base)
        print(f"{label:<24} {d['relative_l2']:>20.3e} {d['rms_change']:>12.3e} {int(d['params']):>12d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
