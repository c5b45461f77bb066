"""Uninformative groups: all responses of a prompt got the same reward, so there is nothing to contrast.

Rule (retrain's pipeline): if max - min of a group's rewards is <= 1e-6, every advantage in the group is exactly 0
(whatever the episode mode computed, e.g. float noise from `r - mean`). Per step the groups are counted as
`skipped_all_correct` (the shared reward > 0.5) or `skipped_all_wrong` (otherwise).
"""

from __future__ import annotations

import torch

from verl_ext.advantage.groups import group_mean, group_range

EQUAL_TOL = 1e-6
CORRECT_THRESHOLD = 0.5


def uninformative_groups(rewards: torch.Tensor, gid: torch.Tensor, n_groups: int) -> tuple[torch.Tensor, int, int]:
    """(bool (bs,): the response's group is uninformative, n_skipped_all_correct, n_skipped_all_wrong)."""
    flat = group_range(rewards, gid, n_groups) <= EQUAL_TOL
    correct = group_mean(rewards, gid, n_groups) > CORRECT_THRESHOLD
    return flat[gid], int((flat & correct).sum()), int((flat & ~correct).sum())
