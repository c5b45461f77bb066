"""Publish a campaign's finished runs into a results directory kept with the code (docs/results/, say), where
`report --out-root <to>` reads them and nothing depends on one machine's outputs/.

    .venv/bin/python scripts/campaign.py publish configs/campaign/advantage_real_cpu.yaml --to docs/results \
        [--out-root outputs/campaign] [--prune-checkpoints]

Each run with a DONE file has its metrics log copied to <to>/<name>/<label>/metrics.jsonl, its last validation's
held-out answers, when it dumped them (verl's <run>/validation/<step>.jsonl), to <label>/validation/, and every answer
file of its large held-out evaluation (<run>/validation/heldout/<step>.jsonl: the first and the last step's,
verl_ext/trainer/heldout.py) to <label>/validation/heldout/; a run without one
(still running, failed, not started) is listed and left alone, so a log is never published half-written. A log
already published with the same bytes is left as it is; one that differs is refused (exit 1) unless --overwrite:
a finished run does not change, so a difference means two campaigns under one name. --prune-checkpoints deletes a
published run's checkpoints (global_step_*: ~1.6 GB a run for SmolLM2-135M), which a finished run never resumes
from. To continue a campaign on another machine, `campaign.py restore SPEC --from <to>` copies the published runs back,
marked done (verl_ext/campaign/restore.py): the runner then skips them.
"""

from __future__ import annotations

import argparse
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from verl_ext.campaign.spec import CampaignSpec, is_done

CHECKPOINT_GLOB = "global_step_*"
VALIDATION_DIR = "validation"  # the real presets' trainer.validation_data_dir, inside the run's directory
HELDOUT_DIR = "heldout"  # the large held-out evaluation's answers, inside it (verl_ext/trainer/heldout.py PREFIX)


@dataclass
class Published:
    copied: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)  # published before with other contents, not overwritten
    unfinished: list[str] = field(default_factory=list)
    pruned_bytes: int = 0


def publish(spec: CampaignSpec, out_root: str | Path, to: str | Path, prune: bool, overwrite: bool) -> Published:
    """Copy every finished run's metrics log of `spec` under `out_root` to `to`/<name>/<label>/ (see the module)."""
    result = Published()
    for plan in spec.runs(out_root):
        if not is_done(plan.run_dir) or not plan.metrics_path.is_file():
            result.unfinished.append(plan.label)
            continue
        target = Path(to) / spec.name / plan.label
        files = [plan.metrics_path, *answer_files(plan.run_dir)]
        pending = {target / f.relative_to(plan.run_dir): f.read_bytes() for f in files}
        pending = {dst: data for dst, data in pending.items() if not (dst.is_file() and dst.read_bytes() == data)}
        if not overwrite and any(dst.is_file() for dst in pending):  # nothing is written when anything conflicts
            result.conflicts.append(plan.label)
            continue
        for dst, data in pending.items():
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(data)
        (result.copied if pending else result.unchanged).append(plan.label)
        if prune:
            for ckpt in sorted(plan.run_dir.glob(CHECKPOINT_GLOB)):
                result.pruned_bytes += sum(f.stat().st_size for f in ckpt.rglob("*") if f.is_file())
                shutil.rmtree(ckpt)
    return result


def last_validation(run_dir: Path) -> Path | None:
    """The run's last held-out answers as verl dumps them (trainer.validation_data_dir = <run>/validation, the real
    presets' default: <step>.jsonl), or None."""
    dumps = [f for f in (run_dir / VALIDATION_DIR).glob("*.jsonl") if f.stem.isdigit()]
    return max(dumps, key=lambda f: int(f.stem), default=None)


def answer_files(run_dir: Path) -> list[Path]:
    """What a reader checks a run's accuracies against: the last validation's answers and every answer file of the
    large held-out evaluation (<run>/validation/heldout/<step>.jsonl), in step order."""
    heldout = [f for f in (run_dir / VALIDATION_DIR / HELDOUT_DIR).glob("*.jsonl") if f.stem.isdigit()]
    last = last_validation(run_dir)
    return [*([last] if last else []), *sorted(heldout, key=lambda f: int(f.stem))]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec")
    p.add_argument("--to", required=True, help="the results root: logs go to <to>/<name>/<label>/metrics.jsonl")
    p.add_argument("--out-root", default="outputs/campaign", help="where the campaign ran")
    p.add_argument("--prune-checkpoints", action="store_true", help="delete each published run's global_step_*")
    p.add_argument("--overwrite", action="store_true", help="replace a published log whose contents differ")


def run(args: argparse.Namespace) -> int:
    spec = CampaignSpec.from_yaml(args.spec)
    r = publish(spec, args.out_root, args.to, args.prune_checkpoints, args.overwrite)
    where = Path(args.to) / spec.name
    print(f"[publish] {spec.name}: {len(r.copied)} copied, {len(r.unchanged)} unchanged, to {where}")
    if r.copied:
        print(f"[publish] copied: {', '.join(r.copied)}")
    if r.unfinished:
        print(f"[publish] not finished, left out: {', '.join(r.unfinished)}")
    if args.prune_checkpoints:
        print(f"[publish] checkpoints of published runs deleted: {r.pruned_bytes / 2**30:.1f} GiB")
    if r.conflicts:
        print(f"[publish] published before with other contents, not replaced (--overwrite): {', '.join(r.conflicts)}")
        return 1
    return 0
