"""The launcher's children as processes (verl_ext/composer/teacher_servers/processes.py), on real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from verl_ext.composer.teacher_servers.processes import group_pids

ROOT = Path(__file__).resolve().parents[3]


def _group_gone(pgid: int, timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not group_pids(pgid):
            return True
        time.sleep(0.1)
    return False


def test_a_server_dies_with_its_launcher_even_when_the_launcher_is_killed(tmp_path):
    """The launcher's children get SIGTERM from the kernel when it dies (PR_SET_PDEATHSIG), here a launcher killed
    with SIGKILL, which runs no clean-up of its own."""
    pid_file = tmp_path / "child.pid"
    launcher = textwrap.dedent(f"""
        import os, subprocess, sys, time
        from verl_ext.composer.teacher_servers.processes import die_with_launcher
        child = subprocess.Popen(["sleep", "300"], start_new_session=True, preexec_fn=die_with_launcher(os.getpid()))
        open({str(pid_file)!r}, "w").write(str(child.pid))
        time.sleep(300)
    """)
    proc = subprocess.Popen([sys.executable, "-c", launcher], env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    child = int(pid_file.read_text())
    assert group_pids(child) == [child]
    proc.kill()
    proc.wait()
    assert _group_gone(child), "the server outlived its killed launcher"
