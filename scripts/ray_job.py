"""Submit a recipe to a running Ray cluster as a Ray job, stream its log, collect its outputs.

    .venv/bin/python scripts/ray_job.py submit --address http://HEAD:8265 --recipe fast_dapo \\
        --run-dir /shared/runs/x -- +preset=cpu_demo trainer.nnodes=2

The same CLI as `python -m verl_ext.launch` (verl_ext/launch/cli.py); docs/CLUSTER.md has the cluster set-up.
"""

import sys

from verl_ext.launch.cli import main

if __name__ == "__main__":
    sys.exit(main())
