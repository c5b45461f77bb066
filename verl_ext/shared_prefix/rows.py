"""Token rows -> the TensorDict verl's trainer hands its actor engine (verl 0.9.1, legacy trainer, engine workers).

verl's trainer builds the batch as left-padded prompts and right-padded responses (`DataProto`), converts it with
`DataProto.to_tensordict` and `left_right_2_no_padding` (nested rows: prompt + response, no padding) and adds the
pass's flags. `engine_batch` does the same from plain token lists, so the benchmark (`scripts/bench_actor_cpu.py`)
and the tests drive the engine's real seams with the layout a training step gives them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def engine_batch(
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    pad_token_id: int,
    temperature: float = 1.0,
    **flags,
):
    """(prompt ids, response ids) per row -> verl's no-padding TensorDict with `flags` as its non-tensor data."""
    from verl.protocol import DataProto
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    if len(prompts) != len(responses) or not prompts:
        raise ValueError(f"{len(prompts)} prompts and {len(responses)} responses: expected as many, at least one")
    width_p = max(len(p) for p in prompts)
    width_r = max(len(r) for r in responses)
    n = len(prompts)
    prompt_ids = torch.full((n, width_p), pad_token_id, dtype=torch.long)
    response_ids = torch.full((n, width_r), pad_token_id, dtype=torch.long)
    mask = torch.zeros((n, width_p + width_r), dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        prompt_ids[i, width_p - len(p) :] = torch.tensor(p)
        response_ids[i, : len(r)] = torch.tensor(r)
        mask[i, width_p - len(p) : width_p + len(r)] = 1
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    data = DataProto.from_dict(
        tensors={
            "prompts": prompt_ids,
            "responses": response_ids,
            "input_ids": torch.cat([prompt_ids, response_ids], dim=-1),
            "attention_mask": mask,
            "position_ids": position_ids,
            "response_mask": mask[:, width_p:],
        },
        meta_info={"temperature": temperature, "pad_token_id": pad_token_id, "use_remove_padding": False, **flags},
    )
    td = left_right_2_no_padding(data.to_tensordict())
    tu.assign_non_tensor(td, **{k: v for k, v in data.meta_info.items() if k not in td.keys()})
    return td


def bare_engine(model, dtype=None):
    """verl's FSDP language-model engine with shared-prefix passes around an unwrapped HF module, for benchmarks and
    tests that drive its `forward_step` on one process without a process group (FSDP2 on one rank runs the same
    module). Only the attributes `forward_step` and the two seams read are set."""
    import types

    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    from verl_ext.shared_prefix.engine import engine_class

    engine = object.__new__(engine_class(FSDPEngineWithLMHead))
    engine.module = model
    engine.pad_to_length = None
    engine.use_ulysses_sp = False
    engine.engine_config = types.SimpleNamespace(entropy_checkpointing=False)
    engine._autocast_dtype = dtype or next(model.parameters()).dtype
    engine.get_data_parallel_group = lambda: None
    return engine
