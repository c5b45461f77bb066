"""The trainer side without Ray: episode outcomes applied to a real DataProto, and the async run-ahead order (the
mixin over a minimal loop that records what happens when; the full trainer runs in the e2e tests)."""

from __future__ import annotations

import pickle
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl import DataProto

from verl_ext.trainer.agent_episodes import AgentEpisodesMixin, apply_episode_outcomes, ok_episode_rows


def batch_of(status, versions, masks):
    masks = torch.tensor(masks)
    n, r = masks.shape
    attn = torch.cat([torch.ones(n, 3, dtype=torch.long), (masks.flip(-1).cumsum(-1).flip(-1) > 0).long()], -1)
    return DataProto.from_dict(
        tensors={"response_mask": masks.clone(), "attention_mask": attn},
        non_tensors={
            "agent_status": np.array(status, dtype=object),
            "agent_episode_id": np.array([f"e{i}" for i in range(n)], dtype=object),
            "agent_policy_version": np.array(versions, dtype=object),
            "agent_rounds": np.array([2] * n, dtype=object),
            "agent_segments": np.array([1] * n, dtype=object),
            "uid": np.array(["a", "a", "b", "b"], dtype=object),
        },
    )


MASKS = [[1, 1, 0, 0, 1, 0], [1, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 1], [1, 0, 1, 1, 0, 0]]


def test_outcomes_drop_rows_out_of_their_group():
    b = batch_of(["ok", "crashed", "ok", "ok"], [1, 1, -1, 0], MASKS)
    ids, status, stale, m = apply_episode_outcomes(b, step=2, max_staleness=0, enforce_staleness=True)
    assert list(status) == ["ok", "crashed", "ok", "stale"] and stale.tolist() == [0, 0, 0, 1]
    nt = b.non_tensor_batch
    assert nt["uid"].tolist() == ["a", "a/dropped/e1", "b", "b/dropped/e3"]
    assert b.batch["response_mask"][[1, 3]].sum() == 0 and b.batch["response_mask"][0].tolist() == MASKS[0]
    assert m["agent/ok"] == 2 and m["agent/dropped/crashed"] == 1 and m["agent/dropped/stale"] == 1
    # reference: per trained row, ones of the mask and zeros before its last one
    pol = [sum(MASKS[i]) for i in (0, 2)]
    env = [MASKS[i][: max(j for j, x in enumerate(MASKS[i]) if x) + 1].count(0) for i in (0, 2)]
    assert m["agent/policy_tokens_mean"] == pytest.approx(np.mean(pol))
    assert m["agent/env_tokens_mean"] == pytest.approx(np.mean(env))
    assert m["agent/staleness_max"] == 0


def test_sync_mode_records_staleness_without_dropping():
    b = batch_of(["ok"] * 4, [0, 0, 0, 0], MASKS)
    _, status, stale, m = apply_episode_outcomes(b, step=3, max_staleness=1, enforce_staleness=False)
    assert list(status) == ["ok"] * 4 and stale.tolist() == [2] * 4 and m["agent/staleness_max"] == 2


class Loop:
    """The parts of ExtRayPPOTrainer's loop the mixin hooks, recording events (generation takes 0.2 s)."""

    def __init__(self, mode: str, steps: int):
        self.config = OmegaConf.create(
            {
                "actor_rollout_ref": {"rollout": {"agent": {"default_agent_loop": "external_agent"}}},
                "external_agent": {"command": sys.executable, "mode": mode},
                "trainer": {},
            }
        )
        self.global_steps, self.total_training_steps, self.events = 0, steps, []
        self.lock = threading.Lock()

    def log(self, *e):
        with self.lock:
            self.events.append(e)

    def training_batches(self):
        for k in range(1, 10):
            self.log("gen_start", k, self.global_steps)
            time.sleep(0.2)
            self.log("gen_end", k)
            yield k

    def sleep_rollout(self):
        self.log("sleep")

    def sync_weights(self, timing_raw):
        self.log("sync", self.global_steps)


class AgentLoop(AgentEpisodesMixin, Loop):
    pass


def drive(t: AgentLoop):
    """What ExtRayPPOTrainer.fit does around the mixin's hooks."""
    batches = t.training_batches()
    for step in range(1, t.total_training_steps + 1):
        t.global_steps = step
        assert next(batches) == step
        t.sleep_rollout()
        time.sleep(0.05)  # the update
        t.sync_weights({})
    batches.close()
    return t.events


def test_async_runs_one_step_ahead_and_syncs_after_it():
    ev = drive(AgentLoop("async", 3))
    starts = {e[1]: e[2] for e in ev if e[0] == "gen_start"}
    # batch k+1 starts while step k trains (global_steps == k): one update older than the weights it trains
    assert starts == {1: 1, 2: 1, 3: 2}  # and nothing runs ahead past the last step
    for k in (1, 2):  # the weight sync after step k waits for the episodes running ahead
        assert ev.index(("gen_end", k + 1)) < ev.index(("sync", k))
    assert ("sleep",) not in ev  # the replicas keep serving the running agents


def test_sync_generates_each_batch_in_its_own_step():
    ev = drive(AgentLoop("sync", 3))
    assert {e[1]: e[2] for e in ev if e[0] == "gen_start"} == {1: 1, 2: 2, 3: 3}
    assert ev.count(("sleep",)) == 3


class CheckpointedLoop(Loop):
    """Loop with a dataloader position that checkpoints (as verl's data.pt does) and a real DataProto per batch."""

    def __init__(self, mode: str, steps: int, root):
        super().__init__(mode, steps)
        self.config.trainer.default_local_dir = str(root)
        self.root, self.drawn = root, 0

    def training_batches(self):
        while True:
            self.drawn += 1
            k = self.drawn
            self.log("gen_start", k, self.global_steps)
            time.sleep(0.05)
            rows = DataProto.from_dict(
                tensors={"responses": torch.full((2, 3), k)}, non_tensors={"uid": np.array([f"t{k}"] * 2, dtype=object)}
            )
            yield rows, {"training/epoch": 0}, {}

    # the trainer base's part of the extension state: none here (the agent mixin adds its own key on top)
    def extra_state_dict(self) -> dict:
        return {}

    def load_extra_state_dict(self, state: dict) -> None:
        pass

    def _save_checkpoint(self):  # as the trainer base: the extension state first, each key in a file of its own, then
        # verl's part (here the dataloader position)
        folder = self.root / f"global_step_{self.global_steps}"
        folder.mkdir()
        for key, value in self.extra_state_dict().items():
            (folder / f"{key}.pkl").write_bytes(pickle.dumps(value))
        (folder / "drawn").write_text(str(self.drawn))

    def _resumed_step_folder(self):
        return str(max(self.root.glob("global_step_*"), key=lambda p: int(p.name.split("_")[-1])))

    def _load_checkpoint(self):
        folder = Path(self._resumed_step_folder())
        self.global_steps = int(folder.name.rsplit("_", 1)[-1])
        self.drawn = int((folder / "drawn").read_text())
        self.load_extra_state_dict({p.stem: pickle.loads(p.read_bytes()) for p in folder.glob("*.pkl")})


class CheckpointedAgentLoop(AgentEpisodesMixin, CheckpointedLoop):
    pass


def train(t, first: int, last: int, save_at=(), crash_after=None):
    """fit's order: draw, update, save (every save_at step), sync. Returns the batches trained, by task number."""
    batches, trained = t.training_batches(), []
    for step in range(first, last + 1):
        t.global_steps = step
        rows, _, _ = next(batches)
        trained.append(int(rows.batch["responses"][0, 0]))
        assert rows.non_tensor_batch["uid"].tolist() == [f"t{trained[-1]}"] * 2
        if step in save_at:
            t._save_checkpoint()
        if step == crash_after:
            break
        t.sync_weights({})
    batches.close()
    return trained


def test_async_resume_trains_the_batch_that_was_running_ahead(tmp_path):
    run1 = CheckpointedAgentLoop("async", 5, tmp_path)
    assert train(run1, 1, 5, save_at=(2,), crash_after=3) == [1, 2, 3]
    # the checkpoint of step 2 was written after batch 3 was drawn (its dataloader position says 3): it holds batch 3
    assert (tmp_path / "global_step_2" / "drawn").read_text() == "3"
    assert (tmp_path / "global_step_2" / "agent_ahead.pkl").exists()

    run2 = CheckpointedAgentLoop("async", 5, tmp_path)
    run2._load_checkpoint()
    assert run2.global_steps == 2
    # every task trained once over the two runs' steps 1-2 and 3-5: batch 3 comes from the checkpoint, not regenerated
    assert train(run2, 3, 5) == [3, 4, 5]
    assert [e[1] for e in run2.events if e[0] == "gen_start"] == [4, 5]


def test_sync_checkpoint_holds_no_batch(tmp_path):
    run = CheckpointedAgentLoop("sync", 3, tmp_path)
    assert train(run, 1, 3, save_at=(2,)) == [1, 2, 3]
    assert not (tmp_path / "global_step_2" / "agent_ahead.pkl").exists()


def test_fast_dapo_screening_judges_only_ok_episodes():
    from recipe.fast_dapo.fast_dapo_ray_trainer import AgentFastDAPOTrainer

    rows = batch_of(["ok", "crashed", "timeout", "ok"], [0, 0, 0, 0], MASKS)
    assert ok_episode_rows(rows).tolist() == [True, False, False, True]
    assert AgentFastDAPOTrainer.screening_valid_rows(None, rows).tolist() == [True, False, False, True]
    del rows.non_tensor_batch["agent_status"]  # not an agent batch: every row counts
    assert ok_episode_rows(rows) is None
