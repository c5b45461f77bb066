"""`composer.sdpo.tool_error_rules` in the Composer's config check (no Ray): none by default, the calculator agent's
rules with `+tool_errors=calculator`, and a rule that cannot work refused before anything starts, with a ConfigError
naming the rule and its key. What the rules do: tests/composer/test_tool_errors.py."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf, open_dict

from verl_ext.advantage import register

register()

from recipe.composer.config_check import ConfigError, composer_settings  # noqa: E402
from verl_ext.composer.tool_errors import ToolErrorRule  # noqa: E402


def _cfg(*overrides):
    from verl_ext.config.compose import compose_config

    cfg = compose_config(
        "composer",
        ["+arm=sdpo", "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=4", *overrides],
        config_module="recipe.composer.config",
        backend="cpu",
    )
    OmegaConf.resolve(cfg)
    return cfg


def _with_rules(rules):
    cfg = _cfg()
    with open_dict(cfg):
        cfg.composer.sdpo.tool_error_rules = rules
    return cfg


def test_no_rules_by_default_and_the_calculators_with_its_group():
    assert composer_settings(_cfg()).sdpo.tool_error_rules == ()
    rules = composer_settings(_cfg("+tool_errors=calculator")).sdpo.tool_error_rules
    assert all(isinstance(r, ToolErrorRule) for r in rules)
    assert [r.kind for r in rules] == [
        "unbalanced_parenthesis",
        "equation_in_call",
        "unsupported_expression",
        "division_by_zero",
        "calculator_syntax",
        "fraction_in_part",
        "operation_not_named",
        "no_tool_call",
    ]
    assert [r.when for r in rules].count("failed") == 2 and rules[-1].source == "no_call"
    # left out of a hand-written config: composer.yaml's value (none)
    cfg = _cfg()
    with open_dict(cfg):
        cfg.composer.sdpo.pop("tool_error_rules")
    assert composer_settings(cfg).sdpo.tool_error_rules == ()


@pytest.mark.parametrize(
    "rules, match",
    [
        ([{"kind": "x", "resutl": "e", "hint": "h"}],
         r"unknown composer\.sdpo\.tool_error_rules\[0\] keys \['resutl'\] \(did you mean 'result'\?\)"),
        ([{"hint": "h"}], r"missing composer\.sdpo\.tool_error_rules\[0\] keys \['kind'\]"),
        ([{"kind": "ok", "hint": "h"}, {"kind": "x", "result": "(", "hint": "h"}],
         r"composer\.sdpo\.tool_error_rules\[1\]: result: not a regular expression"),
        ([{"kind": "x", "result": "e", "hint": "The answer is {ground_truth}."}],
         r"composer\.sdpo\.tool_error_rules\[0\] \(x\): hint uses \['ground_truth'\], which its sites do not carry"),
        ([{"kind": "x", "template": "missing"}],
         r"composer\.sdpo\.tool_error_rules\[0\] \(x\): no hint and no template"),
        ([{"kind": "x", "check": "answer_is_part", "hint": "{part}"}, {"kind": "y", "when": "never", "hint": "h"}],
         r"composer\.sdpo\.tool_error_rules\[1\]\.when must be one of \['always', 'failed'\], got 'never'"),
        ("calculator", r"composer\.sdpo\.tool_error_rules must be a list of rules"),
    ],
)  # fmt: skip
def test_a_rule_that_cannot_work_is_named(rules, match):
    with pytest.raises(ConfigError, match=match):
        composer_settings(_with_rules(rules))


def test_a_rule_may_use_a_default_template():
    (rule,) = composer_settings(_with_rules([{"kind": "tool_error", "result": "^error"}])).sdpo.tool_error_rules
    assert rule.template_key == "tool_error" and rule.hint is None
