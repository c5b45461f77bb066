"""Composer: `python -m recipe.composer.main +arm=full [hydra overrides]` (config: recipe/composer/config/composer.yaml)

Arms of the ablation: +arm=baseline | +arm=sdpo | +arm=replay | +arm=full. The replay channel needs teachers:
    composer.replay.teacher_pool.teachers='[{name: a, base_url: "https://...", model: m, api_key_env: A_KEY}, ...]'
On CPU add `+backend=cpu` and point data/model at the tiny assets (`${tiny_assets:model}` etc.).
"""

from __future__ import annotations

import hydra

from verl_ext.trainer.launch import register_lazy_resolvers

register_lazy_resolvers()  # ${tiny_assets:...} of the cpu_demo preset: verl_ext.toy loads only if a config uses it


@hydra.main(config_path="config", config_name="composer", version_base=None)
def main(config):
    from omegaconf import OmegaConf
    from verl.utils.device import auto_set_device

    from recipe.composer.config_check import composer_settings
    from verl_ext.trainer.launch import run

    auto_set_device(config)
    OmegaConf.resolve(config)
    settings = composer_settings(config)
    print(
        f"[composer] alpha_sdpo={settings.alpha_sdpo} beta_replay={settings.beta_replay} "
        f"teachers={[t.name for t in settings.pool.teachers] if settings.pool else []}"
    )
    run(config)


if __name__ == "__main__":
    main()
