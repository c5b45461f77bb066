"""Composer: `python -m recipe.composer.main +arm=full [hydra overrides]` (config: recipe/composer/config/composer.yaml)

Arms of the ablation: +arm=baseline | +arm=sdpo | +arm=replay | +arm=full. The replay channel needs teachers:
    composer.replay.teacher_pool.teachers='[{name: a, base_url: "https://...", model: m, api_key_env: A_KEY}, ...]'
On CPU add `+backend=cpu` and point data/model at the tiny assets (`${tiny_assets:model}` etc.). Add `--check` (or
`+check_only=true`) to print the run's plan and exit after the pre-flight check, without starting Ray.
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
    from recipe.composer.config_check import prepare_config
    from verl_ext.config.preflight import preflight

    s = prepare_config(config)
    summary = (
        f"alpha_sdpo={s.alpha_sdpo} beta_replay={s.beta_replay} "
        f"teachers={[t.name for t in s.pool.teachers] if s.pool else []}"
    )
    return preflight(config, "composer", settings=summary, files=files)


@hydra.main(config_path="config", config_name="composer", version_base=None)
def main(config):
    drive("composer", config, check)


if __name__ == "__main__":
    sys.argv = translate_check_flag(sys.argv)
    main()
