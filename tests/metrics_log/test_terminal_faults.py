"""The driver's terminal (verl_ext/metrics_log/terminal.py) when something goes wrong, for real: a driver process
whose terminal (a pipe read by the test) goes away, whose workers (child processes on the inherited stdout) write a
line of tens of megabytes or more than a pipe's buffer after the relay died, that is SIGKILLed before its run began,
or whose run fails at a step. Nothing hangs, every byte reaches run.log, and a failure says where and how to resume.
docs/FAULTS.md lists these cases."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from verl_ext.metrics_log.terminal import LOG_NAME, START_ENV, VERBOSE_ENV

ROOT = Path(__file__).resolve().parents[2]


def _env(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (VERBOSE_ENV, START_ENV)}
    env.update(PYTHONPATH=str(ROOT), VERL_EXT_CACHE=str(tmp_path / "cache"))
    return env


def _script(tmp_path: Path, code: str) -> list[str]:
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(code))
    return [sys.executable, str(script), str(tmp_path / "run")]


def _run(tmp_path: Path, code: str, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    cmd = [*_script(tmp_path, code), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(tmp_path), timeout=timeout)


def test_a_terminal_that_goes_away_loses_no_line_of_the_log(tmp_path):
    """The user's terminal closes mid-run (a broken pipe on every write to it): the run goes on, and the log still
    gets every line, those the relay read in the same chunk as a user line included (they were dropped with it)."""
    code = """
        import os, sys, time
        from verl_ext.metrics_log.terminal import Terminal
        with Terminal(sys.argv[1]) as t:
            t.show("[verl_ext] ready")
            while not os.path.exists(sys.argv[2]):
                time.sleep(0.02)
            time.sleep(0.2)
            # one write, so one chunk for the relay: user lines among the workers' lines
            lines = [b"step 1/2 | reward 0.500"] + [b"worker line %d" % i for i in range(200)]
            os.write(1, b"\\n".join(lines + [b"step 2/2 | reward 0.750", b"last worker line", b""]))
            t.show("[verl_ext] validation accuracy 0.100 -> 0.250")
    """
    gone = tmp_path / "terminal-closed"
    proc = subprocess.Popen(
        [*_script(tmp_path, code), str(gone)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(tmp_path)
    )
    try:
        assert proc.stdout.readline().startswith(b"[verl_ext] full log: ")
        assert proc.stdout.readline() == b"[verl_ext] ready\n"
        proc.stdout.close()  # the terminal is gone
        gone.touch()
        proc.wait(timeout=60)
    finally:
        proc.kill()
    log = (tmp_path / "run" / LOG_NAME).read_text()
    for i in range(200):
        assert f"worker line {i}\n" in log, i
    assert "last worker line" in log and "step 2/2 | reward 0.750" in log
    assert proc.returncode == 0, proc.stderr.read().decode()  # show() on a closed terminal raises nothing
    assert "[verl_ext] validation accuracy 0.100 -> 0.250" in log


def test_a_line_of_tens_of_megabytes_is_logged_whole_in_linear_time_and_bounded_memory(tmp_path):
    """A worker writes 32 MiB without a newline. The old relay held it all (`pending += chunk`, a split over the
    whole buffer at each read: quadratic, minutes); now it goes to the log as it arrives, the driver's memory does not
    grow with it, and it is not shown (not a user line); the line after it is."""
    size = 32 * 2**20
    code = f"""
        import resource, subprocess, sys
        from verl_ext.metrics_log.terminal import Terminal
        child = (
            "import os\\n"
            "block = b'x' * 2**20\\n"
            "for _ in range({size // 2**20}):\\n"
            "    os.write(1, block)\\n"
            "os.write(1, b'\\\\nstep 1/1 | reward 1.000\\\\n')\\n"
        )
        with Terminal(sys.argv[1]) as t:
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            subprocess.run([sys.executable, "-c", child], check=True)
            t.show("[verl_ext] done")
            grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
            t.show(f"[verl_ext] peak memory grew by {{grown // 1024}} MiB")
    """
    start = time.monotonic()
    r = _run(tmp_path, code, timeout=120)
    took = time.monotonic() - start
    assert r.returncode == 0, r.stderr
    shown = r.stdout.splitlines()
    assert shown[1:3] == ["step 1/1 | reward 1.000", "[verl_ext] done"], shown[:3]
    grown = int(shown[3].split()[-2])
    assert grown < 16, f"the driver's memory grew by {grown} MiB for a {size >> 20} MiB line"
    assert took < 60, took
    data = (tmp_path / "run" / LOG_NAME).read_bytes()
    assert b"\n" + b"x" * size + b"\nstep 1/1 | reward 1.000\n" in data


def test_a_dead_relay_is_replaced_and_no_writer_blocks(tmp_path):
    """The relay's end of the pipe stops working (a real EBADF: something put a write-only file on its fd), so the
    relay thread ends. A worker started before (it holds the pipe, as Ray's do) then writes 256 KiB, four times a
    pipe's buffer: it must not block, and its every line must reach the log, as must the driver's own later lines
    and those of a process started after (fds 1 and 2 now point at the log)."""
    code = """
        import os, subprocess, sys, time
        from verl_ext.metrics_log.terminal import Terminal
        worker = (
            "import os, sys\\n"
            "sys.stdin.readline()\\n"
            "for i in range(4096):\\n"
            "    os.write(1, b'filler %05d ' % i + b'.' * 50 + b'\\\\n')\\n"
            "os.write(1, b'worker done\\\\n')\\n"
        )
        with Terminal(sys.argv[1]) as t:
            t.show("[verl_ext] started")
            w = subprocess.Popen([sys.executable, "-c", worker], stdin=subprocess.PIPE)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, t._read_fd)  # the relay's next read fails (EBADF)
            os.close(devnull)
            w.stdin.write(b"go\\n")
            w.stdin.close()
            rc = w.wait(timeout=30)  # a blocked writer is the defect: TimeoutExpired
            deadline = time.monotonic() + 10
            while os.readlink("/proc/self/fd/1") != str(t.log_path) and time.monotonic() < deadline:
                time.sleep(0.05)
            print(f"driver line after the relay died (worker exit {rc})")
            subprocess.run([sys.executable, "-c", "print('late process ' * 20000)"], check=True, timeout=30)
            t.show("[verl_ext] the run ended")
    """
    r = _run(tmp_path, code, timeout=90)
    log = (tmp_path / "run" / LOG_NAME).read_text()
    for i in range(4096):
        assert f"filler {i:05d} " in log, i
    assert "worker done" in log and "driver line after the relay died (worker exit 0)" in log
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1:] == ["[verl_ext] started", "[verl_ext] the run ended"]
    (notice,) = r.stderr.splitlines()
    assert notice.startswith("[verl_ext] the terminal's relay stopped (the pipe could not be read: "), notice
    assert log.count("late process ") == 20000 and "[verl_ext] the run ended" in log


def test_what_a_driver_printed_before_its_run_began_survives_a_sigkill(tmp_path):
    """The OOM killer ends a driver before its run's directory is known: what it printed is on disk, in the early
    capture's files named after it; a driver whose run began moves them into its log and deletes them."""
    code = """
        import os, signal, sys, warnings
        from verl_ext.metrics_log.terminal import capture_early
        capture_early()
        print("an early line the OOM killer must not take")  # not flushed: Python's buffer is lost with the process
        warnings.warn("an import-time warning")
        if sys.argv[2] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        from verl_ext.metrics_log.terminal import Terminal
        with Terminal(sys.argv[1]):
            pass
    """
    r = _run(tmp_path, code, "kill")
    assert r.returncode == -signal.SIGKILL and r.stdout == r.stderr == ""
    early = tmp_path / "cache" / "early"
    (out,) = early.glob("*-pid*.stdout")
    (err,) = early.glob("*-pid*.stderr")
    assert out.read_text() == "an early line the OOM killer must not take\n"
    assert "UserWarning: an import-time warning" in err.read_text()
    for f in (out, err):
        f.unlink()

    r = _run(tmp_path, code, "run")
    assert r.returncode == 0, r.stderr
    log = (tmp_path / "run" / LOG_NAME).read_text()
    assert "an early line the OOM killer must not take" in log and "an import-time warning" in log
    assert list(early.iterdir()) == []


FAILING = """
    import os, subprocess, sys
    from pathlib import Path
    from verl_ext.metrics_log.terminal import Terminal
    run_dir = Path(sys.argv[1])
    RAY = "(ExtTaskRunner pid=17680) "
    with Terminal(run_dir, resume_mode="auto") as t:
        t.show("[preflight] the plan")
        lines = [RAY + "step 0/20 | val acc 0.220", RAY + "step  4/20 | reward 0.391 | 12.7 s"]
        (run_dir / "global_step_4").mkdir()  # what verl writes: the checkpoint, then its tracker file
        (run_dir / "latest_checkpointed_iteration.txt").write_text("4")
        if sys.argv[2] == "trainer-reported":  # the trainer's closing lines, printed by the task runner
            lines += [
                RAY + "[verl_ext] run failed at step 5/20: EngineDeadError: EngineCore encountered an issue.",
                RAY + f"[verl_ext] a resume (trainer.resume_mode=auto) starts from {run_dir}/global_step_4",
            ]
        subprocess.run([sys.executable, "-c", f"print({chr(10).join(lines)!r})"], check=True)
        raise RuntimeError(
            "ray::ExtTaskRunner.run() (pid=17680, ip=10.0.0.1)\\n  File \\"engine.py\\", line 3, in step\\n"
            "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue."
        )
"""


def test_a_run_that_fails_at_a_step_says_where_why_and_where_a_resume_starts(tmp_path):
    """The trainer's own lines did not come through (Ray's log forwarding drops an actor's last lines at shutdown;
    or the run failed before the trainer existed): the terminal says at which step it failed, from the last step
    line it passed on, and the checkpoint a resume starts from, read in the run's directory. No success-shaped
    summary (killing vLLM mid-run once printed the normal `validation accuracy ... -> ...` before the failure)."""
    r = _run(tmp_path, FAILING, "lost")
    run_dir = tmp_path / "run"
    assert r.returncode == 1
    assert r.stdout.splitlines()[1:] == [
        "[preflight] the plan",
        "step 0/20 | val acc 0.220",
        "step  4/20 | reward 0.391 | 12.7 s",
    ]
    assert r.stderr.splitlines() == [
        "[verl_ext] run failed at step 5/20: vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an"
        " issue.",
        f"[verl_ext] a resume (trainer.resume_mode=auto) starts from {run_dir}/global_step_4",
        f"[verl_ext] full log: {run_dir / LOG_NAME}",
    ]
    assert "Traceback (most recent call last)" in (run_dir / LOG_NAME).read_text()


def test_the_trainers_failure_lines_are_not_repeated(tmp_path):
    """The trainer's closing lines of a failed run came through the relay: the terminal adds only the log's path."""
    r = _run(tmp_path, FAILING, "trainer-reported")
    run_dir = tmp_path / "run"
    assert r.returncode == 1
    assert r.stdout.splitlines()[-2:] == [
        "[verl_ext] run failed at step 5/20: EngineDeadError: EngineCore encountered an issue.",
        f"[verl_ext] a resume (trainer.resume_mode=auto) starts from {run_dir}/global_step_4",
    ]
    assert r.stderr.splitlines() == [f"[verl_ext] full log: {run_dir / LOG_NAME}"]
