"""The agent entry point checks its config in the driver, before Ray or any model starts."""

from __future__ import annotations

import sys

import pytest

from verl_ext.trainer.agent_main import DEFAULT_TRAINER, prepare

LOOP = "actor_rollout_ref.rollout.agent.default_agent_loop=external_agent"


def test_prepare_defaults_the_trainer_and_checks_the_block():
    cfg, settings = prepare(
        [
            LOOP,
            f"+external_agent.command='{sys.executable} -m verl_ext.agent.examples.guess_agent'",
            "+external_agent.mode=async",
        ]
    )
    assert cfg.trainer.trainer_cls == DEFAULT_TRAINER and settings.mode == "async"


@pytest.mark.parametrize(
    "overrides, match",
    [
        ([], "default_agent_loop=external_agent"),
        ([LOOP], "needs an `external_agent` config block"),
        ([LOOP, "+external_agent.command=/no/such/agent"], "not an executable"),
        ([LOOP, f"+external_agent.command={sys.executable}", "+external_agent.timeout_s=-1"], "timeout_s"),
    ],
)
def test_bad_config_fails_before_ray(overrides, match):
    with pytest.raises(ValueError, match=match):
        prepare(overrides)
