"""What a settings field declares and how a value is held to it: `setting(default, ge=..., help=...)` declares a
field's bounds and meaning beside its type annotation (`int`, `float`, `bool`, `str`, `Literal[...]`, `X | None`,
`tuple[X, ...]`, `dict[K, V]`), `conform` converts a value the way a YAML file or a command-line override gives it
(an int from an integral number or its digits, a tuple from a list) or refuses it, and `check_field` /
`check_declared` do both for one field or a whole instance, the message naming the key, what it must be and what it
means. `read_settings` (settings.py) calls them for every block it reads.
"""

from __future__ import annotations

import difflib
import functools
import numbers
import operator
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, Field, field, fields, is_dataclass
from typing import Any, Literal, Union

from verl_ext.config.errors import ConfigError

BOUNDS = {"ge": (operator.ge, ">="), "gt": (operator.gt, ">"), "le": (operator.le, "<="), "lt": (operator.lt, "<")}


def setting(default: Any = MISSING, *, help: str, factory: Any = MISSING, **bounds) -> Any:
    """A settings field: its default (none where the block's defaults live in a recipe's YAML), its bounds (`ge`,
    `gt`, `le`, `lt`, checked by `read_settings` on a value that is not None) and what the key means (`help`, the
    one place it is written; `field_help` reads it back)."""
    unknown = sorted(set(bounds) - set(BOUNDS))
    if unknown:
        raise TypeError(f"setting(): unknown bounds {unknown}; known: {sorted(BOUNDS)}")
    if not help:
        raise TypeError("setting(): every field says what it means (help=...)")
    return field(default=default, default_factory=factory, metadata={"help": help, "bounds": bounds})


def field_help(cls: type) -> dict[str, str]:
    """Each block key of `cls` and what it means, as declared on its field."""
    return {f.name: f.metadata.get("help", "") for f in fields(cls) if f.init and "key" not in f.metadata}


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@functools.cache
def _nested(cls: type) -> dict[str, type]:
    """The fields of `cls` whose type is itself a settings class (nested blocks)."""
    return {name: t for name, t in _hints(cls).items() if isinstance(t, type) and is_dataclass(t)}


class _Mismatch(ValueError):
    """A value that does not fit a declared type (the message says what the key must be)."""


def _kind(tp: Any) -> str:
    """How a declared type reads in a message."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        return f"one of {list(typing.get_args(tp))}"
    if origin in (Union, types.UnionType):
        return " or ".join("null" if a is type(None) else _kind(a) for a in typing.get_args(tp))
    if origin in (tuple, list):
        return "a list"
    if origin is dict or tp is dict:
        return "a mapping"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(tp, str(tp))


def _to_int(value: Any) -> int:
    if isinstance(value, numbers.Integral):  # numpy's integers
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        return int(value.strip())
    raise ValueError


def _to_float(value: Any) -> float:
    if isinstance(value, (numbers.Real, str)):
        return float(value.strip() if isinstance(value, str) else value)
    raise ValueError


def _to_str(value: Any) -> str:
    if isinstance(value, (int, float)):
        return str(value)  # a YAML/Hydra value read as a number (a key, a host)
    raise ValueError


# scalar type -> the conversion of a value not already of that type (bool never converts, nor is it a number)
_SCALARS: dict[type, Any] = {int: _to_int, float: _to_float, str: _to_str, bool: None}


def _conform_scalar(value: Any, tp: type) -> Any:
    if isinstance(value, bool):
        if tp is bool:
            return value
        raise _Mismatch(_kind(tp))
    if isinstance(value, tp):
        return value
    convert = _SCALARS[tp]
    try:
        return convert(value)
    except (TypeError, ValueError):
        raise _Mismatch(_kind(tp)) from None


def _conform_union(value: Any, tp: Any) -> Any:
    args = typing.get_args(tp)
    if value is None and type(None) in args:
        return None
    for a in args:
        if a is not type(None):
            try:
                return conform(value, a)
            except _Mismatch:
                pass
    raise _Mismatch(_kind(tp))


def _conform_sequence(value: Any, tp: Any) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise _Mismatch(_kind(tp))
    if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        return tuple(value)  # a fixed-shape tuple: passed through
    inner = args[0] if args else Any
    return origin(conform(v, inner) for v in value)


def _conform_mapping(value: Any, tp: Any) -> Any:
    if not isinstance(value, Mapping):
        raise _Mismatch(_kind(tp))
    k, v = typing.get_args(tp) or (Any, Any)
    return {conform(key, k): conform(val, v) for key, val in value.items()}


def conform(value: Any, tp: Any) -> Any:
    """`value` converted to the declared type `tp` (an int from an integral number or its digits, a float from a
    number, a tuple from a list, ...); `_Mismatch` when it cannot be. Types it does not know pass values through."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        args = typing.get_args(tp)
        if value in args and (not isinstance(value, bool) or any(isinstance(a, bool) for a in args)):
            return value
        raise _Mismatch(_kind(tp))
    if origin in (Union, types.UnionType):
        return _conform_union(value, tp)
    if origin in (tuple, list):
        return _conform_sequence(value, tp)
    if origin is dict or tp is dict:
        return _conform_mapping(value, tp)
    if tp in _SCALARS:
        return _conform_scalar(value, tp)
    return value


def check_declared(settings: Any) -> None:
    """Conform each field of a settings instance to its declaration, in place (for a class also built directly in
    code, from its `__post_init__`; `read_settings` has done it already, naming the key with its block's path)."""
    for f in fields(settings):
        if f.init and f.name not in _nested(type(settings)):
            object.__setattr__(settings, f.name, check_field(type(settings), f, getattr(settings, f.name), f.name))


def check_field(cls: type, f: Field, value: Any, key: str) -> Any:
    """`value` of the field `f` of `cls` conformed to its declared type and checked against its bounds; ConfigError
    naming `key` (the dotted config path) otherwise."""
    tp = _hints(cls).get(f.name, Any)
    about = f" ({f.metadata['help']})" if f.metadata.get("help") else ""
    try:
        value = conform(value, tp)
    except _Mismatch as e:
        choices = [a for a in typing.get_args(tp) if isinstance(a, str)] if typing.get_origin(tp) is Literal else []
        close = difflib.get_close_matches(value, choices, n=1) if isinstance(value, str) else []
        about = f" (did you mean {close[0]!r}?)" if close else about  # a typo of a choice: the choice, not the help
        raise ConfigError(f"{key} must be {e}, got {value!r}{about}") from None
    if value is not None:
        for name, bound in f.metadata.get("bounds", {}).items():
            op, sign = BOUNDS[name]
            if not op(value, bound):
                raise ConfigError(f"{key} must be {sign} {bound}, got {value!r}{about}")
    return value
