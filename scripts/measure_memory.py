"""Where a run's memory goes (verl_ext/metrics_log/memory_watch.py): every process of a run and its PSS, every few
seconds, until the run's root process exits; the campaign runner records the same for each of its runs
(`<run>/memory.json`).

    python scripts/measure_memory.py --pid <driver or campaign pid> --out outputs/memory/<run>.json [--every 5]
    python scripts/measure_memory.py --out outputs/memory/demo_real.json -- make demo-real   # run and watch it

Prints the peak of the total, the machine's available memory at that moment and the breakdown at the peak by
part; the JSON holds the timeline (seconds, total PSS in GiB, per part; the keys say gb).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from verl_ext.metrics_log.memory_watch import report, watch


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pid", type=int, help="the run's root process (else the command after --)")
    p.add_argument("--every", type=float, default=5.0, help="seconds between readings")
    p.add_argument("--out", type=Path, help="the JSON of the timeline and the peak")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- a command to run and watch")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if (args.pid is None) == (not command):
        p.error("give --pid or a command after --, not both")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(command) if command else None
    result = watch(proc.pid if proc else args.pid, args.every, args.out)
    print(report(result))
    return proc.wait() if proc else 0


if __name__ == "__main__":
    sys.exit(main())
