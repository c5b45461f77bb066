"""The pass-rate probe: `python -m recipe.fast_dapo.probe [hydra overrides]` (config: fast_dapo.yaml, `probe.*`).

Takes the same overrides as `recipe.fast_dapo.main` and samples `probe.k` responses per training prompt with the run's
model, rollout and reward, then prints and writes the pass@k histogram and the cost model's prediction
(verl_ext/trainer/probe.py). On the CPU demo's heavy-tailed task:

    python -m recipe.fast_dapo.probe +preset=cpu_demo probe.k=16 'data.train_files=${tiny_assets:train,heavy_tail}' \
        'actor_rollout_ref.model.path=${tiny_assets:model,heavy_tail}'
"""

from __future__ import annotations

from verl_ext.metrics_log.terminal import capture_early

if __name__ == "__main__":  # first: what the imports below print goes to the run's log (metrics_log/terminal.py)
    capture_early()

import hydra

from verl_ext.trainer.launch import drive, register_lazy_resolvers

register_lazy_resolvers()


@hydra.main(config_path="config", config_name="fast_dapo", version_base=None)
def main(config):
    as_probe(config)
    drive("probe", config, check)


def check(config, files: str = "full"):
    """The probe's settings, then the pre-flight of the run it measures (its plan)."""
    from recipe.fast_dapo.main import check as run_check
    from verl_ext.config.errors import ConfigError

    if int(config.probe.k) < 1 or int(config.probe.prompts_per_call) < 1:
        raise ConfigError(
            f"probe.k and probe.prompts_per_call must be >= 1, got {config.probe.k}, {config.probe.prompts_per_call}"
        )
    return run_check(config, files)


def as_probe(config) -> None:
    """The run's config, turned into the probe's: its trainer class, nothing trained, no validation."""
    from omegaconf import open_dict

    with open_dict(config):
        config.trainer.trainer_cls = PROBE_TRAINER
        config.trainer.val_before_train = False
        config.trainer.total_training_steps = 1  # trains nothing; verl's trainer needs a step count to start


PROBE_TRAINER = "verl_ext.trainer.probe.PassRateProbeTrainer"

if __name__ == "__main__":
    main()
