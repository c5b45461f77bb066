"""The registry of the advantage algorithms: one entry per algorithm (the kinds are in `base`).

Adding an algorithm: a module in verl_ext/advantage/ whose docstring gives the paper, the formula and the
assumptions, declaring its entry (an `EpisodeMode` or a `TokenTransform`), and that entry's line in ALGORITHMS.
Everything else reads this tuple: the names verl's registry gets (`advantage.register()`, through
`estimators.verl_function`), the values `advantage_mode` / `transform_mode` accept and what each estimator fixes
(`config`), and the functions the pipeline runs (`pipeline`). The order is the order of the names in messages.
A new config key goes into advantage.yaml and `config.AdvantageConfig`; the formula into docs/ALGORITHMS.md.

Without touching the package, a plugin by dotted path (`plugins.py`) adds an episode mode, a transform, an
uncertainty kind or a whole algorithm (`adv_estimator=composable`).
"""

from __future__ import annotations

from verl_ext.advantage.base import Composable, EpisodeMode, TokenTransform, VerlEstimator
from verl_ext.advantage.grpo import GRPO
from verl_ext.advantage.grpo_composer import GRPO_COMPOSER
from verl_ext.advantage.gtpo import GTPO
from verl_ext.advantage.hicra import GTPO_HICRA
from verl_ext.advantage.maxrl import MAXRL
from verl_ext.advantage.sepa import GTPO_SEPA

COMPOSABLE = Composable("composable", summary="advantage_mode + transform_mode, or algorithm_mode, all from config.")

ALGORITHMS: tuple[EpisodeMode | TokenTransform | Composable | VerlEstimator, ...] = (
    GRPO,
    MAXRL,
    GTPO,
    GTPO_HICRA,
    GTPO_SEPA,
    COMPOSABLE,
    GRPO_COMPOSER,
)


def estimators() -> dict[str, EpisodeMode | TokenTransform | Composable]:
    """adv_estimator=<name> -> entry, for the project's estimators the pipeline computes (any other name is verl's
    or a `verl_estimators()` one)."""
    return {a.name: a for a in ALGORITHMS if not isinstance(a, VerlEstimator) and a.estimator}


def verl_estimators() -> dict[str, VerlEstimator]:
    """adv_estimator=<name> -> entry, for the project's whole estimators in verl's calling convention."""
    return {a.name: a for a in ALGORITHMS if isinstance(a, VerlEstimator)}


def episode_modes() -> dict[str, EpisodeMode]:
    """advantage_mode=<name> -> entry (besides a dotted path)."""
    return {a.name: a for a in ALGORITHMS if isinstance(a, EpisodeMode)}


def transforms() -> dict[str, TokenTransform]:
    """transform_mode=<name> -> entry (besides "none" and a dotted path)."""
    return {a.name: a for a in ALGORITHMS if isinstance(a, TokenTransform)}


def check(algorithms) -> None:
    """Names unique, never "none" (no transform) and without dots (a dotted path is a plugin)."""
    names = [a.name for a in algorithms]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates or "none" in names or any("." in n for n in names):
        raise ValueError(f"advantage registry: names must be unique, not 'none' and without dots, got {names}")


check(ALGORITHMS)
