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
"""

from __future__ import annotations

import torch


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
