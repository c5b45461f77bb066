"""Train an external agent with the project's PPO/GRPO trainer on verl's `ppo_trainer` config:

    python -m verl_ext.trainer.agent_main +backend=cpu data.train_files=tasks.parquet ... \
        actor_rollout_ref.rollout.agent.default_agent_loop=external_agent \
        +external_agent.command='python my_agent.py'

Overrides are Hydra overrides of verl's `ppo_trainer` config (with the project's config groups on the search path).
`trainer.trainer_cls` defaults to `verl_ext.trainer.agent_episodes.AgentPPOTrainer`. The `external_agent` block is
checked here, in the driver, before Ray starts. The recipes (`recipe.fast_dapo.main`, `recipe.composer.main`) take the
same overrides with `trainer.trainer_cls=recipe.fast_dapo.fast_dapo_ray_trainer.AgentFastDAPOTrainer` /
`recipe.composer.composer_ray_trainer.AgentComposerTrainer` (each recipe composes its agent trainer).
"""

from __future__ import annotations

import sys

from omegaconf import open_dict

from verl_ext.agent.settings import check_config

DEFAULT_TRAINER = "verl_ext.trainer.agent_episodes.AgentPPOTrainer"


def prepare(overrides: list[str]):
    """The composed, checked config (raises before anything expensive starts)."""
    from verl_ext.config.compose import compose_config
    from verl_ext.trainer.launch import register_lazy_resolvers

    register_lazy_resolvers()
    cfg = compose_config("ppo_trainer", overrides)
    with open_dict(cfg):
        if not cfg.trainer.get("trainer_cls"):
            cfg.trainer.trainer_cls = DEFAULT_TRAINER
    settings = check_config(cfg)
    if settings is None:
        raise ValueError(
            "verl_ext.trainer.agent_main trains external agents: set "
            "actor_rollout_ref.rollout.agent.default_agent_loop=external_agent"
        )
    return cfg, settings


def agent_check(settings):
    """This driver's pre-flight check (verl's ppo_trainer config, the project's trainer base), for `gate`: an agent
    that posts its own score (external_agent.score_source=agent) needs no ground truth in the data."""
    from verl_ext.config.preflight import preflight

    return lambda cfg: preflight(
        cfg, "ppo", settings=settings, reward_reads_data=getattr(settings, "score_source", "reward_fn") != "agent"
    )


def main(argv: list[str] | None = None) -> None:
    from verl.utils.device import auto_set_device

    from verl_ext.config.preflight import failing_cleanly, gate, translate_check_flag
    from verl_ext.trainer.launch import run

    with failing_cleanly("agent"):  # the pre-flight (verl_ext/config/preflight/); --check: print the plan, exit
        cfg, settings = prepare(translate_check_flag(list(sys.argv[1:] if argv is None else argv)))
    print(f"[agent] {settings}")
    auto_set_device(cfg)
    if gate("agent", cfg, agent_check(settings)):
        run(cfg)


if __name__ == "__main__":
    main()
