"""A fast DAPO trainer whose rollout server dies as in a killed job: with `VERL_EXT_TEST_KILL_ROLLOUT_AT_VALIDATION=k`,
as step k's validation starts (after step k's checkpoint and weight sync, before its metrics row), the rollout
server's processes that hold the model are SIGKILLed (as the OOM killer would); the time, the vLLM processes seen and
those killed are written to `VERL_EXT_TEST_KILL_STAMP` (JSON); the run must notice by itself.

The vLLM processes looked at are the run's own: those whose environment holds the kill stamp's path (the driver's
environment reaches Ray's workers and the engines they start).
"""

import json
import os
import signal
import time
from pathlib import Path

from recipe.fast_dapo.fast_dapo_ray_trainer import RayFastDAPOTrainer


def _step_from_env(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value else None


def vllm_processes(marker: str, names: tuple[bytes, ...] = (b"VLLM::Worker", b"VLLM::EngineCore")) -> list[int]:
    """The pids of the vLLM processes whose command line starts with one of `names` and whose environment holds
    `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes().startswith(names) and marker.encode() in (
                    entry / "environ"
                ).read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _process_facts(pid: int) -> dict:
    """A vLLM process's name (its command line's start) and the OpenMP threads its environment gives torch."""
    proc = Path("/proc") / str(pid)
    env = dict(item.split(b"=", 1) for item in (proc / "environ").read_bytes().split(b"\0") if b"=" in item)
    name = (proc / "cmdline").read_bytes().split(b"\0")[0].decode()
    return {"name": name, "OMP_NUM_THREADS": env.get(b"OMP_NUM_THREADS", b"").decode()}


def kill_vllm_workers(marker: str) -> list[int]:
    """SIGKILL every process of the run that holds a vLLM model (as the OOM killer picks the largest): the model
    workers, or the engine process where the worker runs inside it (the CPU backend's "uni" executor); their pids."""
    killed = vllm_processes(marker, (b"VLLM::Worker",)) or vllm_processes(marker, (b"VLLM::EngineCore",))
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    return killed


class CrashingFastDAPOTrainer(RayFastDAPOTrainer):
    def _validate(self, *args, **kwargs):
        if self.global_steps == _step_from_env("VERL_EXT_TEST_KILL_ROLLOUT_AT_VALIDATION"):
            stamp_path = os.environ["VERL_EXT_TEST_KILL_STAMP"]
            seen = {pid: _process_facts(pid) for pid in vllm_processes(stamp_path)}
            killed = kill_vllm_workers(stamp_path)
            assert killed, "no vLLM worker process to kill"
            stamp = {"time": time.time(), "processes": list(seen.values()), "killed": [seen[p] for p in killed]}
            Path(stamp_path).write_text(json.dumps(stamp))
        return super()._validate(*args, **kwargs)
