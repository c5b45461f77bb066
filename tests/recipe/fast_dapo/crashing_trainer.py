"""A fast DAPO trainer that dies like a killed job, at one of two points given by environment variables:

- `VERL_EXT_TEST_CRASH_AFTER_STEP=k`: right after step k has been logged, before the next one;
- `VERL_EXT_TEST_CRASH_AFTER_CHECKPOINT=k`: right after step k's checkpoint is complete, before its metrics row.
"""

import os

from recipe.fast_dapo.fast_dapo_ray_trainer import RayFastDAPOTrainer


class SimulatedCrash(RuntimeError):
    pass


def _step_from_env(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value else None


class CrashingFastDAPOTrainer(RayFastDAPOTrainer):
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
