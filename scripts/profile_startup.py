"""Profile of one end-to-end run: where the seconds before step 1 go, then each step's phases.

Runs a driver (default: fast DAPO on its embedded tiny CPU default, `+preset=cpu_demo`, 2 steps, validation before
training) as a subprocess, stamps every line of its output with the time it arrived, and reports the gaps between
milestones verl and the project print on the way to step 1: interpreter and pre-flight, Ray start, the task runner,
datasets, the FSDP workers (spawn, model load, FSDP wrap and optimizer), the vLLM server and agent-loop workers (the
engine's init ends where the agent-loop workers start), the first weight sync and the validation before training,
and the steps. Ray forwards a worker's lines in bursts, so a milestone is placed to within a second or two. Per
step, verl's own timers from the run's metrics log (generation, old log-probs, update, weight sync). A milestone a
run never printed is shown as missing rather than guessed.

Usage: .venv/bin/python scripts/profile_startup.py [--out outputs/profile_startup] [--entry recipe.fast_dapo.main]
           [-- overrides...]         (e.g. `-- +preset=real_cpu` for the real model)
docs/CI.md keeps the numbers and the command.
"""

from __future__ import annotations

import argparse
import os
import re
import time
from pathlib import Path

from verl_ext.launch.artifacts import METRICS_FILE
from verl_ext.launch.local_run import run_driver
from verl_ext.metrics_log import read_jsonl
from verl_ext.metrics_log.terminal import VERBOSE_ENV

# (label, regex of the line that ends the phase), in the order they happen.
MILESTONES = [
    ("imports, Hydra config, pre-flight", r"\[preflight\] .*plan"),
    ("Ray start", r"Started a local Ray instance"),
    ("task runner actor up", r"TaskRunner pid="),
    ("datasets and dataloaders", r"Size of train dataloader"),
    ("FSDP worker process spawned", r"\(WorkerDict pid="),
    ("model loaded (actor)", r"contains [\d.,]+[KMB]? parameters"),
    ("FSDP wrap, optimizer, reference", r"Total steps: \d+, num_warmup_steps"),
    ("vLLM server process spawned", r"\(vLLMHttpServer pid="),
    ("vLLM engine init; agent-loop workers spawned", r"\(AgentLoopWorker pid="),
    ("first weight sync, validation before training", r"step +0/\d+"),
    ("step 1", r"step +1/\d+ \|"),
]
STEP_TIMERS = ["gen", "old_log_prob", "ref", "adv", "update_actor", "update_weights", "testing", "step"]


def run(entry: str, overrides: list[str], log_path: Path) -> list[tuple[float, str]]:
    """Run the driver, returning (seconds since start, line) for every line of its merged stdout/stderr as it
    arrived; `log_path` keeps the lines with those stamps."""
    start = time.perf_counter()
    lines: list[tuple[float, str]] = []
    rc = run_driver(entry, overrides, log_path, on_line=lambda line: lines.append((time.perf_counter() - start, line)))
    log_path.write_text("".join(f"{t:8.2f} {line}" for t, line in lines))
    if rc:
        raise SystemExit(f"[profile] the run failed (exit {rc}); its output: {log_path}")
    return [(t, line.rstrip("\n")) for t, line in lines]


def milestones(lines: list[tuple[float, str]]) -> list[tuple[str, float | None]]:
    """Arrival time of the first line of each milestone, searched after the previous milestone found."""
    found, i = [], 0
    for label, pattern in MILESTONES:
        rx = re.compile(pattern)
        j = next((k for k in range(i, len(lines)) if rx.search(lines[k][1])), None)
        found.append((label, None if j is None else lines[j][0]))
        i = j if j is not None else i
    return found


def report(found: list[tuple[str, float | None]], total: float, metrics: list[dict]) -> str:
    out = [f"{'phase':<46} {'ends at s':>9} {'takes s':>8}"]
    last = 0.0
    for label, t in found:
        if t is None:
            out.append(f"{label:<46} {'missing':>9}")
            continue
        out.append(f"{label:<46} {t:>9.1f} {t - last:>8.1f}")
        last = t
    out.append(f"{'rest of the run and shutdown':<46} {total:>9.1f} {total - last:>8.1f}")
    if metrics:
        keys = [k for k in STEP_TIMERS if any(f"timing_s/{k}" in m for m in metrics)]
        out += ["", "per step (verl's timers, s): " + " ".join(f"{k:>14}" for k in keys)]
        for m in metrics:
            out.append(
                f"{'step ' + str(m['step']):<28} " + " ".join(f"{m.get(f'timing_s/{k}', 0.0):>14.1f}" for k in keys)
            )
    return "\n".join(out)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="outputs/profile_startup")
    p.add_argument("--entry", default="recipe.fast_dapo.main")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("overrides", nargs="*", help="Hydra overrides (default: +preset=cpu_demo)")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    overrides = args.overrides or ["+preset=cpu_demo"]
    overrides = [
        *overrides,
        f"trainer.total_training_steps={args.steps}",
        "trainer.val_before_train=true",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.resume_mode=disable",
        f"trainer.default_local_dir={out / 'run'}",
    ]
    # the milestones are verl's and vLLM's own lines, which the driver's quiet terminal keeps for its log only
    os.environ[VERBOSE_ENV] = "1"
    print(f"[profile] {args.entry} {' '.join(overrides)}", flush=True)
    start = time.perf_counter()
    lines = run(args.entry, overrides, out / "run.log")
    total = time.perf_counter() - start
    metrics_path = out / "run" / METRICS_FILE
    metrics = read_jsonl(metrics_path) if metrics_path.exists() else []
    print(report(milestones(lines), total, metrics))
    print(f"[profile] timestamped output: {out / 'run.log'}")


if __name__ == "__main__":
    main()
