"""A bounded pool of math_verify child processes with a hard per-call time limit.

Why processes: math_verify's own timeout uses ``signal.alarm``, which only works in the main thread. verl calls
reward functions from executor threads (``loop.run_in_executor`` in the reward loop), where math_verify with a
timeout refuses to run (it logs and returns False) and without one can hang forever: sympy can be asked for
``9^{9^{9^9}}`` or ``(10^7)!``. A thread cannot be stopped from outside; a process can. So every symbolic check
runs in a child; the caller waits at most ``timeout_s`` and, on overrun, kills the child (SIGKILL, which also ends
C-level big-integer loops) and puts a warm standby child in its place, so the next call does not wait for a
restart; a new standby then starts in the background.

Thread-safe: any number of threads may call ``verify``; at most ``size`` children verify at once, a caller waits
for a free one. Start-up (importing and warming sympy, ~1-3 s) is never charged to a call's time limit: a child
is handed out only after it reported ready. The limit bounds a call's verification, not its wait for a free
child: with ``size`` busy children, or two kills within one restart (~2 s), a call queues first.
Memory: about 65 MB per child (``size`` + 1 standby).
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

_WORKER_SCRIPT = str(Path(__file__).with_name("_verify_worker.py"))
_STARTUP_TIMEOUT_S = 120.0  # import of sympy/math_verify on a loaded 2-core machine


class VerifyTimeout(Exception):
    """The child did not answer within the time limit (it has been killed)."""


class _Child:
    """One worker process and its line protocol."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, _WORKER_SCRIPT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )
        self._buf = b""
        if self._read_line(_STARTUP_TIMEOUT_S) != "ready":
            self.kill()
            raise RuntimeError("math_verify worker failed to start (is math-verify installed for this python?)")

    def _read_line(self, timeout_s: float) -> str | None:
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:  # the child died
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode()

    def ask(self, gold: str, pred: str, timeout_s: float, raw: bool = False) -> str | None:
        """Reply line ('1', '0', 'e'), or None when no reply came within ``timeout_s``."""
        inner_limit = max(1, int(timeout_s) + 1)  # the child's own alarm, only for an orphaned child
        try:
            self.proc.stdin.write((json.dumps([gold, pred, inner_limit, raw]) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return None
        return self._read_line(timeout_s)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


class VerifyPool:
    """``verify(gold, pred) -> bool`` through up to ``size`` child processes, each call limited to ``timeout_s``."""

    def __init__(self, size: int = 1, timeout_s: float = 3.0, standby: bool = True) -> None:
        if size < 1:
            raise ValueError(f"VerifyPool size must be >= 1, got {size}")
        if not timeout_s > 0:
            raise ValueError(f"VerifyPool timeout_s must be > 0, got {timeout_s}")
        self.size = size
        self.timeout_s = float(timeout_s)
        self._use_standby = standby
        self._idle: queue.Queue[_Child] = queue.Queue()
        self._standby: list[_Child] = []
        self._lock = threading.Lock()
        self._slots = 0  # verification slots opened so far (<= size); a killed child's slot stays open
        self._deficit = 0  # open slots whose child was killed and not yet replaced
        self._starting = 0  # children starting in the background
        self._closed = False
        self._start_failed = False  # a background start failed: stop retrying, fail callers instead of hanging
        self.kills = 0  # children killed for overrunning; read by tests and the benchmark

    def _deliver(self, child: _Child | None) -> None:
        """A background start finished: fill a killed slot first, else keep it as the standby."""
        with self._lock:
            self._starting -= 1
            if child is None:
                self._start_failed = True
                return
            if self._closed:
                child.kill()
            elif self._deficit > 0:
                self._deficit -= 1
                self._idle.put(child)
            else:
                self._standby.append(child)
        self._top_up()

    def _top_up(self) -> None:
        """Start enough background children to fill killed slots and keep one standby."""
        with self._lock:
            if self._closed or self._start_failed:
                return
            wanted = self._deficit + (1 if self._use_standby and not self._standby else 0)
            to_start = max(0, wanted - self._starting)
            self._starting += to_start
        for _ in range(to_start):
            threading.Thread(target=lambda: self._deliver(_try_start()), daemon=True).start()

    def _acquire(self) -> _Child:
        with self._lock:
            if self._closed:
                raise RuntimeError("VerifyPool is closed")
            open_slot = self._idle.empty() and self._slots < self.size
            if open_slot:
                self._slots += 1
        if open_slot:
            try:
                self._idle.put(_Child())  # the caller waits for start-up, but it is not part of its time limit
            except Exception:
                with self._lock:
                    self._slots -= 1
                raise
            self._top_up()
        while True:
            try:
                return self._idle.get(timeout=1.0)
            except queue.Empty:
                if self._start_failed and self._deficit >= self._slots:
                    raise RuntimeError("math_verify worker failed to restart; no worker left") from None

    def verify(self, gold: str, pred: str, raw: bool = False) -> bool:
        """True when math_verify says ``pred`` equals ``gold``. Raises VerifyTimeout after ``timeout_s``.

        ``pred`` is an answer content (wrapped in ``\\boxed{}`` by the child), or with ``raw`` a piece of response
        text that math_verify extracts the answer from itself."""
        child = self._acquire()
        reply = child.ask(gold, pred, self.timeout_s, raw)
        if reply is None:
            child.kill()
            with self._lock:
                self.kills += 1
                if self._standby:
                    self._idle.put(self._standby.pop())  # a warm child takes the slot at once
                else:
                    self._deficit += 1
            self._top_up()
            raise VerifyTimeout(f"math_verify took longer than {self.timeout_s} s")
        self._idle.put(child)
        return reply == "1"

    def close(self) -> None:
        with self._lock:
            self._closed = True
            standby, self._standby = self._standby, []
        for child in standby:
            child.kill()
        while True:
            try:
                self._idle.get_nowait().kill()
            except queue.Empty:
                break


def _try_start() -> _Child | None:
    try:
        return _Child()
    except Exception:
        return None


_shared: dict[tuple[int, float], VerifyPool] = {}
_shared_lock = threading.Lock()


def shared_pool(size: int, timeout_s: float) -> VerifyPool:
    """One pool per (size, timeout) per process, created on first use and closed at exit."""
    key = (size, float(timeout_s))
    with _shared_lock:
        pool = _shared.get(key)
        if pool is None:
            pool = VerifyPool(size=size, timeout_s=timeout_s)
            _shared[key] = pool
            atexit.register(pool.close)
        return pool
