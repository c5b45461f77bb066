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
from verl_ext.config.errors import ConfigError
from verl_ext.config.settings import read_settings, set_fields

AGENT_LOOP_NAME = "external_agent"
MODES = ("sync", "async")
LAUNCHES = ("fork", "process", "pool")


@dataclass(frozen=True)
class AgentSettings:
    """The block's keys and their defaults (the one place they are set), normalised and checked on construction:
    `from_mapping` reads a run's block, ConfigError naming the key."""

    command: tuple[str, ...] = ()  # a command line (string or list), run once per episode; none with launch=pool
    host: str = DEFAULT_HOST
    port: int = 0
    timeout_s: float = 120.0
    max_inflight: int = DEFAULT_MAX_INFLIGHT
    on_rewrite: str = ON_REWRITE[0]
    score_source: str = SCORE_SOURCES[0]
    api_key: str | None = None  # None: a random key per gateway, handed to the agents in OPENAI_API_KEY
    env: dict[str, str] = field(default_factory=dict)
    episode_log: str | None = None
    transcripts: str | None = None  # a directory: each episode's messages and trained ids (`transcript`)
    mode: str = "sync"
    max_staleness: int = 1
    # fork: each episode forked from a fork server that imported the agent's libraries once (a process per episode
    # where the command is not `python script.py` / `python -m mod`); process: a new process per episode; pool: the
    # user's workers poll /tasks/next (verl_ext.agent.fork_launch, docs/AGENT.md)
    launch: str = "fork"
    tool_parser: str = "hermes"
    reasoning_parser: str = "none"

    @classmethod
    def from_mapping(cls, block: Any) -> AgentSettings:
        if block is None:
            raise ConfigError(
                f"the `{AGENT_LOOP_NAME}` agent loop needs an `external_agent` config block "
                "(at least `+external_agent.command=...`)"
            )
        return read_settings(cls, block, "external_agent")

    def __post_init__(self):
        launch = str(self.launch)
        if launch not in LAUNCHES:
            raise ConfigError(f"external_agent.launch must be one of {LAUNCHES}, got {launch!r}")
        set_fields(
            self,
            command=_command(self.command, launch),
            host=str(self.host),
            port=int(self.port),
            timeout_s=float(self.timeout_s),
            max_inflight=int(self.max_inflight),
            on_rewrite=str(self.on_rewrite),
            score_source=str(self.score_source),
            api_key=None if self.api_key is None else str(self.api_key),
            env={str(k): str(v) for k, v in dict(self.env or {}).items()},
            transcripts=None if self.transcripts is None else str(self.transcripts),
            mode=str(self.mode),
            max_staleness=int(self.max_staleness),
            launch=launch,
            tool_parser=str(self.tool_parser),
            reasoning_parser=str(self.reasoning_parser),
        )
        self._check_gateway()
        self._check_loop()

    def _check_gateway(self) -> None:
        """The gateway's address, key and parsers."""
        if self.api_key is not None and not self.api_key:
            raise ConfigError("external_agent.api_key must be a non-empty string (or unset: a random key per run)")
        if self.api_key is None and not is_loopback(self.host):
            raise ConfigError(
                f"external_agent.host={self.host!r} is reachable from other machines: set an explicit "
                "external_agent.api_key (the random per-run key is only for a gateway on 127.0.0.1 / localhost)"
            )
        if self.reasoning_parser not in REASONING_PARSERS:
            raise ConfigError(
                f"external_agent.reasoning_parser must be one of {REASONING_PARSERS}, got {self.reasoning_parser!r}"
            )
        from verl_ext.agent.gateway.tool_parsers import parser_names

        if self.tool_parser not in parser_names():
            raise ConfigError(
                f"external_agent.tool_parser must be one of the tool parsers {parser_names()} (verl's and "
                f"verl_ext.agent.gateway.tool_parsers'), got {self.tool_parser!r}"
            )
        if self.launch == "pool" and self.api_key is None:
            raise ConfigError(
                "external_agent.launch=pool needs an explicit external_agent.api_key: the workers you start "
                "must know it (the agents the trainer starts get the random per-run key in OPENAI_API_KEY)"
            )
        if not 0 <= self.port < 65536:
            raise ConfigError(f"external_agent.port must be 0 (any free port) or a port number, got {self.port}")
        if self.timeout_s <= 0:
            raise ConfigError(f"external_agent.timeout_s must be > 0, got {self.timeout_s}")
        if self.max_inflight < 1:
            raise ConfigError(f"external_agent.max_inflight must be >= 1, got {self.max_inflight}")

    def _check_loop(self) -> None:
        """The episode rules, the pool's port and the sync/async loop."""
        try:
            check_rules(self.on_rewrite, self.score_source, where=f"{AGENT_LOOP_NAME}.")
        except ValueError as e:
            raise ConfigError(str(e)) from e
        if self.launch == "pool" and self.port == 0:
            raise ConfigError(
                "external_agent.launch=pool needs a fixed external_agent.port: the agent workers must "
                "know where to poll /tasks/next (agent-loop worker i listens on port + i)"
            )
        if self.mode not in MODES:
            raise ConfigError(f"external_agent.mode must be one of {MODES}, got {self.mode!r}")
        if self.max_staleness < 0:
            raise ConfigError(f"external_agent.max_staleness must be >= 0, got {self.max_staleness}")
        if self.mode == "async" and self.max_staleness < 1:
            raise ConfigError(
                "external_agent.mode=async generates the next step's episodes while the current step "
                "trains, so they are 1 update stale: max_staleness must be >= 1"
            )


def _command(cmd: Any, launch: str) -> tuple[str, ...]:
    """external_agent.command as an argv tuple: a string is split as a shell would; empty only with launch=pool (the
    workers are started by the user and poll /tasks/next)."""
    if isinstance(cmd, str):
        cmd = shlex.split(cmd)
    if launch == "pool" and not cmd:
        return ()
    if not cmd or not all(isinstance(c, str) and c for c in cmd):
        raise ConfigError(f"external_agent.command must be a command line (string or list), got {cmd!r}")
    if shutil.which(cmd[0]) is None and not os.path.isfile(cmd[0]):
        raise ConfigError(f"external_agent.command: {cmd[0]!r} is not an executable on PATH or a file")
    return tuple(cmd)


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
        raise ConfigError("external_agent needs verl's async rollout (actor_rollout_ref.rollout.mode=async)")
    _check_trainer_cls(config.get("trainer", {}).get("trainer_cls"))
    return s


def _check_trainer_cls(path) -> None:
    from verl.utils.import_utils import load_class_from_fqn

    cls = load_class_from_fqn(path, "trainer") if path else None
    # `verl_ext.trainer.agent_episodes.AgentEpisodesMixin` sets the flag; read as an attribute, so this module
    # (which the trainer imports) does not import the trainer
    if cls is None or not getattr(cls, "handles_agent_episodes", False):
        raise ConfigError(
            f"external_agent needs a trainer that handles agent episodes, got trainer.trainer_cls={path!r}: use "
            "verl_ext.trainer.agent_episodes.AgentPPOTrainer, or a recipe's (recipe.fast_dapo.fast_dapo_ray_trainer."
            "AgentFastDAPOTrainer, recipe.composer.composer_ray_trainer.AgentComposerTrainer)"
        )
