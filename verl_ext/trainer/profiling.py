"""When to start and stop verl's profiler: the schedule of verl 0.9.1's `fit`, as a small pure object.

`global_profiler.steps` lists the training steps to profile. With `profile_continuous_steps=false` every listed step
is its own window (start before it, stop after it); with `true` consecutive listed steps share one window (start
only where the previous step was not profiled, stop only where the next one is not). The finish command (e.g. a
trace upload) runs once, on the last profiled step: the largest listed step, or the run's final step if that comes
first. One deliberate difference from verl: the window always closes on the run's final step (verl leaves it open
when the step after the final one is listed).

The trainer calls verl's own `_start_profiling` / `_stop_profiling` (worker groups) and the rollout servers'
`start_profile` / `stop_profile` with these decisions (ppo_trainer.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProfileSchedule:
    steps: frozenset[int]
    continuous: bool = False

    @classmethod
    def from_config(cls, profiler_cfg) -> ProfileSchedule:
        steps = (profiler_cfg or {}).get("steps") or ()
        return cls(frozenset(int(s) for s in steps), bool((profiler_cfg or {}).get("profile_continuous_steps", False)))

    def profiled(self, step: int) -> bool:
        return step in self.steps

    def start(self, step: int, first_step_of_run: bool) -> bool:
        """Open a window before `step`? (A window left open by the previous step continues.)"""
        if not self.profiled(step):
            return False
        return not (self.continuous and not first_step_of_run and self.profiled(step - 1))

    def stop(self, step: int, is_last: bool) -> bool:
        """Close the window after `step`?"""
        if not self.profiled(step):
            return False
        return is_last or not (self.continuous and self.profiled(step + 1))

    def run_finish_command(self, step: int, is_last: bool) -> bool:
        return self.profiled(step) and (step == max(self.steps) or is_last)
