"""HICRA: hierarchy-aware credit assignment, planning tokens get amplified credit (Wang et al., arXiv 2509.03646).

Formula, per token: `A_t <- A_t + alpha * |A_t| * plan_t`. A positive advantage on a planning token becomes
A (1 + alpha), a negative one A (1 - alpha): planning tokens of good responses are pushed up more and those of bad
responses are pushed down less. With 0 <= alpha <= 1 the sign is kept. Applied after GTPO weighting.
Assumptions: a planning mask marks the planning tokens (strategic grams, `planning.py`); 0 <= alpha <= 1.
Registry entry: `transform_mode=gtpo_hicra`, and `adv_estimator=gtpo_hicra` (advantage_mode's episode advantage,
GTPO weighting, then HICRA).
"""

from __future__ import annotations

import torch

from verl_ext.advantage.base import TokenTransform, TokenWork
from verl_ext.advantage.gtpo import gtpo_transform


def hicra(token_advantages: torch.Tensor, planning: torch.Tensor, alpha: float) -> torch.Tensor:
    """A (bs, T) with planning tokens (bool or 0/1 (bs, T)) amplified."""
    return token_advantages + alpha * token_advantages.abs() * planning.to(token_advantages.dtype)


def hicra_factor_(planning: torch.Tensor, episode_advantages: torch.Tensor, alpha: float) -> torch.Tensor:
    """In place: planning (float 0/1, (bs, T)) becomes the factor `1 + alpha * sign(A_i) * plan_t`.

    A_t * factor equals `hicra(A_t)` whenever A_t has the sign of its response's A_i (true after GTPO, whose
    weights are >= 0): one pass over a tensor the caller no longer needs, instead of three fresh ones.
    """
    row = (alpha * torch.sign(episode_advantages)).to(planning.dtype).unsqueeze(-1)
    return torch.addcmul(torch.ones((), dtype=planning.dtype, device=planning.device), planning, row, out=planning)


def gtpo_hicra_transform(work: TokenWork) -> torch.Tensor:
    """GTPO, then HICRA's factor (in place on work.u and work.p)."""
    return gtpo_transform(work).mul_(hicra_factor_(work.p, work.episode, work.hicra_alpha))


GTPO_HICRA = TokenTransform(
    "gtpo_hicra",
    gtpo_hicra_transform,
    summary="advantage_mode (default maxrl) + GTPO weighting + HICRA on planning tokens.",
    needs_planning=True,
)
