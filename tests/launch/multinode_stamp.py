"""The multi-node suite's stamp: which code its last green run (`make test-multinode`) ran on.

The suite starts a 2-node Ray cluster and takes ~12-16 minutes on 2 cores, so it stays outside `make test`; it
rotted unseen once (the job log stopped showing step lines when the driver's terminal changed). The stamp keeps it
honest: `scripts/run_tests.sh` writes it when the suite passes, and a test in `make test`
(tests/launch/test_multinode_stamp.py) fails when any file the suite exercises has changed since, naming the files:
run `make test-multinode` again (docs/CI.md).

    python -m tests.launch.multinode_stamp write   # after a green run (run_tests.sh does it)
    python -m tests.launch.multinode_stamp check   # exit 1 and the changed files if the stamp is stale
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STAMP = Path(__file__).with_name("multinode_stamp.json")
# what a cluster job runs through: the launcher, the driver's terminal and launch, the task runner, the campaign's
# cluster submission, and the suite itself
WATCHED = (
    "verl_ext/launch/*.py",
    "verl_ext/metrics_log/terminal.py",
    "verl_ext/trainer/launch.py",
    "verl_ext/trainer/task_runner.py",
    "verl_ext/campaign/submit.py",
    "scripts/ray_job.py",
    "tests/launch/conftest.py",
    "tests/launch/test_e2e_multinode.py",
    "tests/launch/test_e2e_campaign_submit.py",
)


def digests(root: Path = ROOT) -> dict[str, str]:
    """sha256 of each watched file's bytes, by path relative to the repository."""
    files = sorted({p for pattern in WATCHED for p in root.glob(pattern) if p.is_file()})
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def changed(root: Path = ROOT, stamp: Path = STAMP) -> list[str]:
    """The watched files added, removed or changed since the stamp (all of them without a stamp)."""
    now = digests(root)
    then = json.loads(stamp.read_text())["files"] if stamp.exists() else {}
    return sorted(k for k in set(now) | set(then) if now.get(k) != then.get(k))


def write(stamp: Path = STAMP) -> None:
    stamp.write_text(json.dumps({"files": digests()}, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["write"]:
        write()
        print(f"[tests] multi-node suite stamp written: {STAMP.relative_to(ROOT)}")
    elif sys.argv[1:] == ["check"]:
        stale = changed()
        print("\n".join(stale) or "the multi-node stamp is current")
        sys.exit(1 if stale else 0)
    else:
        sys.exit("usage: python -m tests.launch.multinode_stamp write|check")
