"""DPO loss over (chosen, rejected) pairs with reference log-probs: the Composer trace-replay channel.

Paper: Rafailov et al., "Direct Preference Optimization", arXiv 2305.18290. Pairs come from N-teacher disagreement
(see `disagreement.py`); reference log-probs come from verl's ref worker.

With sequence log-probs (sums over the response tokens) lp_c, lp_r under the policy and ref_c, ref_r under the
reference model:

    reward_c = beta * (lp_c - ref_c),   reward_r = beta * (lp_r - ref_r)
    loss     = mean over pairs of -log sigmoid(reward_c - reward_r)

Assumes each pair's chosen and rejected continuations share the same context. beta (``composer.replay.beta_dpo``)
has its default in composer.yaml only.
An empty batch (no pairs this step) gives a zero loss that still carries the inputs' graph, so the trainer can add
it unconditionally.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def sequence_log_probs(token_log_probs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum of per-token log-probs over the response tokens: (B, T), (B, T) -> (B,)."""
    if token_log_probs.shape != mask.shape:
        raise ValueError(f"token_log_probs {tuple(token_log_probs.shape)} and mask {tuple(mask.shape)} differ")
    return (token_log_probs * mask.to(token_log_probs.dtype)).sum(dim=-1)


def dpo_loss(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    *,
    beta: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Mean DPO loss over pairs and metrics (reward margin, accuracy, chosen/rejected rewards, pair count).

    All inputs are (P,) sequence log-probs; the reference ones should carry no gradient.
    """
    inputs = (policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps)
    shapes = {tuple(x.shape) for x in inputs}
    if len(shapes) != 1 or policy_chosen_logps.dim() != 1:
        got = [tuple(x.shape) for x in inputs]
        raise ValueError(f"dpo_loss needs four 1-D tensors of equal length, got shapes {got}")
    if not beta > 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    n_pairs = policy_chosen_logps.shape[0]
    if n_pairs == 0:
        zero = policy_chosen_logps.sum() + policy_rejected_logps.sum()  # 0, on the graph
        return zero, {"dpo/pairs": 0.0}

    chosen_rewards = beta * (policy_chosen_logps - ref_chosen_logps)
    rejected_rewards = beta * (policy_rejected_logps - ref_rejected_logps)
    margins = chosen_rewards - rejected_rewards
    loss = -F.logsigmoid(margins).mean()  # logsigmoid: stable for large |margin|
    metrics = {
        "dpo/pairs": float(n_pairs),
        "dpo/reward_margin": margins.detach().mean().item(),
        "dpo/reward_accuracy": (margins.detach() > 0).float().mean().item(),
        "dpo/chosen_reward": chosen_rewards.detach().mean().item(),
        "dpo/rejected_reward": rejected_rewards.detach().mean().item(),
    }
    return loss, metrics


def dpo_row_losses(
    policy_logps: torch.Tensor,
    ref_logps: torch.Tensor,
    partner_logratios: torch.Tensor,
    signs: torch.Tensor,
    *,
    beta: float,
) -> torch.Tensor:
    """Per-row DPO losses, each row against its pair partner's *fixed* log-ratio: (R,) -> (R,), 0 where sign == 0.

    A pair's chosen (sign +1) and rejected (sign -1) rows may land in different micro-batches of the actor update,
    so each row carries its partner's log-ratio lp - ref measured when the pair was scored (no gradient):

        m_row = beta * sign * ((lp_row - ref_row) - partner_logratio),   L_row = -log sigmoid(m_row)

    While the policy is still at the scoring point (the first pass over the pair), m_row equals the pair's margin
    m, L_row equals the pair's DPO loss, and d L_row / d lp_row equals d L_pair / d lp_row. So L_chosen + L_rejected
    has exactly the gradient of L_pair (twice its value; `composer.actor_loss` reports half of it).
    """
    shapes = {tuple(x.shape) for x in (policy_logps, ref_logps, partner_logratios, signs)}
    if len(shapes) != 1 or policy_logps.dim() != 1:
        raise ValueError(f"dpo_row_losses needs four 1-D tensors of equal length, got {sorted(shapes)}")
    if not beta > 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    sign = signs.to(policy_logps.dtype)
    margin = beta * sign * ((policy_logps - ref_logps.detach()) - partner_logratios.detach())
    return torch.where(sign != 0, -F.logsigmoid(margin), torch.zeros_like(margin))
