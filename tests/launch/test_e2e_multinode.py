"""A real two-node Ray cluster on 127.0.0.1 (two `ray start` processes, each with its own temp dir, CPUs and one
pretend GPU), the tiny fast DAPO recipe submitted to it as a Ray job with trainer.nnodes=2.

1. The run places its FSDP workers and vLLM servers on both nodes (Ray's state API), completes, its weights reach
   both rollout replicas (probs-diff metric small on every step), and the outputs are collected locally.
2. The worker node is killed mid-run: the job fails within a bounded time naming the lost node; with the node back,
   the job re-submitted with resume_mode=auto continues from the last checkpoint, no step logged twice or missing.

Run them alone (they start their own cluster and hold the machine):
    flock /tmp/verl_ext_heavy.lock timeout 1500 .venv/bin/pytest -q tests/launch -m e2e
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.launch.conftest import TINY
from verl_ext.launch import job
from verl_ext.launch.local_cluster import LocalCluster
from verl_ext.metrics_log import read_jsonl

pytestmark = [pytest.mark.e2e, pytest.mark.multinode]  # not in `make test`: `make test-multinode`

JOB_TIMEOUT_S = 600


def _submit(c: LocalCluster, run_dir: Path, overrides: list[str]) -> tuple[object, str]:
    import sys

    client = job.client(c.dashboard_url)
    req = job.JobRequest("fast_dapo", [*TINY, *overrides], str(run_dir), python=sys.executable, lost_node_grace_s=20)
    return client, job.submit(client, req)


def _node_ids(c: LocalCluster) -> set[str]:
    return {n["node_id"] for n in c.alive_nodes()}


class ActorNodes(threading.Thread):
    """Ray's state API, polled while a job runs: the nodes each actor class was ALIVE on (the actors of a finished
    job need not stay in the state API's answers)."""

    CLASSES = ("WorkerDict", "vLLMHttpServer")  # the fused actor/rollout/ref workers, the rollout servers

    def __init__(self, address: str):
        super().__init__(daemon=True)
        self.address, self.seen = address, {c: set() for c in self.CLASSES}
        self.halt = threading.Event()

    def run(self):
        from ray.util.state import list_actors

        while not self.halt.wait(2.0):
            try:
                actors = list_actors(
                    address=self.address, filters=[("state", "=", "ALIVE")], limit=1000, raise_on_missing_output=False
                )
            except Exception:  # noqa: BLE001, S112 -- the dashboard is busy on 2 cores: poll again
                continue
            for a in actors:
                # verl's colocated class is created in a function: its qualified name ends with WorkerDict
                cls = next((c for c in self.CLASSES if (a.class_name or "").endswith(c)), None)
                if cls and a.node_id:
                    self.seen[cls].add(a.node_id)


def test_job_runs_on_both_nodes_and_syncs_weights(cluster, tmp_path):
    import re
    import subprocess
    import sys

    nodes = _node_ids(cluster)
    assert len(nodes) == 2
    run_dir, local = tmp_path / "run", tmp_path / "local"
    # The user's command: submit, stream the log, collect the outputs.
    cmd = [
        sys.executable,
        "scripts/ray_job.py",
        "submit",
        "--address",
        cluster.dashboard_url,
        "--recipe",
        "fast_dapo",
        "--run-dir",
        str(run_dir),
        "--local-dir",
        str(local),
        "--python",
        sys.executable,
        "--",
        *TINY,
        "trainer.total_training_steps=2",
        "trainer.save_freq=-1",
    ]
    poller = ActorNodes(cluster.dashboard_url)
    poller.start()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=job.PROJECT_ROOT, timeout=JOB_TIMEOUT_S)
    poller.halt.set()
    (tmp_path / "cli.log").write_text(r.stdout + r.stderr)
    assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]
    # the job log shows what the local terminal shows: the step lines, the full log's path on the cluster
    assert re.search(r"^step +2/2 \|", r.stdout, re.M), "the log was streamed"
    assert f"[verl_ext] full log: {run_dir / 'run.log'}" in r.stdout
    assert "VERL_EXT_ARTIFACT" not in r.stdout, "the artifact block is not shown to the user"
    jid = re.search(r"submitted (\S+) to", r.stdout).group(1)

    client = job.client(cluster.dashboard_url)
    info = client.get_job_info(jid)
    assert str(info.status.value) == "SUCCEEDED"
    assert poller.seen == {"WorkerDict": nodes, "vLLMHttpServer": nodes}, (poller.seen, nodes)

    assert {"metrics.jsonl", "config.yaml", "overrides.yaml", "metrics.png", "job.json", "job.log"} <= {
        p.name for p in local.iterdir()
    }
    rows = read_jsonl(local / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert rows == read_jsonl(run_dir / "metrics.jsonl"), "the collected log is the run's"
    assert "nnodes: 2" in (local / "config.yaml").read_text()
    assert '"SUCCEEDED"' in (local / "job.json").read_text()
    diffs = [row["training/rollout_probs_diff_max"] for row in rows]
    print("rollout vs actor probs diff max per step:", diffs)
    assert all(row["actor/grad_norm"] > 0 for row in rows)
    # Step 2 samples with the weights of step 1's update: both replicas got them, or this gap would be large.
    assert max(diffs) < 0.05, diffs


def test_lost_node_fails_the_job_and_resume_continues(cluster, tmp_path):
    run_dir = tmp_path / "run"
    steps = ["trainer.total_training_steps=8", "trainer.save_freq=2"]
    client, jid = _submit(cluster, run_dir, [*steps, "trainer.resume_mode=disable"])

    # Wait for the first checkpoint, then take the worker node away abruptly (SIGKILL of its whole process group).
    latest = run_dir / "latest_checkpointed_iteration.txt"
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not latest.exists():
        status = str(client.get_job_status(jid).value)
        assert status not in job.TERMINAL, (
            f"job ended ({status}) before its first checkpoint:\n" + client.get_job_logs(jid)[-5000:]
        )
        assert time.monotonic() < deadline, "no checkpoint within the time limit"
        time.sleep(0.5)
    lost = cluster.worker_node_ids()
    assert len(lost) == 1
    cluster.kill_node(1)
    t_kill = time.monotonic()

    status = job.wait(client, jid, timeout_s=180)
    failed_after_s = time.monotonic() - t_kill
    assert status == "FAILED"
    assert failed_after_s < 180
    info = client.get_job_info(jid)
    assert lost[0] in info.message, info.message[-3000:]  # the message names the lost node
    failed_log = client.get_job_logs(jid)
    assert f"[verl_ext.launch] FAILED: lost node {lost[0]}" in failed_log, failed_log[-3000:]
    logged_before = [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl")]
    last_ckpt = int(latest.read_text())
    assert logged_before[-1] < 8, "the kill came before the run ended"
    assert last_ckpt >= 2 and last_ckpt % 2 == 0

    # Node back (a new raylet: a new node id), same command with resume_mode=auto.
    cluster.restart_node(1)
    client, jid2 = _submit(cluster, run_dir, [*steps, "trainer.resume_mode=auto"])
    status = job.wait(client, jid2, timeout_s=JOB_TIMEOUT_S)
    log = client.get_job_logs(jid2)
    assert status == "SUCCEEDED", log[-5000:]
    resumed = f"[verl_ext] resumed from {run_dir}/global_step_{last_ckpt} at step {last_ckpt}"
    assert resumed in log, log[-5000:]  # the job log says where it resumed (verl's own lines are in run.log)
    assert f"Setting global step to {last_ckpt}" in (run_dir / "run.log").read_text()
    rows = read_jsonl(run_dir / "metrics.jsonl")
    print("rollout vs actor probs diff max per step:", [r["training/rollout_probs_diff_max"] for r in rows])
    assert [r["step"] for r in rows] == list(range(1, 9)), "no step twice, none missing"
    print(
        f"job failed {failed_after_s:.1f} s after the node was killed; steps logged before: {logged_before}, "
        f"resumed from checkpoint {last_ckpt}; rows written from the checkpoint: "
        f"{[r['step'] for r in rows if r.get('training/row_recovered')]}"
    )
