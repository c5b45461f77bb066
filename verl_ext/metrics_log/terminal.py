"""What a user sees in the terminal while a recipe's driver runs, and where everything else goes.

A run prints a great deal that says nothing to its user: Ray's, vLLM's and verl's start-up chatter, library
warnings, every worker's stderr, a progress bar redrawn per step. A quiet run (the default) keeps all of it, in
order, in the run's log file `<trainer.default_local_dir>/run.log`, and shows in the terminal only:

- the log's path, first;
- what the driver itself shows (`Terminal.show`): the pre-flight plan and the closing summary;
- the project's own lines from any process of the run, which start with `[verl_ext]` (the start-up phases as they
  complete, notices) or `[campaign]` (the campaign runner's), and the step lines (`step  3/16 | ...`), with Ray's
  `(ExtTaskRunner pid=...)` prefix and colour codes taken off (`user_line`).

How: the driver points its stdout and stderr (file descriptors 1 and 2, which every process it starts inherits: Ray,
its workers, vLLM; Ray forwards its workers' output to the driver's) into a pipe, and a relay thread writes every
byte of the pipe to the log and the user lines to the terminal. A run that fails shows its cause and the log's path,
not the tracebacks of every worker (they are in the log). Ctrl-C stops the run: the driver's KeyboardInterrupt shuts
Ray down (verl_ext/trainer/launch.py) and the terminal says so, with the log's path.

What the driver prints before the run's directory is known (the imports' warnings, Hydra's composition, the
pre-flight's model build) is held from the driver's first line (`capture_early`) and put at the head of the log.

`VERL_EXT_VERBOSE=1` turns it off: everything goes to the terminal, as verl prints it, and no log file is written.
"""

from __future__ import annotations

import atexit
import datetime
import os
import re
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

VERBOSE_ENV = "VERL_EXT_VERBOSE"
START_ENV = "VERL_EXT_RUN_START"  # the driver's start (epoch seconds), inherited by the processes Ray starts
LOG_NAME = "run.log"
PREFIX = "[verl_ext]"
_USER = re.compile(r"^(\[verl_ext\] |\[campaign\] |step +\d+/\d+( \||$))")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Ray's prefix on a forwarded line: "(ExtTaskRunner pid=17680) ", "(pid=12) ", "(raylet, ip=10.0.0.2) "
_RAY_PREFIX = re.compile(r"^\((?:[\w.:-]+ )?(?:pid=\d+|[\w-]+)(?:, ip=[\d.:a-f]+)?\) ")
_SYNC = b"\x00verl_ext-terminal-sync"  # a line the relay answers (show waits for it) and never logs
_RAY_REPEATED = re.compile(r" \[repeated \d+x across cluster\]$")


_early: dict = {}  # the early capture while it lasts: {"held": (file for fd 1, file for fd 2), "saved": (fd 1, fd 2)}


def capture_early() -> None:
    """A driver's first call, before its heavy imports: until the run's Terminal opens, fds 1 and 2 go to temporary
    files, which the Terminal writes at the head of the run's log, or (a driver that ends before, e.g. `--help`, a
    Hydra error or a subcommand that runs no Terminal, or a verbose or check-only run) back onto the terminal, each
    to the stream it was written to. Nothing under VERL_EXT_VERBOSE=1."""
    if verbose() or _early:
        return
    _flush()
    held = (tempfile.TemporaryFile(), tempfile.TemporaryFile())
    _early.update(held=held, saved=(os.dup(1), os.dup(2)))
    os.dup2(held[0].fileno(), 1)
    os.dup2(held[1].fileno(), 2)
    atexit.register(release_early)


def release_early(log=None) -> None:
    """End the early capture (if any): fds 1 and 2 back, and what it held into `log` (a binary file), else onto the
    terminal's stdout and stderr as written."""
    if not _early:
        return
    _flush()
    held, saved = _early.pop("held"), _early.pop("saved")
    for fd, original in zip((1, 2), saved):
        os.dup2(original, fd)
        os.close(original)
    for fd, f in zip((1, 2), held):
        f.seek(0)
        data = f.read()
        f.close()
        if log is not None:
            log.write(data)
        elif data:
            os.write(fd, data)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a stream closed at interpreter exit (the atexit release): nothing to flush
            continue


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV, "").strip().lower() in ("1", "true", "yes")


def phase(text: str) -> None:
    """A start-up phase's line, from whichever process completes it: `[verl_ext] <text> (<s> s)`, the seconds since
    the driver started when this process can tell (START_ENV)."""
    start = os.environ.get(START_ENV)
    since = f" ({time.time() - float(start):.0f} s)" if start else ""
    print(f"{PREFIX} {text}{since}", flush=True)


def user_line(raw: str) -> str | None:
    """The line as the user reads it if it is a user line (module docstring), else None."""
    text = _ANSI.sub("", raw).rstrip("\r\n")
    text = _RAY_REPEATED.sub("", _RAY_PREFIX.sub("", text, count=1))
    return text if _USER.match(text) else None


def failure_cause(exc: BaseException) -> str:
    """One line saying why a run failed: the innermost `Error: message` line of a (remote) traceback."""
    text = str(exc)
    for line in reversed(text.splitlines()):
        line = line.strip()
        if re.match(r"^[\w.]+(Error|Exception|Interrupt|Exit)\b.*", line):
            return line
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


class Terminal:
    """The driver's terminal for one run (module docstring). Use as a context manager around the whole run; `show`
    writes to the terminal (and the log). Disabled (`enabled=False`, or VERL_EXT_VERBOSE=1), it only prints."""

    def __init__(self, run_dir: str | Path, enabled: bool = True):
        self.log_path = Path(run_dir) / LOG_NAME
        self.enabled = enabled and not verbose()
        self._tty = None
        self._tty_err = None
        self._log = None
        self._saved: tuple[int, int] | None = None
        self._relay: threading.Thread | None = None
        self._read_fd: int | None = None
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._piped = False  # fds 1 and 2 point into the relay's pipe

    # ------------------------------------------------------------------ the run's start and end
    def __enter__(self) -> Terminal:
        # this run's clock, inherited by the processes it starts; a parent's (a campaign running its runs one after
        # another) is not this run's start
        os.environ[START_ENV] = f"{time.time():.3f}"
        if not self.enabled:
            release_early()
            return self
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab", buffering=0)
        stamp = datetime.datetime.now().isoformat(timespec="seconds")
        self._log.write(f"\n===== {stamp} {' '.join(sys.argv)}\n".encode())
        release_early(self._log)
        self._saved = (os.dup(1), os.dup(2))
        self._tty = os.fdopen(os.dup(self._saved[0]), "w", buffering=1)
        self._tty_err = os.fdopen(os.dup(self._saved[1]), "w", buffering=1)
        self.show(f"{PREFIX} full log: {self.log_path}")
        read_fd, write_fd = os.pipe()
        os.dup2(write_fd, 1)
        os.dup2(write_fd, 2)
        os.close(write_fd)
        self._read_fd = read_fd
        self._piped = True
        for stream in (sys.stdout, sys.stderr):
            if hasattr(stream, "reconfigure"):
                stream.reconfigure(line_buffering=True)  # each line reaches the relay as it is printed
        self._relay = threading.Thread(target=self._run_relay, name="verl_ext-terminal", daemon=True)
        self._relay.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if not self.enabled:
            return False
        if exc is not None and not isinstance(exc, SystemExit):
            traceback.print_exception(exc_type, exc, tb)  # into the log, whole
        self._restore()
        if exc is None or isinstance(exc, SystemExit):
            return False
        if isinstance(exc, KeyboardInterrupt):
            self.error(f"{PREFIX} interrupted: the run stopped (checkpoints saved so far are kept)")
            self.error(f"{PREFIX} full log: {self.log_path}")
            raise SystemExit(130) from None
        self.error(f"{PREFIX} run failed: {failure_cause(exc)}")
        self.error(f"{PREFIX} full log: {self.log_path}")
        raise SystemExit(1) from None

    def show(self, text: str) -> None:
        """Lines for the user: to the terminal, and to the log, after every line the run printed before them."""
        self._say(text, self._tty, sys.stdout)

    def error(self, text: str) -> None:
        """`show`, on the terminal's stderr: why the run stopped."""
        self._say(text, self._tty_err, sys.stderr)

    def _say(self, text: str, tty, plain) -> None:
        if not self.enabled:
            print(text, file=plain, flush=True)
            return
        self._sync()
        with self._lock:
            tty.write(text + "\n")
            tty.flush()
            self._log.write((text + "\n").encode())

    # ------------------------------------------------------------------ the relay
    def _sync(self, timeout: float = 2.0) -> None:
        """Wait until the relay has passed on everything written to the pipe so far (a marker line through it)."""
        if not self._piped or not self._relay.is_alive():
            return
        _flush()
        self._synced.clear()
        os.write(1, _SYNC + b"\n")
        self._synced.wait(timeout)

    def _run_relay(self) -> None:
        pending = b""
        while True:
            try:
                chunk = os.read(self._read_fd, 65536)
            except OSError:
                return
            if not chunk:
                with self._lock:
                    self._log.write(pending)
                return
            try:
                pending += chunk
                *lines, pending = re.split(rb"(?<=\n)|(?<=\r)(?!\n)", pending)
                for raw in lines:
                    if raw.rstrip(b"\r\n") == _SYNC:
                        self._synced.set()
                        continue
                    with self._lock:
                        self._log.write(raw)
                    line = user_line(raw.decode("utf-8", "replace"))
                    if line is not None:
                        with self._lock:
                            self._tty.write(line + "\n")
                            self._tty.flush()
            except Exception:  # noqa: BLE001 -- the relay must keep draining the pipe whatever a line holds
                pending = b""

    def _restore(self) -> None:
        """Give the driver its terminal back; the relay drains what the run's processes still write (to the log)."""
        _flush()
        self._sync()
        self._piped = False
        out, err = self._saved
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.close(out)
        os.close(err)
        # Ray's processes that outlive the driver (none should) keep the pipe open: wait briefly for the last lines
        self._relay.join(timeout=1.0)
