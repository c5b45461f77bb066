"""A fast DAPO trainer that dies like a killed job, at one of the points given by environment variables:

- `VERL_EXT_TEST_CRASH_AFTER_STEP=k`: right after step k has been logged, before the next one;
- `VERL_EXT_TEST_CRASH_AFTER_CHECKPOINT=k`: right after step k's checkpoint is complete, before its metrics row;
- `VERL_EXT_TEST_KILL_ROLLOUT_AT_STEP=k`: before the first generation call from step k on, the rollout server's
  processes that hold the model are SIGKILLed (as the OOM killer would); the time, the vLLM processes seen and those
  killed are written to `VERL_EXT_TEST_KILL_STAMP` (JSON); the run must notice by itself;
- `VERL_EXT_TEST_KILL_ROLLOUT_AT_VALIDATION=k`: the same kill as step k's validation starts, which is after step k's
  checkpoint and weight sync and before its metrics row.

The vLLM processes looked at are the run's own: those whose environment holds the kill stamp's path (the driver's
environment reaches Ray's workers and the engines they start).
"""

import json
import os
import signal
import time
from pathlib import Path

from recipe.fast_dapo.fast_dapo_ray_trainer import RayFastDAPOTrainer


class SimulatedCrash(RuntimeError):
    pass


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
    def _kill_the_rollout(self):
        stamp_path = os.environ["VERL_EXT_TEST_KILL_STAMP"]
        seen = {pid: _process_facts(pid) for pid in vllm_processes(stamp_path)}
        self._killed = kill_vllm_workers(stamp_path)
        assert self._killed, "no vLLM worker process to kill"
        stamp = {"time": time.time(), "processes": list(seen.values()), "killed": [seen[p] for p in self._killed]}
        Path(stamp_path).write_text(json.dumps(stamp))

    def generate(self, gen_batch, timing_raw):
        kill_at = _step_from_env("VERL_EXT_TEST_KILL_ROLLOUT_AT_STEP")
        if kill_at is not None and self.global_steps >= kill_at and not getattr(self, "_killed", None):
            self._kill_the_rollout()
        return super().generate(gen_batch, timing_raw)

    def _validate(self, *args, **kwargs):
        if self.global_steps == _step_from_env("VERL_EXT_TEST_KILL_ROLLOUT_AT_VALIDATION"):
            self._kill_the_rollout()
        return super()._validate(*args, **kwargs)

    def training_batches(self):
        crash_after = _step_from_env("VERL_EXT_TEST_CRASH_AFTER_STEP")
        for item in super().training_batches():
            if crash_after is not None and self.global_steps > crash_after:
                raise SimulatedCrash(f"simulated crash before step {self.global_steps}")
            yield item

    def _save_checkpoint(self):
        super()._save_checkpoint()
        if self.global_steps == _step_from_env("VERL_EXT_TEST_CRASH_AFTER_CHECKPOINT"):
            raise SimulatedCrash(f"simulated crash after the checkpoint of step {self.global_steps}")
