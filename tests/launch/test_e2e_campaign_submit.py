"""A campaign submitted to the real two-node cluster (tests/launch/conftest.py): each (condition, seed) one Ray job,
at most 2 at a time, a restart of the campaign script neither duplicates nor re-runs finished jobs, failures are
reported and re-submitted on the next start. Runs are 1-step tiny fast DAPO jobs on one node each."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from tests.launch.conftest import TINY
from verl_ext.campaign import CampaignSpec
from verl_ext.campaign.submit import STATE_FILE, SubmitState, submit_campaign
from verl_ext.launch import job
from verl_ext.metrics_log import read_jsonl

pytestmark = [pytest.mark.e2e, pytest.mark.multinode]  # not in `make test`: `make test-multinode`
ROOT = job.PROJECT_ROOT


class Interrupted(Exception):
    pass


def test_campaign_on_the_cluster_survives_a_restart_and_reports_failures(cluster, tmp_path):
    raw = {
        "name": "cs",
        "entry": "recipe.fast_dapo.main",
        "base": [o for o in TINY if not o.startswith("trainer.nnodes")]
        + ["trainer.nnodes=1", "trainer.total_training_steps=1", "trainer.save_freq=-1"],
        "conditions": {
            "grpo": ["algorithm.adv_estimator=grpo"],
            "maxrl": ["algorithm.adv_estimator=maxrl"],
            "broken": ["curriculum.max_num_gen_batches=-1"],  # composes, then fails the recipe's own config check
        },
        "seeds": [0],
    }
    spec = CampaignSpec.from_dict(raw)
    plans = spec.runs(tmp_path / "cluster")  # the "shared storage" (this machine's disk)
    local = tmp_path / "local"
    client = job.client(cluster.dashboard_url)

    # 0) With the pre-flight (the default) the broken run is refused before any job is submitted. Below it is
    #    skipped, so that the broken run fails on the cluster, as a run that passes the check can.
    with pytest.raises(job.JobError, match="curriculum.max_num_gen_batches must be >= 0"):
        submit_campaign(spec, plans, client, local, max_concurrent=2, python=sys.executable)
    assert not [j for j in client.list_jobs() if (j.metadata or {}).get("campaign") == "cs"]

    # 1) The script dies right after Ray accepted the first job, before its state file recorded it.
    def die_after_first_submit(msg):
        if "submitted" in msg:
            raise Interrupted(msg)

    with pytest.raises(Interrupted, match="grpo_s0: submitted cs-grpo_s0-a1"):
        submit_campaign(
            spec, plans, client, local, max_concurrent=2, python=sys.executable, log=die_after_first_submit,
            preflight="none",
        )  # fmt: skip

    # 2) Restarted: follows that job instead of submitting it again, runs the rest two at a time.
    messages = []
    result = submit_campaign(
        spec, plans, client, local, max_concurrent=2, python=sys.executable, poll_s=1, log=messages.append,
        preflight="none",
    )  # fmt: skip
    assert "[campaign] grpo_s0: cs-grpo_s0-a1 was already submitted, following it" in messages
    assert sorted(result.succeeded) == ["grpo_s0", "maxrl_s0"] and result.skipped == []
    assert list(result.failed) == ["broken_s0"]
    assert "curriculum.max_num_gen_batches must be >= 0" in result.failed["broken_s0"]
    for label in ("grpo_s0", "maxrl_s0"):
        assert [r["step"] for r in read_jsonl(local / "cs" / label / "metrics.jsonl")] == [1]
        assert (local / "cs" / label / "metrics.png").exists()
    state = SubmitState.load(local / "cs" / STATE_FILE).runs
    assert {k: (v["status"], v["attempts"]) for k, v in state.items()} == {
        "grpo_s0": ("SUCCEEDED", 1),
        "maxrl_s0": ("SUCCEEDED", 1),
        "broken_s0": ("FAILED", 1),
    }

    # 3) The CLI, started again: the finished runs are skipped, the failed one is re-submitted and reported.
    spec_path = tmp_path / "cs.yaml"
    spec_path.write_text(yaml.safe_dump(raw))
    r = subprocess.run(
        [
            sys.executable,
            "scripts/campaign.py",
            str(spec_path),
            "--submit",
            cluster.dashboard_url,
            "--out-root",
            str(tmp_path / "cluster"),
            "--local-root",
            str(local),
            "--max-concurrent",
            "2",
            "--python",
            sys.executable,
            "--preflight",
            "none",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "[campaign] 0 succeeded, 2 done earlier, 1 failed of 3 runs" in r.stdout
    assert "FAILED broken_s0" in r.stdout and "curriculum.max_num_gen_batches must be >= 0" in r.stdout

    # What the cluster saw: one job per successful run, two attempts of the broken one, never more than 2 at once.
    jobs = [j for j in client.list_jobs() if (j.metadata or {}).get("campaign") == "cs"]
    per_run = {}
    for j in jobs:
        per_run.setdefault(j.metadata["run"], []).append(j.submission_id)
    assert {k: sorted(v) for k, v in per_run.items()} == {
        "grpo_s0": ["cs-grpo_s0-a1"],
        "maxrl_s0": ["cs-maxrl_s0-a1"],
        "broken_s0": ["cs-broken_s0-a1", "cs-broken_s0-a2"],
    }
    spans = [(j.start_time, j.end_time) for j in jobs]
    most = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert most <= 2, "the concurrency limit held"
