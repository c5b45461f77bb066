"""The driver's quiet terminal end to end: real drivers (`python -m recipe.fast_dapo.main`, the tiny preset) that
fail inside Ray or are interrupted with Ctrl-C, as a user sees them. Both stop before any worker starts (~25 s each);
the terminal's unit tests are test_terminal.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import run_driver
from verl_ext.metrics_log.terminal import LOG_NAME, VERBOSE_ENV

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def test_a_run_that_fails_inside_ray_shows_the_cause_and_the_log_within_a_few_lines(tmp_path):
    """A real driver (`python -m recipe.fast_dapo.main`, the tiny preset) whose dataset fails to load in the task
    runner: the terminal ends with the cause and the log's path, the workers' tracebacks are in the log only."""
    run_dir = tmp_path / "run"
    args = [
        "+preset=cpu_demo",
        f"data.custom_cls.path={ROOT / 'tests' / 'metrics_log' / 'failing_dataset.py'}",
        "data.custom_cls.name=FailsToLoad",
        f"trainer.default_local_dir={run_dir}",
        f"hydra.run.dir={tmp_path / 'hydra'}",
    ]
    r = run_driver("recipe.fast_dapo.main", args, timeout=600)
    lines = r.stdout.splitlines()
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    assert lines[0] == f"[verl_ext] full log: {run_dir / LOG_NAME}"
    # after the plan, the one phase that completed; then on stderr the cause, where a resume starts and the log
    assert lines[-1].startswith("[verl_ext] Ray started, task runner up"), lines[-5:]
    assert r.stderr.splitlines() == [
        "[verl_ext] run failed: RuntimeError: the training data could not be read (the test's failing dataset)",
        "[verl_ext] resume is off (trainer.resume_mode=disable): a rerun starts from step 0",  # cpu_demo's setting
        f"[verl_ext] full log: {run_dir / LOG_NAME}",
    ]
    assert "Traceback" not in r.stdout + r.stderr
    log = (run_dir / LOG_NAME).read_text()
    assert "Traceback (most recent call last)" in log and "FailsToLoad" in log


def _processes_with(marker: str) -> list[str]:
    """Command lines of the live processes whose environment holds `marker` (this run's own Ray directory)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/environ").read_bytes():
                found.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120])
        except OSError:
            continue
    return found


def test_ctrl_c_stops_a_real_run_within_seconds_and_leaves_no_process(tmp_path):
    """Ctrl-C (SIGINT to the driver's process group, as a terminal sends it) while the workers start: the driver
    exits 130 within seconds, says so, and no process of the run (Ray, its workers, vLLM) is left."""
    import signal
    import time

    ray_tmp = tempfile.mkdtemp(prefix="vxint-", dir="/tmp")
    env = {k: v for k, v in os.environ.items() if k not in (VERBOSE_ENV, "RAY_ADDRESS")}
    env.update(RAY_TMPDIR=ray_tmp, PYTHONPATH=str(ROOT))
    out = tmp_path / "stdout"
    args = ["+preset=cpu_demo", f"trainer.default_local_dir={tmp_path / 'run'}", f"hydra.run.dir={tmp_path / 'h'}"]
    with open(out, "w") as stdout, open(tmp_path / "stderr", "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "recipe.fast_dapo.main", *args],
            cwd=ROOT,
            env=env,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,  # its own process group, which receives the SIGINT as a terminal's would
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # pytest's runner may ignore SIGINT
        )
        try:
            deadline = time.monotonic() + 300
            while "[verl_ext] Ray started" not in out.read_text():
                assert proc.poll() is None and time.monotonic() < deadline, out.read_text()
                time.sleep(0.2)
            os.killpg(proc.pid, signal.SIGINT)
            start = time.monotonic()
            rc = proc.wait(timeout=60)
            took = time.monotonic() - start
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    time.sleep(2)  # let the processes Ray was stopping exit
    left = _processes_with(ray_tmp)
    shutil.rmtree(ray_tmp, ignore_errors=True)
    assert rc == 130 and took < 30, (rc, took)
    assert (tmp_path / "stderr").read_text().splitlines()[0] == (
        "[verl_ext] interrupted: the run stopped (checkpoints saved so far are kept)"
    )
    assert not left, left
