"""Served teachers handed to a command (verl_ext/composer/teacher_servers/env.py): the variable, the
`${served_teachers:}` resolver through the Composer's config check, and the command's process, on real processes.
The launcher's `-- COMMAND` mode with a real vLLM server runs in tests/recipe/composer/test_e2e_composer_real.py."""

from __future__ import annotations

import json
import signal
import sys

import pytest

from verl_ext.composer.teacher_servers import env as te
from verl_ext.composer.teacher_servers.settings import ServeSettings, pool_entries
from verl_ext.config.errors import ConfigError

ENTRIES = pool_entries(
    [("released", "http://127.0.0.1:8001/v1"), ("trained", "http://127.0.0.1:8002/v1")], ServeSettings()
)


def test_the_variable_round_trips_and_a_missing_one_names_the_launcher():
    assert te.served_teachers({te.TEACHERS_ENV: te.encode(ENTRIES)}) == ENTRIES
    with pytest.raises(ConfigError, match=rf"{te.TEACHERS_ENV} is not set.*serve_teachers.py --model \.\.\. --"):
        te.served_teachers({})
    with pytest.raises(ConfigError, match="is not JSON"):
        te.served_teachers({te.TEACHERS_ENV: "[{name: a}]"})
    with pytest.raises(ConfigError, match="non-empty JSON list"):
        te.served_teachers({te.TEACHERS_ENV: "[]"})


def test_the_resolver_gives_the_composer_its_teachers(monkeypatch):
    from omegaconf import OmegaConf

    from recipe.composer.config_check import composer_settings
    from verl_ext.advantage import register
    from verl_ext.composer.teacher_pool import TeacherConfig
    from verl_ext.config.compose import compose_config
    from verl_ext.trainer.launch import register_lazy_resolvers

    register()
    register_lazy_resolvers()
    overrides = ["+arm=full", "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=4"]
    overrides.append(f"composer.replay.teacher_pool.teachers=${{{te.RESOLVER}:}}")
    cfg = compose_config("composer", overrides, config_module="recipe.composer.config", backend="cpu")
    monkeypatch.setenv(te.TEACHERS_ENV, te.encode(ENTRIES))
    OmegaConf.resolve(cfg)
    assert composer_settings(cfg).pool.teachers == tuple(TeacherConfig(**e) for e in ENTRIES)


def test_the_command_gets_the_teachers_and_its_exit_code_is_returned(tmp_path):
    out = tmp_path / "seen.json"
    code = f"import os, sys; open({str(out)!r}, 'w').write(os.environ[{te.TEACHERS_ENV!r}]); sys.exit(3)"
    proc = te.start_command([sys.executable, "-c", code], ENTRIES)
    proc.wait(timeout=60)
    assert te.end_command(proc) == 3
    assert json.loads(out.read_text()) == ENTRIES


def test_a_command_still_running_is_stopped():
    proc = te.start_command([sys.executable, "-c", "import time; time.sleep(300)"], ENTRIES)
    assert te.end_command(proc, grace_s=10) == -signal.SIGTERM
