"""Stands in for a recipe's driver in the job-log test: runs under the real driver terminal (`Terminal`), as every
recipe's `drive` does, and prints what a run's processes print: chatter, step lines (one with Ray's worker prefix),
the resume point; then ends as `exit=<ok|fail>` says. Hydra's files are written where a real run writes them."""

import sys
from pathlib import Path

from verl_ext.metrics_log.terminal import Terminal, capture_early, phase

capture_early()
args = dict(a.split("=", 1) for a in sys.argv[1:])
hydra_dir = Path(args["hydra.run.dir"]) / ".hydra"
hydra_dir.mkdir(parents=True)
(hydra_dir / "config.yaml").write_text("trainer:\n  nnodes: 2\n")
(hydra_dir / "overrides.yaml").write_text("- exit=" + args["exit"] + "\n")
run_dir = hydra_dir.parents[1]
print("early chatter before the run's directory is known", flush=True)
with Terminal(run_dir) as term:
    print("INFO verl chatter: Setting global step to 2", flush=True)
    phase(f"resumed from {run_dir}/global_step_2 at step 2")
    print("(TaskRunner pid=17) step  3/4 | reward 0.500 | 1.0 s", flush=True)
    print("step  4/4 | reward 0.750 | 1.0 s", file=sys.stderr, flush=True)
    if args["exit"] == "fail":
        raise RuntimeError("rollout server died: EngineDeadError")
    term.show("[verl_ext] validation accuracy 0.2 -> 0.4")
(run_dir / "metrics.jsonl").write_text('{"step": 3}\n{"step": 4}\n')
