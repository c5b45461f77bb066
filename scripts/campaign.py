"""Run a campaign: every (condition, seed) of a spec, one process each, then all runs' curves in one plot.

    .venv/bin/python scripts/campaign.py configs/campaign/advantage_ablation_cpu.yaml [--out-root outputs/campaign]
        [--only maxrl+gtpo_sepa grpo+none] [--dry-run]
    .venv/bin/python scripts/campaign.py report SPEC [...]   # seed-band curves and tables: verl_ext/campaign/report.py

Runs go one after another (each already uses every GPU or core it is given); on a Ray cluster run this on the head
node, where each run's driver joins the cluster (RAY_ADDRESS). Re-running the same command resumes: runs with a
DONE file are skipped, an interrupted run continues from its last checkpoint (trainer.resume_mode=auto). A failed
run is reported and the others still run; the exit code is 1 if any failed. Each run's output is in <run>/run.log.
The spec format is in verl_ext/campaign/spec.py.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from tqdm import tqdm

from verl_ext.campaign import CampaignSpec, is_done, mark_done
from verl_ext.metrics_log.plot import plot_runs


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["report"]:
        from verl_ext.campaign.report import main as report_main

        return report_main(argv[1:])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("spec")
    p.add_argument("--out-root", default="outputs/campaign")
    p.add_argument("--only", nargs="+", help="condition names to run (default: all)")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = p.parse_args(argv)

    spec = CampaignSpec.from_yaml(args.spec)
    plans = spec.runs(args.out_root)
    if args.only:
        unknown = set(args.only) - set(spec.conditions)
        if unknown:
            raise SystemExit(f"--only: unknown conditions {sorted(unknown)}; the spec has {list(spec.conditions)}")
        plans = [r for r in plans if r.condition in args.only]
    if spec.plot_keys:
        from verl_ext.metrics_log.plot import require_matplotlib

        require_matplotlib()  # before hours of runs, not after
    failed = []
    for run in tqdm(plans, desc=f"campaign {spec.name}", unit="run"):
        cmd = [sys.executable, "-m", spec.entry, *run.overrides]
        if args.dry_run:
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
    if args.dry_run:
        return 0
    logs = [(r.label, r.run_dir / "metrics.jsonl") for r in plans if (r.run_dir / "metrics.jsonl").exists()]
    if spec.plot_keys and logs:
        out = Path(args.out_root) / spec.name / "curves.png"
        plot_runs([path for _, path in logs], spec.plot_keys, out, labels=[label for label, _ in logs])
        print(f"[campaign] curves of {len(logs)} runs: {out}")
    if failed:
        print(f"[campaign] {len(failed)} of {len(plans)} runs failed: {failed}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
