"""Continue a campaign on another machine: the reverse of `publish`.

    .venv/bin/python scripts/campaign.py restore SPEC --from docs/results [--out-root outputs/campaign]

A campaign of many hours outlives a machine: a fresh clone has the published runs (docs/results/<name>/<label>/, from
`publish`) but no outputs/. `restore` copies each published run's files (its metrics log and answer files) back to
<out-root>/<name>/<label>/ and writes its DONE file, so the runner skips it and `report --out-root <out-root>` reads it
beside the runs still to come. A run already finished here is left alone; one started here but not finished (a metrics
log or a checkpoint without DONE: an interrupted run that resumes from its checkpoint) is refused and named (exit 1),
never mixed with a published log; a run not published is listed: the campaign runs it.
"""

from __future__ import annotations

import argparse
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from verl_ext.campaign.publish import CHECKPOINT_GLOB
from verl_ext.campaign.spec import CampaignSpec, is_done, mark_done


@dataclass
class Restored:
    restored: list[str] = field(default_factory=list)
    done_here: list[str] = field(default_factory=list)  # finished under out_root already: left alone
    started_here: list[str] = field(default_factory=list)  # a local run in progress: not overwritten
    unpublished: list[str] = field(default_factory=list)


def restore(spec: CampaignSpec, results: str | Path, out_root: str | Path) -> Restored:
    """Copy every run of `spec` published under `results` into `out_root`, marked done (see the module)."""
    result = Restored()
    for plan in spec.runs(out_root):
        source = Path(results) / spec.name / plan.label
        if not (source / plan.metrics_path.name).is_file():
            result.unpublished.append(plan.label)
        elif is_done(plan.run_dir):
            result.done_here.append(plan.label)
        elif plan.metrics_path.exists() or any(plan.run_dir.glob(CHECKPOINT_GLOB)):
            result.started_here.append(plan.label)
        else:
            shutil.copytree(source, plan.run_dir, dirs_exist_ok=True)
            mark_done(plan.run_dir)  # no duration: the ETA of the runs to come averages only runs timed here
            result.restored.append(plan.label)
    return result


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec")
    p.add_argument("--from", dest="results", required=True, help="the results root `publish --to` wrote")
    p.add_argument("--out-root", default="outputs/campaign", help="where the campaign runs")


def run(args: argparse.Namespace) -> int:
    spec = CampaignSpec.from_yaml(args.spec)
    r = restore(spec, args.results, args.out_root)
    where = Path(args.out_root) / spec.name
    print(f"[restore] {spec.name}: {len(r.restored)} restored, {len(r.done_here)} finished here already, to {where}")
    for what, labels in (("restored", r.restored), ("not published, to run", r.unpublished)):
        if labels:
            print(f"[restore] {what}: {', '.join(labels)}")
    if r.started_here:
        print(f"[restore] started here and not finished, not replaced: {', '.join(r.started_here)}")
        return 1
    return 0
