"""The driver's quiet terminal (verl_ext/metrics_log/terminal.py): a real driver-like process with a child process
writing to the inherited stdout/stderr (as Ray's processes do), its terminal output read as a user sees it and its
log file read back."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from verl_ext.metrics_log.terminal import LOG_NAME, START_ENV, VERBOSE_ENV, failure_cause, user_line

ROOT = Path(__file__).resolve().parents[2]

DRIVER = textwrap.dedent(
    """
    import subprocess, sys, warnings
    from verl_ext.metrics_log.terminal import Terminal, capture_early, phase
    capture_early()
    warnings.warn("an import-time warning nobody can act on")
    RAY_LINE = "\\x1b[36m(ExtTaskRunner pid=17680)\\x1b[0m "
    with Terminal(sys.argv[1]) as t:
        t.show("[preflight] fast_dapo: the run's plan\\n  model      /some/model")
        print("(raylet) a Ray notice")
        phase("Ray started, task runner up")
        child = (
            "import sys;"
            f"print({RAY_LINE!r} + 'step 1/2 | reward 0.500 | 3.1 s');"
            "print('\\\\x1b[33m(WorkerDict pid=1)\\\\x1b[0m UserWarning: torch_dtype is deprecated', file=sys.stderr);"
            "sys.stderr.write('Training Progress:  50%|#####     | 1/2\\\\r');"
            f"print({RAY_LINE!r} + 'step 2/2 | reward 0.750 | val acc 0.250 | 2.0 s [repeated 2x across cluster]')"
        )
        subprocess.run([sys.executable, "-c", child], check=True)
        if sys.argv[2] == "fail":
            raise ValueError("the reward function broke (from a worker)")
        if sys.argv[2] == "interrupt":
            raise KeyboardInterrupt
        t.show("[verl_ext] validation accuracy 0.100 -> 0.250")
    """
)


def _drive(
    tmp_path: Path, mode: str, verbose: bool = False, env_extra: dict | None = None
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in (VERBOSE_ENV, START_ENV)}
    env["PYTHONPATH"] = str(ROOT)
    env.update(env_extra or {})
    if verbose:
        env[VERBOSE_ENV] = "1"
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    return subprocess.run(
        [sys.executable, str(script), str(tmp_path / "run"), mode], capture_output=True, text=True, env=env, timeout=60
    )


def test_the_terminal_shows_the_user_lines_and_the_log_keeps_everything(tmp_path):
    r = _drive(tmp_path, "ok")
    assert r.returncode == 0, r.stderr
    log = tmp_path / "run" / LOG_NAME
    lines = r.stdout.splitlines()
    assert lines[0] == f"[verl_ext] full log: {log}"
    assert lines[1:3] == ["[preflight] fast_dapo: the run's plan", "  model      /some/model"]
    assert lines[3].startswith("[verl_ext] Ray started, task runner up (") and lines[3].endswith(" s)")
    assert lines[4:] == [
        "step 1/2 | reward 0.500 | 3.1 s",
        "step 2/2 | reward 0.750 | val acc 0.250 | 2.0 s",
        "[verl_ext] validation accuracy 0.100 -> 0.250",
    ]
    assert r.stderr == ""
    text = log.read_text()
    for kept in (
        "an import-time warning nobody can act on",  # held from the driver's first line
        "(raylet) a Ray notice",
        "UserWarning: torch_dtype is deprecated",
        "Training Progress:  50%",
        "(ExtTaskRunner pid=17680)",
        "step 2/2 | reward 0.750",
        "[verl_ext] validation accuracy 0.100 -> 0.250",
    ):
        assert kept in text, kept
    assert "verl_ext-terminal-sync" not in text


def test_a_run_started_by_a_campaign_counts_its_seconds_from_its_own_start(tmp_path):
    """A campaign's terminal sets the start-up clock in its environment, which its runs inherit; each run restarts it
    (a run started 11 minutes into a campaign once showed `Ray started, task runner up (682 s)` for a 14 s start)."""
    r = _drive(tmp_path, "ok", env_extra={START_ENV: str(time.time() - 3600)})
    assert r.returncode == 0, r.stderr
    (line,) = [x for x in r.stdout.splitlines() if x.startswith("[verl_ext] Ray started")]
    seconds = int(line.rsplit("(", 1)[1].removesuffix(" s)"))
    assert 0 <= seconds < 60, line


def test_a_failed_run_shows_its_cause_and_the_log_and_keeps_the_traceback_in_the_log(tmp_path):
    r = _drive(tmp_path, "fail")
    log = tmp_path / "run" / LOG_NAME
    assert r.returncode == 1
    assert r.stderr.splitlines() == [  # after the run's last step line (a Terminal given no resume mode)
        "[verl_ext] run failed after step 2/2: ValueError: the reward function broke (from a worker)",
        f"[verl_ext] full log: {log}",
    ]
    assert "Traceback" not in r.stdout + r.stderr
    assert "Traceback (most recent call last)" in log.read_text()


def test_ctrl_c_says_the_run_stopped_and_exits_130(tmp_path):
    r = _drive(tmp_path, "interrupt")
    assert r.returncode == 130
    assert r.stderr.splitlines()[0] == "[verl_ext] interrupted: the run stopped (checkpoints saved so far are kept)"
    assert "Traceback" not in r.stdout + r.stderr


def test_verbose_prints_everything_and_writes_no_log(tmp_path):
    r = _drive(tmp_path, "ok", verbose=True)
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    assert "an import-time warning" in out and "(raylet) a Ray notice" in out and "(ExtTaskRunner pid=17680)" in out
    assert not (tmp_path / "run" / LOG_NAME).exists()


@pytest.mark.parametrize(
    "raw, shown",
    [
        (
            "\x1b[36m(ExtTaskRunner pid=17680)\x1b[0m step  3/16 | reward 0.250 | 38.1 s",
            "step  3/16 | reward 0.250 | 38.1 s",
        ),
        ("(TaskRunner pid=12, ip=10.0.0.2) [verl_ext] workers up (52 s)", "[verl_ext] workers up (52 s)"),
        ("step 0/16 | val acc 0.167\r\n", "step 0/16 | val acc 0.167"),
        ("[verl_ext] metrics log: out/metrics.jsonl", "[verl_ext] metrics log: out/metrics.jsonl"),
        ("[campaign] 2/24 maxrl+gtpo_s0: started", "[campaign] 2/24 maxrl+gtpo_s0: started"),
        ("(vLLMHttpServer pid=1) WARNING Triton is not installed", None),
        ("[validate_config] All configuration checks passed successfully!", None),
        ("(ExtTaskRunner pid=1) stepping through the stepper", None),
        ("Training Progress:  50%|#####     | 8/16", None),
    ],
)
def test_user_lines(raw, shown):
    assert user_line(raw) == shown


def test_failure_cause_is_the_innermost_error_line_of_a_remote_traceback():
    remote = RuntimeError(
        "ray::ExtTaskRunner.run() (pid=1, ip=10.0.0.1)\n  File \"x.py\", line 3, in f\n    raise ValueError('boom')\n"
        "ValueError: boom"
    )
    assert failure_cause(remote) == "ValueError: boom"
    assert failure_cause(OSError("disk full")) == "OSError: disk full"
