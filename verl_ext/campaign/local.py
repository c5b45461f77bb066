"""The local campaign runner: every planned run of a spec as one process after another on this machine (each run
already uses every GPU or core it is given), resumable, then all runs' curves in one plot. The cluster runner, one Ray
job per run, is `submit.py`; the command line for both is `cli.py` (`scripts/campaign.py`). Each run goes through
`launch/local_run.py`, the benchmarks' runner too."""

from __future__ import annotations

import os
import re
import shlex
import time
from pathlib import Path

from verl_ext.campaign.spec import CampaignSpec, RunPlan, done_seconds, is_done, mark_done
from verl_ext.launch.artifacts import CHECKPOINT_TRACKER, METRICS_FILE
from verl_ext.launch.local_run import driver_command, run_driver
from verl_ext.metrics_log.failure import failed_cause
from verl_ext.metrics_log.jsonl import read_jsonl
from verl_ext.metrics_log.memory_watch import MemoryWatch
from verl_ext.metrics_log.plot import plot_runs

CONSOLE_FILE = "console.log"  # a run's terminal output (its full log is the driver's run.log beside it)
MEMORY_FILE = "memory.json"  # the run's memory while it ran (metrics_log/memory_watch.py); a resumed run's last part
STOP_FILE = "STOP"  # in the campaign's directory: finish the run in progress, start no other (the file is consumed)
_STEP_LINE = re.compile(r"^step +\d+/\d+ \|")  # a driver's line per training step (metrics_log/console.py)


class RunProgress:
    """What the campaign shows of a run while it runs: each of its training-step lines after the run's tag, and the
    cause of a failure it reported, for the run's FAILED line."""

    def __init__(self, tag: str):
        self.tag = tag
        self.cause: str | None = None

    def __call__(self, line: str) -> None:
        text = line.rstrip("\n")
        if _STEP_LINE.match(text):
            print(f"{self.tag}: {text}", flush=True)
        elif (cause := failed_cause(text)) is not None:
            self.cause = cause


def run_local(spec: CampaignSpec, plans: list[RunPlan], dry_run: bool = False) -> list[str]:
    """Run each plan (`python -m <entry> <overrides>`; the driver's own full log in <run>/run.log, what it shows in
    <run>/console.log) unless its DONE file exists; a failed run is reported and the others still run. One line per
    run started and ended, with the count and the time left estimated from the runs finished so far, and the run's
    step lines between them (RunProgress), and its peak memory (this runner and every process of the run, sampled
    every 10 s into <run>/memory.json: metrics_log/memory_watch.py). A file named STOP in the campaign's directory
    (`touch outputs/campaign/<name>/STOP`) ends the campaign between two runs, so a machine can be freed without
    killing a run part-way; the same command later starts where it stopped. Returns the failed runs' labels.
    `dry_run`: print the commands only."""
    failed: list[str] = []
    todo = [run for run in plans if not is_done(run.run_dir)]
    # the time left is estimated from every run that ran in one go: this invocation's and the earlier ones'
    durations = [t for run in plans if (t := done_seconds(run.run_dir)) is not None]
    if not dry_run:
        print(f"[campaign] {spec.name}: {len(plans)} runs, {len(plans) - len(todo)} done before, {len(todo)} to run")
    for i, run in enumerate(todo, start=1):
        stop = run.run_dir.parent / STOP_FILE
        if not dry_run and stop.exists():
            stop.unlink()
            print(f"[campaign] stopped before {run.label} ({stop} was found); the same command goes on from here")
            break
        if dry_run:  # quoted for a shell: an override may hold ${...} (a resolver) or spaces
            print(shlex.join(driver_command(spec.entry, run.overrides)))
            continue
        watch = RunProgress(f"[campaign] {i}/{len(todo)} {run.label}")
        print(f"{watch.tag}: started", flush=True)
        start, resumed = time.monotonic(), (run.run_dir / CHECKPOINT_TRACKER).exists()
        memory = MemoryWatch(run.run_dir / MEMORY_FILE)
        with memory.of(os.getpid()):  # this runner and the run's every process below it
            rc = run_driver(spec.entry, run.overrides, run.run_dir / CONSOLE_FILE, append=True, on_line=watch)
        took = time.monotonic() - start
        peak = f"; peak memory {memory.peak_gib:.1f} GiB" if memory.peak_gib is not None else ""
        if rc == 0:
            mark_done(run.run_dir, None if resumed else took)  # a resumed run's time is only its last part
            if not resumed:
                durations.append(took)
            print(f"{watch.tag}: finished in {_minutes(took)}{peak}; {progress(durations, len(todo) - i)}", flush=True)
        else:
            failed.append(run.label)
            cause = f": {watch.cause}" if watch.cause else ""
            print(
                f"{watch.tag}: FAILED (exit {rc}) after {_minutes(took)}{cause}{peak}; see {run.run_dir / 'run.log'}",
                flush=True,
            )
    return failed


def progress(durations: list[float], left: int) -> str:
    """What is left, with its time estimated from the finished runs' mean duration."""
    if left == 0:
        return "none left"
    if not durations:
        return f"{left} left"
    return f"{left} left, ~{_minutes(left * sum(durations) / len(durations))} (mean of {len(durations)} finished)"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def plot_curves(spec: CampaignSpec, plans: list[RunPlan], root: Path) -> None:
    """`spec.plot_keys` of every run that has a metric log under `root` (local runs, or a cluster's collected
    outputs), one figure: <root>/<name>/curves.png. A key none of these runs logged (a campaign run in parts, whose
    first runs are of a condition without that loss) gets no panel and a line saying so: the runs' exit status is
    the training's, never the plot's."""
    logs = [(r.label, root / spec.name / r.label / METRICS_FILE) for r in plans]
    logs = [(label, path) for label, path in logs if path.exists()]
    if not (spec.plot_keys and logs):
        return
    logged = set().union(*(record.keys() for _, path in logs for record in read_jsonl(path)))
    keys = [k for k in spec.plot_keys if k in logged]
    absent = [k for k in spec.plot_keys if k not in logged]
    if absent:
        print(f"[campaign] curves: no run so far logged {absent}; no panel for them")
    if keys:
        out = root / spec.name / "curves.png"
        plot_runs([path for _, path in logs], keys, out, labels=[label for label, _ in logs])
        print(f"[campaign] curves of {len(logs)} runs: {out}")
