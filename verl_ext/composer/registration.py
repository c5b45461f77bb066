"""Registers the Composer pieces with verl: the `grpo_composer` advantage estimator.

No policy loss is registered. verl 0.9.1 calls a registered policy loss (`register_policy_loss`) from
`verl.workers.utils.losses.ppo_loss` with old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config
and rollout_is_weights only: (B, T) log-probs of the sampled tokens, never logits, so the full-logit JSD term
cannot be computed there. It belongs in an engine-level loss function (see the package docstring).
"""

from __future__ import annotations

ADV_ESTIMATOR_NAME = "grpo_composer"


def register() -> None:
    """Register `grpo_composer` in verl's advantage-estimator registry. Safe to call more than once."""
    from verl.trainer.ppo.core_algos import register_adv_est

    from verl_ext.composer.grpo_composer import compute_grpo_composer_advantage

    # register_adv_est accepts the same function object again and raises only for a different one.
    register_adv_est(ADV_ESTIMATOR_NAME)(compute_grpo_composer_advantage)
