"""The project's one configuration-error type.

Every check that reads a run config in the driver (the recipes' config checks, the advantage pipeline's settings,
plugin loading, the verl-feature table in `verl_ext/trainer/fidelity.py`) raises `ConfigError`, so a caller catches
one type and a bad key fails before Ray starts with a message naming it. It subclasses `ValueError` because that is
what a bad value is (and what callers written against plain `ValueError` still catch).
"""

from __future__ import annotations


class ConfigError(ValueError):
    pass
