"""The `external_agent` block: parsed once, bad values rejected with the key's name (before Ray starts)."""

from __future__ import annotations

import sys

import pytest
from omegaconf import OmegaConf

from verl_ext.agent.settings import AgentSettings, check_config

PY = sys.executable


def test_defaults_and_command_forms():
    s = AgentSettings.from_mapping({"command": f"{PY} -m verl_ext.agent.examples.guess_agent"})
    assert s.command == (PY, "-m", "verl_ext.agent.examples.guess_agent")
    assert (s.host, s.port, s.timeout_s, s.max_inflight) == ("127.0.0.1", 0, 120.0, 256)
    assert (s.on_rewrite, s.score_source, s.mode, s.max_staleness) == ("drop", "agent", "sync", 1)
    assert AgentSettings.from_mapping({"command": [PY, "x.py"], "env": {"A": 1}}).env == {"A": "1"}
    pool = AgentSettings.from_mapping({"launch": "pool", "port": 8700, "api_key": "k"})  # workers are the user's
    assert pool.command == () and pool.launch == "pool"
    assert (s.tool_parser, s.reasoning_parser) == ("hermes", "none")


def test_api_key_defaults_to_a_random_key_per_gateway():
    from verl_ext.agent.settings import gateway_key

    s = AgentSettings.from_mapping({"command": PY})
    assert s.api_key is None
    keys = {gateway_key(s) for _ in range(3)}
    assert len(keys) == 3 and all(len(k) >= 32 for k in keys)
    assert gateway_key(AgentSettings.from_mapping({"command": PY, "api_key": "mine"})) == "mine"
    # loopback hosts need no explicit key; an explicit key allows any host
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.5"):
        assert AgentSettings.from_mapping({"command": PY, "host": host}).api_key is None
    assert AgentSettings.from_mapping({"command": PY, "host": "0.0.0.0", "api_key": "k"}).host == "0.0.0.0"


@pytest.mark.parametrize(
    "block, match",
    [
        (None, "needs an `external_agent` config block"),
        ({"command": ""}, "must be a command line"),
        ({"command": "/no/such/agent-binary"}, "not an executable"),
        ({"command": PY, "port": 70000}, "port"),
        ({"command": PY, "timeout_s": 0}, "timeout_s must be > 0"),
        ({"command": PY, "max_inflight": 0}, "max_inflight must be >= 1"),
        ({"command": PY, "on_rewrite": "keep"}, "on_rewrite must be one of"),
        ({"command": PY, "score_source": "judge"}, "score_source must be one of"),
        ({"command": PY, "mode": "later"}, "mode must be one of"),
        ({"command": PY, "max_staleness": -1}, "max_staleness must be >= 0"),
        ({"command": PY, "comand": PY}, r"unknown external_agent keys \['comand'\]"),
        ({"command": PY, "launch": "docker"}, "launch must be one of"),
        ({"launch": "pool", "api_key": "k"}, "needs a fixed external_agent.port"),
        ({"launch": "pool", "port": 8700}, "launch=pool needs an explicit external_agent.api_key"),
        ({"command": PY, "host": "0.0.0.0"}, "host='0.0.0.0' is reachable from other machines"),
        ({"command": PY, "host": "10.1.2.3"}, "set an explicit external_agent.api_key"),
        ({"command": PY, "api_key": ""}, "api_key must be a non-empty string"),
        ({"command": PY, "tool_parser": "xml"}, r"tool_parser must be one of the tool parsers \[.*'hermes', .*'line'"),
        ({"command": PY, "reasoning_parser": "r1"}, "reasoning_parser must be one of"),
        ({"command": PY, "mode": "async", "max_staleness": 0}, "max_staleness must be >= 1"),
    ],
)
def test_bad_values_name_the_key(block, match):
    with pytest.raises(ValueError, match=match):
        AgentSettings.from_mapping(block)


def _config(loop: str, mode: str = "async", block=None, trainer_cls="verl_ext.trainer.agent_episodes.AgentPPOTrainer"):
    cfg = {
        "actor_rollout_ref": {"rollout": {"mode": mode, "agent": {"default_agent_loop": loop}}},
        "trainer": {"trainer_cls": trainer_cls},
    }
    if block is not None:
        cfg["external_agent"] = block
    return OmegaConf.create(cfg)


def test_check_config():
    assert check_config(_config("single_turn_agent")) is None  # not an agent run: nothing to check
    # verl's parsers and the project's own (verl_ext/agent/gateway/tool_parsers.py) are known by name
    for parser in ("hermes", "line"):
        assert AgentSettings.from_mapping({"command": PY, "tool_parser": parser}).tool_parser == parser
    assert check_config(_config("external_agent", block={"command": PY})).command == (PY,)
    with pytest.raises(ValueError, match="needs an `external_agent` config block"):
        check_config(_config("external_agent"))
    with pytest.raises(ValueError, match="async rollout"):
        check_config(_config("external_agent", mode="sync", block={"command": PY}))
    with pytest.raises(ValueError, match="default_agent_loop is 'single_turn_agent'"):
        check_config(_config("single_turn_agent", block={"command": PY}))  # the block would be silently ignored
    with pytest.raises(ValueError, match="needs a trainer that handles agent episodes"):
        check_config(
            _config(
                "external_agent", block={"command": PY}, trainer_cls="verl_ext.trainer.ppo_trainer.ExtRayPPOTrainer"
            )
        )
    with pytest.raises(ValueError, match="needs a trainer that handles agent episodes"):
        check_config(_config("external_agent", block={"command": PY}, trainer_cls=None))
