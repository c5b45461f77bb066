"""Ray TaskRunner that builds verl's workers, datasets and resource pools exactly as verl 0.9.1's legacy runner does,
then runs the trainer class named by `trainer.trainer_cls` (default: the project's ExtRayPPOTrainer).

A run that sets `actor_rollout_ref.actor.use_prefix_grouper` on a GPU gets the actor/rollout/reference worker that
swaps in the shared-prefix engines in its own process (`actor_rollout_worker_class`; why there:
verl_ext/shared_prefix/registration.py); every other run gets verl's worker and verl's engines.

`run` returns the trainer's closing lines (`closing_lines`: the run summary, the probe's report) for the driver
process to print (verl_ext/trainer/launch.py): printed here, just before Ray shuts down, Ray's log forwarding can
drop them. A run that fails returns nothing, so its closing lines are printed here, before the error propagates.
"""

from __future__ import annotations

import ray
from omegaconf import OmegaConf
from verl.trainer.main_ppo_v0 import BaseTaskRunner

DEFAULT_TRAINER = "verl_ext.trainer.ppo_trainer.ExtRayPPOTrainer"


def actor_rollout_worker_class(config, verl_worker: type) -> type:
    """The actor/rollout/reference worker class for this run: `verl_worker` (verl's), or for a run that sets
    `actor.use_prefix_grouper` off the CPU backend its shared-prefix subclass (verl_ext/shared_prefix/worker.py). The
    CPU backend registers its own shared-prefix engine in every process (verl_ext/cpu/shims.py) and keeps verl's."""
    from verl_ext import cpu

    if cpu.is_requested() or not config.actor_rollout_ref.actor.get("use_prefix_grouper", False):
        return verl_worker
    from verl_ext.shared_prefix.worker import SharedPrefixActorRolloutRefWorker

    if not issubclass(SharedPrefixActorRolloutRefWorker, verl_worker):
        raise TypeError(f"the shared-prefix worker extends verl's ActorRolloutRefWorker, not {verl_worker!r}")
    return SharedPrefixActorRolloutRefWorker


@ray.remote
class ExtTaskRunner(BaseTaskRunner):
    def add_actor_rollout_worker(self, config):
        """verl's worker and role, with the worker class `actor_rollout_worker_class` picks for this run."""
        from verl.trainer.ppo.ray_trainer import Role

        verl_worker, worker_group_cls = super().add_actor_rollout_worker(config)
        worker = actor_rollout_worker_class(config, verl_worker)
        if worker is not verl_worker:
            for role in (Role.ActorRollout, Role.ActorRolloutRef):
                if role in self.role_worker_mapping:
                    self.role_worker_mapping[role] = ray.remote(worker)
        return worker, worker_group_cls

    def run(self, config):
        from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler, need_critic, need_reference_policy
        from verl.utils.config import omega_conf_to_dataclass, validate_config
        from verl.utils.dataset.rl_dataset import collate_fn
        from verl.utils.import_utils import load_class_from_fqn
        from verl.workers.config import HFModelConfig

        from verl_ext.metrics_log.terminal import phase

        phase("Ray started, task runner up")
        OmegaConf.resolve(config)
        _, worker_group_cls = self.add_actor_rollout_worker(config)
        self.add_critic_worker(config)
        self.add_reward_model_resource_pool(config)
        self.add_teacher_model_resource_pool(config)
        use_ref, use_critic = need_reference_policy(config), need_critic(config)
        validate_config(config=config, use_reference_policy=use_ref, use_critic=use_critic)
        model_config: HFModelConfig = omega_conf_to_dataclass(config.actor_rollout_ref.model)
        tokenizer, processor = model_config.tokenizer, model_config.processor
        data = config.data
        train_dataset = create_rl_dataset(
            data.train_files, data, tokenizer, processor, is_train=True, max_samples=data.get("train_max_samples", -1)
        )
        val_dataset = create_rl_dataset(
            data.val_files, data, tokenizer, processor, is_train=False, max_samples=data.get("val_max_samples", -1)
        )
        phase(f"data: {len(train_dataset)} training prompts, {len(val_dataset)} validation prompts")
        trainer_cls = load_class_from_fqn(config.trainer.get("trainer_cls") or DEFAULT_TRAINER, "trainer")
        trainer = trainer_cls(
            config=config,
            tokenizer=tokenizer,
            processor=processor,
            role_worker_mapping=self.role_worker_mapping,
            resource_pool_manager=self.init_resource_pool_mgr(config),
            ray_worker_group_cls=worker_group_cls,
            train_dataset=train_dataset,
            val_dataset=val_dataset,
            collate_fn=collate_fn,
            train_sampler=create_rl_sampler(data, train_dataset),
        )
        trainer.init_workers()
        phase("workers up: the actor (FSDP) and the rollout server (vLLM)")
        try:
            trainer.fit()
        except BaseException:
            for line in getattr(trainer, "closing_lines", []):
                print(line, flush=True)
            raise
        return list(getattr(trainer, "closing_lines", []))
