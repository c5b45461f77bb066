"""The local campaign runner: every planned run of a spec as one process after another on this machine (each run
already uses every GPU or core it is given), resumable, then all runs' curves in one plot. The cluster runner, one Ray
job per run, is `submit.py`; the command line for both is `cli.py` (`scripts/campaign.py`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tqdm import tqdm

from verl_ext.campaign.spec import CampaignSpec, RunPlan, is_done, mark_done
from verl_ext.launch.artifacts import METRICS_FILE
from verl_ext.metrics_log.plot import plot_runs


def run_local(spec: CampaignSpec, plans: list[RunPlan], dry_run: bool = False) -> list[str]:
    """Run each plan (`python -m <entry> <overrides>`, output in <run>/run.log) unless its DONE file exists; a failed
    run is reported and the others still run. Returns the failed runs' labels. `dry_run`: print the commands only."""
    failed = []
    for run in tqdm(plans, desc=f"campaign {spec.name}", unit="run"):
        cmd = [sys.executable, "-m", spec.entry, *run.overrides]
        if dry_run:
            print(" ".join(cmd))
            continue
        if is_done(run.run_dir):
            tqdm.write(f"[campaign] {run.label}: done, skipped")
            continue
        run.run_dir.mkdir(parents=True, exist_ok=True)
        with open(run.run_dir / "run.log", "a") as log:
            rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
        if rc == 0:
            mark_done(run.run_dir)
            tqdm.write(f"[campaign] {run.label}: finished")
        else:
            failed.append(run.label)
            tqdm.write(f"[campaign] {run.label}: FAILED (exit {rc}), see {run.run_dir / 'run.log'}")
    return failed


def plot_curves(spec: CampaignSpec, plans: list[RunPlan], root: Path) -> None:
    """`spec.plot_keys` of every run that has a metric log under `root` (local runs, or a cluster's collected
    outputs), one figure: <root>/<name>/curves.png."""
    logs = [(r.label, root / spec.name / r.label / METRICS_FILE) for r in plans]
    logs = [(label, path) for label, path in logs if path.exists()]
    if spec.plot_keys and logs:
        out = root / spec.name / "curves.png"
        plot_runs([path for _, path in logs], spec.plot_keys, out, labels=[label for label, _ in logs])
        print(f"[campaign] curves of {len(logs)} runs: {out}")
