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
byte of the pipe to the log and the user lines to the terminal. A run that fails shows where and why it failed and
where a resume starts (failure.py), and the log's path, not the tracebacks of every worker (they are in the log).
Ctrl-C stops the run: the driver's KeyboardInterrupt shuts Ray down (verl_ext/trainer/launch.py) and the terminal
says so, with the log's path.

Since every process of the run writes into that pipe, a relay that stops draining it would block them all once its
64 KiB are full. So (docs/FAULTS.md):
- the relay cuts lines chunk by chunk (lines.py): a line of any length costs time linear in its size and at most
  64 KiB of memory, and goes to the log as it arrives;
- the log gets every byte first; the terminal is written by a thread of its own from a bounded queue (`_Screen`), so
  a terminal that blocks or is gone costs terminal lines, never log lines or the run;
- each line is passed on by itself: whatever one line or one write does, the relay goes on with the next;
- a watchdog notices a relay that ended while the run goes on (its end of the pipe unreadable): fds 1 and 2 then
  point at the log itself and a plain drain copies into the log what the processes started before still write.

What the driver prints before the run's directory is known (the imports' warnings, Hydra's composition, the
pre-flight's model build) is held from the driver's first line (`capture_early`) in files on disk (`early_dir()`),
moved to the head of the log when the run's Terminal opens; a driver killed before leaves them there.

`VERL_EXT_VERBOSE=1` turns it off: everything goes to the terminal, as verl prints it, and no log file is written.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import os
import queue
import re
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from verl_ext.metrics_log.failure import (
    FAILED,
    failed_line,
    failure_cause,
    is_resume_line,
    resume_line,
    step_of,
    where_after,
)
from verl_ext.metrics_log.lines import LineSplitter

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


EARLY_SUBDIR = "early"  # under the project's cache (VERL_EXT_CACHE, default ~/.cache/verl_ext)
_early: dict = {}  # the early capture while it lasts: {"held": (file for fd 1, file for fd 2), "saved": (fd 1, fd 2)}


def early_dir() -> Path:
    """Where a driver's output before its run's directory is known waits: `<VERL_EXT_CACHE>/early/`, one pair of
    files per driver, `<time>-pid<pid>.stdout` and `.stderr`, deleted when the run's log takes them in (or the
    driver ends). A driver killed before (SIGKILL: the OOM killer) leaves them there."""
    cache = os.environ.get("VERL_EXT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "verl_ext")
    return Path(cache) / EARLY_SUBDIR


def _early_files() -> tuple:
    """The early capture's two files, named in `early_dir()`; unnamed temporary files if that cannot be written."""
    stem = f"{time.strftime('%Y%m%d-%H%M%S')}-pid{os.getpid()}"
    try:
        folder = early_dir()
        folder.mkdir(parents=True, exist_ok=True)
        return tuple(open(folder / f"{stem}.{name}", "w+b", buffering=0) for name in ("stdout", "stderr"))
    except OSError:
        return (tempfile.TemporaryFile(), tempfile.TemporaryFile())


def capture_early() -> None:
    """A driver's first call, before its heavy imports: until the run's Terminal opens, fds 1 and 2 go to files on
    disk (`early_dir()`), which the Terminal writes at the head of the run's log, or (a driver that ends before,
    e.g. `--help`, a Hydra error or a subcommand that runs no Terminal, or a verbose or check-only run) back onto
    the terminal, each to the stream it was written to; then deleted. Python's stdout is line-buffered meanwhile, so
    that a driver killed before then (SIGKILL) leaves every line it printed in those files. Nothing under
    VERL_EXT_VERBOSE=1."""
    if verbose() or _early:
        return
    _flush()
    held = _early_files()
    _early.update(held=held, saved=(os.dup(1), os.dup(2)))
    os.dup2(held[0].fileno(), 1)
    os.dup2(held[1].fileno(), 2)
    _line_buffered()
    atexit.register(release_early)


def release_early(log=None) -> None:
    """End the early capture (if any): fds 1 and 2 back, and what it held into `log` (a binary file), else onto the
    terminal's stdout and stderr as written; its files deleted."""
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
        if log is not None:
            log.write(data)
        elif data:
            _write_all(fd, data)
        f.close()
        if isinstance(f.name, str):  # a named file (a temporary one's name is its fd)
            with contextlib.suppress(OSError):
                os.unlink(f.name)


def _line_buffered() -> None:
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            with contextlib.suppress(OSError, ValueError):
                stream.reconfigure(line_buffering=True)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


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


class _Screen:
    """The user's terminal, written by a thread of its own from a bounded queue: a terminal that blocks (a stopped
    pager, a consumer that stopped reading, Ctrl-S) or is gone (closed window, broken pipe) never holds up the relay,
    which keeps writing the log and draining the run's pipe. A line that finds the queue full is dropped from the
    terminal (counted in `dropped`; it is in the log); after a failed write (`broken` says why) nothing more is
    written to it."""

    def __init__(self, out_fd: int, err_fd: int, limit: int = 10_000):
        self._fds = (out_fd, err_fd)
        self._queue: queue.Queue = queue.Queue(maxsize=limit)
        self.dropped = 0
        self.broken: str | None = None
        threading.Thread(target=self._run, name="verl_ext-screen", daemon=True).start()

    def put(self, text: str, err: bool = False) -> None:
        try:
            self._queue.put_nowait((self._fds[err], (text + "\n").encode("utf-8", "replace")))
        except queue.Full:
            self.dropped += 1

    def drain(self, timeout: float) -> bool:
        """Wait (at most `timeout` s) until every line put so far is written; False if it was not."""
        done = threading.Event()
        try:
            self._queue.put(done, timeout=timeout)
        except queue.Full:
            return False
        return done.wait(timeout)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if isinstance(item, threading.Event):
                item.set()
            elif self.broken is None:
                try:
                    _write_all(*item)
                except OSError as e:
                    self.broken = f"{type(e).__name__}: {e}"
            else:
                self.dropped += 1


class Terminal:
    """The driver's terminal for one run (module docstring). Use as a context manager around the whole run; `show`
    writes to the terminal (and the log). Disabled (`enabled=False`, or VERL_EXT_VERBOSE=1), it only prints.

    A run that fails says so on stderr (failure.py): at which step, why, where a resume starts (with `resume_mode`,
    the run's `trainer.resume_mode`; the checkpoints are looked up in `run_dir`), and the log's path; the trainer's
    own such lines, when they came through, are not repeated."""

    def __init__(
        self, run_dir: str | Path, enabled: bool = True, resume_mode: str | None = None, resume_from_path=None
    ):
        self.run_dir = Path(run_dir)
        self.log_path = self.run_dir / LOG_NAME
        self.enabled = enabled and not verbose()
        self.resume_mode = resume_mode
        self.resume_from_path = resume_from_path
        self._screen: _Screen | None = None
        self._log = None
        self._saved: tuple[int, int] | None = None
        self._relay: threading.Thread | None = None
        self._read_fd: int | None = None  # the relay's end of the pipe
        self._spare_fd: int | None = None  # another fd on it, for the fallback drain if the relay is gone
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._piped = False  # fds 1 and 2 point into the relay's pipe
        self._closing = False  # the run is over: what still arrives goes to the log only
        self.relay_stopped: str | None = None  # why the relay stopped before the run's end (the fallback took over)
        self.last_step: tuple[int, int] | None = None  # the last step line passed on: (step, total)
        self._shown_failure = False  # the trainer's failure lines came through (failure.py)
        self._shown_resume = False

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
        self._screen = _Screen(os.dup(self._saved[0]), os.dup(self._saved[1]))
        self.show(f"{PREFIX} full log: {self.log_path}")
        read_fd, write_fd = os.pipe()
        self._spare_fd = os.dup(read_fd)
        os.dup2(write_fd, 1)
        os.dup2(write_fd, 2)
        os.close(write_fd)
        self._read_fd = read_fd
        self._piped = True
        _line_buffered()  # each line reaches the relay as it is printed
        self._relay = threading.Thread(target=self._run_relay, name="verl_ext-terminal", daemon=True)
        self._relay.start()
        threading.Thread(target=self._watch, name="verl_ext-terminal-watchdog", daemon=True).start()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if not self.enabled:
            return False
        if exc is not None and not isinstance(exc, SystemExit):
            traceback.print_exception(exc_type, exc, tb)  # into the log, whole
        self._restore()
        self._closing = True
        try:
            if exc is None or isinstance(exc, SystemExit):
                return False
            if isinstance(exc, KeyboardInterrupt):
                self.error(f"{PREFIX} interrupted: the run stopped (checkpoints saved so far are kept)")
                self.error(f"{PREFIX} full log: {self.log_path}")
                raise SystemExit(130) from None
            for line in self.failure_report(exc):
                self.error(line)
            raise SystemExit(1) from None
        finally:
            self._screen.drain(timeout=5.0)

    def failure_report(self, exc: BaseException) -> list[str]:
        """The lines that end a failed run on the terminal: the failure and the resume point (unless the trainer's
        came through the relay already), then the log's path."""
        lines = []
        if not self._shown_failure:
            lines.append(failed_line(failure_cause(exc), where_after(self.last_step)))
        if self.resume_mode and not self._shown_resume:
            lines.append(resume_line(self.resume_mode, self.run_dir, self.resume_from_path))
        return [*lines, f"{PREFIX} full log: {self.log_path}"]

    def show(self, text: str) -> None:
        """Lines for the user: to the terminal, and to the log, after every line the run printed before them."""
        self._say(text, err=False)

    def error(self, text: str) -> None:
        """`show`, on the terminal's stderr: why the run stopped."""
        self._say(text, err=True)

    def _say(self, text: str, err: bool) -> None:
        if not self.enabled:
            print(text, file=sys.stderr if err else sys.stdout, flush=True)
            return
        self._sync()
        with self._lock:
            for line in text.split("\n"):
                self._screen.put(line, err)
            self._write_log((text + "\n").encode())

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
        """Every byte of the pipe to the log, the user lines to the terminal. Nothing a line holds or a write does
        stops it: each piece is passed on by itself (`_pass_on`), and a piece whose passing failed is still logged.
        It ends at the pipe's end, or when its end of the pipe cannot be read (the watchdog then drains the pipe)."""
        pieces = LineSplitter()
        while True:
            try:
                chunk = os.read(self._read_fd, 65536)
            except OSError as e:
                self.relay_stopped = f"the pipe could not be read: {type(e).__name__}: {e}"
                return
            if not chunk:
                self._write_log(pieces.rest())
                return
            for piece, whole in pieces.feed(chunk):
                try:
                    self._pass_on(piece, whole)
                except Exception:  # noqa: BLE001 -- the relay must keep draining the pipe whatever a line holds
                    continue

    def _pass_on(self, piece: bytes, whole: bool) -> None:
        if piece.endswith(_SYNC + b"\n"):  # show's marker (maybe after another process's unfinished line)
            piece = piece[: -len(_SYNC) - 1]
            self._synced.set()
            if not piece:
                return
            whole = False
        with self._lock:
            self._write_log(piece)
        if not whole or self._closing:
            return
        line = user_line(piece.decode("utf-8", "replace"))
        if line is None:
            return
        self.last_step = step_of(line) or self.last_step
        self._shown_failure = self._shown_failure or line.startswith(FAILED)
        self._shown_resume = self._shown_resume or is_resume_line(line)
        with self._lock:
            self._screen.put(line)

    def _write_log(self, data: bytes) -> None:
        """Into the log; a failed write (a full disk) loses that piece only."""
        try:
            _write_all(self._log.fileno(), data)
        except (OSError, ValueError):
            pass

    # ------------------------------------------------------------------ a relay that stopped
    def _watch(self, every: float = 0.2) -> None:
        """If the relay ends while the run still writes into the pipe, nothing would drain it: every process of the
        run would block on its next write once the pipe's buffer (64 KiB) is full. Then fds 1 and 2 are pointed at
        the log itself (the driver's writes, and those of the processes it starts from then on, go there directly)
        and a plain drain copies what the processes already started write into the pipe to the log."""
        while not self._stop.wait(every):
            if self._relay.is_alive():
                continue
            self._take_over()
            return

    def _take_over(self) -> None:
        with self._lock:
            if not self._piped:  # the run ended meanwhile (`_restore`)
                return
            _flush()
            os.dup2(self._log.fileno(), 1)
            os.dup2(self._log.fileno(), 2)
            self._piped = False
        threading.Thread(target=self._drain_to_log, name="verl_ext-terminal-drain", daemon=True).start()
        why = self.relay_stopped or "it ended"
        self.error(f"{PREFIX} the terminal's relay stopped ({why}): the run's output goes to its log only")

    def _drain_to_log(self) -> None:
        while True:
            try:
                chunk = os.read(self._spare_fd, 65536)
            except InterruptedError:
                continue
            except OSError:
                return
            if not chunk:
                return
            with self._lock:
                self._write_log(chunk)

    def _restore(self) -> None:
        """Give the driver its terminal back; the relay drains what the run's processes still write (to the log)."""
        _flush()
        self._sync()
        self._stop.set()
        with self._lock:
            self._piped = False
            out, err = self._saved
            os.dup2(out, 1)
            os.dup2(err, 2)
            os.close(out)
            os.close(err)
        # Ray's processes that outlive the driver (none should) keep the pipe open: wait briefly for the last lines
        self._relay.join(timeout=1.0)
