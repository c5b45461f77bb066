"""Compose a verl Hydra config in-process (tests, benchmarks, notebooks), the same way the CLI entry points do.

`compose_config("ppo_trainer", ["data.train_batch_size=4"], backend="cpu")` gives the DictConfig that
`python -m verl.trainer.main_ppo hydra.searchpath=[pkg://verl_ext.config] +backend=cpu data.train_batch_size=4` runs
with. Hydra's `hydra.job.env_set` is not applied by the compose API; `verl_ext.cpu.session.cpu_session` sets the
same variables for in-process runs.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf


def compose_config(
    config_name: str = "ppo_trainer",
    overrides: list[str] | None = None,
    config_module: str = "verl.trainer.config",
    backend: str | None = None,
) -> DictConfig:
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    overrides = list(overrides or [])
    if backend:
        overrides = [f"+backend={backend}"] + overrides
    GlobalHydra.instance().clear()
    with initialize_config_module(config_module=config_module, version_base=None):
        cfg = compose(
            config_name=config_name,
            overrides=["hydra.searchpath=[pkg://verl.trainer.config,pkg://verl_ext.config]"] + overrides,
        )
    GlobalHydra.instance().clear()
    if "hydra" in cfg:
        OmegaConf.set_struct(cfg, False)
        cfg.pop("hydra")
        OmegaConf.set_struct(cfg, True)
    return cfg


def driver_config_module(driver: str) -> str:
    """The config package of a driver module whose Hydra config is the `config/` directory beside it
    (`@hydra.main(config_path="config")`): `pkg.main` -> `pkg.config`. The driver module is the caller's (a
    campaign spec's entry, a cluster job's driver)."""
    return f"{driver.rpartition('.')[0]}.config"
