"""The fork server: one small single-threaded Python process per agent-loop worker that imports the agent's
libraries once and forks one child per episode (`external_agent.launch=fork`, docs/AGENT.md "How episodes are
launched"). Standard library only, and never imported by the server process itself: `fork_launch` starts it from a
clean interpreter, the agent command's own `python`, as

    <python> -c BOOT <this file> <control fd> <plan as JSON>

(`BOOT` compiles this file and runs it as `__verl_ext_forkserver__`, so nothing of verl_ext is imported into the
server and this file's directory is not on `sys.path`). The worker side imports this module for `top_level_imports`,
`SESSION_VARS` and the frame format only.

What is preloaded: the modules the agent's script (`python path/agent.py`) or module (`python -m pkg.mod`) imports
in its top-level statements (`import x`, `from x import y`, also inside a top-level `try:`; `from x import y` also
imports the submodule `x.y` when `y` is one), with `sys.path[0]` set as `python` sets it for that command (the
script's directory; the working directory for `-m`). Left out, because they are the agent's own code and run fresh
in every episode: modules found in that `sys.path[0]` directory (the script's siblings, or the working directory's
packages under `-m`) and the `-m` module's own top-level package. Nothing of the agent's own code runs in the
server: the script itself runs per episode, in the child, as `runpy.run_path(script, run_name="__main__")`
(`runpy.run_module(mod, run_name="__main__", alter_sys=True)` for `-m`). An import that fails is skipped (the
episode imports it itself and fails as the process would).

The preload is refused (the worker falls back to process mode) when it left a thread running (forking a process with
threads can deadlock its children; a native thread pool that stops itself when the process forks, as OpenBLAS's
does, is fine: the server forks once to let it stop and counts again) or when an imported module read one of the
episode's session variables (`SESSION_VARS`) while being imported: the server has none of them, and the module would
keep the server's value instead of the episode's.

Per episode, the child: `os.setsid()` (its own session and process group, which is killed when the episode ends),
stdin and stdout on /dev/null, stderr into a pipe whose last 2 kB come back with the exit code, `os.environ`
replaced wholesale with the episode's environment, the worker's working directory, `sys.argv` as the command's,
numpy's global generator reseeded (Python's `random` reseeds itself on fork), then the script; at its end it does
what the interpreter's exit does (`SystemExit` codes, a traceback and 1 for an uncaught exception, non-daemon
threads joined, `atexit` handlers run, streams flushed) and leaves with `os._exit`. Module globals and environment
changes die with the child: every episode is a fresh fork of the preloaded server.

Protocol (one Unix socket, frames of a 4-byte big-endian length + UTF-8 JSON):
    server -> worker  {"op": "hello", "pid", "preloaded": [...], "local": [...], "failed": {name: error},
                       "threads": [...], "session_env_reads": [...], "seconds"}     once, after the preload
    worker -> server  {"op": "run", "id", "env": {...}, "cwd"}       fork an episode
    server -> worker  {"op": "started", "id", "pid"}                 its process group id is pid
    worker -> server  {"op": "kill", "id"}                           SIGKILL its process group (timeout, cancel)
    server -> worker  {"op": "exit", "id", "code", "stderr"}         code as asyncio's returncode (-N: signal N)
    server -> worker  {"op": "failed", "id", "error"}                the fork itself failed
When the child exits, the server kills what is left of its process group (SIGKILL) before reporting, so nothing an
episode started outlives it (a process that made itself a new session escapes, as in process mode). When the
worker's end of the socket closes (the worker died or closed it), or on SIGTERM, the server kills every running
episode's group and exits.
"""

from __future__ import annotations

import ast
import atexit
import gc
import importlib
import importlib.machinery
import json
import os
import runpy
import selectors
import signal
import socket
import struct
import sys
import threading
import time
import traceback

# the variables that differ per episode (verl_ext.agent.agent_process.agent_env sets them); the server starts without
# them and refuses a preload that read one
SESSION_VARS = (
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_API_KEY",
    "AGENT_SCORE_URL",
    "AGENT_EPISODE_ID",
    "AGENT_TASK",
)
HEADER = struct.Struct(">I")
STDERR_TAIL = 2048  # bytes of an episode's stderr that come back, as in process mode
STDERR_GRACE_S = 1.0  # after the child's group is killed, how long its stderr may take to reach EOF
BOOT = (
    "import sys; p = sys.argv.pop(1); "
    "exec(compile(open(p, encoding='utf-8').read(), p, 'exec'), {'__name__': '__verl_ext_forkserver__'})"
)


def frame(msg: dict) -> bytes:
    data = json.dumps(msg).encode()
    return HEADER.pack(len(data)) + data


def top_level_imports(source: str, filename: str = "<agent>") -> list[str]:
    """The absolute module names a program imports in its top-level statements (and a top-level `try:` body), in
    order, without duplicates: `import a.b` -> a.b; `from a import b` -> a, a.b (a.b is imported when it is a
    submodule). Relative and `__future__` imports are left out. SyntaxError if the source does not parse."""
    names: list[str] = []

    def visit(body) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                names.extend(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module != "__future__":
                names.append(node.module)
                names.extend(f"{node.module}.{a.name}" for a in node.names if a.name != "*")
            elif isinstance(node, ast.Try):
                visit(node.body)

    visit(ast.parse(source, filename).body)
    return list(dict.fromkeys(names))


def find_source(module: str) -> str | None:
    """The file `python -m module` runs (a package's `__main__`), found without importing anything."""
    parts = module.split(".")
    spec = None
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        spec = find(parts[0], None) if find else None
        if spec is not None:
            break
    for i in range(1, len(parts)):
        if spec is None or not spec.submodule_search_locations:
            return None
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]), list(spec.submodule_search_locations))
    if spec is not None and spec.submodule_search_locations:
        spec = importlib.machinery.PathFinder.find_spec(f"{module}.__main__", list(spec.submodule_search_locations))
    origin = getattr(spec, "origin", None)
    return origin if origin and os.path.isfile(origin) else None


class _RecordingEnviron(os._Environ):
    """os.environ during the preload: the same variables, recording lookups of the session variables."""

    reads: set[str]

    def __getitem__(self, key):
        if key in SESSION_VARS:
            self.reads.add(key)
        return super().__getitem__(key)


def main_path(plan: dict) -> str:
    """`sys.path[0]` as `python` sets it for the command: the script's directory, or the working directory for -m."""
    return os.path.dirname(os.path.realpath(plan["target"])) if plan["kind"] == "script" else os.getcwd()


def preload(plan: dict) -> dict:
    """Import the agent's top-level imports (module docstring); the hello message's fields."""
    t0 = time.monotonic()
    kind, target = plan["kind"], plan["target"]
    local_dir = main_path(plan)
    source_file = target if kind == "script" else find_source(target)
    own_package = target.partition(".")[0] if kind == "module" else None
    names: list[str] = []
    failed: dict[str, str] = {}
    if source_file is None:
        failed[target] = "source not found"
    else:
        try:
            with open(source_file, encoding="utf-8") as f:
                names = top_level_imports(f.read(), source_file)
        except (OSError, SyntaxError, ValueError) as e:
            failed[target] = f"{type(e).__name__}: {e}"
    real_environ = os.environ
    recording = _RecordingEnviron(
        real_environ._data,
        real_environ.encodekey,
        real_environ.decodekey,
        real_environ.encodevalue,
        real_environ.decodevalue,
    )
    recording.reads = set()
    preloaded, local = [], []
    os.environ = recording  # noqa: B003 - the same variables, only watched (restored below)
    try:
        for name in names:
            top = name.partition(".")[0]
            parent, _, leaf = name.rpartition(".")
            if top == own_package or (
                top not in sys.builtin_module_names
                and importlib.machinery.PathFinder.find_spec(top, [local_dir]) is not None
            ):
                if parent not in local:  # `from own import name`: `own` stands for both
                    local.append(name)
                continue
            if parent and parent in names and parent in sys.modules and hasattr(sys.modules[parent], leaf):
                continue  # `from a import b` where b is an attribute of a (or a submodule a imported itself)
            try:
                importlib.import_module(name)
                preloaded.append(name)
            except ImportError as e:
                if not (parent and parent in names):  # not `from a import b` with b an attribute: a real failure
                    failed[name] = f"{type(e).__name__}: {e}"
            except Exception as e:  # an import that fails here fails in the episode too, as in process mode
                failed[name] = f"{type(e).__name__}: {e}"
    finally:
        os.environ = real_environ  # noqa: B003 - the real mapping back
    return {
        "preloaded": preloaded,
        "local": local,
        "failed": failed,
        "threads": _threads(),
        "session_env_reads": sorted(recording.reads),
        "seconds": round(time.monotonic() - t0, 3),
    }


def _threads() -> list[str]:
    """The threads other than the main one: Python's, and on Linux any a C extension started."""
    names = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    try:
        n_os = len(os.listdir("/proc/self/task"))
    except OSError:
        return names
    return names + ["<native thread>"] * max(0, n_os - 1 - len(names))


def exit_code(code) -> int:
    """The process exit status of `SystemExit(code)`, as the interpreter computes it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        print(code, file=sys.stderr)
    except Exception:
        pass
    return 1


def run_episode_child(plan: dict, env: dict, cwd: str, stderr_fd: int, close_fds: list[int]) -> None:
    """In the forked child: become the episode's process (module docstring) and run the agent; never returns."""
    code = 1
    try:
        os.setsid()  # first: everything it starts is in its group
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        for fd in close_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        os.dup2(stderr_fd, 2)
        os.close(devnull)
        os.close(stderr_fd)
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        if "numpy.random" in sys.modules:  # its global generator was seeded once, in the server
            sys.modules["numpy.random"].seed()
        sys.argv = [plan["target"], *plan["args"]]
        interrupted = False
        try:
            if plan["kind"] == "script":
                runpy.run_path(plan["target"], run_name="__main__")
            else:
                runpy.run_module(plan["target"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            code = exit_code(e.code)
        except KeyboardInterrupt:
            traceback.print_exc()
            interrupted = True
        except BaseException:
            traceback.print_exc()
            code = 1
        try:
            threading._shutdown()  # join non-daemon threads, as the interpreter's exit does
        except BaseException:
            traceback.print_exc()
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        if interrupted:  # the interpreter ends an uncaught KeyboardInterrupt by SIGINT
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
    finally:
        os._exit(code)


class _Child:
    __slots__ = ("rid", "pid", "fd", "tail", "eof", "code", "exited_at")

    def __init__(self, rid, pid: int, fd: int):
        self.rid, self.pid, self.fd = rid, pid, fd
        self.tail = bytearray()
        self.eof = False
        self.code: int | None = None
        self.exited_at: float | None = None


def _kill_group(pid: int) -> None:
    for kill in (os.killpg, os.kill):  # the group; the child itself, in case it has not reached setsid yet
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class Server:
    """The server's loop: control frames, the children's stderr pipes, and SIGCHLD (through the wakeup fd)."""

    def __init__(self, ctl: socket.socket, plan: dict):
        self.ctl, self.plan = ctl, plan
        self.sel = selectors.DefaultSelector()
        self.buf = bytearray()
        self.children: dict[int, _Child] = {}  # pid -> child, until its exit is reported
        self.by_id: dict[object, _Child] = {}
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a Python handler, so the wakeup fd is written
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        self.sel.register(ctl, selectors.EVENT_READ, "ctl")
        self.sel.register(self.wake_r, selectors.EVENT_READ, "wake")

    def serve(self) -> None:
        try:
            while self._step():
                pass
        finally:
            for child in list(self.children.values()):
                if child.code is None:
                    _kill_group(child.pid)
            for child in list(self.children.values()):
                if child.code is None:
                    try:
                        os.waitpid(child.pid, 0)
                    except ChildProcessError:
                        pass
                    _kill_group(child.pid)

    def _step(self) -> bool:
        now = time.monotonic()
        waits = [c.exited_at + STDERR_GRACE_S - now for c in self.children.values() if c.exited_at is not None]
        timeout = max(0.0, min([1.0, *waits]))
        for key, _ in self.sel.select(timeout):
            if key.data == "ctl":
                if not self._read_control():
                    return False
            elif key.data == "wake":
                try:
                    while os.read(self.wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
            else:
                self._read_stderr(key.data)
        self._reap()
        self._report()
        return True

    def _read_control(self) -> bool:
        data = self.ctl.recv(1 << 16)
        if not data:  # the worker is gone
            return False
        self.buf += data
        while len(self.buf) >= HEADER.size:
            (n,) = HEADER.unpack_from(self.buf)
            if len(self.buf) < HEADER.size + n:
                break
            msg = json.loads(self.buf[HEADER.size : HEADER.size + n])
            del self.buf[: HEADER.size + n]
            if msg["op"] == "run":
                self._spawn(msg)
            elif msg["op"] == "kill":
                child = self.by_id.get(msg["id"])
                if child is not None and child.code is None:
                    _kill_group(child.pid)
        return True

    def _spawn(self, msg: dict) -> None:
        rid = msg["id"]
        try:
            r, w = os.pipe()
        except OSError as e:
            self.ctl.sendall(frame({"op": "failed", "id": rid, "error": f"pipe: {e}"}))
            return
        close = [self.ctl.fileno(), self.wake_r, self.wake_w, r, *(c.fd for c in self.children.values() if not c.eof)]
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        try:
            pid = os.fork()
        except OSError as e:
            os.close(r)
            os.close(w)
            self.ctl.sendall(frame({"op": "failed", "id": rid, "error": f"fork: {e}"}))
            return
        if pid == 0:
            self.sel.close()
            run_episode_child(self.plan, msg["env"], msg["cwd"], w, close)
        os.close(w)
        os.set_blocking(r, False)
        child = _Child(rid, pid, r)
        self.children[pid] = self.by_id[rid] = child
        self.sel.register(r, selectors.EVENT_READ, child)
        self.ctl.sendall(frame({"op": "started", "id": rid, "pid": pid}))

    def _read_stderr(self, child: _Child) -> None:
        try:
            data = os.read(child.fd, 1 << 16)
        except BlockingIOError:
            return
        if data:
            child.tail += data
            del child.tail[: -2 * STDERR_TAIL]
        else:
            self._close_stderr(child)

    def _close_stderr(self, child: _Child) -> None:
        if not child.eof:
            self.sel.unregister(child.fd)
            os.close(child.fd)
            child.eof = True

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = self.children.get(pid)
            if child is None:
                continue
            _kill_group(pid)  # whatever the episode left running in its group
            child.code = os.waitstatus_to_exitcode(status)
            child.exited_at = time.monotonic()

    def _report(self) -> None:
        now = time.monotonic()
        for child in list(self.children.values()):
            if child.code is None or not (child.eof or now - child.exited_at >= STDERR_GRACE_S):
                continue
            if not child.eof:  # something outside its group holds the pipe: report what came
                self._read_stderr(child)
                self._close_stderr(child)
            del self.children[child.pid]
            del self.by_id[child.rid]
            err = bytes(child.tail).decode(errors="replace")[-STDERR_TAIL:]
            self.ctl.sendall(frame({"op": "exit", "id": child.rid, "code": child.code, "stderr": err}))


def main(argv: list[str]) -> None:
    ctl = socket.socket(fileno=int(argv[0]))
    plan = json.loads(argv[1])
    if not getattr(sys.flags, "safe_path", False):  # `-c` put "" there; with PYTHONSAFEPATH neither puts anything
        sys.path[0] = main_path(plan)
    hello = preload(plan)
    if hello["threads"]:  # a pool that stops itself for a fork (OpenBLAS's pthread_atfork handler) is gone after one
        trial = os.fork()
        if trial == 0:
            os._exit(0)
        os.waitpid(trial, 0)
        hello["threads"] = _threads()
    gc.freeze()  # the preloaded objects stay out of the children's collections: fewer copied pages
    ctl.sendall(frame({"op": "hello", "pid": os.getpid(), **hello}))
    Server(ctl, plan).serve()


if __name__ == "__verl_ext_forkserver__":
    main(sys.argv[1:])
