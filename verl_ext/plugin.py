"""Loaded by verl in every process that imports it (driver, TaskRunner, workers, rollout servers) through the
`verl.plugins` entry point. verl swallows exceptions raised here (logged at debug level only), so registration
errors are logged at warning level before re-raising.
"""

import logging

logger = logging.getLogger(__name__)


def _load() -> None:
    from verl_ext import advantage, agent, cpu
    from verl_ext.cpu import platform  # noqa: F401  registers "cpu"; never auto-detected, only by VERL_PLATFORM=cpu
    from verl_ext.shared_prefix import registration as shared_prefix

    if cpu.is_requested():
        cpu.activate()
    advantage.register()  # maxrl, gtpo, gtpo_hicra, gtpo_sepa, composable, grpo_composer in verl's estimator registry
    agent.register()  # the external_agent agent loop (verl_ext/agent/external_loop.py)
    if not cpu.is_requested():
        shared_prefix.register()  # verl's cuda/npu FSDP engines with shared-prefix passes (the CPU backend has its own)


try:
    _load()
except Exception:
    logger.warning("verl_ext plugin failed to load", exc_info=True)
    raise
