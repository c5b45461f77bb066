"""Rule-based math reward (``math_reward.compute_score``) for verl's custom reward function hook.

``reward.custom_reward_function.path=pkg://verl_ext.reward.math_reward``,
``reward.custom_reward_function.name=compute_score``. Nothing to register.
"""

from verl_ext.reward.math_reward import MathRewardConfig, compute_score

__all__ = ["MathRewardConfig", "compute_score"]
