"""Served teachers handed to a command through its environment: `serve_teachers.py ... -- COMMAND`.

Why: the teacher launcher (cli.py) picks free ports, so a config written before the teachers start (a
campaign spec, a script) cannot know their URLs. The launcher therefore runs the command itself once every teacher
answers, with the teacher pool's list in the environment variable `TEACHERS_ENV` (JSON), and a config reads it with
the `${served_teachers:}` resolver:

    python scripts/serve_teachers.py --model released --model trained=DIR -- \\
        python scripts/campaign.py configs/campaign/composer_real_cpu.yaml
    # with, in the spec's overrides:  composer.replay.teacher_pool.teachers=${served_teachers:}

The teachers then live exactly as long as the command: they stop when it ends, and the command gets SIGTERM if the
launcher dies. A run started without the launcher fails its pre-flight with the message of `served_teachers` (no
silent runs without teachers), and a stale file cannot point a run at dead ports.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence

from verl_ext.config.errors import ConfigError

TEACHERS_ENV = "VERL_EXT_TEACHERS"
RESOLVER = "served_teachers"
COMMAND_GRACE_S = 30.0  # SIGTERM -> SIGKILL for a command still running when the launcher stops


def encode(entries: Sequence[Mapping]) -> str:
    """The pool's teacher entries (settings.pool_entries) as the variable's value."""
    return json.dumps([dict(e) for e in entries])


def served_teachers(environ: Mapping[str, str] | None = None) -> list[dict]:
    """The `${served_teachers:}` resolver: the teacher entries the launcher put in TEACHERS_ENV. ConfigError (naming
    the variable and the command that sets it) when it is unset or not a list of teacher entries."""
    raw = (os.environ if environ is None else environ).get(TEACHERS_ENV)
    if not raw:
        raise ConfigError(
            f"${{{RESOLVER}:}}: {TEACHERS_ENV} is not set; run this command under the teacher launcher, which sets "
            "it once its teachers answer: python scripts/serve_teachers.py --model ... -- <this command>"
        )
    try:
        entries = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ConfigError(f"${{{RESOLVER}:}}: {TEACHERS_ENV} is not JSON ({e})") from e
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise ConfigError(f"${{{RESOLVER}:}}: {TEACHERS_ENV} must be a non-empty JSON list of teachers, got {raw!r}")
    return entries


def start_command(command: Sequence[str], entries: Sequence[Mapping], preexec: Callable[[], None] | None = None):
    """Start `command` with the teachers in its environment (a Popen). It stays in the launcher's process group, so
    Ctrl-C in the terminal reaches both; `preexec` (the launcher's parent-death signal) ends it with the launcher."""
    env = {**os.environ, TEACHERS_ENV: encode(entries)}
    return subprocess.Popen(list(command), env=env, preexec_fn=preexec)


def end_command(proc: subprocess.Popen, grace_s: float = COMMAND_GRACE_S) -> int:
    """The command's exit code; a command still running (the launcher is stopping on a signal) gets SIGTERM, then
    SIGKILL after grace_s."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode
