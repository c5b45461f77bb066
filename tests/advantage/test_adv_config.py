"""AdvantageConfig: defaults, the documented YAML, the forms of verl's algorithm section, and bad input."""

import pytest
import yaml
from omegaconf import OmegaConf

from verl_ext.advantage import (
    ADVANTAGE_YAML,
    DEFAULT_STRATEGIC_GRAMS,
    AdvantageConfig,
    SepaConfig,
    validate_algorithm_config,
)


def test_defaults_are_the_reference_defaults():
    c = AdvantageConfig.from_algorithm(None)
    modes = (c.advantage_mode, c.transform_mode, c.algorithm_mode, c.uncertainty_kind)
    assert modes == ("maxrl", "none", None, "surprisal")
    assert (c.gtpo_beta, c.hicra_alpha) == (0.1, 0.2)
    assert c.sepa == SepaConfig(steps=500, schedule="linear", delay_steps=50, correct_rate_gate=0.1)
    assert len(c.strategic_grams) == 18 and c.strategic_grams == DEFAULT_STRATEGIC_GRAMS


def test_yaml_documents_every_key_with_the_defaults():
    text = ADVANTAGE_YAML.read_text()
    data = yaml.safe_load(text)
    from_yaml = AdvantageConfig.from_algorithm(data)
    assert from_yaml == AdvantageConfig.from_algorithm(None)
    fields = set(AdvantageConfig.__dataclass_fields__) - {"adv_estimator"}
    assert set(data) == fields
    for key in fields | set(SepaConfig.__dataclass_fields__):
        assert "# " in text.split(f"{key}:")[0].rsplit("\n\n", 1)[-1], f"{key} has no comment above it"


@pytest.mark.parametrize("form", ["dict", "dictconfig"])
def test_reads_nested_sepa_grams_and_params(form):
    raw = {
        "adv_estimator": "gtpo_sepa",
        "advantage_mode": "grpo",
        "uncertainty_kind": "pred_var",
        "gtpo_beta": 0.2,
        "sepa": {"steps": 100, "schedule": "auto"},
        "strategic_grams": "wait let me, notice that ,",
        "transform_params": {"scale": 2},
    }
    c = AdvantageConfig.from_algorithm(raw if form == "dict" else OmegaConf.create(raw))
    assert c.adv_estimator == "gtpo_sepa" and c.effective_transform == "gtpo_sepa"
    assert c.uncertainty_kind == "predictive_variance" and c.gtpo_beta == 0.2
    assert c.sepa == SepaConfig(steps=100, schedule="auto", delay_steps=50, correct_rate_gate=0.1)
    assert c.strategic_grams == ("wait let me", "notice that")
    assert c.transform_params == {"scale": 2}
    assert (c.needs_log_probs, c.needs_planning, c.uses_sepa, c.needs_entropys) == (True, True, True, False)


def test_requirements_per_estimator():
    assert not AdvantageConfig.from_algorithm({"adv_estimator": "maxrl"}).needs_log_probs
    c = AdvantageConfig.from_algorithm({"adv_estimator": "gtpo", "uncertainty_kind": "shannon"})
    assert c.needs_log_probs and c.needs_entropys and not c.needs_planning and not c.uses_sepa
    c = AdvantageConfig.from_algorithm({"adv_estimator": "composable", "transform_mode": "gtpo_hicra"})
    assert c.needs_planning and not c.uses_sepa
    c = AdvantageConfig.from_algorithm({"adv_estimator": "composable", "uncertainty_kind": "entropy"})
    assert not c.needs_log_probs and not c.needs_entropys  # transform none: episode level only


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"advantage_mode": "reinforce"}, "unknown advantage_mode 'reinforce'"),
        ({"transform_mode": "sepa"}, "unknown transform_mode 'sepa'"),
        ({"uncertainty_kind": "varentropy"}, "unknown uncertainty_kind"),
        ({"gtpo_beta": -0.1}, "gtpo_beta must be >= 0"),
        ({"gtpo_beta": "big"}, "gtpo_beta must be a number"),
        ({"hicra_alpha": 1.5}, r"algorithm.hicra_alpha must be <= 1.0, got 1.5 \(.*flips the sign"),
        ({"sepa": {"schedule": "cosine"}}, "sepa.schedule"),
        ({"sepa": {"steps": -1}}, "sepa.steps"),
        ({"sepa": {"steps": 2.5}}, "sepa.steps must be an integer"),
        ({"sepa": {"correct_rate_gate": 2}}, "correct_rate_gate"),
        ({"sepa": {"ramp": 3}}, "unknown algorithm.sepa keys \\['ramp'\\]"),
        ({"sepa": 5}, "algorithm.sepa must be a mapping"),
        ({"sepa_steps": 100}, "unknown key algorithm.sepa_steps"),
        ({"gtpo_alpha": 0.1}, "unknown key algorithm.gtpo_alpha"),
        ({"strategic_grams": ["let me", "!!"]}, "must start and end"),
        ({"strategic_grams": " , "}, "no gram"),
        ({"transform_params": [1, 2]}, "transform_params must be a mapping"),
        ({"adv_estimator": "gtpo", "transform_mode": "gtpo_hicra"}, "contradicts transform_mode"),
        ({"adv_estimator": "gtpo_sepa", "algorithm_mode": "a.b"}, "only by adv_estimator=composable"),
        ({"adv_estimator": "maxrl", "advantage_mode": "grpo"}, "adv_estimator=maxrl takes no"),
        ({"adv_estimator": "grpo", "transform_mode": "gtpo"}, "no effect with adv_estimator=grpo"),
        ({"adv_estimator": "rloo", "advantage_mode": "pkg.fn"}, "no effect with adv_estimator=rloo"),
    ],
)
def test_bad_values_raise_clear_errors(raw, message):
    with pytest.raises(ValueError, match=message):
        AdvantageConfig.from_algorithm(raw)


def test_validate_algorithm_config():
    assert validate_algorithm_config(OmegaConf.create({"adv_estimator": "gae", "gamma": 1.0})) is None
    assert validate_algorithm_config({"adv_estimator": "grpo", "transform_mode": "none", "gtpo_beta": 0.3}) is None
    assert validate_algorithm_config({"adv_estimator": "gtpo"}).effective_transform == "gtpo"
    with pytest.raises(ValueError, match="expected verl's algorithm config"):
        validate_algorithm_config("gtpo")


def test_fixed_estimators_accept_the_yaml_defaults_merged_in():
    defaults = yaml.safe_load(ADVANTAGE_YAML.read_text())
    for name in ("maxrl", "gtpo", "gtpo_hicra", "gtpo_sepa", "composable"):
        assert validate_algorithm_config({**defaults, "adv_estimator": name}).adv_estimator == name
