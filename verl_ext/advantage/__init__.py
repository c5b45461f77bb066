"""Composable advantage pipeline for verl: MaxRL, GTPO, HICRA, SEPA, planning-token detection and plugins.

`register()` adds the estimators `maxrl`, `gtpo`, `gtpo_hicra`, `gtpo_sepa`, `composable` and the Composer's
`grpo_composer` to verl's registry
(idempotent). verl's own `grpo` stays as it is (with `norm_adv_by_std_in_grpo=False` it is the reference GRPO).
The formulas are in the modules named after each algorithm, each listed once in `registry` (how to add one is
there); the config keys in `config` and advantage.yaml.
"""

from __future__ import annotations

from verl_ext.advantage.base import AdvantageInputs
from verl_ext.advantage.config import ADVANTAGE_YAML, AdvantageConfig, SepaConfig, validate_algorithm_config
from verl_ext.advantage.gram_match import DEFAULT_STRATEGIC_GRAMS
from verl_ext.advantage.pipeline import compute_advantages
from verl_ext.advantage.planning import PlanningDetector
from verl_ext.advantage.plugins import (
    AlgorithmContext,
    AlgorithmOutput,
    PluginError,
    TransformContext,
    TransformOutput,
    episode_vectorized,
)
from verl_ext.advantage.sepa_schedule import SepaController

__all__ = [
    "ADVANTAGE_YAML",
    "AdvantageInputs",
    "DEFAULT_STRATEGIC_GRAMS",
    "AdvantageConfig",
    "AlgorithmContext",
    "AlgorithmOutput",
    "PlanningDetector",
    "PluginError",
    "SepaConfig",
    "SepaController",
    "TransformContext",
    "TransformOutput",
    "compute_advantages",
    "episode_vectorized",
    "register",
    "validate_algorithm_config",
]


def register() -> None:
    """Register the estimators with verl.trainer.ppo.core_algos.register_adv_est. Safe to call repeatedly."""
    from verl.trainer.ppo.core_algos import register_adv_est

    from verl_ext.advantage.estimators import verl_function
    from verl_ext.advantage.registry import estimators, verl_estimators

    for name in estimators():
        register_adv_est(name)(verl_function(name))
    for name, entry in verl_estimators().items():
        register_adv_est(name)(entry.fn)
