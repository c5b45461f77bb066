"""Composer's actor loss: verl's PPO loss + alpha_sdpo * full-logit SDPO + beta_replay * trace-replay DPO
(docs/ALGORITHMS.md section 6).

    total = ppo_loss (the GRPO channel) + alpha_sdpo * sdpo_jsd + beta_replay * replay_dpo

verl 0.9.1's registered policy losses see only the sampled tokens' log-probs. Logits reach only the callable a
trainer installs with `actor_rollout_wg.set_loss_fn(fn)`, and verl's FSDP engine calls it twice per micro-batch
when the micro-batch's non-tensor flag `distillation_use_topk` is True (verl/workers/engine/fsdp/transformer_impl.py,
`prepare_model_outputs`; the same contract verl's own top-k distillation uses):

1. as a logits processor, `fn(student_logits=(1, nnz, V), data=micro_batch)`: it returns per-token (1, nnz)
   tensors, which the engine stores in `model_output` (nested, one row per sequence);
2. as the loss, `fn(model_output=..., data=micro_batch, dp_group=...)` -> (loss, metrics).

`ComposerActorLoss` does both, in two modes:

- **collect** (micro-batch flag `composer_collect_topk` = k): the SDPO teacher pass. The actor scores the
  hint-augmented rows without gradient (`compute_log_prob` with compute_loss=True) and the processor returns the
  top-k log-probs and ids of every position as k per-token int64 outputs `composer_topk_j`, each holding the j-th
  id and the bits of its float32 log-prob (`pack_topk`: verl moves every output key through several per-row
  loops, so k keys cost half of 2k); the loss is 0.
- **train** (the actor update): the processor returns `composer_sdpo_jsd`, the per-token generalized JSD between
  the live student logits and the stored teacher top-k (`sdpo.topk_generalized_jsd`) at the tokens whose
  `sdpo_weight` is non-zero; the loss adds, to verl's `ppo_loss`,

      alpha_sdpo  * sum_t sdpo_weight_t * jsd_t                        * dp_size
      beta_replay * sum_rows dpo_weight_r * (L_r - L_r.detach() / 2)    * dp_size

  where L_r is `dpo.dpo_row_losses` (gradient of each pair's DPO loss, see there; subtracting half the detached
  value makes a pair's two rows sum to the pair's DPO loss and leaves the gradient unchanged). The trainer sets
  the weights so that one update pass sums to the batch means:
  sdpo_weight = (number of rollout mini-batches) / (error-site tokens of the step), so
  each mini-batch's term is the batchmean JSD of its sites in expectation; dpo_weight = (slot weight) / pairs.
  `* dp_size` undoes the data-parallel gradient averaging, as verl's `agg_loss` does.

Metrics (SUM over micro-batches and ranks, then verl averages over mini-batches; the trainer divides pairs of
them, which cancels that average): composer/sdpo_jsd_sum, composer/sdpo_tokens, composer/dpo_loss_sum,
composer/dpo_pairs.

Assumes no Ulysses sequence parallelism (the processor needs every token's logits; checked) and no fused kernels
(they never materialise logits; the config check rejects them).
"""

from __future__ import annotations

from typing import Any

import torch
from verl.utils import tensordict_utils as tu
from verl.utils.metric import AggregationType, Metric
from verl.workers.utils.losses import ppo_loss
from verl.workers.utils.padding import no_padding_2_padding

from verl_ext.composer.dpo import dpo_row_losses
from verl_ext.composer.sdpo import topk_generalized_jsd

COLLECT_FLAG = "composer_collect_topk"
TOPK_PREFIX = "composer_topk_"
JSD_KEY = "composer_sdpo_jsd"
SDPO_COLUMNS = ("sdpo_topk_log_probs", "sdpo_topk_ids", "sdpo_weight")
DPO_COLUMNS = ("dpo_sign", "dpo_weight", "dpo_ref_logp", "dpo_partner_logratio")


def update_means(metrics: dict) -> tuple[float, float | None]:
    """(the batchmean SDPO JSD the update saw, 0.0 without site tokens; the mean DPO loss it saw, None without
    pairs) from verl's reduced actor metrics, whose `actor/composer/*` sums (see the module docstring) are removed
    from `metrics`."""
    jsd_sum, jsd_tokens, dpo_sum, dpo_pairs = (
        metrics.pop(f"actor/composer/{key}", None)
        for key in ("sdpo_jsd_sum", "sdpo_tokens", "dpo_loss_sum", "dpo_pairs")
    )
    jsd = float(jsd_sum) / float(jsd_tokens) if jsd_tokens else 0.0
    return jsd, (float(dpo_sum) / float(dpo_pairs) if dpo_pairs else None)


def response_positions(offsets: torch.Tensor, prompt_lens: torch.Tensor, response_lens: torch.Tensor):
    """(row, column, packed position) of every response token of a packed micro-batch.

    verl packs the micro-batch's sequences back to back (offsets = cumulative lengths); the logits at packed
    position p predict token p + 1, so response token t of row i is predicted at offsets[i] + prompt_len_i + t - 1
    (what `no_padding_2_padding` slices).
    """
    rows = torch.repeat_interleave(torch.arange(len(response_lens), device=offsets.device), response_lens)
    starts = torch.repeat_interleave(offsets[:-1] + prompt_lens - 1, response_lens)
    first = torch.repeat_interleave(torch.cumsum(response_lens, 0) - response_lens, response_lens)
    cols = torch.arange(int(response_lens.sum()), device=offsets.device) - first
    return rows, cols, starts + cols


def pack_topk(log_probs: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """int64 = (id << 32) | (the 32 bits of the float32 log-prob): exact for ids < 2**31 and every float32."""
    bits = log_probs.float().contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    return (ids.to(torch.int64) << 32) | bits


def unpack_topk(packed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of pack_topk: (float32 log-probs, int64 ids)."""
    low = packed & 0xFFFFFFFF
    low = torch.where(low >= 2**31, low - 2**32, low)  # back to the signed 32-bit pattern
    return low.to(torch.int32).view(torch.float32), packed >> 32


class ComposerActorLoss:
    """The actor's loss callable (see the module docstring); picklable, sent to every actor rank."""

    def __init__(
        self,
        actor_config: Any,
        *,
        alpha_sdpo: float,
        jsd_beta: float,
        token_clip: float | None,
        beta_replay: float,
        beta_dpo: float,
    ):
        # No defaults here: every value comes from composer.yaml through the recipe's settings.
        if alpha_sdpo < 0 or beta_replay < 0:
            raise ValueError(f"alpha_sdpo and beta_replay must be >= 0, got {alpha_sdpo}, {beta_replay}")
        self.actor_config = actor_config  # verl's ActorConfig dataclass (what the worker's own ppo_loss gets)
        self.alpha_sdpo, self.jsd_beta, self.token_clip = float(alpha_sdpo), float(jsd_beta), token_clip
        self.beta_replay, self.beta_dpo = float(beta_replay), float(beta_dpo)

    def __call__(self, model_output=None, data=None, dp_group=None, student_logits=None, **kwargs):
        collect_k = tu.get_non_tensor_data(data=data, key=COLLECT_FLAG, default=None)
        if student_logits is not None:
            if collect_k is not None:
                return self._collect_topk(student_logits, int(collect_k))
            return self._sdpo_jsd(student_logits, data)
        if collect_k is not None:  # forward only: the engine just reads the value
            return torch.zeros(()), {}
        return self._loss(model_output, data, dp_group)

    # ------------------------------------------------------------------ logits processor
    @staticmethod
    def _collect_topk(student_logits: torch.Tensor, k: int) -> dict[str, torch.Tensor]:
        logits = student_logits.detach()
        k = logits.shape[-1] if k <= 0 else min(k, logits.shape[-1])  # k <= 0: the whole vocabulary
        top = torch.log_softmax(logits.float(), dim=-1).topk(k, dim=-1)  # (1, nnz, k)
        packed = pack_topk(top.values, top.indices)
        return {f"{TOPK_PREFIX}{j}": packed[..., j] for j in range(k)}

    def _sdpo_jsd(self, student_logits: torch.Tensor, data) -> dict[str, torch.Tensor]:
        jsd = torch.zeros(student_logits.shape[1], dtype=torch.float32, device=student_logits.device)
        if self.alpha_sdpo == 0 or "sdpo_weight" not in data.keys():
            return {JSD_KEY: jsd.unsqueeze(0)}
        offsets = data["input_ids"].offsets()
        if int(offsets[-1]) > student_logits.shape[1]:
            raise NotImplementedError(
                "composer's full-logit SDPO needs every token's logits on each rank: "
                "Ulysses sequence parallelism is not supported (set ulysses_sequence_parallel_size=1)"
            )
        attn, width = data["attention_mask"], data["prompts"].shape[1]
        rows, cols, pos = response_positions(offsets, attn[:, :width].sum(-1), attn[:, width:].sum(-1))
        site = data["sdpo_weight"][rows, cols] != 0
        rows, cols, pos = rows[site], cols[site], pos[site]
        if pos.numel():
            per_token = topk_generalized_jsd(
                student_logits[0, pos],
                data["sdpo_topk_log_probs"][rows, cols],
                data["sdpo_topk_ids"][rows, cols],
                beta=self.jsd_beta,
                token_clip=self.token_clip,
            )
            jsd = jsd.index_put((pos,), per_token.to(jsd.dtype))
        return {JSD_KEY: jsd.unsqueeze(0)}

    # ------------------------------------------------------------------ the loss
    def _loss(self, model_output, data, dp_group):
        loss, metrics = ppo_loss(self.actor_config, model_output, data, dp_group)
        dp_size = data["dp_size"]
        if self.alpha_sdpo > 0 and JSD_KEY in model_output and "sdpo_weight" in data.keys():
            jsd = no_padding_2_padding(model_output[JSD_KEY], data)  # (b, R), aligned with the responses
            weight = data["sdpo_weight"].to(jsd.dtype)
            loss = loss + self.alpha_sdpo * (jsd * weight).sum() * dp_size
            sites = weight != 0
            metrics["composer/sdpo_jsd_sum"] = Metric(AggregationType.SUM, jsd.detach()[sites].sum())
            metrics["composer/sdpo_tokens"] = Metric(AggregationType.SUM, sites.sum().float())
        if self.beta_replay > 0 and "dpo_sign" in data.keys():
            log_probs = no_padding_2_padding(model_output["log_probs"], data)
            mask = data["response_mask"]
            mask = (mask.to_padded_tensor(0) if mask.is_nested else mask).to(log_probs.dtype)
            row = dpo_row_losses(
                (log_probs * mask).sum(-1),
                data["dpo_ref_logp"],
                data["dpo_partner_logratio"],
                data["dpo_sign"],
                beta=self.beta_dpo,
            )
            weight = data["dpo_weight"].to(row.dtype)
            loss = loss + self.beta_replay * (weight * (row - 0.5 * row.detach())).sum() * dp_size
            metrics["composer/dpo_loss_sum"] = Metric(AggregationType.SUM, (weight * row.detach()).sum() / 2)
            metrics["composer/dpo_pairs"] = Metric(AggregationType.SUM, weight.sum() / 2)
        return loss, metrics
