"""Export a trained actor checkpoint (verl's FSDP/FSDP2 shards) to a float32 Hugging Face directory that vLLM serves.

Why not verl's own merger (`python -m verl.model_merger merge --backend fsdp ...`): it runs on CPU here, but it
casts every tensor to bfloat16 (verl 0.9.1, verl/model_merger/fsdp_model_merger.py). The project trains in float32
with small learning rates, and the rounding erases most of the training: on the advantage campaign's
grpo+none_s0 step-16 actor (SmolLM2-135M, lr 1e-5, 16 steps) the bfloat16 rounding error of the weights has norm
2.86 against 0.50 for the whole change training made, and 89% of the changed weights round back to the released
model's bfloat16 value. This export keeps the checkpoint's own dtype (float32).

What it reads: `<actor dir>/huggingface/` (config, tokenizer, chat template, generation config, saved by verl) and
`model_world_size_<W>_rank_<r>.pt` for r < W (each rank's state dict of DTensors). A parameter sharded on a 1-D mesh
(`Shard(d)`) is the ranks' local tensors concatenated along d in rank order; a replicated one is rank 0's. Other
layouts (2-D meshes: tensor or hybrid parallelism) are refused with the reason. The directory is written to a
temporary name and renamed into place when complete.

    python -m verl_ext.pretrained.export --local-dir CKPT/global_step_16/actor --target-dir outputs/teachers/NAME
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

_SHARD_FILE = re.compile(r"^model_world_size_(\d+)_rank_(\d+)\.pt$")
# what verl saves beside the config in <actor>/huggingface and vLLM reads: copied as they are
_HF_FILES = ("chat_template.jinja", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
             "special_tokens_map.json", "vocab.json", "merges.txt", "tokenizer.model")  # fmt: skip


class ExportError(ValueError):
    """The directory is not an exportable checkpoint; the message says what is missing."""


def shard_files(local_dir: Path) -> list[Path]:
    """The model shard files of one checkpoint, in rank order; ExportError unless exactly ranks 0..W-1 are there."""
    found = {}
    for p in local_dir.iterdir():
        m = _SHARD_FILE.match(p.name)
        if m:
            found[(int(m.group(1)), int(m.group(2)))] = p
    sizes = {w for w, _ in found}
    if not found:
        raise ExportError(f"{local_dir}: no model_world_size_<W>_rank_<r>.pt files (a verl actor checkpoint folder)")
    if len(sizes) != 1:
        raise ExportError(f"{local_dir}: shards of several world sizes {sorted(sizes)}")
    (world,) = sizes
    missing = [r for r in range(world) if (world, r) not in found]
    if missing:
        raise ExportError(f"{local_dir}: world size {world} but ranks {missing} are missing")
    return [found[(world, r)] for r in range(world)]


def merge_tensor(name: str, shards: list) -> torch.Tensor:
    """One parameter from every rank's entry: plain tensors and replicated DTensors are rank 0's; a DTensor sharded
    on a 1-D mesh is its local pieces concatenated along the shard dimension."""
    import torch
    from torch.distributed.tensor import DTensor, Replicate, Shard

    first = shards[0]
    if not isinstance(first, DTensor):
        return first.detach().clone() if isinstance(first, torch.Tensor) else first
    if len(first.placements) != 1:
        raise ExportError(f"{name}: placements {first.placements} (a 2-D mesh); only 1-D FSDP meshes are exported")
    placement = first.placements[0]
    if isinstance(placement, Replicate):
        return first._local_tensor.detach().clone()
    if isinstance(placement, Shard):
        return torch.cat([s._local_tensor.detach() for s in shards], dim=placement.dim)
    raise ExportError(f"{name}: placement {placement} is neither Shard nor Replicate")


def export_actor(local_dir: str | Path, target_dir: str | Path, log=None) -> Path:
    """Write the checkpoint's model as a Hugging Face directory at target_dir (float32, safetensors, with the
    tokenizer and chat template); returns target_dir. ExportError before any heavy work when the input is not one."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    say = log or (lambda line: print(f"[verl_ext] {line}", file=sys.stderr, flush=True))
    local_dir, target = Path(local_dir), Path(target_dir)
    hf_dir = local_dir / "huggingface"
    if not (hf_dir / "config.json").is_file():
        raise ExportError(f"{local_dir}: no huggingface/config.json (a verl actor checkpoint folder has one)")
    files = shard_files(local_dir)
    if target.exists():
        raise ExportError(f"{target} exists; remove it or choose another --target-dir")
    say(f"reading {len(files)} shard(s) from {local_dir}")
    states = [torch.load(f, map_location="cpu", weights_only=False) for f in files]
    state = {name: merge_tensor(name, [s[name] for s in states]) for name in states[0]}
    del states
    config = AutoConfig.from_pretrained(hf_dir)
    dtypes = {t.dtype for t in state.values() if isinstance(t, torch.Tensor) and t.is_floating_point()}
    dtype = dtypes.pop() if len(dtypes) == 1 else torch.float32
    config.dtype = dtype
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.load_state_dict(state, strict=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        for name in _HF_FILES:
            if (hf_dir / name).is_file():
                shutil.copy2(hf_dir / name, tmp / name)
        (tmp / "EXPORTED_FROM.json").write_text(json.dumps({"local_dir": str(local_dir.resolve())}, indent=1))
        tmp.chmod(0o755)  # mkdtemp's 0700 would hide the model from other users of a shared machine
        tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    say(f"exported {model.num_parameters()} parameters ({dtype}) to {target}")
    return target


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--local-dir", required=True, help="the actor checkpoint folder (…/global_step_N/actor)")
    p.add_argument("--target-dir", required=True, help="the Hugging Face directory to write (must not exist)")
    args = p.parse_args(argv)
    try:
        print(export_actor(args.local_dir, args.target_dir))
    except ExportError as e:
        p.error(str(e))
    return 0


if __name__ == "__main__":
    sys.exit(main())


def model_directory(spec: str, scratch: str | Path, log=None) -> tuple[str, Path]:
    """(name, Hugging Face directory) of a model named on a command line: `released` (SmolLM2-135M-Instruct as
    released), or NAME=DIR with DIR a Hugging Face directory (an exported teacher, say) or a verl actor checkpoint
    (`<run>/global_step_N/actor`, exported to `<scratch>/NAME` first, float32). ExportError names a DIR that is
    neither."""
    if spec == "released":
        from verl_ext.pretrained.smollm2 import ensure_smollm2

        return "released", ensure_smollm2()
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        raise ExportError(f"a model is `released` or NAME=DIR, got {spec!r}")
    path = Path(path)
    if (path / "config.json").is_file():
        return name, path
    try:
        shard_files(path)
    except (ExportError, OSError) as e:
        raise ExportError(
            f"{name}: {path} is neither a Hugging Face directory (no config.json) nor a verl actor checkpoint ({e})"
        ) from None
    if log:
        log(f"{name}: exporting the actor checkpoint {path}")
    return name, export_actor(path, Path(scratch) / name)
