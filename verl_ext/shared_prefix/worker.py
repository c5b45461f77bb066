"""verl's actor/rollout/reference worker for a run that asks for shared-prefix passes on a GPU.

`SharedPrefixActorRolloutRefWorker` is verl 0.9.1's `ActorRolloutRefWorker` (verl/workers/engine_workers.py) with one
step before verl's own `__init__`: it swaps the shared-prefix engines into verl's engine registry in its own process
(`registration.register`), so the engines it builds later (`init_model`: the actor's and the fused reference's)
are the shared-prefix subclasses. The TaskRunner hands Ray this class instead of verl's only for a run with
`actor.use_prefix_grouper` off the CPU backend (`verl_ext/trainer/task_runner.py`); every other process, and every
other run, keeps verl's engine classes. Why the decision rides on the worker class: registration.py.
"""

from __future__ import annotations

from verl.workers.engine_workers import ActorRolloutRefWorker

from verl_ext.shared_prefix.registration import register


class SharedPrefixActorRolloutRefWorker(ActorRolloutRefWorker):
    """verl's worker, built after the shared-prefix engines are registered in this process."""

    def __init__(self, *args, **kwargs):
        register()
        super().__init__(*args, **kwargs)
