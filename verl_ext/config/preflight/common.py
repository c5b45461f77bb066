"""What every pre-flight check uses: reading a number from the config (or a ConfigError naming its key; any other value
is read with `verl_ext.config.settings.get`), telling a remote path from a local one, and collecting the ConfigErrors
of independent checks so one pass reports them all."""

from __future__ import annotations

from collections.abc import Callable

from omegaconf import DictConfig, OmegaConf

from verl_ext.config.errors import ConfigError


def number(cfg: DictConfig, key: str, kind: type, default=None):
    """The value at `key` as int/float; a ConfigError naming the key if it is not one (bools are not numbers)."""
    value = OmegaConf.select(cfg, key, default=default)
    if value is None:
        return None
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int:
        ok = ok and float(value).is_integer()
    if not ok:
        raise ConfigError(f"{key}={value!r} must be {'an integer' if kind is int else 'a number'}")
    return kind(value)


def is_remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


class Problems:
    """Runs independent checks and collects their ConfigErrors, so one pass reports every problem."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def run(self, fn: Callable, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ConfigError as e:
            self.messages.append(str(e))
            return None
