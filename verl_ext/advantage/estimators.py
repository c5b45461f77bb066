"""verl advantage estimators: `maxrl`, `gtpo`, `gtpo_hicra`, `gtpo_sepa`, `composable`.

Each keeps verl's calling convention `fn(token_level_rewards, response_mask, index, config=None, **kwargs)
-> (advantages, returns)`, shapes (bs, T), `index` the uid array, reward per response = sum over T, and
returns = advantages (outcome-only, as verl's GRPO). `config` is verl's `algorithm` section (see `config`).

Keyword arguments the token-level estimators use (verl's stock trainer passes none of them; the project's trainer
`verl_ext.trainer.ExtRayPPOTrainer` does):
    old_log_probs (bs, T)   log-probs of the sampled tokens under the rollout-time policy
    entropys (bs, T)        per-token vocabulary entropy; required by uncertainty_kind=shannon_entropy
    planning_mask (bs, T)   bool; else detected from `responses` (bs, T ids) with `tokenizer` when needed
    step (int)              the training step, handed to plugins
    sepa_lambda (float)     SEPA strength for this step (from SepaController.resolve); required by gtpo_sepa
    metrics (dict)          filled with float metrics (see `pipeline`)
Other keyword arguments (verl may add some, e.g. reward_baselines) are ignored.
"""

from __future__ import annotations

import threading

import torch

from verl_ext.advantage.config import AdvantageConfig
from verl_ext.advantage.pipeline import compute_advantages
from verl_ext.advantage.planning import PlanningDetector

_detectors: dict[tuple, tuple[object, PlanningDetector]] = {}
_detectors_lock = threading.Lock()


def planning_detector(tokenizer, grams: tuple[str, ...]) -> PlanningDetector:
    """One cached detector per (tokenizer object, grams): building the token table costs about a second."""
    key = (id(tokenizer), grams)
    with _detectors_lock:
        cached = _detectors.get(key)
        if cached is None or cached[0] is not tokenizer:  # id reuse after the tokenizer was freed
            cached = (tokenizer, PlanningDetector(tokenizer, grams))
            _detectors[key] = cached
        return cached[1]


def _estimate(name: str, token_level_rewards, response_mask, index, config, kwargs) -> tuple[torch.Tensor, ...]:
    cfg = AdvantageConfig.from_algorithm(config, adv_estimator=name)
    planning_mask = kwargs.get("planning_mask")
    tokenizer, responses = kwargs.get("tokenizer"), kwargs.get("responses")
    if planning_mask is None and cfg.needs_planning and tokenizer is not None and responses is not None:
        planning_mask = planning_detector(tokenizer, cfg.strategic_grams)(responses, response_mask)
    with torch.no_grad():
        advantages = compute_advantages(
            cfg,
            token_level_rewards,
            response_mask,
            index,
            old_log_probs=kwargs.get("old_log_probs"),
            entropys=kwargs.get("entropys"),
            planning_mask=planning_mask,
            step=int(kwargs.get("step") or 0),
            sepa_lambda=kwargs.get("sepa_lambda"),
            metrics=kwargs.get("metrics"),
        )
    return advantages, advantages


def compute_maxrl_advantage(token_level_rewards, response_mask, index=None, config=None, **kwargs):
    """MaxRL episode advantages, broadcast over each response's tokens."""
    return _estimate("maxrl", token_level_rewards, response_mask, index, config, kwargs)


def compute_gtpo_advantage(token_level_rewards, response_mask, index=None, config=None, **kwargs):
    """advantage_mode (default maxrl) + GTPO weighting."""
    return _estimate("gtpo", token_level_rewards, response_mask, index, config, kwargs)


def compute_gtpo_hicra_advantage(token_level_rewards, response_mask, index=None, config=None, **kwargs):
    """advantage_mode (default maxrl) + GTPO weighting + HICRA on planning tokens."""
    return _estimate("gtpo_hicra", token_level_rewards, response_mask, index, config, kwargs)


def compute_gtpo_sepa_advantage(token_level_rewards, response_mask, index=None, config=None, **kwargs):
    """advantage_mode (default maxrl) + SEPA pooling + GTPO weighting (the recommended condition)."""
    return _estimate("gtpo_sepa", token_level_rewards, response_mask, index, config, kwargs)


def compute_composable_advantage(token_level_rewards, response_mask, index=None, config=None, **kwargs):
    """advantage_mode + transform_mode, or algorithm_mode, all from config."""
    return _estimate("composable", token_level_rewards, response_mask, index, config, kwargs)


ESTIMATOR_FNS = {
    "maxrl": compute_maxrl_advantage,
    "gtpo": compute_gtpo_advantage,
    "gtpo_hicra": compute_gtpo_hicra_advantage,
    "gtpo_sepa": compute_gtpo_sepa_advantage,
    "composable": compute_composable_advantage,
}
