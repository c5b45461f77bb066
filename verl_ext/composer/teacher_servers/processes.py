"""The launcher's children as Linux processes: a child that ends with its launcher, even a launcher killed by
SIGKILL (`PR_SET_PDEATHSIG`), and a process group's live members and their memory, read from /proc. Each teacher
server runs in a process group of its own (its engine process is in it too), so these see a server whole.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable, Sequence

_PR_SET_PDEATHSIG = 1


def die_with_launcher(launcher_pid: int) -> Callable[[], None]:
    """preexec_fn: the child gets SIGTERM when the launcher dies (Linux); if it already died, the child ends now."""
    libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None

    def preexec() -> None:
        if libc is not None:
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != launcher_pid:
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def group_pids(pgid: int) -> list[int]:
    """Live processes of a process group (read from /proc)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(entry))
    return pids


def pss_mib(pids: Sequence[int]) -> float:
    """Proportional set size of the processes, in MiB: shared pages counted once across them."""
    total_kb = 0
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    total_kb += int(line.split()[1])
                    break
    return total_kb / 1024
