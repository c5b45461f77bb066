"""The trace-replay rows of one actor update (Composer channel 3, docs/ALGORITHMS.md section 6): which rows, in
which order, with what
DPO columns.

The DPO term itself is in the actor's loss (`actor_loss.ComposerActorLoss`, per row via `dpo.dpo_row_losses`);
this module lays the pairs out as rows verl's update accepts:

- `fill_slots`: verl needs the update batch to be a multiple of its mini-batch size, so P pairs fill a fixed number
  of pair slots (one mini-batch of rows / 2), cycled; each copy gets weight 1 / (copies of its pair), so the summed
  weight per pair, and hence its gradient, does not depend on the padding.
- `replay_columns`: per row (chosen_0, rejected_0, chosen_1, ...): sign (+1 / -1), weight (slot weight / P, so one
  pass sums to the mean DPO loss over the P pairs), the row's reference log-prob and its partner's log-ratio
  lp - ref (fixed at scoring time).
- `rows_first_per_rank`: the update order. verl splits the update batch into contiguous, equal chunks, one per
  data-parallel rank, and each rank walks its chunk in mini-batches. Putting each rank's share of the replay rows
  at the head of its chunk makes the replay rows the first mini-batch of the update on every rank: the policy is
  then still where the pairs were scored, so the DPO gradient is exact (see `dpo.dpo_row_losses`).

And around them, one step's replay rows from its pairs: `pair_rows` (the rows to score, in verl's padded layout),
`replay_block` (the scored rows' DPO loss before the update, its metrics and the block's columns), `update_batch`
(the block and the step's rows as one update batch) and `grpo_pg_loss` (verl's per-mini-batch pg_loss without the
replay mini-batch's).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import torch
from verl import DataProto

from verl_ext.composer.actor_loss import DPO_COLUMNS, SDPO_COLUMNS
from verl_ext.composer.disagreement import DPOPair
from verl_ext.composer.dpo import dpo_loss, sequence_log_probs
from verl_ext.composer.rows import pack_rows


def fill_slots(n_items: int, n_slots: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(item index per slot, weight per slot): items cycled over the slots, weights 1 / copies of the item."""
    if n_items < 1 or n_slots < n_items:
        raise ValueError(f"need 1 <= n_items <= n_slots, got n_items={n_items}, n_slots={n_slots}")
    index = torch.arange(n_slots) % n_items
    copies = torch.bincount(index, minlength=n_items).float()
    return index, 1.0 / copies[index]


def replay_columns(seq_policy: torch.Tensor, seq_ref: torch.Tensor, n_slots: int) -> dict[str, torch.Tensor]:
    """Rows and DPO columns for pairs scored as rows (chosen_0, rejected_0, chosen_1, ...): (2P,) sequence log-probs.

    Returns row_index (2 * n_slots,) into the scored rows, and per returned row: dpo_sign, dpo_weight, dpo_ref_logp,
    dpo_partner_logratio.
    """
    if seq_policy.shape != seq_ref.shape or seq_policy.dim() != 1 or seq_policy.numel() % 2:
        raise ValueError(f"need two (2P,) tensors, got {tuple(seq_policy.shape)} and {tuple(seq_ref.shape)}")
    n_pairs = seq_policy.numel() // 2
    pair_of_slot, slot_weight = fill_slots(n_pairs, n_slots)
    row_index = torch.stack([2 * pair_of_slot, 2 * pair_of_slot + 1], dim=1).reshape(-1)
    partner_index = row_index ^ 1  # chosen 2p <-> rejected 2p + 1
    logratio = (seq_policy - seq_ref).detach().float()
    return {
        "row_index": row_index,
        "dpo_sign": torch.tensor([1.0, -1.0]).repeat(n_slots),
        "dpo_weight": (slot_weight / n_pairs).repeat_interleave(2),
        "dpo_ref_logp": seq_ref.detach().float()[row_index],
        "dpo_partner_logratio": logratio[partner_index],
    }


def rows_first_per_rank(n_head: int, n_rest: int, n_ranks: int) -> torch.Tensor:
    """Order of the rows [head (n_head) ; rest (n_rest)] such that each of the n_ranks contiguous chunks starts with
    its share of the head rows."""
    if n_ranks < 1 or n_head % n_ranks or n_rest % n_ranks:
        raise ValueError(f"{n_head} head rows and {n_rest} other rows do not split evenly over {n_ranks} ranks")
    head, rest = n_head // n_ranks, n_rest // n_ranks
    order = []
    for r in range(n_ranks):
        order.append(torch.arange(r * head, (r + 1) * head))
        order.append(n_head + torch.arange(r * rest, (r + 1) * rest))
    return torch.cat(order)


def pair_rows(pairs: Sequence[DPOPair], tokenizer, prompt_width: int, response_width: int) -> dict[str, torch.Tensor]:
    """The pairs as rows chosen_0, rejected_0, chosen_1, ... in verl's padded layout with the batch's widths: the
    pair's prompt ids (its last prompt_width) and the response text's tokens + EOS (its first response_width).

    A pair from an agent's turn (`turn_replay.episode_turns`: its prompt has `context` and `rejected_ids`) is placed
    where the turn was sampled: the response side starts with the episode's tokens before the turn (earlier turns
    and the environment's, response_mask 0: context, no loss), then the action, the student's sampled tokens for the
    rejected row and the teachers' action + EOS for the chosen one."""
    eos = tokenizer.eos_token_id
    prefixes, responses, contexts = [], [], []
    for pair in pairs:
        context = [int(x) for x in pair.prompt.get("context") or []]
        for text, sampled in ((pair.chosen, None), (pair.rejected, pair.prompt.get("rejected_ids"))):
            action = list(sampled) if sampled is not None else tokenizer.encode(text, add_special_tokens=False) + [eos]
            prefixes.append(pair.prompt["ids"][-prompt_width:])
            responses.append((context + action)[:response_width])
            contexts.append(min(len(context), response_width))
    rows = pack_rows(
        prefixes, responses, tokenizer.pad_token_id, response_width=response_width, prefix_width=prompt_width
    )
    for i, n in enumerate(contexts):
        rows["response_mask"][i, :n] = 0
    return rows


def replay_block(
    rows: dict[str, torch.Tensor],
    policy: torch.Tensor,
    ref: torch.Tensor,
    *,
    beta_dpo: float,
    n_slots: int,
    batch_keys: Iterable[str],
) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """The replay block's columns and the channel's metrics, from `pair_rows` and their (2P, R) token log-probs
    under the policy and the reference.

    Metrics: loss/replay_dpo (the mean DPO loss before the update), replay/pairs_used and replay/<dpo metric>. The
    block (2 * n_slots rows, `replay_columns`) carries the rows, old_log_probs = the policy's, zero advantages (the
    DPO term is in the actor loss), and where the step's batch has them (`batch_keys`): ref_log_prob, and for the
    rollout correction rollout_log_probs = the policy's and rollout_is_weights = 1 (not sampled by the rollout:
    importance weight 1).
    """
    mask = rows["response_mask"]
    seq_pol, seq_ref = sequence_log_probs(policy, mask), sequence_log_probs(ref, mask)
    loss, dpo_metrics = dpo_loss(seq_pol[0::2], seq_pol[1::2], seq_ref[0::2], seq_ref[1::2], beta=beta_dpo)
    metrics = {
        "loss/replay_dpo": float(loss),
        "replay/pairs_used": float(seq_pol.numel() // 2),
        **{f"replay/{k.split('/', 1)[1]}": v for k, v in dpo_metrics.items()},
    }
    cols = replay_columns(seq_pol, seq_ref, n_slots)
    row_index = cols.pop("row_index")
    keys = set(batch_keys)
    block = {k: v[row_index] for k, v in rows.items()}
    block["old_log_probs"] = policy[row_index]
    block["advantages"] = torch.zeros_like(block["old_log_probs"])
    if "ref_log_prob" in keys:
        block["ref_log_prob"] = ref[row_index]
    if "rollout_log_probs" in keys:
        block["rollout_log_probs"] = policy[row_index]
    if "rollout_is_weights" in keys:
        block["rollout_is_weights"] = torch.ones_like(block["old_log_probs"])
    block.update(cols)
    return block, metrics


def update_batch(batch: DataProto, block: DataProto, n_ranks: int) -> DataProto:
    """The actor-update batch: `block` (the replay rows) and the step's rows, each rank's chunk starting with its
    share of the block (rows_first_per_rank). Only the columns the update reads are kept: the block's, and the SDPO
    columns the step's rows carry. A column one side lacks is zero there if it is a loss-term column (the DPO
    columns on the step's rows, the SDPO columns on the block), else a KeyError."""
    keys = list(block.batch.keys()) + [k for k in SDPO_COLUMNS if k in batch.batch.keys()]
    optional = {*DPO_COLUMNS, *SDPO_COLUMNS}
    missing = [k for k in keys if k not in batch.batch.keys() and k not in optional]
    if missing:
        raise KeyError(f"the training batch lacks columns {missing} that the extra rows carry")

    def column(side: DataProto, other: DataProto, key: str) -> torch.Tensor:
        if key in side.batch.keys():
            return side.batch[key]
        like = other.batch[key]
        return torch.zeros((len(side), *like.shape[1:]), dtype=like.dtype)

    tensors = {}
    for k in keys:
        head, tail = column(block, batch, k), column(batch, block, k)
        tensors[k] = torch.cat([head.to(tail.dtype), tail])
    order = rows_first_per_rank(len(block), len(batch), n_ranks)
    merged = DataProto.from_dict(tensors={k: v[order] for k, v in tensors.items()})
    merged.meta_info = {k: v for k, v in batch.meta_info.items() if k != "global_token_num"}
    merged.meta_info["global_token_num"] = merged.batch["attention_mask"].sum(-1).tolist()
    return merged


def grpo_pg_loss(pg_loss, n_rows: int, rows_per_minibatch: int) -> float | None:
    """verl's per-mini-batch pg_loss of an update of n_rows whose first mini-batch of each epoch is the replay block
    (zero advantages), averaged over the other mini-batches; None when it cannot be told apart (not a list, one
    mini-batch per epoch, or a length that is not whole epochs)."""
    per_epoch = n_rows // rows_per_minibatch
    if isinstance(pg_loss, list) and per_epoch > 1 and len(pg_loss) % per_epoch == 0:
        return float(np.mean([v for i, v in enumerate(pg_loss) if i % per_epoch]))
    return None
