"""The `external_agent` config block (documented key by key in docs/AGENT.md), parsed and
checked in one place so a bad value fails in the driver before Ray starts (`check_config`) and the agent loop, the
gateway and the trainer read the same validated values."""

from __future__ import annotations

import ipaddress
import os
import secrets
import shlex
import shutil
from dataclasses import dataclass, field
from typing import Any

from verl_ext.agent.episode import ON_REWRITE, SCORE_SOURCES, check_rules
from verl_ext.agent.gateway.core import DEFAULT_HOST, DEFAULT_MAX_INFLIGHT
from verl_ext.agent.gateway.toolcall import REASONING_PARSERS

AGENT_LOOP_NAME = "external_agent"
MODES = ("sync", "async")
LAUNCHES = ("process", "pool")


@dataclass(frozen=True)
class AgentSettings:
    command: tuple[str, ...] = ()
    host: str = DEFAULT_HOST
    port: int = 0
    timeout_s: float = 120.0
    max_inflight: int = DEFAULT_MAX_INFLIGHT
    on_rewrite: str = ON_REWRITE[0]
    score_source: str = SCORE_SOURCES[0]
    api_key: str | None = None  # None: a random key per gateway, handed to the agents in OPENAI_API_KEY
    env: dict[str, str] = field(default_factory=dict)
    episode_log: str | None = None
    mode: str = "sync"
    max_staleness: int = 1
    launch: str = "process"
    tool_parser: str = "hermes"
    reasoning_parser: str = "none"

    @classmethod
    def from_mapping(cls, block: Any) -> AgentSettings:
        if block is None:
            raise ValueError(
                f"the `{AGENT_LOOP_NAME}` agent loop needs an `external_agent` config block "
                "(at least `+external_agent.command=...`)"
            )
        d = dict(block)
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(
                f"external_agent: unknown keys {sorted(unknown)}; known: {sorted(cls.__dataclass_fields__)}"
            )
        launch = str(d.get("launch", cls.launch))
        if launch not in LAUNCHES:
            raise ValueError(f"external_agent.launch must be one of {LAUNCHES}, got {launch!r}")
        cmd = d.get("command")
        if isinstance(cmd, str):
            cmd = shlex.split(cmd)
        if launch == "pool" and not cmd:
            cmd = ()  # workers are started by the user and poll /tasks/next
        elif not cmd or not all(isinstance(c, str) and c for c in cmd):
            raise ValueError(f"external_agent.command must be a command line (string or list), got {cmd!r}")
        elif shutil.which(cmd[0]) is None and not os.path.isfile(cmd[0]):
            raise ValueError(f"external_agent.command: {cmd[0]!r} is not an executable on PATH or a file")
        s = cls(
            command=tuple(cmd),
            host=str(d.get("host", cls.host)),
            port=int(d.get("port", cls.port)),
            timeout_s=float(d.get("timeout_s", cls.timeout_s)),
            max_inflight=int(d.get("max_inflight", cls.max_inflight)),
            on_rewrite=str(d.get("on_rewrite", cls.on_rewrite)),
            score_source=str(d.get("score_source", cls.score_source)),
            api_key=None if d.get("api_key") is None else str(d["api_key"]),
            env={str(k): str(v) for k, v in dict(d.get("env") or {}).items()},
            episode_log=d.get("episode_log"),
            mode=str(d.get("mode", cls.mode)),
            max_staleness=int(d.get("max_staleness", cls.max_staleness)),
            launch=launch,
            tool_parser=str(d.get("tool_parser", cls.tool_parser)),
            reasoning_parser=str(d.get("reasoning_parser", cls.reasoning_parser)),
        )
        if s.api_key is not None and not s.api_key:
            raise ValueError("external_agent.api_key must be a non-empty string (or unset: a random key per run)")
        if s.api_key is None and not is_loopback(s.host):
            raise ValueError(
                f"external_agent.host={s.host!r} is reachable from other machines: set an explicit "
                "external_agent.api_key (the random per-run key is only for a gateway on 127.0.0.1 / localhost)"
            )
        if s.reasoning_parser not in REASONING_PARSERS:
            raise ValueError(
                f"external_agent.reasoning_parser must be one of {REASONING_PARSERS}, got {s.reasoning_parser!r}"
            )
        from verl.experimental.agent_loop.tool_parser import ToolParser

        if s.tool_parser not in ToolParser._registry:
            raise ValueError(
                f"external_agent.tool_parser must be one of verl's tool parsers {sorted(ToolParser._registry)}, "
                f"got {s.tool_parser!r}"
            )
        if s.launch == "pool" and s.api_key is None:
            raise ValueError(
                "external_agent.launch=pool needs an explicit external_agent.api_key: the workers you start "
                "must know it (process-mode agents get the random per-run key in OPENAI_API_KEY)"
            )
        if not 0 <= s.port < 65536:
            raise ValueError(f"external_agent.port must be 0 (any free port) or a port number, got {s.port}")
        if s.timeout_s <= 0:
            raise ValueError(f"external_agent.timeout_s must be > 0, got {s.timeout_s}")
        if s.max_inflight < 1:
            raise ValueError(f"external_agent.max_inflight must be >= 1, got {s.max_inflight}")
        check_rules(s.on_rewrite, s.score_source, where=f"{AGENT_LOOP_NAME}.")
        if s.launch == "pool" and s.port == 0:
            raise ValueError(
                "external_agent.launch=pool needs a fixed external_agent.port: the agent workers must "
                "know where to poll /tasks/next (agent-loop worker i listens on port + i)"
            )
        if s.mode not in MODES:
            raise ValueError(f"external_agent.mode must be one of {MODES}, got {s.mode!r}")
        if s.max_staleness < 0:
            raise ValueError(f"external_agent.max_staleness must be >= 0, got {s.max_staleness}")
        if s.mode == "async" and s.max_staleness < 1:
            raise ValueError(
                "external_agent.mode=async generates the next step's episodes while the current step "
                "trains, so they are 1 update stale: max_staleness must be >= 1"
            )
        return s


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def gateway_key(settings: AgentSettings) -> str:
    """The key a gateway expects: the configured one, else a fresh random one (per gateway, i.e. per run and
    agent-loop worker), which the agents get in OPENAI_API_KEY."""
    return settings.api_key if settings.api_key is not None else secrets.token_urlsafe(24)


def uses_external_agent(config) -> bool:
    return config.actor_rollout_ref.rollout.agent.get("default_agent_loop") == AGENT_LOOP_NAME


def check_config(config) -> AgentSettings | None:
    """Driver-side check (before Ray): the block parses, verl's settings the episodes rely on are set, and the trainer
    class handles agent episodes (dropped episodes out of their groups, the ledger). An `external_agent` block without
    the `external_agent` loop would be silently ignored, so it is an error too."""
    from verl_ext.config.errors import ConfigError

    if not uses_external_agent(config):
        if config.get("external_agent"):
            raise ConfigError(
                "external_agent.* is set but actor_rollout_ref.rollout.agent.default_agent_loop is "
                f"{config.actor_rollout_ref.rollout.agent.get('default_agent_loop')!r}: set it to "
                f"'{AGENT_LOOP_NAME}' (or remove the external_agent block)"
            )
        return None
    s = AgentSettings.from_mapping(config.get("external_agent"))
    rollout = config.actor_rollout_ref.rollout
    if rollout.get("mode", "async") != "async":
        raise ValueError("external_agent needs verl's async rollout (actor_rollout_ref.rollout.mode=async)")
    _check_trainer_cls(config.get("trainer", {}).get("trainer_cls"))
    return s


def _check_trainer_cls(path) -> None:
    from verl.utils.import_utils import load_class_from_fqn

    from verl_ext.config.errors import ConfigError

    cls = load_class_from_fqn(path, "trainer") if path else None
    # `verl_ext.agent.trainer.AgentEpisodesMixin` sets the flag; read as an attribute, so this module (which the
    # trainer imports) does not import the trainer
    if cls is None or not getattr(cls, "handles_agent_episodes", False):
        raise ConfigError(
            f"external_agent needs a trainer that handles agent episodes, got trainer.trainer_cls={path!r}: use "
            "verl_ext.agent.trainer.AgentPPOTrainer, or a recipe's (recipe.fast_dapo.fast_dapo_ray_trainer."
            "AgentFastDAPOTrainer, recipe.composer.composer_ray_trainer.AgentComposerTrainer)"
        )
