"""The `external_agent` config block (documented key by key in docs/AGENT.md), parsed and
checked in one place so a bad value fails in the driver before Ray starts (`check_config`) and the agent loop, the
gateway and the trainer read the same validated values."""

from __future__ import annotations

import ipaddress
import os
import secrets
import shlex
import shutil
from dataclasses import dataclass
from typing import Any, Literal

from verl_ext.agent.episode import ON_REWRITE, SCORE_SOURCES
from verl_ext.agent.gateway.core import DEFAULT_HOST, DEFAULT_MAX_INFLIGHT
from verl_ext.agent.gateway.toolcall import REASONING_PARSERS
from verl_ext.config.errors import ConfigError
from verl_ext.config.fields import setting
from verl_ext.config.settings import read_settings, set_fields

AGENT_LOOP_NAME = "external_agent"
MODES = ("sync", "async")
LAUNCHES = ("fork", "process", "pool")


@dataclass(frozen=True)
class AgentSettings:
    """The block's keys, each declared once here with its default, its bounds and its meaning; `from_mapping` reads
    a run's block (types, choices and bounds enforced by `read_settings`), `__post_init__` checks the rules across
    keys. ConfigError naming the key."""

    command: str | tuple[str, ...] = setting(
        (),
        help="the agent's command line (a string, split as a shell would, or a list), run once per episode; "
        "none with launch=pool",
    )
    host: str = setting(DEFAULT_HOST, help="the gateway's address; a non-loopback one needs an explicit api_key")
    port: int = setting(
        0,
        ge=0,
        lt=65536,
        help="the gateway's port; 0 = any free port (fork and process); agent-loop worker i takes port + i",
    )
    timeout_s: float = setting(
        120.0, gt=0, help="an episode not finished by then is killed (its process group) and dropped as `timeout`"
    )
    max_inflight: int = setting(
        DEFAULT_MAX_INFLIGHT,
        ge=1,
        help="generation requests admitted at once per gateway; more get 429 (the openai client retries)",
    )
    on_rewrite: Literal[ON_REWRITE] = setting(
        ON_REWRITE[0], help="an agent that rewrote its history: `drop` the episode, or `last`: train its last segment"
    )
    score_source: Literal[SCORE_SOURCES] = setting(
        SCORE_SOURCES[0],
        help="`agent`: the posted score is the reward (no score = dropped); `reward_fn`: verl's reward function "
        "scores the trained transcript",
    )
    api_key: str | None = setting(
        None,
        help="the key the gateway expects; null = a random key per gateway, handed to the agents in OPENAI_API_KEY",
    )
    env: dict[str, str] = setting(factory=dict, help="extra environment variables for the agent")
    episode_log: str | None = setting(
        None, help="the episode ledger (JSONL); null = episodes.jsonl beside trainer.jsonl_metrics_path"
    )
    transcripts: str | None = setting(None, help="a directory: each episode's messages and trained ids (`transcript`)")
    mode: Literal[MODES] = setting(
        "sync",
        help="`sync`: all episodes of a step finish before its update; `async`: the next step's episodes "
        "run during it (docs/AGENT.md)",
    )
    max_staleness: int = setting(
        1, ge=0, help="async: episodes sampled by weights more than this many updates old are dropped (`stale`)"
    )
    launch: Literal[LAUNCHES] = setting(
        "fork",
        help="fork: each episode forked from a fork server that imported the agent's libraries once (a "
        "process per episode where the command is not `python script.py` / `python -m mod`); process: a new process "
        "per episode; pool: the user's workers poll /tasks/next (verl_ext.agent.fork_launch, docs/AGENT.md)",
    )
    tool_parser: str = setting(
        "hermes",
        help="how tool calls are read from the policy's text: a parser of verl's ToolParser registry "
        "(verl's and verl_ext.agent.gateway.tool_parsers')",
    )
    reasoning_parser: Literal[REASONING_PARSERS] = setting(
        "none", help="`think`: <think>...</think> returned as reasoning_content, never parsed for calls; `none`: off"
    )

    @classmethod
    def from_mapping(cls, block: Any) -> AgentSettings:
        if block is None:
            raise ConfigError(
                f"the `{AGENT_LOOP_NAME}` agent loop needs an `external_agent` config block "
                "(at least `+external_agent.command=...`)"
            )
        return read_settings(cls, block, "external_agent")

    def __post_init__(self):
        set_fields(self, command=_command(self.command, self.launch))
        if self.api_key is not None and not self.api_key:
            raise ConfigError("external_agent.api_key must be a non-empty string (or unset: a random key per run)")
        if self.api_key is None and not is_loopback(self.host):
            raise ConfigError(
                f"external_agent.host={self.host!r} is reachable from other machines: set an explicit "
                "external_agent.api_key (the random per-run key is only for a gateway on 127.0.0.1 / localhost)"
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
        if self.launch == "pool" and self.port == 0:
            raise ConfigError(
                "external_agent.launch=pool needs a fixed external_agent.port: the agent workers must "
                "know where to poll /tasks/next (agent-loop worker i listens on port + i)"
            )
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
