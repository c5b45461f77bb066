"""`grpo_composer` advantage estimator: GRPO outcome advantage plus the sampled-token SDPO term ("Recipe B"), the
Composer's channels 1 and 2 (docs/ALGORITHMS.md section 6). Papers: GRPO, Shao et al., arXiv 2402.03300; SDPO,
Huebotter et al., arXiv 2601.20802 (the teacher is the same model under a hint, `verl_ext/composer/sdpo.py`).

Formula, per response with score r = sum of its token-level rewards and group g = the responses of its prompt (uid),
as verl's built-in `grpo`:

    A = (r - mean_g) / (std_g + eps)   if norm_adv_by_std_in_grpo (default), else  A = r - mean_g

broadcast over the response tokens (times response_mask); then, if `alpha_sdpo` > 0,

    A_t += alpha_sdpo * (logp_teacher_t - logp_student_t)   at error-site tokens (and only response tokens)

Returns (advantages, returns) with returns = advantages, as verl's grpo does.
Assumptions: one scalar reward per response; the unbiased std, and mean 0 / std 1 for a group of one (verl's
convention); teacher and student log-probs aligned on the response tokens, student = the rollout's `old_log_probs`.
Registry entry: a `VerlEstimator` (`adv_estimator=grpo_composer`): its SDPO inputs come from the Composer's trainer,
not from the pipeline's `AdvantageInputs`.

Config (verl's `algorithm` section; extra keys need a `+` on the command line):
    norm_adv_by_std_in_grpo (bool, default True): divide by the group std (False = Dr.GRPO).
    alpha_sdpo (float, default 0.0; recommended 0.1): weight of the SDPO term; 0 switches it off.
verl's legacy `compute_advantage` passes only token_level_rewards, response_mask, index and config; with
alpha_sdpo > 0 the caller must also pass sdpo_teacher_log_probs, old_log_probs and sdpo_error_mask (all (B, T)).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from verl_ext.advantage.base import VerlEstimator
from verl_ext.advantage.groups import group_ids, group_mean_std
from verl_ext.config.settings import get


def sdpo_advantage_term(
    teacher_logp: torch.Tensor,
    student_logp: torch.Tensor,
    error_mask: torch.Tensor,
    alpha: float,
) -> torch.Tensor:
    """alpha * (teacher_logp - student_logp) at error-mask tokens, 0 elsewhere; all (B, T), no gradient."""
    if not (teacher_logp.shape == student_logp.shape == error_mask.shape):
        raise ValueError(
            "teacher_logp, student_logp and error_mask must share one shape, got "
            f"{tuple(teacher_logp.shape)}, {tuple(student_logp.shape)}, {tuple(error_mask.shape)}"
        )
    if not alpha >= 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    with torch.no_grad():
        diff = teacher_logp.float() - student_logp.float()
        # where(), not a product: a masked -inf log-prob (padding) must give 0, not NaN.
        return torch.where(error_mask.bool(), alpha * diff, torch.zeros_like(diff))


# Keys verl's legacy compute_advantage may pass that this estimator does not use.
_IGNORED_KWARGS = frozenset({"reward_baselines"})


def compute_grpo_composer_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    config: Any = None,
    epsilon: float = 1e-6,
    sdpo_teacher_log_probs: torch.Tensor | None = None,
    old_log_probs: torch.Tensor | None = None,
    sdpo_error_mask: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    unknown = set(kwargs) - _IGNORED_KWARGS
    if unknown:
        raise TypeError(f"grpo_composer got unexpected arguments {sorted(unknown)}")
    norm_by_std = bool(get(config, "norm_adv_by_std_in_grpo", True))
    alpha = float(get(config, "alpha_sdpo", 0.0))
    if alpha < 0:
        raise ValueError(f"algorithm.alpha_sdpo must be >= 0, got {alpha}")
    if len(index) != token_level_rewards.shape[0]:
        raise ValueError(f"index has {len(index)} entries for {token_level_rewards.shape[0]} responses")

    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        group, n_groups = group_ids(index, len(scores))
        group = group.to(scores.device)
        mean, std = group_mean_std(scores, group, n_groups)
        centred = scores - mean[group]
        scalars = centred / (std[group] + epsilon) if norm_by_std else centred
        advantages = scalars.unsqueeze(-1) * response_mask

    if alpha > 0:
        missing = [
            name
            for name, value in (
                ("sdpo_teacher_log_probs", sdpo_teacher_log_probs),
                ("old_log_probs", old_log_probs),
                ("sdpo_error_mask", sdpo_error_mask),
            )
            if value is None
        ]
        if missing:
            raise ValueError(
                f"grpo_composer: algorithm.alpha_sdpo={alpha} > 0 needs {missing}; verl's compute_advantage does not "
                "pass them, so the composer trainer must (or set alpha_sdpo=0)"
            )
        site_mask = sdpo_error_mask.bool() & response_mask.bool()
        advantages = advantages + sdpo_advantage_term(sdpo_teacher_log_probs, old_log_probs, site_mask, alpha).to(
            advantages.dtype
        )
    return advantages, advantages


def composer_advantages(batch, algo: Any, sdpo: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The estimator on a verl batch (a DataProto with token_level_rewards, response_mask, uid, and old_log_probs
    when `sdpo` holds the sampled-token inputs sdpo_teacher_log_probs / sdpo_error_mask); `algo` is its config."""
    extra = {} if sdpo is None else dict(sdpo, old_log_probs=batch.batch["old_log_probs"])
    return compute_grpo_composer_advantage(
        token_level_rewards=batch.batch["token_level_rewards"],
        response_mask=batch.batch["response_mask"],
        index=batch.non_tensor_batch["uid"],
        config=algo,
        **extra,
    )


GRPO_COMPOSER = VerlEstimator(
    "grpo_composer",
    compute_grpo_composer_advantage,
    summary="GRPO advantages plus the sampled-token SDPO term at error-site tokens (the Composer).",
)
