"""What a settings field declares and how values are held to it (verl_ext/config/fields.py): `conform` against a
table of what a YAML file or an override gives, `read_settings` naming the dotted key, the bound and the field's
meaning, `check_declared` on a class built in code, and every block the project reads declaring each key's meaning."""

from __future__ import annotations

import typing
from dataclasses import dataclass, is_dataclass
from typing import Literal

import numpy as np
import pytest

from verl_ext.config.errors import ConfigError
from verl_ext.config.fields import _Mismatch, check_declared, conform, field_help, setting
from verl_ext.config.settings import read_settings


# ------------------------------------------------------------------------------------------------- declared fields
@dataclass(frozen=True)
class Declared:
    """A block that declares its types, choices and bounds on its fields."""

    mode: Literal["sync", "async"] = setting("sync", help="how episodes run")
    port: int = setting(0, ge=0, lt=65536, help="the port; 0 = any")
    rate: float = setting(0.5, gt=0.0, le=1.0, help="a share")
    cap: int | None = setting(None, ge=1, help="a cap; null = none")
    flag: bool = setting(False, help="a switch")
    name: str = setting("x", help="a name")
    when: tuple[Literal["first", "last"], ...] = setting(("first",), help="when")
    env: dict[str, str] = setting(factory=dict, help="variables")


@pytest.mark.parametrize(
    "value, tp, expected",
    [
        (3, int, 3),
        (3.0, int, 3),
        (np.int64(3), int, 3),  # numpy's integers and floats are numbers
        (np.float32(0.5), float, 0.5),
        ("4", int, 4),
        (1, float, 1.0),
        ("1.5", float, 1.5),
        (8000, str, "8000"),
        (True, bool, True),
        ([1, "2"], tuple[int, ...], (1, 2)),
        ({"a": 1}, dict[str, str], {"a": "1"}),
        (None, int | None, None),
        ("7", int | None, 7),
        ("async", Literal["sync", "async"], "async"),
        ([1], list, [1]),  # a bare container type: passed through
    ],
)
def test_conform_converts_what_a_yaml_or_an_override_gives(value, tp, expected):
    out = conform(value, tp)
    assert out == expected and type(out) is type(expected)


@pytest.mark.parametrize(
    "value, tp",
    [
        (True, int),  # a bool is not a number
        (2.5, int),
        ("x", int),
        (True, float),
        (None, float),
        (True, str),
        (1, bool),
        ("ab", tuple[str, ...]),  # a string is not a list of strings
        ("fast", Literal["sync", "async"]),
        (True, Literal[1]),
        ([1], dict[str, str]),
    ],
)
def test_conform_refuses_what_does_not_fit(value, tp):
    with pytest.raises(_Mismatch):
        conform(value, tp)


def test_read_settings_enforces_the_declarations_naming_the_dotted_key_and_its_meaning():
    s = read_settings(Declared, {"port": "8000", "rate": 1, "cap": 3, "when": ["last"], "env": {"A": 1}}, "agent")
    assert (s.port, s.rate, s.cap, s.when, s.env) == (8000, 1.0, 3, ("last",), {"A": "1"})
    bad = {
        "mode": ("fast", r"agent.mode must be one of \['sync', 'async'\], got 'fast' \(how episodes run\)"),
        "port": (70000, r"agent.port must be < 65536, got 70000 \(the port; 0 = any\)"),
        "rate": (0, r"agent.rate must be > 0.0, got 0.0"),
        "cap": (0, r"agent.cap must be >= 1, got 0"),
        "flag": ("yes", r"agent.flag must be true or false, got 'yes'"),
        "when": (["middle"], r"agent.when must be one of \['first', 'last'\], got \['middle'\]"),
        "env": ("A=1", r"agent.env must be a mapping, got 'A=1'"),
    }
    for key, (value, match) in bad.items():
        with pytest.raises(ConfigError, match=match):
            read_settings(Declared, {key: value}, "agent")
    assert read_settings(Declared, {"cap": None}, "agent").cap is None, "null passes an optional field's bounds"


def test_check_declared_enforces_the_same_on_a_class_built_in_code():
    @dataclass(frozen=True)
    class Rule:
        source: Literal["a", "b"] = setting("a", help="where")
        n: int = setting(1, ge=1, help="how many")

        def __post_init__(self):
            check_declared(self)

    assert Rule(n="2").n == 2
    with pytest.raises(ConfigError, match=r"source must be one of \['a', 'b'\], got 'c'"):
        Rule(source="c")
    with pytest.raises(ConfigError, match=r"n must be >= 1, got 0"):
        Rule(n=0)


def test_setting_wants_a_meaning_and_known_bounds():
    with pytest.raises(TypeError, match="help"):
        setting(1, help="")
    with pytest.raises(TypeError, match=r"unknown bounds \['min'\]"):
        setting(1, min=0, help="x")


def _declared_classes():
    from recipe.composer.config_check import ComposerBlock, ReplayBlock, SdpoBlock
    from recipe.fast_dapo.config_check import AutoGenBatch, CurriculumSettings
    from verl_ext.advantage.config import AdvantageConfig, SepaConfig
    from verl_ext.agent.settings import AgentSettings
    from verl_ext.composer.teacher_pool import TeacherConfig, TeacherPoolConfig
    from verl_ext.composer.tool_errors import ToolErrorRule
    from verl_ext.config.trainer_settings import HeldoutSettings, TrainerExtras

    return [
        AgentSettings, HeldoutSettings, TrainerExtras, SdpoBlock, ReplayBlock, ComposerBlock, SepaConfig,
        AdvantageConfig, CurriculumSettings, AutoGenBatch, ToolErrorRule, TeacherConfig, TeacherPoolConfig,
    ]  # fmt: skip


@pytest.mark.parametrize("cls", _declared_classes(), ids=lambda c: c.__name__)
def test_every_key_of_a_declared_block_says_what_it_means(cls):
    """The blocks the project reads declare each key's meaning on its field (`setting(help=...)`); a nested block
    is its own class."""
    nested = {n for n, t in typing.get_type_hints(cls).items() if isinstance(t, type) and is_dataclass(t)}
    assert {k: h for k, h in field_help(cls).items() if not h and k not in nested} == {}


def test_a_typo_of_a_choice_is_answered_with_the_choice():
    with pytest.raises(
        ConfigError, match=r"agent.mode must be one of \['sync', 'async'\], got 'asnyc' \(did you mean 'async'\?\)"
    ):
        read_settings(Declared, {"mode": "asnyc"}, "agent")
