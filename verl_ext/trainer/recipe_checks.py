"""What every recipe on the project's trainer base checks of its run config, in its own config check before Ray:
verl's legacy trainer, the plot settings, the verl-feature fidelity table with the recipe trainer's declaration, and
the `external_agent` block. The recipe hands in what differs (its name for the messages, its trainer's fidelity)."""

from __future__ import annotations

from omegaconf import DictConfig

from verl_ext.config.errors import ConfigError
from verl_ext.config.trainer_settings import read_trainer_extras
from verl_ext.trainer.fidelity import TrainerFidelity, check_fidelity


def check_recipe_run(cfg: DictConfig, recipe: str, fidelity: TrainerFidelity) -> None:
    """ConfigError naming the key: `trainer.use_v1` (the trainer base is verl's legacy loop), the project's `trainer.*`
    keys (`TrainerExtras`), the fidelity table's rejections (`check_fidelity(cfg, fidelity)`) and the agent
    block (`verl_ext.agent.settings.check_config`). `recipe` names the recipe in the messages ("fast DAPO")."""
    from verl_ext.agent.settings import check_config as check_agent_config  # the agent package, only when checked

    if cfg.trainer.get("use_v1", False):
        raise ConfigError(f"{recipe} runs on verl's legacy trainer: set trainer.use_v1=false")
    read_trainer_extras(cfg.trainer)  # the project's trainer.* keys (the JSONL log, the plot, the held-out set)
    check_fidelity(cfg, fidelity)
    check_agent_config(cfg)  # the external_agent block, when the agent loop is selected (or the block is set)
