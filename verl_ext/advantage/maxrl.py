"""MaxRL episode advantages: inverse success-rate reweighting (Tajwar et al., arXiv 2602.02710).

Formula, per prompt group with mean reward `mu`:
    `A_i = 0` if `mu <= 1e-6`, else `A_i = (r_i - mu) / (mu + 1e-6)`.
With 0/1 rewards and K of N correct, a correct response gets about N/K - 1 and a wrong one -1, so rare successes
on hard prompts get large updates and easy prompts small ones.
Assumptions: rewards are non-negative success scores (a group whose mean is <= 1e-6 carries no signal). A group of
one has mu = r, so A = 0 (no contrast); verl's GRPO singleton convention (mean 0) is deliberately not used, since
here it would divide by 1e-6.
Registry entry: `advantage_mode=maxrl`, and `adv_estimator=maxrl` (these advantages broadcast over the tokens).
"""

from __future__ import annotations

import torch

from verl_ext.advantage.base import EpisodeMode
from verl_ext.advantage.groups import group_mean

MAXRL_EPS = 1e-6


def maxrl_advantages(rewards: torch.Tensor, gid: torch.Tensor, n_groups: int) -> torch.Tensor:
    """(bs,) advantages from (bs,) rewards (float64 recommended) and group ids."""
    mu = group_mean(rewards, gid, n_groups)[gid]
    return torch.where(mu <= MAXRL_EPS, torch.zeros_like(rewards), (rewards - mu) / (mu + MAXRL_EPS))


MAXRL = EpisodeMode(
    "maxrl", maxrl_advantages, summary="MaxRL episode advantages, broadcast over each response's tokens."
)
