"""The one way a config block is read (verl_ext/config/settings.py), on small settings classes and a YAML of their
own: unknown keys named with a suggestion, left-out keys from the YAML or the field, nested blocks, keys read from
elsewhere in the run's config, the YAML's values written into a run's config, one error type."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from omegaconf import OmegaConf

from verl_ext.config.errors import ConfigError
from verl_ext.config.settings import YamlDefaults, block_keys, get, read_from, read_settings

YAML = """
block:
  rate: 0.5
  path: ${run_dir}/out.jsonl
  inner:
    steps: 3
size: 8
"""
RUN = OmegaConf.create({"run_dir": "/r"})  # a run's config, for the YAML's ${run_dir}


@dataclass(frozen=True)
class Block:
    """The YAML's `block`; `size` is the run config's top-level key."""

    rate: float
    path: str
    inner: Inner
    size: int = read_from("size")


@dataclass(frozen=True)
class WithDefaults:
    name: str
    retries: int = 3


@dataclass(frozen=True)
class Inner:
    steps: int

    def __post_init__(self):
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")


@pytest.fixture
def defaults(tmp_path):
    path = tmp_path / "recipe.yaml"
    path.write_text(YAML)
    return YamlDefaults(path)


def test_left_out_keys_take_the_yaml_values_resolved_against_the_run(defaults):
    run = OmegaConf.create({"run_dir": "/runs/a", "block": {"inner": {}}})
    s = read_settings(Block, run.block, "block", defaults=defaults, cfg=run)
    assert s == Block(rate=0.5, path="/runs/a/out.jsonl", inner=Inner(steps=3), size=8)
    run = OmegaConf.create({"run_dir": "/r", "size": 2, "block": {"rate": 0.1, "inner": {"steps": 7}}})
    s = read_settings(Block, run.block, "block", defaults=defaults, cfg=run)
    assert s == Block(0.1, "/r/out.jsonl", Inner(7), 2)
    assert block_keys(Block) == ["rate", "path", "inner"]  # size is the run config's key, not the block's


def test_unknown_keys_are_named_with_the_closest_known_one(defaults):
    with pytest.raises(ConfigError, match=r"unknown block keys \['rat'\] \(did you mean 'rate'\?\); known: "):
        read_settings(Block, {"rat": 1}, "block", defaults=defaults, cfg=RUN)
    with pytest.raises(ConfigError, match=r"unknown block.inner keys \['step'\]"):
        read_settings(Block, {"inner": {"step": 1}}, "block", defaults=defaults, cfg=RUN)
    with pytest.raises(ConfigError, match="block must be a mapping, got 3"):
        read_settings(Block, 3, "block", defaults=defaults)


def test_a_key_in_neither_the_block_nor_the_yaml_is_named(defaults):
    defaults.tree = {"block": {"path": "p", "inner": {"steps": 1}}, "size": 1}
    with pytest.raises(ConfigError, match=r"block.rate is not set, and recipe.yaml has no default for it"):
        read_settings(Block, {}, "block", defaults=defaults, cfg=OmegaConf.create({}))


def test_without_a_yaml_the_fields_own_defaults_and_required_keys():
    assert read_settings(WithDefaults, {"name": "a"}, "w") == WithDefaults("a", 3)
    with pytest.raises(ConfigError, match=r"missing w keys \['name'\]: each is required \(see x\)"):
        read_settings(WithDefaults, None, "w", required_note=" (see x)")


def test_a_value_error_of_the_class_is_a_config_error_naming_the_block(defaults):
    with pytest.raises(ConfigError, match="block.inner: steps must be >= 0, got -1"):
        read_settings(Block, {"inner": {"steps": -1}}, "block", defaults=defaults, cfg=RUN)


def test_fill_writes_the_yaml_values_the_run_leaves_out(defaults):
    run = OmegaConf.create({"run_dir": "/r", "block": {"rate": 0.9, "typo": 1}})
    OmegaConf.set_struct(run, True)
    defaults.fill(run, "block", "size")
    assert OmegaConf.to_container(run.block) == {"rate": 0.9, "path": "/r/out.jsonl", "inner": {"steps": 3}, "typo": 1}
    assert run.size == 8
    run = OmegaConf.create({"run_dir": "/r", "size": None})
    defaults.fill(run, "size")
    assert run.size is None  # null is a value the run sets, not a left-out key


def test_get_reads_dictconfig_mapping_and_verl_config_objects_alike():
    """`get` is the one getter for a run config (DictConfig), a plain mapping and verl's dataclass configs (what an
    estimator may be handed): the same dotted key gives the same value, and absent or null gives the default."""
    from verl.trainer.config import AlgoConfig

    as_dict = {"algorithm": {"norm_adv_by_std_in_grpo": False, "gamma": None}}
    for cfg in (OmegaConf.create(as_dict), as_dict):
        assert get(cfg, "algorithm.norm_adv_by_std_in_grpo", True) is False
        assert get(cfg, "algorithm.gamma", 0.5) == 0.5  # null -> default
        assert get(cfg, "algorithm.missing.deeper", 7) == 7
    algo = AlgoConfig(norm_adv_by_std_in_grpo=False)
    assert get(algo, "norm_adv_by_std_in_grpo", True) is False
    assert get(algo, "alpha_sdpo", 0.25) == 0.25  # not a field of verl's AlgoConfig
    assert get(None, "anything", 3) == 3
