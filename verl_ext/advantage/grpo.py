"""GRPO episode advantages, reference style without std (Shao et al., DeepSeekMath, arXiv 2402.03300).

Formula, per prompt group: `A_i = r_i - mean_j r_j`.
Assumptions: one scalar reward per response; groups given by uid. A group of one gets A = 0 (its own mean);
verl's built-in `grpo` instead uses mean 0 for singletons, so it returns A = r there. Everything else equals verl's
`grpo` with `norm_adv_by_std_in_grpo=False`, which the project keeps as the campaign baseline.
Registry entry: `advantage_mode=grpo` only; `adv_estimator=grpo` stays verl's own.
"""

from __future__ import annotations

import torch

from verl_ext.advantage.base import EpisodeMode
from verl_ext.advantage.groups import group_mean


def grpo_advantages(rewards: torch.Tensor, gid: torch.Tensor, n_groups: int) -> torch.Tensor:
    """(bs,) advantages from (bs,) rewards (float64 recommended) and group ids."""
    return rewards - group_mean(rewards, gid, n_groups)[gid]


GRPO = EpisodeMode("grpo", grpo_advantages, summary="GRPO episode advantages (r - group mean).", estimator=False)
