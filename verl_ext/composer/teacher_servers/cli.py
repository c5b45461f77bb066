"""The teacher launcher's command line (`scripts/serve_teachers.py`): start the teachers, print the pool block, and
stop them on exit; with `-- COMMAND ...`, run the command once they answer, with their list in its environment
(env.py), stop them when it ends and exit with its code.

    python scripts/serve_teachers.py --model released --model trained=outputs/teachers/grpo_s0_step16

Every argument is checked before any server starts. SIGINT, SIGTERM and SIGHUP become an orderly stop (SIGINT even
where the shell started the launcher as a background job, which ignores SIGINT otherwise).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from verl_ext.composer.teacher_servers import env
from verl_ext.composer.teacher_servers.processes import die_with_launcher
from verl_ext.composer.teacher_servers.server import TeacherServerError, TeacherServers, choose_ports
from verl_ext.composer.teacher_servers.settings import (
    RELEASED,
    ServeSettings,
    check_unique_names,
    flag,
    parse_model_arg,
    render_block,
)
from verl_ext.config.fields import field_help
from verl_ext.pretrained.smollm2 import ensure_smollm2


def build_parser() -> argparse.ArgumentParser:
    defaults = ServeSettings()
    p = argparse.ArgumentParser(
        prog="serve_teachers.py",
        usage="%(prog)s --model [NAME=]DIR|released [--model ...] [options] [-- COMMAND ...]",
        description="Start real LM teachers (vLLM OpenAI servers on CPU) for the Composer, print the teacher pool "
        "block, and stop them on exit (Ctrl-C, SIGTERM, or this process dying). With -- COMMAND ...: run the "
        "command once they answer, with the teachers in its environment (VERL_EXT_TEACHERS, read by "
        "${served_teachers:} in a config: verl_ext/composer/teacher_servers/env.py), stop them when it ends and "
        "exit with its code.",
    )
    p.add_argument(
        "--model",
        action="append",
        required=True,
        metavar="[NAME=]DIR|released",
        help=f"a teacher: {RELEASED!r} (SmolLM2-135M-Instruct as released) or a Hugging Face model directory; repeat "
        "for each teacher",
    )
    p.add_argument("--port", type=int, default=None, help="first port (then +1 per teacher); default: free ports")
    p.add_argument("--log-dir", default="outputs/teachers/logs", help="one vLLM log per teacher (default: %(default)s)")
    p.add_argument("--write", default=None, metavar="FILE", help="also write the printed block to FILE when ready")
    helps = field_help(ServeSettings)
    for f in dataclasses.fields(ServeSettings):
        if f.name == "host":
            continue
        kind = {"int": int, "float": float}.get(str(f.type), str)
        default = getattr(defaults, f.name)
        shown = "" if default is None else " (default: %(default)s)"
        p.add_argument(flag(f.name), type=kind, default=default, help=helps[f.name] + shown)
    return p


def _stop_on(signum, frame) -> None:
    raise SystemExit(128 + signum)


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the launcher's arguments, the command after the first `--`; [] without one)."""
    argv = list(argv)
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1 :]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    own, command = split_command(argv)
    args = parser.parse_args(own)
    if "--" in argv and not command:
        parser.error("-- must be followed by a command")
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(ServeSettings) if f.name != "host"}
    try:  # every argument is checked before any server starts
        settings = ServeSettings(**values)
        # every directory and name first, then the released model (fetched on first use: a 93 MB download)
        check_unique_names([parse_model_arg(v, resolve_released=lambda: Path(RELEASED)) for v in args.model])
        specs = [parse_model_arg(v, resolve_released=ensure_smollm2) for v in args.model]
        if args.port is not None:
            choose_ports(len(specs), settings.host, args.port)
    except ValueError as e:
        parser.error(str(e))
    # SIGINT too: a shell starts a background job (`serve_teachers.py &`) with SIGINT ignored, and Python keeps that
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop_on)
    servers = TeacherServers(specs, settings, args.log_dir, args.port)
    try:
        servers.start()
        block = render_block(servers.pool_teachers())
        if args.write:
            Path(args.write).parent.mkdir(parents=True, exist_ok=True)
            Path(args.write).write_text(block)
        print(block, end="", flush=True)
        if command:
            return _serve_command(servers, command)
        servers.say(f"{len(specs)} teacher(s) serving; Ctrl-C or SIGTERM stops them")
        while not servers.dead():
            time.sleep(1.0)
        _say_dead(servers)
        return 1
    except TeacherServerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except SystemExit as e:
        return int(e.code or 0)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # the stop below is bounded; a second signal must not cut it short
        servers.say("stopping")
        servers.stop()
        servers.say("stopped")


def _serve_command(servers: TeacherServers, command: list[str]) -> int:
    """Run the command with the teachers in its environment until it ends (its exit code), or until a teacher dies
    (1: the command is stopped rather than left to train against a dead endpoint)."""
    servers.say(f"running {' '.join(command)} with {env.TEACHERS_ENV} set")
    proc = env.start_command(command, servers.pool_teachers(), preexec=die_with_launcher(os.getpid()))
    try:
        while proc.poll() is None and not servers.dead():
            time.sleep(1.0)
        if proc.poll() is None:
            _say_dead(servers)
            servers.say("stopping the command: its teachers are gone")
            env.end_command(proc)
            return 1
        servers.say(f"the command exited with code {proc.returncode}")
        return proc.returncode if proc.returncode >= 0 else 128 - proc.returncode  # killed by a signal: 128 + N
    finally:
        env.end_command(proc)


def _say_dead(servers: TeacherServers) -> None:
    for s in servers.dead():
        servers.say(f"{s.spec.name}: the server exited with code {s.exited()}; the end of its log:\n{s.log_tail()}")


if __name__ == "__main__":
    sys.exit(main())
