"""verl's FSDP language-model engine with shared-prefix passes (verl 0.9.1, `FSDPEngineWithLMHead`).

verl 0.9.1 keeps PrefixGrouper's pieces (`actor.use_prefix_grouper`, `trainer/ppo/prefix_grouper_utils.py`, an
attention patch in `models/transformers/monkey_patch.py`), but no engine worker calls them: the legacy actor that did
is gone, and the key now only makes the trainer's `_balance_batch` keep each uid's rows together. This engine does
the forward itself. It overrides the two seams verl's `forward_step` calls around the model, so the rest (micro-batch
loop, loss, backward, FSDP) is verl's own:

- `prepare_model_inputs`: when the micro-batch carries the `shared_prefix` flag and is eligible (below), the rows
  are laid out as packs (`packing.plan_packs`: each distinct prompt once, its responses after it) with a 4-D mask
  in the form the model's attention takes (`eager`: additive; `sdpa`: bool) and explicit positions.
- `prepare_model_outputs`: the packs' logits are turned back into verl's per-row nested log-probs (and entropies),
  each row token from its own pack position with its own label (`packing.row_log_probs`), so verl's losses read the
  same layout as from the unshared pass.

A micro-batch without the flag, or one the packing does not cover, runs verl's unshared pass unchanged: fused
kernels, top-K distillation (the Composer's SDPO channel) and distillation-only passes, Sigma-pi^2, Ulysses sequence
parallelism, 3-D rotary positions (VLMs), multi-modal inputs, sliding-window attention layers (a 4-D mask replaces
the model's own, window included), rows whose positions are not 0..len-1. Rows that share
no prompt are packs of one row each: the same cost as the unshared pass.

The flag rides on the batch: the trainer sets `meta_info["shared_prefix"]` from `actor.use_prefix_grouper`, and
verl's `DataProto.to_tensordict` turns meta_info into the non-tensor data every actor and reference call reads.
"""

from __future__ import annotations

import torch

from verl_ext.shared_prefix import FLAG, MASK_KIND
from verl_ext.shared_prefix.packing import PackPlan, attention_mask_4d, plan_packs, row_log_probs

# A pack of one prompt and its responses is cut before it exceeds this many tokens (the prompt repeats in each cut).
# Attention over a pack costs L^2 and most of it is masked; at 1024 tokens SmolLM2-135M's eager attention is about
# a quarter of its linear layers' work (4 L^2 d x heads x layers = 72 GFLOP against 2 x 135M x L = 276).
MAX_PACK_TOKENS = 1024
# Per-micro-batch settings under which the engine runs verl's unshared pass instead.
_UNSHARED_WHEN = ("use_fused_kernels", "distillation_use_topk", "distillation_only", "calculate_sum_pi_squared")


def _setting(micro_batch, key: str, default=False):
    # verl imported here, not at module level: verl loads the project's plugin on import, and the CPU backend's
    # registration (verl_ext/cpu/shims.py) imports this module
    from verl.utils import tensordict_utils as tu

    return tu.get_non_tensor_data(data=micro_batch, key=key, default=default)


def ineligible(engine, micro_batch) -> str | None:
    """Why this micro-batch runs unshared (None: it packs)."""
    if not _setting(micro_batch, FLAG):
        return "not requested"
    for key in _UNSHARED_WHEN:
        if _setting(micro_batch, key):
            return key
    if getattr(engine, "use_ulysses_sp", False):
        return "ulysses sequence parallelism"
    if micro_batch["position_ids"].dim() != 2:
        return "3-D position ids"
    config = getattr(engine.module, "config", None)
    if getattr(config, "use_sliding_window", False) or any(
        t != "full_attention" for t in (getattr(config, "layer_types", None) or ())
    ):
        return "sliding-window attention"  # the packs' 4-D mask would replace the model's window
    mm = micro_batch.get("multi_modal_inputs", None)
    if mm is not None and any(bool(x) for x in (mm.tolist() if hasattr(mm, "tolist") else mm)):
        return "multi-modal inputs"
    return None


def _rows(micro_batch) -> tuple[list[torch.Tensor], list[int]] | None:
    """The rows' tokens and prompt lengths; None if a row's positions are not 0..len-1."""
    input_ids, position_ids = micro_batch["input_ids"], micro_batch["position_ids"]
    rows = list(input_ids.unbind())
    expected = torch.cat([torch.arange(r.numel(), device=r.device) for r in rows])
    if not torch.equal(position_ids.values().to(expected.dtype), expected):
        return None
    prompt_width = micro_batch["prompts"].shape[-1]
    prompt_lens = micro_batch["attention_mask"][:, :prompt_width].sum(-1).tolist()
    return rows, prompt_lens


class SharedPrefixLMHead:
    """Mixin over verl's `FSDPEngineWithLMHead`; `engine_class` makes the concrete class."""

    max_pack_tokens = MAX_PACK_TOKENS

    def forward_step(self, micro_batch, loss_function, forward_only):
        """verl's step; a micro-batch that asked for sharing also reports `shared_prefix/token_frac`: the tokens the
        model ran on over the rows' tokens (1.0 when it ran unshared). The update's metrics carry it to the log as
        `actor/shared_prefix/token_frac`."""
        self._token_frac = None
        loss, output = super().forward_step(micro_batch, loss_function, forward_only)
        if _setting(micro_batch, FLAG):
            output.setdefault("metrics", {})["shared_prefix/token_frac"] = self._token_frac or 1.0
        return loss, output

    def prepare_model_inputs(self, micro_batch):
        why = ineligible(self, micro_batch)
        rows = _rows(micro_batch) if why is None else None
        if rows is None:
            return super().prepare_model_inputs(micro_batch)
        attn = getattr(getattr(self.module, "config", None), "_attn_implementation", None)
        if attn not in MASK_KIND:
            raise ValueError(
                f"actor_rollout_ref.actor.use_prefix_grouper=true needs attn_implementation eager or sdpa "
                f"(actor_rollout_ref.model.override_config.attn_implementation); the model runs {attn!r}"
            )
        tokens, prompt_lens = rows
        temperature = micro_batch["temperature"]
        if isinstance(temperature, torch.Tensor):
            temps = temperature.float().reshape(-1).expand(len(tokens)).tolist()
        else:
            temps = [float(temperature)] * len(tokens)
        pad = _setting(micro_batch, "pad_token_id", 0)
        plan = plan_packs(tokens, prompt_lens, temps, self.max_pack_tokens, pad_token_id=pad)
        pack_temps = torch.empty(plan.num_packs, dtype=torch.float32)
        pack_temps[plan.pack_of_row.cpu()] = torch.tensor(temps, dtype=torch.float32)
        unit = all(t == 1.0 for t in temps)
        dtype = getattr(self, "_autocast_dtype", torch.float32)
        model_inputs = {
            "input_ids": plan.input_ids,
            "position_ids": plan.position_ids,
            "attention_mask": attention_mask_4d(plan.segment, MASK_KIND[attn], dtype),
        }
        output_args = {"shared_prefix_plan": plan, "pack_temperature": None if unit else pack_temps}
        self._token_frac = plan.pack_tokens / plan.row_tokens
        return model_inputs, output_args

    def prepare_model_outputs(self, output, output_args, micro_batch, logits_processor_func):
        plan: PackPlan | None = output_args.get("shared_prefix_plan")
        if plan is None:
            return super().prepare_model_outputs(output, output_args, micro_batch, logits_processor_func)
        logits = output.logits
        if hasattr(logits, "full_tensor"):  # tensor parallel: logits sharded on the vocabulary
            logits = logits.full_tensor()
        input_ids = micro_batch["input_ids"]
        labels = torch.roll(input_ids.values(), shifts=-1, dims=0)  # verl's labels, last position included
        temps = output_args["pack_temperature"]
        entropy_wanted = _setting(micro_batch, "calculate_entropy")
        log_probs, entropy = row_log_probs(
            logits, plan, labels, None if temps is None else temps.to(logits.device), entropy_wanted
        )
        offsets = input_ids.offsets()
        model_output = {"log_probs": torch.nested.nested_tensor_from_jagged(log_probs, offsets)}
        if entropy is not None:
            model_output["entropy"] = torch.nested.nested_tensor_from_jagged(entropy, offsets)
        return model_output


def engine_class(base: type) -> type:
    """`base` (verl's FSDPEngineWithLMHead or a subclass of it) with shared-prefix passes."""
    if issubclass(base, SharedPrefixLMHead):
        return base
    cls = type(f"SharedPrefix{base.__name__}", (SharedPrefixLMHead, base), {})
    cls.__module__ = __name__
    return cls
