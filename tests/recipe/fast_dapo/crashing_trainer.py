"""A fast DAPO trainer that dies like a killed job: right after a given step has been logged, before the next one."""

import os

from recipe.fast_dapo.fast_dapo_ray_trainer import RayFastDAPOTrainer


class SimulatedCrash(RuntimeError):
    pass


class CrashingFastDAPOTrainer(RayFastDAPOTrainer):
    def training_batches(self):
        crash_after = int(os.environ["VERL_EXT_TEST_CRASH_AFTER_STEP"])
        for item in super().training_batches():
            if self.global_steps > crash_after:
                raise SimulatedCrash(f"simulated crash before step {self.global_steps}")
            yield item
