"""Loaded by verl in every process that imports it (driver, TaskRunner, workers, rollout servers) through the
`verl.plugins` entry point. verl swallows exceptions raised here (logged at debug level only), so registration
errors are logged at warning level before re-raising.

What it registers is the same for every run: the project's advantage estimators and agent loop, and under
VERL_PLATFORM=cpu the CPU backend (its platform, shims and engines). It registers no GPU engine: verl's cuda/npu
engines are swapped for the shared-prefix ones only in the workers of a run that sets `actor.use_prefix_grouper`
(verl_ext/shared_prefix/registration.py says why there and not here).
"""

import logging

logger = logging.getLogger(__name__)


def _load() -> None:
    from verl_ext import advantage, agent, cpu
    from verl_ext.cpu import platform  # noqa: F401  registers "cpu"; never auto-detected, only by VERL_PLATFORM=cpu

    if cpu.is_requested():
        cpu.activate()
    advantage.register()  # maxrl, gtpo, gtpo_hicra, gtpo_sepa, composable, grpo_composer in verl's estimator registry
    agent.register()  # the external_agent agent loop (verl_ext/agent/external_loop.py)


try:
    _load()
except Exception:
    logger.warning("verl_ext plugin failed to load", exc_info=True)
    raise
