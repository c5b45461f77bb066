"""A fast DAPO trainer that dies like a killed job, at one of the points given by environment variables:

- `VERL_EXT_TEST_CRASH_AFTER_STEP=k`: right after step k has been logged, before the next one;
- `VERL_EXT_TEST_CRASH_AFTER_CHECKPOINT=k`: right after step k's checkpoint is complete, before its metrics row;
- `VERL_EXT_TEST_KILL_ROLLOUT_AT_STEP=k`: before the first generation call from step k on, the rollout server's
  vLLM worker processes are SIGKILLed (as the OOM killer would), the time written to `VERL_EXT_TEST_KILL_STAMP`; the
  run must notice by itself.
"""

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


def vllm_processes(names: tuple[bytes, ...] = (b"VLLM::Worker", b"VLLM::EngineCore")) -> list[int]:
    """The pids of the machine's vLLM processes whose command line starts with one of `names` (the e2e runs are
    alone on it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes().startswith(names):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def kill_vllm_workers() -> list[int]:
    """SIGKILL every vLLM worker process; their pids."""
    killed = vllm_processes((b"VLLM::Worker",))
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    return killed


class CrashingFastDAPOTrainer(RayFastDAPOTrainer):
    def generate(self, gen_batch, timing_raw):
        kill_at = _step_from_env("VERL_EXT_TEST_KILL_ROLLOUT_AT_STEP")
        if kill_at is not None and self.global_steps >= kill_at and not getattr(self, "_killed", None):
            self._killed = kill_vllm_workers()
            assert self._killed, "no vLLM worker process to kill"
            Path(os.environ["VERL_EXT_TEST_KILL_STAMP"]).write_text(str(time.time()))
        return super().generate(gen_batch, timing_raw)

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
