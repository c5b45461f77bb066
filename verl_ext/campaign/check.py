"""Check a campaign before its first run: one run of every condition through its recipe driver's pre-flight
(the `check` of the spec's entry module, verl_ext/config/preflight/), so a typo in the fourth condition fails now, in
seconds, not after three runs.

Seeds differ only by their seed overrides, which the first seed's run already carries, so one run per condition is
enough. Entry points that are not a project recipe (`recipe.<name>.main` with a `check` function) are not checked.
"""

from __future__ import annotations

import importlib

from verl_ext.campaign.spec import CampaignSpec, RunPlan


def recipe_name(entry: str) -> str | None:
    """`recipe.<name>.main` -> <name> if that module has the driver's `check`; None for any other entry point."""
    parts = entry.split(".")
    if len(parts) != 3 or parts[0] != "recipe" or parts[2] != "main":
        return None
    try:
        module = importlib.import_module(entry)
    except ImportError:
        return None
    return parts[1] if callable(getattr(module, "check", None)) else None


def check_campaign(spec: CampaignSpec, plans: list[RunPlan], files: str = "full") -> dict[str, str]:
    """condition -> the pre-flight's error, for every condition among `plans` whose first run fails it."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from verl_ext.config.compose import compose_config, driver_config_module
    from verl_ext.config.preflight import check_composed

    recipe = recipe_name(spec.entry)
    if recipe is None:
        return {}
    check = importlib.import_module(spec.entry).check  # the spec's driver (recipe_name imported it already)
    first: dict[str, RunPlan] = {}
    for run in plans:
        first.setdefault(run.condition, run)
    errors = {}
    for condition, run in first.items():
        try:
            cfg = compose_config(recipe, run.overrides, config_module=driver_config_module(spec.entry))
            check_composed(recipe, check, cfg, files=files)
        except (HydraException, OmegaConfBaseException, ValueError) as e:
            errors[condition] = str(e)
    return errors
