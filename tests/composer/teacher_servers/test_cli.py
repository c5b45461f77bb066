"""The teacher launcher's command line (verl_ext/composer/teacher_servers/cli.py): arguments checked before any
server starts, the command after `--`, and SIGINT stopping a starting server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.composer.conftest import alive, descendants
from verl_ext.composer.teacher_servers.cli import main, split_command

ROOT = Path(__file__).resolve().parents[3]


def test_a_bad_model_stops_the_command_before_any_server_starts(tmp_path, capsys):
    log_dir = tmp_path / "logs"
    with pytest.raises(SystemExit) as exc:
        main(["--model", "released", "--model", str(tmp_path / "nope"), "--log-dir", str(log_dir)])
    assert exc.value.code == 2
    assert f"--model '{tmp_path / 'nope'}': {tmp_path / 'nope'} does not exist" in capsys.readouterr().err
    assert not log_dir.exists()  # no server was started: none wrote a log


def test_sigint_stops_a_starting_server_even_when_the_shell_ignores_it(tmp_path):
    """A shell starts a background job with SIGINT ignored; the launcher still stops on it, with the server it was
    starting (a real vLLM server process, still importing), and exits 130."""
    cmd = [sys.executable, str(ROOT / "scripts/serve_teachers.py"), "--model", "released"]
    launcher = subprocess.Popen(
        [*cmd, "--log-dir", str(tmp_path / "logs")],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        lines = []
        while not any("importing vLLM" in line for line in lines):
            line = launcher.stderr.readline()
            assert line, f"the launcher ended early: {lines}"
            lines.append(line)
        server = descendants(launcher.pid)
        assert server
        launcher.send_signal(signal.SIGINT)
        assert launcher.wait(timeout=60) == 130
        assert alive(server) == []
        assert "[teachers] stopped" in launcher.stderr.read()
    finally:
        launcher.kill()
        launcher.wait()


def test_the_command_follows_the_first_double_dash():
    assert split_command(["--model", "released"]) == (["--model", "released"], [])
    assert split_command(["--model", "released", "--", "python", "-m", "x", "--", "y"]) == (
        ["--model", "released"],
        ["python", "-m", "x", "--", "y"],
    )


def test_a_double_dash_without_a_command_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--model", "released", "--"])
    assert exc.value.code == 2 and "-- must be followed by a command" in capsys.readouterr().err
