"""Campaign-on-a-cluster pieces that need no cluster: the state file and the checks made before any submission
(the submission itself runs against a real two-node Ray cluster in tests/launch/test_e2e_campaign_submit.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from verl_ext.campaign import CampaignSpec
from verl_ext.campaign.submit import SubmitState, recipe_of, submit_campaign

ROOT = Path(__file__).resolve().parents[2]


def test_state_round_trips_and_is_replaced_atomically(tmp_path):
    path = tmp_path / "c" / "submit_state.json"
    state = SubmitState.load(path)
    assert state.runs == {}
    state.get("a_s0").update(attempts=1, submission_id="c-a_s0-a1", status="SUBMITTED")
    state.save()
    assert not path.with_name(path.name + ".tmp").exists()
    again = SubmitState.load(path)
    assert again.runs == {"a_s0": {"attempts": 1, "submission_id": "c-a_s0-a1", "status": "SUBMITTED", "message": None}}


@pytest.mark.parametrize("entry", ["verl.trainer.main_ppo", "recipe.fast_dapo", "recipe.x.main.y"])
def test_only_recipe_entry_points_go_to_a_cluster(entry):
    with pytest.raises(ValueError, match="recipe.<name>.main"):
        recipe_of(entry)
    assert recipe_of("recipe.fast_dapo.main") == "fast_dapo"


def test_bad_campaigns_fail_before_submitting(tmp_path):
    spec = CampaignSpec.from_dict(
        {"name": "c", "entry": "recipe.fast_dapo.main", "seeds": [0], "conditions": {"x": ["trainer.no_such_key=1"]}}
    )
    # `client` is never used: the checks fail first (a client would need a cluster).
    with pytest.raises(ValueError, match="must be absolute"):
        submit_campaign(spec, spec.runs("relative/root"), client=None, local_root=tmp_path)
    with pytest.raises(ValueError, match="Could not override 'trainer.no_such_key'"):
        submit_campaign(spec, spec.runs(tmp_path / "abs"), client=None, local_root=tmp_path)
    with pytest.raises(ValueError, match="max_concurrent must be >= 1"):
        submit_campaign(spec, spec.runs(tmp_path / "abs"), client=None, local_root=tmp_path, max_concurrent=0)


def test_cli_submit_needs_an_absolute_cluster_root():
    r = subprocess.run(
        [
            sys.executable,
            "scripts/campaign.py",
            "configs/campaign/advantage_ablation_cpu.yaml",
            "--submit",
            "http://127.0.0.1:9",
            "--out-root",
            "outputs/campaign",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 1 and "must be absolute" in r.stderr, r.stderr
