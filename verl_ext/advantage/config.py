"""Advantage-pipeline settings read from verl's `algorithm` config section.

verl passes `config.algorithm` to estimators as an OmegaConf DictConfig (the legacy and V1 trainers both do);
AlgoConfig dataclasses and plain dicts are read the same way. The keys live flat under `algorithm` and are new to
verl, so on the command line they need a `+` (`+algorithm.gtpo_beta=0.2`, `+algorithm.sepa.schedule=auto`), or a
recipe merges advantage.yaml (beside this file, every key documented) under `algorithm`.

Which keys count depends on `algorithm.adv_estimator` (what each estimator fixes is its entry in `registry`):
- `maxrl`: MaxRL episode advantages broadcast over tokens; no transform.
- `gtpo`, `gtpo_hicra`, `gtpo_sepa`: `advantage_mode` (default maxrl) then that transform.
- `composable`: `advantage_mode` + `transform_mode`, or `algorithm_mode`, which wins over both.
A key that contradicts the estimator (e.g. `transform_mode=gtpo_hicra` with `adv_estimator=gtpo`, or
`transform_mode=gtpo` with verl's `grpo`, which would silently ignore it) is an error (`ConfigError`, the project's
one config-error type). Every default comes from advantage.yaml, read through the project's settings mechanism
(`verl_ext/config/settings.py`); nothing here repeats a value. A key set to null takes the YAML's value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

import verl_ext.advantage.registry as registry
from verl_ext.advantage.gram_match import parse_grams
from verl_ext.advantage.plugins import Plugin, load_context_plugin, load_episode_plugin, load_uncertainty_plugin
from verl_ext.advantage.sepa_schedule import SCHEDULES
from verl_ext.advantage.uncertainty import KIND_ALIASES, canonical_kind
from verl_ext.config.errors import ConfigError
from verl_ext.config.fields import setting
from verl_ext.config.settings import YamlDefaults, as_dict, did_you_mean, read_settings, set_fields

ADVANTAGE_YAML = Path(__file__).with_name("advantage.yaml")
# The one place every default lives (each key documented there), the `algorithm` block's keys of this package;
# read on first use by the settings mechanism (verl_ext/config/settings.py). The dataclasses below have no defaults.
DEFAULTS = YamlDefaults(ADVANTAGE_YAML, under="algorithm")

# The names in the registry (registry.ALGORITHMS, one entry per algorithm), for readers outside the package; the
# checks below ask the registry itself.
ESTIMATORS = tuple(registry.estimators())  # the project's adv_estimator names
EPISODE_MODES = tuple(registry.episode_modes())  # built-in advantage_mode values
TRANSFORM_MODES = ("none", *registry.transforms())  # built-in transform_mode values
# Prefixes of this package's keys: another key with one of them is most likely a typo of ours.
_OUR_PREFIXES = ("advantage_", "transform_", "algorithm_mode", "uncertainty", "gtpo", "hicra", "sepa", "strategic")
# Keys naming a mode or kind, for which an empty string, like null, takes advantage.yaml's value.
_NAMES = ("advantage_mode", "transform_mode", "algorithm_mode", "uncertainty_kind", "schedule")


# Types, choices and bounds are declared on the fields (enforced by read_settings); defaults and the account of each
# key live in advantage.yaml only.
@dataclass(frozen=True)
class SepaConfig:
    steps: int = setting(ge=0, help="steps of SEPA's linear lambda ramp")
    schedule: Literal[SCHEDULES] = setting(help="linear: lambda ramps over `steps`; auto: from the variance ratio")
    delay_steps: int = setting(ge=0, help="steps before the ramp starts (lambda 0)")
    correct_rate_gate: float = setting(ge=0.0, le=1.0, help="lambda stays 0 until the batch's correct rate reaches it")


@dataclass(frozen=True)
class AdvantageConfig:
    adv_estimator: str | None = setting(help="verl's key; null: none named (every estimator-specific check is skipped)")
    advantage_mode: str = setting(help="the episode advantage (a registered mode or a plugin's dotted path)")
    transform_mode: str = setting(help="the token-level transform (none, a registered one or a plugin's path)")
    algorithm_mode: str | None = setting(help="a whole-algorithm plugin's dotted path; null = none")
    uncertainty_kind: str = setting(help="GTPO's token weight: surprisal, predictive variance or Shannon entropy")
    gtpo_beta: float = setting(ge=0.0, help="GTPO's entropy weight")
    hicra_alpha: float = setting(
        ge=0.0, le=1.0, help="HICRA's planning-token boost; above 1 it flips the sign of negative advantages"
    )
    sepa: SepaConfig
    strategic_grams: str | list | None = setting(
        help="planning n-grams (HICRA, SEPA): a list or one comma-separated string"
    )
    advantage_params: Mapping[str, Any] | None = setting(help="keyword arguments of the advantage plugin")
    transform_params: Mapping[str, Any] | None = setting(help="keyword arguments of the transform plugin")

    def __post_init__(self):
        set_fields(
            self,
            uncertainty_kind=canonical_kind(self.uncertainty_kind),
            strategic_grams=parse_grams(self.strategic_grams),
            advantage_params=_params(self.advantage_params, "advantage_params"),
            transform_params=_params(self.transform_params, "transform_params"),
        )

    @classmethod
    def from_algorithm(cls, cfg: Any, adv_estimator: str | None = None) -> AdvantageConfig:
        """Read and validate (plugins are imported and their signatures checked). ConfigError on bad input.

        cfg: verl's `algorithm` section (DictConfig, AlgoConfig, dict) or None for all defaults. The section holds
            verl's keys too: only this package's are read, and a key that looks like one of ours is refused.
        adv_estimator: overrides `cfg.adv_estimator` (estimators pass their own name).
        """
        if cfg is not None and not isinstance(cfg, Mapping):
            raise ConfigError(
                f"expected verl's algorithm config (DictConfig, dict or AlgoConfig), got {type(cfg).__name__}"
            )
        raw = as_dict(cfg, "algorithm")
        _reject_lookalike_keys(raw)
        ours = _set_keys({k: v for k, v in raw.items() if k in KEYS})
        ours["adv_estimator"] = adv_estimator if adv_estimator is not None else raw.get("adv_estimator")
        config = read_settings(cls, ours, "algorithm", defaults=DEFAULTS)
        config.validate()
        return config

    def validate(self) -> None:
        _check_mode(self.advantage_mode, tuple(registry.episode_modes()), "advantage_mode")
        _check_mode(self.transform_mode, ("none", *registry.transforms()), "transform_mode")
        self._check_estimator()
        self.plugins()  # imports each plugin and checks its signature now, not inside a Ray worker

    def _check_estimator(self) -> None:
        """What the estimator fixes (its registry entry) must not be contradicted: an episode-mode estimator (maxrl)
        takes no other advantage_mode than its own or the default, no transform and no algorithm_mode; a transform
        estimator (gtpo*) no other transform and no algorithm_mode; verl's estimators none of the three."""
        est = self.adv_estimator
        transform_set = self.transform_mode != "none"
        if est is None:
            return
        entry = registry.estimators().get(est)
        if entry is None:
            if transform_set or self.algorithm_mode or self.advantage_mode not in registry.episode_modes():
                raise ConfigError(
                    f"transform_mode/algorithm_mode/a plugin advantage_mode have no effect with adv_estimator={est}; "
                    f"use one of {tuple(registry.estimators())} (e.g. adv_estimator=composable advantage_mode=grpo "
                    "transform_mode=gtpo)"
                )
            return
        episode, transform = entry.fixed
        if episode is not None:
            other_mode = self.advantage_mode not in (episode, DEFAULTS.value("algorithm.advantage_mode"))
            if other_mode or transform_set or self.algorithm_mode:
                raise ConfigError(
                    f"adv_estimator={est} takes no advantage_mode/transform_mode/algorithm_mode; use "
                    "adv_estimator=composable to combine them"
                )
        elif transform is not None:
            if transform_set and self.transform_mode != transform:
                raise ConfigError(
                    f"adv_estimator={est} contradicts transform_mode={self.transform_mode}; drop transform_mode or "
                    "use adv_estimator=composable"
                )
            if self.algorithm_mode:
                raise ConfigError(f"algorithm_mode is used only by adv_estimator=composable, not {est}")

    # What the selected estimator computes -------------------------------------------------------------------
    def _fixed(self) -> tuple[str | None, str | None]:
        entry = registry.estimators().get(self.adv_estimator)
        return (None, None) if entry is None else entry.fixed

    @property
    def effective_transform(self) -> str:
        """The transform the estimator applies ("none" for maxrl and for algorithm_mode)."""
        if self.algorithm_mode:
            return "none"
        fixed = self._fixed()[1]
        return self.transform_mode if fixed is None else fixed

    @property
    def effective_episode_mode(self) -> str:
        return self._fixed()[0] or self.advantage_mode

    def plugins(self) -> list[Plugin]:
        """The plugins the estimator calls (loaded and checked)."""
        out = []
        if self.algorithm_mode:
            out.append(load_context_plugin(self.algorithm_mode, "algorithm_mode"))
        else:
            if self.effective_episode_mode not in registry.episode_modes():
                out.append(load_episode_plugin(self.effective_episode_mode))
            if self.effective_transform != "none" and self.effective_transform not in registry.transforms():
                out.append(load_context_plugin(self.effective_transform, "transform_mode"))
        if self.uncertainty_kind not in KIND_ALIASES.values() and self.needs_log_probs:
            out.append(load_uncertainty_plugin(self.uncertainty_kind))
        return out

    @property
    def needs_log_probs(self) -> bool:
        """Token-level: old_log_probs must be passed."""
        return bool(self.algorithm_mode) or self.effective_transform != "none"

    @property
    def needs_entropys(self) -> bool:
        """The trainer must have the actor compute per-token entropies and keep them."""
        if not self.needs_log_probs:
            return False
        return self.uncertainty_kind == "shannon_entropy" or any(p.needs_entropy for p in self.plugins())

    @property
    def needs_planning(self) -> bool:
        """Planning masks must be passed, or a tokenizer and the response ids to detect them."""
        transform = registry.transforms().get(self.effective_transform)
        return (transform is not None and transform.needs_planning) or any(p.needs_planning for p in self.plugins())

    @property
    def uses_sepa(self) -> bool:
        """A `sepa_lambda` must be passed (from the trainer's SepaController)."""
        transform = registry.transforms().get(self.effective_transform)
        return (transform is not None and transform.uses_sepa_lambda) or any(
            p.uses_sepa_controller for p in self.plugins()
        )


# This package's keys of the `algorithm` section (adv_estimator is verl's).
KEYS = tuple(f.name for f in fields(AdvantageConfig) if f.name != "adv_estimator")


def validate_algorithm_config(cfg: Any) -> AdvantageConfig | None:
    """Check verl's `algorithm` section before Ray starts. The AdvantageConfig if adv_estimator is one of this
    package's estimators, else None (after checking that no key of ours would be silently ignored)."""
    config = AdvantageConfig.from_algorithm(cfg)
    return config if config.adv_estimator in registry.estimators() else None


def _set_keys(block: Mapping[str, Any]) -> dict[str, Any]:
    """The keys a block (the `algorithm` section or its `sepa`) sets: null, and an empty string for a key naming a
    mode or kind, take advantage.yaml's value."""
    return {
        k: _set_keys(v) if k == "sepa" and isinstance(v, Mapping) else v
        for k, v in block.items()
        if v is not None and not (k in _NAMES and v == "")
    }


def _reject_lookalike_keys(raw: Mapping[str, Any]) -> None:
    for key in raw:
        if key not in KEYS and isinstance(key, str) and key.startswith(_OUR_PREFIXES):
            raise ConfigError(
                f"unknown key algorithm.{key}{did_you_mean(key, KEYS)}; the advantage pipeline reads {list(KEYS)} "
                f"(see {ADVANTAGE_YAML.name})"
            )


def _check_mode(mode: str, builtins: tuple[str, ...], key: str) -> None:
    if not isinstance(mode, str) or (mode not in builtins and "." not in mode):
        raise ConfigError(f"unknown {key} {mode!r}: use one of {list(builtins)} or a dotted path 'pkg.module.fn'")


def _params(value: Any, key: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key} must be a mapping of plugin parameters, got {value!r}")
    return dict(value)
