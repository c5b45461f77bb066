"""Patches only where used: the entry points load the toy package only for a toy preset, and the /dev/shm cleanup
runs only on the CPU backend."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# One interpreter for both entry points (importing verl dominates the cost): compose each recipe against a real model
# path first (the toy package must stay unloaded), then the cpu_demo preset (its ${tiny_assets:...} loads it).
COMPOSE = textwrap.dedent("""
    import sys
    import recipe.fast_dapo.main, recipe.composer.main  # each registers the lazy ${tiny_assets:...} resolver
    from omegaconf import OmegaConf
    from verl_ext.config.compose import compose_config
    for overrides in (["actor_rollout_ref.model.path=/models/real"], ["+preset=cpu_demo"]):
        for recipe, arm in (("fast_dapo", []), ("composer", ["+arm=baseline"])):
            cfg = compose_config(recipe, [*arm, *overrides], config_module=f"recipe.{recipe}.config")
            OmegaConf.resolve(cfg)
            print("TOY_LOADED", recipe, "verl_ext.toy" in sys.modules, cfg.actor_rollout_ref.model.path)
""")


def test_entry_points_load_the_toy_package_only_for_the_toy_preset(tiny_assets):
    out = subprocess.run([sys.executable, "-c", COMPOSE], capture_output=True, text=True, check=True, cwd=".").stdout
    rows = [line.split(" ", 3)[1:] for line in out.splitlines() if line.startswith("TOY_LOADED")]
    assert rows == [
        ["fast_dapo", "False", "/models/real"],
        ["composer", "False", "/models/real"],
        ["fast_dapo", "True", str(tiny_assets.model_dir)],
        ["composer", "True", str(tiny_assets.model_dir)],
    ]


def test_shm_cleanup_runs_on_the_cpu_backend_only(monkeypatch):
    """run() with a task that fails at once: the cleanup runs (or not) in the `finally`, without Ray."""
    from verl_ext.cpu import cleanup
    from verl_ext.trainer import launch

    calls = []
    monkeypatch.setattr(cleanup, "shm_segments", lambda: calls.append("snapshot") or set())
    monkeypatch.setattr(cleanup, "unlink_orphaned_shm", lambda before: calls.append("unlink") or [])

    def failing_run_ppo(config, task_runner_class=None):
        raise RuntimeError("stop before Ray")

    import verl.trainer.main_ppo

    monkeypatch.setattr(verl.trainer.main_ppo, "run_ppo", failing_run_ppo)
    for platform, expected in (("cpu", ["snapshot", "unlink"]), ("", [])):
        calls.clear()
        monkeypatch.setenv("VERL_PLATFORM", platform)
        with pytest.raises(RuntimeError, match="stop before Ray"):
            launch.run(None)
        assert calls == expected, platform
