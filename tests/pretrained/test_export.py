"""Exporting a trained actor checkpoint to a Hugging Face directory (verl_ext/pretrained/export.py): a real FSDP2
checkpoint of the tiny model, saved as verl saves it (each rank's state dict of DTensors), comes back bit for bit in
float32, where verl's own merger would round it to bfloat16."""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.distributed as dist

from verl_ext.pretrained import export


@pytest.fixture
def gloo(tmp_path):
    """A one-rank gloo process group (FSDP2 needs one to shard)."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _fsdp_checkpoint(tiny_assets, actor_dir):
    """The tiny model after one optimiser step, its shards saved as verl's FSDP checkpoint manager saves them."""
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_assets.model_dir, dtype=torch.float32)
    fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-5)  # a change far below bfloat16's resolution
    ids = torch.tensor([[1, 2, 3, 4]])
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    actor_dir.mkdir(parents=True)
    torch.save(model.state_dict(), actor_dir / "model_world_size_1_rank_0.pt")
    shutil.copytree(tiny_assets.model_dir, actor_dir / "huggingface", ignore=shutil.ignore_patterns("*.safetensors"))
    return {k: v.full_tensor().detach().clone() for k, v in model.state_dict().items()}


def test_export_is_exact_in_float32(gloo, tiny_assets, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    trained = _fsdp_checkpoint(tiny_assets, tmp_path / "actor")
    released = AutoModelForCausalLM.from_pretrained(tiny_assets.model_dir, dtype=torch.float32).state_dict()
    out = export.export_actor(tmp_path / "actor", tmp_path / "hf", log=lambda line: None)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.dtype == torch.float32
    exported = model.state_dict()
    assert set(exported) == set(trained)
    changed = erased = 0
    for name, tensor in trained.items():
        assert torch.equal(exported[name], tensor), name
        moved = tensor != released[name]
        changed += int(moved.sum())
        erased += int((moved & (tensor.bfloat16() == released[name].bfloat16())).sum())
    assert erased > changed / 2  # in bfloat16 (verl's merger) most of the step would be rounded away
    assert (
        AutoTokenizer.from_pretrained(out).chat_template
        == AutoTokenizer.from_pretrained(tiny_assets.model_dir).chat_template
    )


def test_shards_concatenate_along_their_dimension_in_rank_order(gloo):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard

    mesh = init_device_mesh("cpu", (1,))
    a, b = torch.arange(6.0).reshape(2, 3), torch.arange(6.0, 12.0).reshape(2, 3)
    pieces = [DTensor.from_local(t, mesh, [Shard(1)]) for t in (a, b)]
    assert torch.equal(export.merge_tensor("w", pieces), torch.cat([a, b], dim=1))
    replicated = [DTensor.from_local(t, mesh, [Replicate()]) for t in (a, b)]
    assert torch.equal(export.merge_tensor("w", replicated), a)
    assert torch.equal(export.merge_tensor("plain", [a, b]), a)


def test_what_is_not_an_exportable_checkpoint_is_named(tmp_path):
    actor = tmp_path / "actor"
    (actor / "huggingface").mkdir(parents=True)
    with pytest.raises(export.ExportError, match="no huggingface/config.json"):
        export.export_actor(tmp_path, tmp_path / "out")
    (actor / "huggingface" / "config.json").write_text("{}")
    with pytest.raises(export.ExportError, match="no model_world_size"):
        export.export_actor(actor, tmp_path / "out")
    (actor / "model_world_size_2_rank_0.pt").write_bytes(b"")
    with pytest.raises(export.ExportError, match=r"world size 2 but ranks \[1\] are missing"):
        export.export_actor(actor, tmp_path / "out")
    (actor / "model_world_size_2_rank_1.pt").write_bytes(b"")
    (tmp_path / "out").mkdir()
    with pytest.raises(export.ExportError, match="exists"):
        export.export_actor(actor, tmp_path / "out")
