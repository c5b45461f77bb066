"""The one way the project reads a config block: a typed settings class, its left-out keys from one place.

A settings class is a frozen dataclass with one field per key its block may hold (as verl's own `BaseConfig`
dataclasses, and prime-rl's configs that forbid extra keys). Each field declares what the key may hold, once, on the
field: its type (`int`, `float`, `bool`, `str`, `Literal[...]` for a choice, `X | None`, `tuple[X, ...]`), its bounds
and its meaning (`setting(default, ge=1, help=...)`). `read_settings(cls, block, where)` builds one from a run's
block:

* a key the class has no field for is refused, named with the block's path (`unknown curriculum keys ['typo']`),
  with the closest known key as a suggestion;
* a key the block leaves out takes its default from one place: the recipe's YAML when `defaults` is given (a
  `YamlDefaults`; the class's fields then have no defaults of their own), else the field's own default; a key with
  neither is an error naming it, never a second value in code;
* a field whose type is a settings class is a nested block, read the same way at `<where>.<field>`;
* a field declared with `read_from("data.train_batch_size")` is not a key of the block: it is read from that key of
  the run's config (`cfg`), with the YAML's value when the config leaves it out;
* every value is converted to its field's declared type and checked against its choices and bounds, generically:
  `ConfigError: external_agent.port must be < 65536, got 70000`, the key's dotted name first;
* a `ValueError` or `TypeError` the class raises comes back as a `ConfigError` prefixed with the block's path. The
  class's `__post_init__` keeps only what a declaration cannot say (a rule across keys, a command line to split).

`YamlDefaults` is a recipe's YAML (or a package's, such as `advantage/advantage.yaml`), read on first use: the
value at a dotted key (`value`), the run's value else the YAML's (`setting`), and `fill`, which writes the YAML's
values into a run's config for the keys it leaves out, so whatever reads the config later (the trainer, verl's
workers, an estimator) finds them and needs no default of its own.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, Field, field, fields
from pathlib import Path
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from verl_ext.config.errors import ConfigError
from verl_ext.config.fields import _nested, check_field

T = TypeVar("T")
_ABSENT = object()
_REPO = Path(__file__).resolve().parents[2]


def get(cfg: Any, key: str, default=None):
    """The run's value at the dotted `key`; `default` when the key is absent or null, or `cfg` is None.

    `cfg` is a DictConfig, a mapping, or a config object with `.get` or attributes (verl's dataclass configs, such as
    the `AlgoConfig` verl may hand an estimator)."""
    if isinstance(cfg, DictConfig):
        value = OmegaConf.select(cfg, key, default=default)
        return default if value is None else value
    value = cfg
    for part in key.split("."):
        if value is None:
            return default
        getter = getattr(value, "get", None)
        value = getter(part, None) if callable(getter) else getattr(value, part, None)
    return default if value is None else value


def as_dict(block: Any, where: str) -> dict:
    """A block as a plain dict (interpolations resolved): None is an empty block, anything but a mapping an error."""
    if block is None:
        return {}
    if isinstance(block, DictConfig):
        return OmegaConf.to_container(block, resolve=True)
    if isinstance(block, Mapping):
        return {k: block[k] for k in block}
    raise ConfigError(f"{where} must be a mapping, got {block!r}")


def did_you_mean(key: str, known: Iterable[str]) -> str:
    """` (did you mean 'x'?)` for the closest known key, or nothing."""
    close = difflib.get_close_matches(key, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def read_from(key: str, *, help: str = "") -> Field:
    """A settings field that is not a key of its block but the run config's `key` (read by `read_settings`)."""
    return field(metadata={"key": key, "help": help})


def block_keys(cls: type) -> list[str]:
    """The keys a block read into `cls` may hold: its fields, less those read from elsewhere (`read_from`)."""
    return [f.name for f in fields(cls) if f.init and "key" not in f.metadata]


def set_fields(settings: Any, **values) -> None:
    """Set normalised values on a frozen settings instance, from its `__post_init__`."""
    for name, value in values.items():
        object.__setattr__(settings, name, value)


class YamlDefaults:
    """The YAML file where a block's defaults live, each documented there; read on first use, interpolations kept
    as written. `under` is the config path the file describes (`advantage.yaml` is merged under `algorithm`)."""

    def __init__(self, path: Path, under: str = ""):
        self.path, self.under = Path(path), under

    @functools.cached_property
    def tree(self) -> dict:
        return OmegaConf.to_container(OmegaConf.load(self.path), resolve=False)

    @property
    def shown(self) -> str:
        return str(self.path.relative_to(_REPO)) if self.path.is_relative_to(_REPO) else str(self.path)

    def value(self, key: str, cfg: DictConfig | None = None):
        """The YAML's value at the dotted `key` (a block as a plain dict), its interpolations resolved against the
        run's config `cfg` (against the YAML itself without one). ConfigError naming the key when it has none."""
        prefix = f"{self.under}." if self.under else ""
        value = self.tree if key.startswith(prefix) else None
        for part in key.removeprefix(prefix).split("."):
            if not isinstance(value, dict) or part not in value:
                raise ConfigError(
                    f"{key} is not set, and {self.path.name} has no default for it (its defaults live there only): "
                    f"set {key} or restore it in {self.shown}"
                )
            value = value[part]
        root = cfg if cfg is not None else OmegaConf.create(self.tree)
        try:
            return OmegaConf.to_container(OmegaConf.create({"v": value}, parent=root), resolve=True)["v"]
        except OmegaConfBaseException as e:
            raise ConfigError(f"{key}: {self.path.name}'s value needs the run's config: {e}") from e

    def setting(self, cfg: DictConfig, key: str):
        """The run's value at `key`, or the YAML's when the config does not have the key."""
        value = OmegaConf.select(cfg, key, default=_ABSENT)
        return self.value(key, cfg) if value is _ABSENT else value

    def fill(self, cfg: DictConfig, *keys: str) -> None:
        """Write the YAML's value into `cfg` for each of `keys` it leaves out; a block the config has gets the YAML's
        keys it leaves out (unknown keys stay, for `read_settings` to name)."""
        with open_dict(cfg):
            for key in keys:
                run = OmegaConf.select(cfg, key, default=_ABSENT)
                value = self.value(key, cfg)
                if isinstance(value, dict) and (run is _ABSENT or run is None or isinstance(run, DictConfig)):
                    merged = OmegaConf.merge(value, run if isinstance(run, DictConfig) else {})
                    OmegaConf.update(cfg, key, merged, merge=False, force_add=True)
                elif run is _ABSENT:
                    OmegaConf.update(cfg, key, value, force_add=True)


def read_settings(
    cls: type[T],
    block: Any,
    where: str,
    *,
    defaults: YamlDefaults | None = None,
    cfg: DictConfig | None = None,
    required_note: str = "",
) -> T:
    """Read the run's `block` (a DictConfig, mapping or None) at config path `where` into the settings class `cls`
    (see the module docstring). `cfg` is the run's whole config: fields `read_from` another key are read there, and
    the YAML's interpolations resolve against it. `required_note` ends the message naming keys left out when a
    class without defaults has no YAML either (where the values are)."""
    data = as_dict(block, where)
    known = block_keys(cls)
    unknown = sorted(set(data) - set(known))
    if unknown:
        hint = "".join(did_you_mean(str(k), known) for k in unknown[:1])
        see = f" (see {defaults.shown})" if defaults is not None else ""
        raise ConfigError(f"unknown {where} keys {unknown}{hint}; known: {sorted(known)}{see}")
    nested = _nested(cls)
    values, missing = {}, []
    for f in fields(cls):
        if not f.init:
            continue
        if "key" in f.metadata:
            value = defaults.setting(cfg, f.metadata["key"]) if defaults else get(cfg, f.metadata["key"])
        elif f.name in data:
            value = data[f.name]
        elif f.name in nested:
            value = None  # the nested block's keys take their own defaults
        elif defaults is not None:
            value = defaults.value(f"{where}.{f.name}", cfg)
        elif f.default is MISSING and f.default_factory is MISSING:
            missing.append(f.name)
            continue
        else:
            continue  # the field's own default
        if f.name in nested:
            if not isinstance(value, nested[f.name]):
                value = read_settings(nested[f.name], value, f"{where}.{f.name}", defaults=defaults, cfg=cfg)
        else:
            value = check_field(cls, f, value, f.metadata.get("key") or f"{where}.{f.name}")
        values[f.name] = value
    if missing:
        raise ConfigError(f"missing {where} keys {missing}: each is required{required_note}")
    try:
        return cls(**values)
    except ConfigError:
        raise
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from e
