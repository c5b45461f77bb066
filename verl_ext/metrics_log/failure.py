"""What a failed run says, in the terminal and as a failed trainer's closing lines: that it failed, where (the step it
was at), why (one line), and where a resume starts (the latest checkpoint) -- never the summary of a finished run.

    [verl_ext] run failed at step 5/20: EngineDeadError: the engine core died
    [verl_ext] a resume (trainer.resume_mode=auto) starts from outputs/demo/global_step_4

The trainer knows the step and the checkpoints (verl_ext/trainer/ppo_trainer.py, `_close_run`); the driver's terminal
(terminal.py) prints the same lines itself when the trainer's never reached it (a failure before the trainer was
built, or lines Ray's log forwarding dropped), from the last step line it passed on and the run's directory.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

PREFIX = "[verl_ext]"
FAILED = f"{PREFIX} run failed"  # how every failure line starts
TRACKER_FILE = "latest_checkpointed_iteration.txt"  # verl's: the step of the run's latest complete checkpoint
RESUME_MODES = ("auto", "disable", "resume_path")  # verl 0.9.1's trainer.resume_mode


_OOM = re.compile(r"OutOfMemoryError\b")
# Ray's memory monitor, in the messages of Ray 2.4x-2.5x: the node's memory, each killed worker's name and memory
_OOM_NODE = re.compile(r"was (?:running was )?([\d.]+) ?GB(?: used)? / ([\d.]+) ?GB")
_OOM_WORKER = re.compile(r"(?:name=([^,()]+), )?pid=(\d+), (?:actual )?memory used=([\d.]+) ?GB")


def oom_cause(text: str) -> str | None:
    """One line for Ray's memory monitor killing the run's workers, naming them and the node's memory, or None when
    `text` is not such a failure."""
    if not _OOM.search(text):
        return None
    workers = [
        f"{(name or 'a worker').strip()} (pid {pid}, {float(gb):.1f} GB)" for name, pid, gb in _OOM_WORKER.findall(text)
    ]
    node = _OOM_NODE.search(text)
    at = f" with the node at {float(node.group(1)):.1f} of {float(node.group(2)):.1f} GB" if node else ""
    killed = ", ".join(workers) if workers else "workers of the run"
    return (
        f"OutOfMemoryError: Ray's memory monitor killed {killed}{at}: the run needs more memory than the machine "
        "has free (docs/FAULTS.md: memory)"
    )


def failure_cause(exc: BaseException) -> str:
    """One line saying why a run failed: the innermost `Error: message` line of a (remote) traceback; for Ray's
    memory monitor, the workers it killed and the node's memory (`oom_cause`)."""
    text = str(exc)
    if (oom := oom_cause(text)) is not None:
        return oom
    for line in reversed(text.splitlines()):
        line = line.strip()
        if re.match(r"^[\w.]+(Error|Exception|Interrupt|Exit)\b.*", line):
            # vLLM's "see above" points at a stack trace the terminal does not show: the run's log has it
            return line.replace("See stack trace (above) for the root cause.", "Its stack trace is in the run's log.")
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def failed_line(cause: str, where: str = "") -> str:
    """`[verl_ext] run failed at step 5/20: <cause>`; `where` says at which step ("at step 5/20", "before step 1/20"),
    empty when unknown."""
    return f"{FAILED}{' ' + where if where else ''}: {cause}"


_FAILED_LINE = re.compile(re.escape(FAILED) + r"(?: (?:at|before|after) step \d+/\d+)?: (?P<cause>.*)$")


def failed_cause(line: str) -> str | None:
    """The cause a `failed_line` names (`EngineDeadError: ...`), or None for any other line: how a reader of a run's
    terminal output (the campaign runner) tells why it stopped."""
    m = _FAILED_LINE.match(line.rstrip("\r\n"))
    return m.group("cause") if m else None


def latest_checkpoint(run_dir: str | os.PathLike) -> str | None:
    """The run's latest complete checkpoint, as verl's `find_latest_ckpt_path` finds it: `<run_dir>/global_step_<N>`,
    N read from verl's tracker file (written last, after the checkpoint); None without one."""
    tracker = Path(run_dir) / TRACKER_FILE
    try:
        step = int(tracker.read_text().strip())
    except (OSError, ValueError):
        return None
    folder = os.path.join(os.fspath(run_dir), f"global_step_{step}")
    return folder if os.path.isdir(folder) else None


def resume_line(resume_mode: str, run_dir: str | os.PathLike, resume_from_path: str | None = None) -> str:
    """Where the run would start again with the same command: `trainer.resume_mode=auto` from the latest checkpoint
    under `run_dir` (step 0 without one), `resume_path` from `resume_from_path`, `disable` from step 0."""
    latest = latest_checkpoint(run_dir)
    if resume_mode == "disable":
        also = f" (latest checkpoint: {latest})" if latest else ""
        return f"{PREFIX} resume is off (trainer.resume_mode=disable): a rerun starts from step 0{also}"
    if resume_mode == "resume_path":
        also = f"; the latest checkpoint is {latest}" if latest and latest != resume_from_path else ""
        return f"{PREFIX} a resume (trainer.resume_mode=resume_path) starts from {resume_from_path}{also}"
    if latest is None:
        return f"{PREFIX} no checkpoint yet: a resume starts from step 0"
    return f"{PREFIX} a resume (trainer.resume_mode={resume_mode}) starts from {latest}"


_STEP = re.compile(r"^step +(\d+)/(\d+)\b")


def step_of(user_line: str) -> tuple[int, int] | None:
    """(step, total) of a step line as the terminal shows it (`step  4/20 | ...`; step 0 is the validation before
    training), else None."""
    m = _STEP.match(user_line)
    return (int(m.group(1)), int(m.group(2))) if m else None


def where_after(last_step: tuple[int, int] | None) -> str:
    """At which step a run failed, from the last step line it printed: the next one (`at step 5/20` after step 4's
    line), `after step 20/20` after the last one, "" when it printed none."""
    if last_step is None:
        return ""
    step, total = last_step
    return f"after step {step}/{total}" if step >= total else f"at step {step + 1}/{total}"


def is_resume_line(line: str) -> bool:
    """A line of `resume_line`'s."""
    return line.startswith((f"{PREFIX} a resume ", f"{PREFIX} no checkpoint yet", f"{PREFIX} resume is off"))
