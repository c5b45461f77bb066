"""Patches only where used: the entry points load the toy package only for a toy preset, and the /dev/shm cleanup
runs only on the CPU backend."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from types import SimpleNamespace

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


def test_run_prints_the_closing_lines_the_task_returned_in_the_driver(monkeypatch, capsys):
    """The TaskRunner's `run` returns the trainer's closing lines; verl's run_ppo drops that result, so run() keeps
    the ObjectRef run_ppo waited for and prints the lines after it, in order, in the driver. Without Ray: an actor
    class stand-in whose `run.remote` returns the result itself, read back with a pass-through ray.get."""
    import ray
    import verl.trainer.main_ppo

    from verl_ext.trainer import launch

    lines = ["[verl_ext] validation accuracy 0.220 -> 1.000 (constant answer: 0.180)", "[verl_ext] metrics log: m"]

    class Actor:  # what `@ray.remote` makes of a class, as far as run_ppo uses it
        @staticmethod
        def options(**kwargs):
            return Actor

        @staticmethod
        def remote():
            return SimpleNamespace(run=SimpleNamespace(remote=lambda config: list(lines)))

    def verl_like_run_ppo(config, task_runner_class):  # verl 0.9.1: .remote() or .options(...).remote(), then run
        runner = (task_runner_class.options(runtime_env={}) if config == "nsys" else task_runner_class).remote()
        ray.get(runner.run.remote(config))

    monkeypatch.setattr(verl.trainer.main_ppo, "run_ppo", verl_like_run_ppo)
    monkeypatch.setattr(ray, "get", lambda ref: ref)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setenv("VERL_PLATFORM", "")
    for config in ("plain", "nsys"):
        assert launch.run(config, task_runner_class=Actor) == lines
        assert capsys.readouterr().out.splitlines() == lines


def test_verl_run_ppo_still_runs_the_task_runner_as_run_relies_on():
    """run() keeps the result by how verl's run_ppo calls the runner: a verl upgrade that changes it fails here."""
    import inspect

    from verl.trainer.main_ppo import run_ppo

    src = inspect.getsource(run_ppo)
    assert "runner = task_runner_class.remote()" in src
    assert "runner = task_runner_class.options(" in src
    assert "ray.get(runner.run.remote(config))" in src


def test_mathgen_resolver_takes_a_mix_and_a_validation_size():
    """`${mathgen:val,steps,64}`: the steps mix with 64 held-out questions; its training rows are the default's."""
    import pandas as pd

    from verl_ext.trainer.launch import _mathgen

    small = _mathgen("val", "steps", 64)
    assert len(pd.read_parquet(small)) == 64
    assert set(pd.read_parquet(small)["data_source"]) == {
        "mathgen/algebra__linear_1d",
        "mathgen/arithmetic__add_sub_multiple",
    }
    train_small, train_default = (
        pd.read_parquet(_mathgen("train", "steps", 64)),
        pd.read_parquet(_mathgen("train", "steps")),
    )
    assert [i["question"] for i in train_small["extra_info"]] == [i["question"] for i in train_default["extra_info"]]
    assert 0 < _mathgen("baseline", "steps", 64) < 1


def test_mathgen_resolver_names_the_large_held_out_set_of_a_preset():
    """`${mathgen:heldout,steps,64}`: 1,024 questions, none with the meaning of a training or validation question of
    that same task (the one `${mathgen:val,steps,64}` and `${mathgen:train,steps,64}` name)."""
    import pandas as pd

    from verl_ext.mathgen.canonical import meaning_key
    from verl_ext.trainer.launch import _mathgen

    def meanings(what):
        rows = pd.read_parquet(_mathgen(what, "steps", 64))
        return {meaning_key(x["question"]) for x in rows["extra_info"]}

    heldout = pd.read_parquet(_mathgen("heldout", "steps", 64))
    assert len(heldout) == 1024
    assert not meanings("heldout") & (meanings("train") | meanings("val"))
