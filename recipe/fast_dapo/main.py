"""Fast DAPO: `python -m recipe.fast_dapo.main [hydra overrides]` (config: recipe/fast_dapo/config/fast_dapo.yaml).

The embedded CPU demo: `python -m recipe.fast_dapo.main +preset=cpu_demo`. Add `--check` (or `+check_only=true`) to
print the run's plan and exit after the pre-flight check (verl_ext/config/preflight/), without starting Ray.
"""

from __future__ import annotations

from verl_ext.metrics_log.terminal import capture_early

if __name__ == "__main__":  # first: what the imports below print goes to the run's log (metrics_log/terminal.py)
    capture_early()

import sys

import hydra

from verl_ext.config.preflight import translate_check_flag
from verl_ext.trainer.launch import drive, register_lazy_resolvers

register_lazy_resolvers()  # ${tiny_assets:...} of the cpu_demo preset: verl_ext.toy loads only if a config uses it


def check(config, files: str = "full"):
    """The driver's whole check, before Ray: the recipe's settings, then what the run needs. Returns the plan."""
    from recipe.fast_dapo.config_check import prepare_config
    from verl_ext.config.preflight import preflight

    settings = prepare_config(config)
    # A step trains on train_batch_size kept prompts, whatever the generation calls drew (fast_dapo_ray_trainer.py).
    return preflight(
        config,
        "fast_dapo",
        responses_per_prompt=settings.N,
        prompts_per_step=settings.train_batch_size,
        settings=settings,
        files=files,
    )


@hydra.main(config_path="config", config_name="fast_dapo", version_base=None)
def main(config):
    drive("fast_dapo", config, check)


if __name__ == "__main__":
    sys.argv = translate_check_flag(sys.argv)
    main()
