"""Stands in for a recipe's main in the entry test: writes a metrics log and Hydra's files where a real run would,
then exits with the code given as `exit=<n>`."""

import sys
from pathlib import Path

args = dict(a.split("=", 1) for a in sys.argv[1:])
hydra_dir = Path(args["hydra.run.dir"]) / ".hydra"
hydra_dir.mkdir(parents=True)
(hydra_dir / "config.yaml").write_text("trainer:\n  nnodes: 2\n  dir: ${trainer.nnodes}x\n")
(hydra_dir / "overrides.yaml").write_text("- exit=" + args["exit"] + "\n")
(hydra_dir.parents[1] / "metrics.jsonl").write_text('{"step": 1}\n')
print("fake run done", flush=True)
sys.exit(int(args["exit"]))
