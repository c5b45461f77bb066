"""The fast DAPO driver as a user runs it (`python -m recipe.fast_dapo.main`, as `make demo` does: its own Ray, the
compact console): the closing summary reaches the driver's stdout, after the step lines, in the README's order.

The trainer runs inside a Ray actor; lines printed there just before Ray shuts down can be dropped by Ray's log
forwarding (a `make demo` ended on its last step line). The summary is returned by the task and printed by the
driver, after Ray is down, so it is the last thing on stdout. It can only come from the task's result: the workers
must run this checkout's code (the subprocess gets this checkout first on PYTHONPATH, which Ray's workers inherit).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import backend_overrides
from verl_ext.metrics_log import read_jsonl
from verl_ext.metrics_log.console import run_summary, val_accuracy

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[3]
STEPS = 2


def test_the_driver_prints_the_closing_summary_last(tiny_assets, tmp_path):
    from verl_ext.toy.task import constant_answer_baseline

    out = tmp_path / "run"
    overrides = [
        *backend_overrides(),
        "+preset=tiny",  # the demo's run (compact console, val_baseline, plot_keys), shorter and smaller
        f"trainer.total_training_steps={STEPS}",
        f"trainer.test_freq={STEPS}",
        "trainer.save_freq=-1",
        f"trainer.default_local_dir={out}",
        "data.train_batch_size=4",
        "data.gen_batch_size=8",
        "data.val_max_samples=16",
        "data.seed=0",  # the pre-flight asks for it with val_max_samples
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        f"hydra.run.dir={tmp_path / 'hydra'}",
    ]
    ray_tmp = tempfile.mkdtemp(prefix="vxdrv-", dir="/tmp")  # Ray's socket paths must stay under 107 bytes
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # its own Ray, as `make demo` starts
    env.update(RAY_TMPDIR=ray_tmp, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p))
    try:
        r = subprocess.run(
            [sys.executable, "-m", "recipe.fast_dapo.main", *overrides],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=1500,
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    (tmp_path / "driver.log").write_text(r.stdout + "\n--- stderr ---\n" + r.stderr)
    assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]

    rows = read_jsonl(out / "metrics.jsonl")
    assert [row["step"] for row in rows] == list(range(STEPS + 1))
    first, last = val_accuracy(rows[0]), val_accuracy(rows[-1])
    baseline = {"label": "constant answer", "value": constant_answer_baseline(tiny_assets.val_file)[1]}
    assert first is not None and last is not None
    # the README's three lines: validation accuracy first -> last (the baseline), the log, the curves
    summary = run_summary(first, last, baseline, str(out / "metrics.jsonl"), str(out / "metrics.png")).splitlines()
    lines = r.stdout.splitlines()
    assert lines[-3:] == summary, lines[-20:]
    everything = lines + r.stderr.splitlines()
    assert sum("[verl_ext] metrics log:" in line for line in everything) == 1, "printed by the driver only"
    assert any(line.endswith(f"step 0/{STEPS} | val acc {first:.3f}") for line in lines), "the compact step lines"
    assert (out / "metrics.png").exists()
