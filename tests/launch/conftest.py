"""The two-node Ray cluster on 127.0.0.1 shared by every e2e test of this package (started once), and the tiny
fast DAPO overrides its jobs use."""

from __future__ import annotations

import shutil
import tempfile

import pytest

from verl_ext.launch.local_cluster import LocalCluster

# Plain sampling (on-policy every step): a replica that missed a weight sync would show in the probs diff.
TINY = [
    "+preset=cpu_demo",
    "trainer.nnodes=2",
    "curriculum.enable=false",
    "data.train_batch_size=2",
    "data.gen_batch_size=2",  # one call per step: the preset's 16 would feed 8 steps, rows up to 7 updates old
    # N = 8 responses per prompt: 16 rows, 8 per rank. Groups of 4 were all right or all wrong on both prompts of a
    # step in ~3% of steps (sampled accuracy ~0.5): no gradient, so no weights to sync; groups of 8, ~1e-4
    "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.rollout.n_continue=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.actor.optim.lr=1e-3",
    "trainer.test_freq=-1",
    "trainer.val_before_train=false",
    "trainer.plot_keys=[critic/score/mean]",
]


@pytest.fixture(scope="package")
def cluster(tiny_assets):
    from verl_ext.cpu.cleanup import shm_segments, unlink_orphaned_shm

    before = shm_segments()
    tmp = tempfile.mkdtemp(prefix="vxmn-", dir="/tmp")  # short: Ray's socket paths
    # Health checks every second: a killed node is declared dead in seconds, not ~30 s.
    c = LocalCluster(
        num_nodes=2,
        cpus_per_node=6,
        gpus_per_node=1,
        temp_dir=tmp,
        env={"RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "5"},
    )
    try:
        c.start()  # stops what it started if it fails
        yield c
    finally:
        c.stop()
        c.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
        unlink_orphaned_shm(before)  # segments of the vLLM servers on the killed node
