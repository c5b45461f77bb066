"""Trace-replay DPO applied through the policy-gradient update ("DPO as advantage"; Composer seed 003, channel 3).

verl 0.9.1's actor update takes per-token advantages, not an extra loss (an extra loss needs the engine-level loss
function, see the package docstring). For a pair with sequence log-probs lp_c, lp_r (sums over response tokens) and
reference ref_c, ref_r (DPO, Rafailov et al., arXiv 2305.18290):

    m = beta_dpo * ((lp_c - ref_c) - (lp_r - ref_r)),   L = -log sigmoid(m)
    dL/dlp_c = -beta_dpo * (1 - sigmoid(m)),   dL/dlp_r = +beta_dpo * (1 - sigmoid(m))

A policy-gradient loss -A * sum_t log pi(y_t) (what PPO's clipped loss is at ratio 1, i.e. on the first mini-batch
pass) has gradient -A * d lp. So advantages

    A_chosen = beta_replay * beta_dpo * (1 - sigmoid(m)),   A_rejected = -A_chosen   (on every response token)

give the gradient of beta_replay * L for each pair. The scale is per pair (not divided by the pair count): verl's
`loss_agg_mode` normalises the update (token-mean divides by the mini-batch's response tokens). The PPO clip bounds
the step like any other row. m is evaluated at the current policy, so it is exact for a single update pass.

`fill_slots` spreads P items over a fixed number of row slots (verl needs the update batch to be a multiple of its
mini-batch size): items are repeated cyclically and each copy gets weight 1 / (copies of its item), so the summed
advantage per item, and hence the gradient, does not depend on the padding.
"""

from __future__ import annotations

import torch


def dpo_advantages(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    beta_dpo: float,
    beta_replay: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(A_chosen, A_rejected), each (P,): minus the gradient of beta_replay * DPO loss w.r.t. each sequence log-prob."""
    inputs = (policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps)
    if len({tuple(x.shape) for x in inputs}) != 1 or policy_chosen_logps.dim() != 1:
        raise ValueError(f"need four 1-D tensors of equal length, got {[tuple(x.shape) for x in inputs]}")
    if not beta_dpo > 0:
        raise ValueError(f"beta_dpo must be > 0, got {beta_dpo}")
    if not beta_replay >= 0:
        raise ValueError(f"beta_replay must be >= 0, got {beta_replay}")
    with torch.no_grad():
        margin = beta_dpo * ((policy_chosen_logps - ref_chosen_logps) - (policy_rejected_logps - ref_rejected_logps))
        a = beta_replay * beta_dpo * torch.sigmoid(-margin.float())  # 1 - sigmoid(m) = sigmoid(-m), stable
    return a, -a


def fill_slots(n_items: int, n_slots: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(item index per slot, weight per slot): items cycled over the slots, weights 1 / copies of the item."""
    if n_items < 1 or n_slots < n_items:
        raise ValueError(f"need 1 <= n_items <= n_slots, got n_items={n_items}, n_slots={n_slots}")
    index = torch.arange(n_slots) % n_items
    copies = torch.bincount(index, minlength=n_items).float()
    return index, 1.0 / copies[index]
