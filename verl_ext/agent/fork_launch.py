"""The worker side of `external_agent.launch=fork` (the default): which commands can be forked (`fork_plan`), one
running fork server (`ForkServer`, the async client of `verl_ext.agent.forkserver`), and per event loop and command
the launcher that starts it on the first episode and restarts it when it died (`ForkLauncher`, `LAUNCHERS`).

Forked: `python path/agent.py args` and `python -m pkg.mod args` (the interpreter named `python`, `python3` or
`python3.X`, nothing between it and the script or `-m`), on Linux. Anything else (a shell script, node, an interpreter
option such as `-u`, another platform) runs as a process per episode, as `launch=process` does, and the reason is
logged once. The server is also given up for process mode, reason logged once, when its preload is unsafe to fork
(a thread left running, a session variable read at import: `verl_ext.agent.forkserver`) or after it died or failed to
start `MAX_SERVER_FAILURES` times; a failed start alone sends just that episode to a process.

When the server dies: an episode it had already started ends as `crashed` (exit code None) with the stderr line
"verl-ext fork server died ...", and its process group is killed from here; an episode it had not started yet is run
on a restarted server; the next episode restarts it in any case.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import os
import re
import signal
import socket
import sys
from dataclasses import asdict, dataclass
from typing import Any

from verl_ext.agent import forkserver

logger = logging.getLogger(__name__)

HELLO_TIMEOUT_S = 300.0  # the server's preload (imports on a loaded 2-core machine: the Agents SDK takes ~2 s idle)
KILL_WAIT_S = 5.0  # after a kill request, how long the server has to report the episode's end
MAX_SERVER_FAILURES = 3  # deaths or failed starts of a launcher's server before it falls back to processes for good
_PYTHON = re.compile(r"python[0-9.]*")


@dataclass(frozen=True)
class ForkPlan:
    """What the server runs per episode: `kind` "script" (`target` a file) or "module" (`target` for `-m`)."""

    python: str
    kind: str
    target: str
    args: tuple[str, ...]


def fork_plan(command: tuple[str, ...], platform: str = sys.platform) -> ForkPlan | str:
    """The plan for `command`, or why it cannot be forked (it then runs as a process per episode)."""
    if not platform.startswith("linux") or not hasattr(os, "fork"):
        return f"the fork server runs on Linux only (platform {platform!r})"
    if not command:
        return "no command"
    exe, *rest = command
    if not _PYTHON.fullmatch(os.path.basename(exe)):
        return f"{exe!r} is not a Python interpreter (python, python3, python3.X)"
    if not rest:
        return "no script or -m module after the interpreter"
    if rest[0] == "-m":
        if len(rest) < 2:
            return "-m without a module"
        return ForkPlan(exe, "module", rest[1], tuple(rest[2:]))
    if rest[0].startswith("-"):
        return f"interpreter option {rest[0]!r}: only `python script.py ...` and `python -m module ...` are forked"
    if not os.path.isfile(rest[0]):
        return f"{rest[0]!r} is not a file"
    return ForkPlan(exe, "script", rest[0], tuple(rest[1:]))


def unsafe_preload(hello: dict[str, Any]) -> str | None:
    """Why a server's preload must not be forked, or None."""
    if hello["threads"]:
        return f"the preload left threads running ({', '.join(hello['threads'])}): a fork copies them half-done"
    if hello["session_env_reads"]:
        return (
            f"a preloaded module read {', '.join(hello['session_env_reads'])} while imported: it would keep the "
            "server's value instead of the episode's"
        )
    return None


class ForkServerError(RuntimeError):
    """The server could not be started or lost."""


class ServerDied(ForkServerError):
    def __init__(self, message: str, started: bool):
        super().__init__(message)
        self.started = started  # the episode had been forked (it was running when the server died)


class _Episode:
    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.pid: int | None = None
        self.done: asyncio.Future = loop.create_future()  # (exit code, stderr)


class _Frames(asyncio.Protocol):
    """The worker's end of the socket: frames in, to `on_message`; `on_lost` once the connection is gone."""

    def __init__(self, on_message, on_lost):
        self.on_message, self.on_lost = on_message, on_lost
        self.buf = bytearray()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        size = forkserver.HEADER.size
        while len(self.buf) >= size:
            (n,) = forkserver.HEADER.unpack_from(self.buf)
            if len(self.buf) < size + n:
                return
            msg = json.loads(self.buf[size : size + n])
            del self.buf[: size + n]
            self.on_message(msg)

    def connection_lost(self, exc) -> None:
        self.on_lost()


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class ForkServer:
    """One running fork server, owned by the event loop that started it (`start`)."""

    def __init__(self, proc):
        self.proc = proc
        self.pid: int = proc.pid
        self.hello: dict[str, Any] | None = None
        self.dead: str | None = None  # why it is gone
        self._hello = asyncio.get_running_loop().create_future()
        self._episodes: dict[int, _Episode] = {}
        self._next_id = 0
        self._transport: asyncio.Transport | None = None

    @classmethod
    async def start(cls, plan: ForkPlan, env: dict[str, str], hello_timeout_s: float = HELLO_TIMEOUT_S) -> ForkServer:
        """Start a server for `plan` with environment `env` (the episodes' environment less the session variables)
        and wait for its preload; ForkServerError when it does not come up."""
        parent, child = socket.socketpair()
        try:
            proc = await asyncio.create_subprocess_exec(
                plan.python,
                "-c",
                forkserver.BOOT,
                forkserver.__file__,
                str(child.fileno()),
                json.dumps(asdict(plan)),
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                pass_fds=(child.fileno(),),
                start_new_session=True,  # a Ctrl-C to the worker's group is not the server's
            )
        except OSError as e:
            parent.close()
            raise ForkServerError(f"cannot start {plan.python!r}: {e}") from e
        finally:
            child.close()
        server = cls(proc)
        server._transport, _ = await asyncio.get_running_loop().create_unix_connection(
            lambda: _Frames(server._on_message, server._on_lost), sock=parent
        )
        try:
            server.hello = await asyncio.wait_for(asyncio.shield(server._hello), hello_timeout_s)
        except (TimeoutError, ServerDied) as e:
            await server.aclose()
            why = f"no hello within {hello_timeout_s:.0f} s" if isinstance(e, TimeoutError) else "it exited"
            raise ForkServerError(f"the fork server did not come up: {why} ({server.proc.returncode})") from e
        return server

    def _on_message(self, msg: dict[str, Any]) -> None:
        if msg["op"] == "hello":
            if not self._hello.done():
                self._hello.set_result(msg)
            return
        ep = self._episodes.get(msg["id"])
        if ep is None or ep.done.done():
            return
        if msg["op"] == "started":
            ep.pid = msg["pid"]
        elif msg["op"] == "exit":
            ep.done.set_result((msg["code"], msg["stderr"]))
        elif msg["op"] == "failed":
            ep.done.set_exception(ForkServerError(f"the fork server could not fork: {msg['error']}"))

    def _on_lost(self) -> None:
        """The server is gone: kill its running episodes' groups (their parent cannot any more) and fail them."""
        if self.dead is None:
            self.dead = f"verl-ext fork server (pid {self.pid}) died (its socket closed)"
        if not self._hello.done():
            self._hello.set_exception(ServerDied(self.dead, started=False))
            self._hello.exception()  # retrieved here: `start` may have stopped waiting
        for ep in self._episodes.values():
            if ep.pid is not None:
                _kill_group(ep.pid)
            if not ep.done.done():
                ep.done.set_exception(ServerDied(self.dead, started=ep.pid is not None))

    async def run(self, env: dict[str, str], timeout_s: float) -> tuple[int | None, bool, str]:
        """One episode, as `agent_process.run_agent`: (exit code or None, timed out, last 2 kB of its stderr).
        ServerDied when the server is gone (before or during the episode)."""
        if self.dead:
            raise ServerDied(self.dead, started=False)
        rid, self._next_id = self._next_id, self._next_id + 1
        ep = self._episodes[rid] = _Episode(asyncio.get_running_loop())
        try:
            self._transport.write(forkserver.frame({"op": "run", "id": rid, "env": env, "cwd": os.getcwd()}))
            try:
                code, err = await asyncio.wait_for(asyncio.shield(ep.done), timeout_s)
                return code, False, err
            except TimeoutError:
                await self._stop(rid, ep)
                return None, True, ""
        finally:  # also on cancellation (shutdown): never leave an episode running
            if not ep.done.done():
                await self._stop(rid, ep)
            if ep.done.done() and not ep.done.cancelled():
                ep.done.exception()  # retrieved: an exception nobody awaits is not reported as lost
            self._episodes.pop(rid, None)

    async def _stop(self, rid: int, ep: _Episode) -> None:
        """Kill the episode's group through the server (it reaps the child, so the pid cannot have been reused), and
        from here when the server does not confirm."""
        if not self.dead:
            try:
                self._transport.write(forkserver.frame({"op": "kill", "id": rid}))
                await asyncio.wait_for(asyncio.shield(ep.done), KILL_WAIT_S)
                return
            except Exception:  # noqa: BLE001 - any failure here means: kill it from here
                pass
        if ep.pid is not None:
            _kill_group(ep.pid)

    async def aclose(self) -> None:
        """Close the socket: the server kills every running episode's group and exits."""
        if self.dead is None:
            self.dead = "closed"
        if self._transport is not None:
            self._transport.close()
        try:
            await asyncio.wait_for(self.proc.wait(), KILL_WAIT_S)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()

    def terminate(self) -> None:
        """From outside the server's loop (its loop stopped, or at exit): SIGTERM, which makes it kill its running
        episodes' groups and exit."""
        if self.proc.returncode is None:
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


def server_env(episode_env: dict[str, str]) -> dict[str, str]:
    """The server's environment: an episode's, less the variables that differ per episode."""
    return {k: v for k, v in episode_env.items() if k not in forkserver.SESSION_VARS}


class ForkLauncher:
    """Episodes of one command on one event loop: the fork server started on the first episode and restarted when it
    died; None from `run` where the episode must run as a process instead (module docstring)."""

    def __init__(self, command: tuple[str, ...]):
        self.command = command
        plan = fork_plan(command)
        self.plan = plan if isinstance(plan, ForkPlan) else None
        self.fallback: str | None = None if self.plan else plan  # why episodes run as processes, for good
        self.server: ForkServer | None = None
        self.failures = 0
        self.starts = 0
        self._logged = False
        self._lock = asyncio.Lock()

    def _fall_back(self, why: str) -> None:
        self.fallback = why
        if not self._logged:
            self._logged = True
            logger.warning("external_agent: launch=fork runs %s as a process per episode: %s", self.command, why)

    async def run(self, env: dict[str, str], timeout_s: float) -> tuple[int | None, bool, str] | None:
        """The episode's (exit code or None, timed out, stderr tail), or None: run it as a process."""
        for _ in range(2):
            server = await self._server(env)
            if server is None:
                return None
            try:
                return await server.run(env, timeout_s)
            except ServerDied as e:
                if e.started:
                    return None, False, f"{e} (the episode's process group was killed)"
            except ForkServerError as e:  # the fork itself failed: this episode as a process
                logger.warning("external_agent: %s; this episode runs as a process", e)
                return None
        return None  # the server died twice before starting it: as a process

    async def _server(self, env: dict[str, str]) -> ForkServer | None:
        if self.fallback:
            self._fall_back(self.fallback)  # logged once
            return None
        async with self._lock:
            if self.server is not None and not self.server.dead:
                return self.server
            if self.server is not None:
                logger.warning("external_agent: %s; restarting it", self.server.dead)
                await self.server.aclose()
                self.server = None
                self.failures += 1
            if self.failures >= MAX_SERVER_FAILURES:
                self._fall_back(f"the fork server died or failed to start {self.failures} times")
                return None
            try:
                self.starts += 1
                server = await ForkServer.start(self.plan, server_env(env))
            except ForkServerError as e:
                self.failures += 1
                logger.warning("external_agent: %s; this episode runs as a process", e)
                return None
            problem = unsafe_preload(server.hello)
            if problem:
                await server.aclose()
                self._fall_back(problem)
                return None
            h = server.hello
            logger.info(
                "external_agent: fork server pid %s for %s preloaded %s in %.1f s (own code left out: %s; failed: %s)",
                server.pid,
                self.command,
                h["preloaded"],
                h["seconds"],
                h["local"],
                h["failed"],
            )
            self.server = server
            return server

    async def aclose(self) -> None:
        if self.server is not None:
            await self.server.aclose()
            self.server = None


class ForkLaunchers:
    """This process's launchers, one per event loop (an agent-loop worker has one), command and extra environment
    (`external_agent.env`, which the server starts with: variables an interpreter reads at start, such as
    PYTHONPATH, are the server's)."""

    def __init__(self) -> None:
        self._by_loop: dict[asyncio.AbstractEventLoop, dict[tuple, ForkLauncher]] = {}

    def get(self, command: tuple[str, ...], extra_env: dict[str, str] | None = None) -> ForkLauncher:
        loop = asyncio.get_running_loop()
        # a loop that no longer runs cannot serve its servers' sockets (a test's loop, stopped): they are ended
        for gone in [lp for lp in self._by_loop if lp is not loop and (lp.is_closed() or not lp.is_running())]:
            for launcher in self._by_loop.pop(gone).values():
                if launcher.server is not None:
                    launcher.server.terminate()
        launchers = self._by_loop.setdefault(loop, {})
        key = (command, tuple(sorted((extra_env or {}).items())))
        if key not in launchers:
            launchers[key] = ForkLauncher(command)
        return launchers[key]

    async def aclose(self) -> None:
        """Stop the running loop's servers (from inside that loop)."""
        for launcher in self._by_loop.pop(asyncio.get_running_loop(), {}).values():
            await launcher.aclose()

    def close(self) -> None:
        """Stop every server from outside its loop (at exit)."""
        for launchers in self._by_loop.values():
            for launcher in launchers.values():
                if launcher.server is not None:
                    launcher.server.terminate()
        self._by_loop.clear()


LAUNCHERS = ForkLaunchers()
atexit.register(LAUNCHERS.close)
