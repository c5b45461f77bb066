"""Shim for verl 0.9.1: verl's FSDP language-model engines for cuda and npu swapped for their shared-prefix subclasses,
in the worker processes of a run that asks for shared-prefix passes (`actor.use_prefix_grouper`), and nowhere else.

Why a registry write: `EngineRegistry.register` (verl/workers/engine/base.py) asserts that a (device, vendor) key is
new, so there is no public way to replace an engine; `register()` writes the subclass into `EngineRegistry._engines`
(idempotent). The subclass behaves as verl's class unless a batch asks for shared prefixes.

When it runs: only in the process of `SharedPrefixActorRolloutRefWorker` (worker.py), before that worker builds its
engines; the TaskRunner, which holds the run's resolved config, hands Ray that worker class only for a run with
`actor.use_prefix_grouper` on a GPU (verl_ext/trainer/task_runner.py). A GPU run without the key builds verl's own
worker and verl's own engine classes, in every process: the project's plugin (verl_ext/plugin.py), loaded in every
verl process, registers no GPU engine. The decision travels with the worker class because the other carriers fail:
- the plugin runs at `import verl`, before any config exists in the process; swapping there swapped every GPU run;
- the engine's constructor gets the model, engine (`actor.fsdp_config`), optimizer and checkpoint configs, none of
  which holds `actor.use_prefix_grouper`, so the engine cannot choose when it is built;
- an environment variable would have to reach every worker: verl's `run_ppo` forwards a fixed list of variables,
  a Ray job's runtime environment is fixed when Ray starts and is not ours to set when Ray is already up (a cluster
  job, the tests' session), and a variable left set in a shell would swap for runs that did not ask.
A Ray actor class is pickled by reference and imported in its worker, on any node of any cluster, with nothing else
to propagate. The CPU backend registers its own shared-prefix engine for device `cpu` in every CPU process
(`cpu/shims.py`) and keeps verl's worker.

Upstream: verl 0.9.1 `EngineRegistry._engines`, `EngineRegistry.register`, `ActorRolloutRefWorker` and the legacy
TaskRunner's `add_actor_rollout_worker`. tests/shared_prefix/test_registration.py fails when the registry's layout
or its refusal changes, or when the engine a run's worker builds is not the one its config asks for.
"""

from __future__ import annotations

from verl_ext.shared_prefix import DEVICES


def register() -> None:
    """Swap verl's FSDP language-model engines for cuda and npu for their shared-prefix subclasses (idempotent)."""
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp import transformer_impl  # noqa: F401  (registers verl's engines)

    from verl_ext.shared_prefix.engine import engine_class

    for backend, by_device in EngineRegistry._engines.get("language_model", {}).items():
        if backend not in ("fsdp", "fsdp2"):
            continue
        for key, cls in list(by_device.items()):
            device = key[0] if isinstance(key, tuple) else key
            if device in DEVICES:
                by_device[key] = engine_class(cls)
