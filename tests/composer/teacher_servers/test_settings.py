"""The teacher launcher's settings (verl_ext/composer/teacher_servers/settings.py): the --model values, the settings'
checks, and the printed pool block through the Composer's config check."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from verl_ext.composer.teacher_pool import TeacherConfig
from verl_ext.composer.teacher_servers.settings import (
    ServeSettings,
    TeacherSpec,
    check_unique_names,
    parse_model_arg,
    pool_entries,
    render_block,
    render_override,
)


def _hf_dir(path: Path, *, config=True, weights=True, tokenizer=True) -> Path:
    path.mkdir(parents=True)
    if config:
        (path / "config.json").write_text("{}")
    if weights:
        (path / "model.safetensors").write_bytes(b"")
    if tokenizer:
        (path / "tokenizer.json").write_text("{}")
    return path


def _not_released():
    raise AssertionError("the released model was asked for")


def test_released_and_named_directories(tmp_path):
    released = _hf_dir(tmp_path / "released_model")
    assert parse_model_arg("released", lambda: released) == TeacherSpec("released", released)
    assert parse_model_arg("base=released", lambda: released) == TeacherSpec("base", released)
    d = _hf_dir(tmp_path / "step16")
    assert parse_model_arg(str(d), _not_released) == TeacherSpec("step16", d)
    assert parse_model_arg(f"trained={d}", _not_released) == TeacherSpec("trained", d)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda p: p / "missing", "does not exist"),
        (lambda p: _hf_dir(p / "m", config=False), "no config.json"),
        (lambda p: _hf_dir(p / "m", weights=False), "no weights"),
        (lambda p: _hf_dir(p / "m", tokenizer=False), "no tokenizer"),
    ],
)
def test_a_bad_model_directory_names_the_argument(tmp_path, make, match):
    path = make(tmp_path)
    with pytest.raises(ValueError, match=f"--model '{path}': .*{match}"):
        parse_model_arg(str(path), _not_released)


def test_a_training_checkpoint_points_to_the_export(tmp_path):
    actor = tmp_path / "global_step_16" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    (actor / "huggingface" / "config.json").write_text("{}")
    (actor / "model_world_size_1_rank_0.pt").write_bytes(b"")
    with pytest.raises(ValueError, match=r"training checkpoint .* python -m verl_ext.pretrained.export --local-dir"):
        parse_model_arg(f"trained={actor}", _not_released)


def test_names_are_checked(tmp_path, released_dir):
    with pytest.raises(ValueError, match="teacher name 'a b' must be"):
        parse_model_arg("a b=released", lambda: released_dir)
    with pytest.raises(ValueError, match=r"given twice"):
        check_unique_names([TeacherSpec("x", released_dir), TeacherSpec("x", tmp_path)])


def test_settings_errors_name_the_flag():
    with pytest.raises(ValueError, match=r"--kv-cache-mib must be > 0, got 0 \(KV cache per server, MiB\)"):
        ServeSettings(kv_cache_mib=0)
    with pytest.raises(ValueError, match="--threads must be an integer, got 1.5"):
        ServeSettings(threads=1.5)
    with pytest.raises(ValueError, match="--max-tokens .* below --max-model-len"):
        ServeSettings(max_tokens=1024, max_model_len=1024)
    with pytest.raises(ValueError, match=r"--chat-template 'line_template': not a template name"):
        ServeSettings(chat_template="line_template")
    with pytest.raises(ValueError, match=r"--tool-choice must be one of \['none', 'auto', 'required'\]"):
        ServeSettings(tool_choice="never")


def test_the_teachers_tool_choice_goes_into_the_block_and_through_the_composers_check():
    entries = pool_entries([("released", "http://127.0.0.1:8001/v1")], ServeSettings(tool_choice="none"))
    assert entries[0]["tool_choice"] == "none"
    pool = _composer_pool(merge=OmegaConf.create(yaml.safe_load(render_block(entries))))
    assert pool.teachers[0].tool_choice == "none"
    assert "tool_choice" not in ENTRIES[0], "the student's own tool choice unless asked"


# -- the printed block -----------------------------------------------------------------------------------------------

ENTRIES = pool_entries(
    [("released", "http://127.0.0.1:8001/v1"), ("trained", "http://127.0.0.1:8002/v1")], ServeSettings()
)


def _composer_pool(*overrides, merge=None):
    from verl_ext.advantage import register

    register()
    from recipe.composer.config_check import composer_settings
    from verl_ext.config.compose import compose_config

    cfg = compose_config(
        "composer",
        ["+arm=full", "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=4", *overrides],
        config_module="recipe.composer.config",
        backend="cpu",
    )
    if merge is not None:
        cfg = OmegaConf.merge(cfg, merge)
    OmegaConf.resolve(cfg)
    return composer_settings(cfg).pool


def test_the_block_goes_through_the_composers_config_check_as_yaml_and_as_an_override():
    expected = tuple(TeacherConfig(**e) for e in ENTRIES)
    assert expected[0] == TeacherConfig("released", "http://127.0.0.1:8001/v1", "released", None, 300.0, 128)
    text = render_block(ENTRIES)
    as_yaml = _composer_pool(merge=OmegaConf.create(yaml.safe_load(text)))
    override = next(line for line in text.splitlines() if line.startswith("# 'composer."))[2:]
    assert override == render_override(ENTRIES)
    as_override = _composer_pool(override.strip("'"))  # the shell's quotes gone, as Hydra receives it
    assert as_yaml.teachers == as_override.teachers == expected
