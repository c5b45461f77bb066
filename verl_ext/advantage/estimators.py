"""verl's entry points for the project's estimators: one function per `registry.estimators()` name (`maxrl`, `gtpo`,
`gtpo_hicra`, `gtpo_sepa`, `composable`), made here from the registry and registered by `advantage.register()`.

Each keeps verl's calling convention `fn(token_level_rewards, response_mask, index, config=None, **kwargs)
-> (advantages, returns)`, shapes (bs, T), `index` the uid array, reward per response = sum over T, and
returns = advantages (outcome-only, as verl's GRPO). `config` is verl's `algorithm` section (see `config`).

Keyword arguments the token-level estimators use (verl's stock trainer passes none of them; the project's trainer
`verl_ext.trainer.ExtRayPPOTrainer` does), read once into an `AdvantageInputs` (base.py):
    old_log_probs (bs, T)   log-probs of the sampled tokens under the rollout-time policy
    entropys (bs, T)        per-token vocabulary entropy; required by uncertainty_kind=shannon_entropy
    planning_mask (bs, T)   bool; else detected from `responses` (bs, T ids) with `tokenizer` when needed
    step (int)              the training step, handed to plugins
    sepa_lambda (float)     SEPA strength for this step (from SepaController.resolve); required by gtpo_sepa
    metrics (dict)          filled with float metrics (see `pipeline`)
Other keyword arguments (verl may add some, e.g. reward_baselines) are ignored.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable

import torch

import verl_ext.advantage.registry as registry
from verl_ext.advantage.base import AdvantageInputs
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


def estimate(name: str, token_level_rewards, response_mask, index, config, kwargs) -> tuple[torch.Tensor, ...]:
    """The estimator `name` on verl's arguments: (advantages, returns), the same tensor."""
    cfg = AdvantageConfig.from_algorithm(config, adv_estimator=name)
    inputs = AdvantageInputs.from_verl(token_level_rewards, response_mask, index, kwargs)
    tokenizer, responses = kwargs.get("tokenizer"), kwargs.get("responses")
    if inputs.planning_mask is None and cfg.needs_planning and tokenizer is not None and responses is not None:
        planning_mask = planning_detector(tokenizer, cfg.strategic_grams)(responses, response_mask)
        inputs = dataclasses.replace(inputs, planning_mask=planning_mask)
    with torch.no_grad():
        advantages = compute_advantages(cfg, inputs, metrics=kwargs.get("metrics"))
    return advantages, advantages


@functools.cache  # one function object per name: verl's register_adv_est accepts it again, never a different one
def verl_function(name: str) -> Callable:
    """verl's estimator function for a registry estimator (`compute_<name>_advantage`)."""
    summary = registry.estimators()[name].summary

    def estimator(token_level_rewards, response_mask, index=None, config=None, **kwargs):
        return estimate(name, token_level_rewards, response_mask, index, config, kwargs)

    estimator.__name__ = estimator.__qualname__ = f"compute_{name}_advantage"
    estimator.__doc__ = summary
    return estimator


ESTIMATOR_FNS = {name: verl_function(name) for name in registry.estimators()}
globals().update({fn.__name__: fn for fn in ESTIMATOR_FNS.values()})  # importable by name, e.g. for pickling
