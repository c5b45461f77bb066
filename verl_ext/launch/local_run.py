"""A recipe's driver run on this machine as a child process: `python -m <entry> <overrides>` to its end, its terminal
output in a file. The local campaign runner (`campaign/local.py`) runs each planned run with `run_driver`; the
benchmarks that train (`scripts/bench_actor_cpu.py`, `bench_sampling_cpu.py`, `bench_composer.py`) run each arm with
`run_recipe` and read its metric log back. A cluster job is `job.py`."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from verl_ext.launch.artifacts import METRICS_FILE
from verl_ext.metrics_log import read_jsonl


def driver_command(entry: str, overrides: Sequence[str]) -> list[str]:
    """The driver's command line: this interpreter, the entry module (e.g. `recipe.fast_dapo.main`), the overrides."""
    return [sys.executable, "-m", entry, *overrides]


def run_driver(
    entry: str,
    overrides: Sequence[str],
    console: Path,
    append: bool = False,
    on_line: Callable[[str], None] | None = None,
) -> int:
    """Run the driver to its end with its stdout and stderr written to `console` (added to the file's end with
    `append`, as a resumed run's), each line also handed to `on_line` as it arrives; returns its exit status. The
    lines are read as UTF-8 with any other byte replaced (U+FFFD): a run's output is not always text, and one bad
    byte must not stop the reader (and with it the campaign)."""
    console.parent.mkdir(parents=True, exist_ok=True)
    cmd = driver_command(entry, overrides)
    with open(console, "a" if append else "w", encoding="utf-8") as out:
        if on_line is None:
            return subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode
        pipe = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "bufsize": 1}
        with subprocess.Popen(cmd, **pipe, text=True, encoding="utf-8", errors="replace") as proc:
            for line in proc.stdout:
                out.write(line)
                out.flush()
                on_line(line)
        return proc.returncode


def run_recipe(entry: str, overrides: Sequence[str], run_dir: Path, console: Path) -> list[dict]:
    """Train with `run_dir` as the run's directory (`trainer.default_local_dir`, its metric log `METRICS_FILE` there)
    and its terminal output in `console`; returns the metric log's rows. A failed run raises CalledProcessError
    (its output is in `console`)."""
    overrides = [
        *overrides,
        f"trainer.default_local_dir={run_dir}",
        f"trainer.jsonl_metrics_path={run_dir / METRICS_FILE}",
    ]
    rc = run_driver(entry, overrides, console)
    if rc:
        raise subprocess.CalledProcessError(rc, driver_command(entry, overrides))
    return read_jsonl(run_dir / METRICS_FILE)
