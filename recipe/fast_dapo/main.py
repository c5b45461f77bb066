"""Fast DAPO: `python -m recipe.fast_dapo.main [hydra overrides]` (config: recipe/fast_dapo/config/fast_dapo.yaml).

The embedded CPU demo: `python -m recipe.fast_dapo.main +preset=cpu_demo`.
"""

from __future__ import annotations

import hydra

from verl_ext.trainer.launch import register_lazy_resolvers

register_lazy_resolvers()  # ${tiny_assets:...} of the cpu_demo preset: verl_ext.toy loads only if a config uses it


@hydra.main(config_path="config", config_name="fast_dapo", version_base=None)
def main(config):
    from verl.utils.device import auto_set_device

    from recipe.fast_dapo.config_check import prepare_config
    from verl_ext.trainer.launch import run

    auto_set_device(config)
    settings = prepare_config(config)
    print(f"[fast_dapo] {settings}")
    run(config)


if __name__ == "__main__":
    main()
