"""Trainer side of agent episodes: dropped episodes out of their advantage group, staleness, counts, the ledger,
and the async mode.

`AgentEpisodesMixin` goes in front of any `ExtRayPPOTrainer` subclass (ready-made: `AgentPPOTrainer` here for plain
PPO/GRPO; each recipe composes its own next to its trainer: `AgentFastDAPOTrainer` in
`recipe/fast_dapo/fast_dapo_ray_trainer.py`, `AgentComposerTrainer` in `recipe/composer/composer_ray_trainer.py`;
select with `trainer.trainer_cls=...`). Before each training step it

- in async mode, drops episodes more than `external_agent.max_staleness` policy updates old (status `stale`, see
  `episode.staleness`); the staleness of every episode is recorded (column `agent_staleness`, the ledger);
- gives every dropped episode's row (agent_status != ok) a uid of its own and response mask 0, so it neither adds
  loss nor shifts its task's group mean/std (the other episodes of the task are the group);
- records the step in the episode ledger (`verl_ext.agent.ledger`: refuses an episode id seen before, so an episode
  is never trained twice; `external_agent.episode_log`, default `episodes.jsonl` beside
  `trainer.jsonl_metrics_path`);
- logs `agent/episodes`, `agent/ok`, `agent/dropped/<status>` (every status, 0 included), `agent/rewrites`,
  `agent/rounds_mean`, `agent/staleness_max` in the step's metrics, and the drift accounting of the gateway
  (`core.Drift`): `agent/drift/extended`, `agent/drift/split/<reason>` (every reason, 0 included),
  `agent/tool_faults/<kind>`, `agent/drift/splits_per_1k_rounds`; per episode in the ledger, and summed over the
  run in `drift_summary.json` beside it (printed when training ends); and the episodes' tool use
  (`verl_ext.agent.tool_use`): `agent/tool_call_frac`, `agent/tool_calls_mean`, `agent/tool_result_in_answer_frac`.

Modes (`external_agent.mode`):
- `sync` (default): all episodes of a step finish before its update (on-policy, staleness 0).
- `async`: the seed design's buffer flow with a one-step buffer. When step k's batch is handed to training, step
  k+1's episodes start in a background thread against the current (not yet updated) weights, so agent time overlaps
  the update. The weight sync after step k waits for them to finish (an episode never straddles two weight
  versions), so step k+1 trains on episodes exactly 1 update stale; the bound is enforced per trajectory from the
  weight version the rollout stamped on its rounds. The rollout replicas are not put to sleep during the update in
  this mode (they are serving the next step's agents): on a GPU that needs memory for both, as in verl's own
  fully-async setups. A checkpoint saved while a batch runs ahead holds that batch (key `agent_ahead` of the
  extension state, `verl_ext_state.pt`): its tasks are already taken from the dataloader, so a resume trains it first
  instead of losing it.
"""

from __future__ import annotations

import concurrent.futures
import json
from collections import Counter
from pathlib import Path

import numpy as np
from verl import DataProto

from verl_ext.agent.episode import DROP_STATUSES, stale_mask, staleness
from verl_ext.agent.gateway.core import SPLIT_REASONS, TOOL_FAULTS
from verl_ext.agent.ledger import EpisodeLedger
from verl_ext.agent.settings import AgentSettings, uses_external_agent
from verl_ext.agent.tool_use import tool_use_metrics
from verl_ext.trainer.ppo_trainer import ExtRayPPOTrainer

_END = object()


def episode_columns_metrics(status: np.ndarray, rounds: np.ndarray, segments: np.ndarray) -> dict[str, float]:
    """The step's episode counters from the batch's agent columns (pure)."""
    status = np.asarray(status).astype(str)
    m = {"agent/episodes": float(len(status)), "agent/ok": float((status == "ok").sum())}
    for s in DROP_STATUSES:
        m[f"agent/dropped/{s}"] = float((status == s).sum())
    m["agent/rewrites"] = float(np.maximum(np.asarray(segments, dtype=np.int64) - 1, 0).sum())
    m["agent/rounds_mean"] = float(np.asarray(rounds, dtype=np.float64).mean()) if len(status) else 0.0
    return m


def drift_metrics(column) -> tuple[dict[str, float], dict[int, dict]]:
    """The step's drift counters from the `agent_drift` column (JSON per episode, `core.Drift.as_dict`), and the
    parsed rows that are worth a ledger entry (more than one round joined, or a tool-call fault). Pure."""
    total, notable = Counter(), {}
    for i, raw in enumerate(column):
        d = json.loads(raw) if isinstance(raw, str) else dict(raw)
        total["extended"] += d.get("extended", 0)
        for r, n in d.get("split", {}).items():
            total[f"split/{r}"] += n
        for k, n in d.get("tool_faults", {}).items():
            total[f"tool_faults/{k}"] += n
        if d.get("extended") or d.get("split") or d.get("tool_faults"):
            notable[i] = d
    m = {"agent/drift/extended": float(total["extended"])}
    for r in SPLIT_REASONS:
        m[f"agent/drift/split/{r}"] = float(total[f"split/{r}"])
    for k in TOOL_FAULTS:
        m[f"agent/tool_faults/{k}"] = float(total[f"tool_faults/{k}"])
    splits = sum(total[f"split/{r}"] for r in SPLIT_REASONS)
    joins = splits + total["extended"]  # rounds after the first of each episode
    m["agent/drift/splits_per_1k_rounds"] = 1000.0 * splits / joins if joins else 0.0
    return m, notable


def ok_episode_rows(rows: DataProto) -> np.ndarray | None:
    """Which rows are finished episodes (`agent_status` "ok"); None when the batch is not one of agent episodes."""
    status = rows.non_tensor_batch.get("agent_status")
    return None if status is None else np.asarray(status).astype(str) == "ok"


def versions_of(column) -> list[int | None]:
    """The `agent_policy_version` column with -1 (the rollout reported no version) as None."""
    return [None if v is None or int(v) < 0 else int(v) for v in column]


class AgentEpisodesMixin:
    # what `settings.check_config` asks of `trainer.trainer_cls` (an attribute, so the settings need not import this)
    handles_agent_episodes = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.agent_settings = (
            AgentSettings.from_mapping(self.config.get("external_agent")) if uses_external_agent(self.config) else None
        )
        self._episode_ledger: EpisodeLedger | None = None
        self._prefetch: concurrent.futures.Future | None = None
        self._resumed_ahead = _END  # the checkpoint's batch that was running ahead, trained first on resume
        self._drift_totals: Counter = Counter()  # drift counters summed over the steps this process trained

    @property
    def agent_async(self) -> bool:
        return self.agent_settings is not None and self.agent_settings.mode == "async"

    def _episode_log_path(self) -> Path | None:
        if self.agent_settings is None:
            return None
        if self.agent_settings.episode_log:
            return Path(self.agent_settings.episode_log)
        metrics_path = self.config.trainer.get("jsonl_metrics_path")
        return Path(metrics_path).with_name("episodes.jsonl") if metrics_path else None

    def _ledger(self) -> EpisodeLedger | None:
        if self._episode_ledger is None and (path := self._episode_log_path()) is not None:
            # First call is at the first step trained by this process: global_steps - 1 is the checkpoint's step.
            self._episode_ledger = EpisodeLedger(path, resume_from_step=self.global_steps - 1)
        return self._episode_ledger

    # ------------------------------------------------------------------ async: the next step's episodes run ahead
    def training_batches(self):
        batches = super().training_batches()
        if not self.agent_async:
            yield from batches
            return
        pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="agent-episodes")
        try:
            if self._resumed_ahead is not _END:
                fut = concurrent.futures.Future()
                fut.set_result(self._resumed_ahead)
                self._resumed_ahead = _END
            else:
                fut = pool.submit(next, batches, _END)
            while True:
                item = fut.result()
                if item is _END:
                    return
                # no run-ahead past the last step (its episodes would never be trained)
                ahead = self.global_steps < self.total_training_steps
                self._prefetch = fut = pool.submit(next, batches, _END) if ahead else None
                yield item
                if fut is None:
                    fut = pool.submit(next, batches, _END)
        finally:
            self._prefetch = None
            pool.shutdown(wait=True, cancel_futures=True)

    def sleep_rollout(self) -> None:
        if not self.agent_async:  # async: the replicas are serving the next step's episodes
            super().sleep_rollout()

    def extra_state_dict(self) -> dict:
        # The trainer writes this state before verl's part of the checkpoint, the dataloader's (and a curriculum's)
        # position: waiting here for the batch running ahead puts that batch into the checkpoint with the position
        # after it, or a resume would never train it.
        state = super().extra_state_dict()
        item = self._prefetch.result() if self._prefetch is not None else _END
        if item is not _END:
            state["agent_ahead"] = item
        return state

    def load_extra_state_dict(self, state: dict) -> None:
        super().load_extra_state_dict(state)
        if self.agent_async and "agent_ahead" in state:
            self._resumed_ahead = state["agent_ahead"]

    def sync_weights(self, timing_raw: dict) -> None:
        if self._prefetch is not None:  # the episodes running ahead finish on the weights they started with
            concurrent.futures.wait([self._prefetch])
        super().sync_weights(timing_raw)

    # ------------------------------------------------------------------ per step
    def prepare_batch(self, batch: DataProto, step) -> DataProto:
        batch = super().prepare_batch(batch, step)
        if "agent_status" in batch.non_tensor_batch:
            ids, status, stale_n, m = apply_episode_outcomes(
                batch, self.global_steps, self.agent_settings.max_staleness, enforce_staleness=self.agent_async
            )
            drift = {}
            if "agent_drift" in batch.non_tensor_batch:
                dm, notable = drift_metrics(batch.non_tensor_batch["agent_drift"])
                m.update(dm)
                self._drift_totals.update({k: v for k, v in dm.items() if "per_1k" not in k})
                drift = {ids[i]: d for i, d in notable.items()}
            ledger = self._ledger()
            if ledger is not None:  # before the update: a crash after it leaves the step in the ledger, as the log
                ledger.record(self.global_steps, ids, list(status), list(stale_n), drift=drift)
            step.metrics.update(m)
        return batch

    def on_run_end(self) -> None:
        super().on_run_end()
        if self._episode_ledger is not None:
            self._episode_ledger.close()
        self._write_drift_summary()

    def _write_drift_summary(self) -> None:
        """The run summary of the gateway's drift accounting: a closing line (printed by the driver process, after
        the trainer's own), and `drift_summary.json` beside the ledger."""
        if not self._drift_totals:
            return
        t = {k.removeprefix("agent/"): int(v) for k, v in sorted(self._drift_totals.items())}
        splits = sum(v for k, v in t.items() if k.startswith("drift/split/"))
        joins = splits + t.get("drift/extended", 0)
        t["drift/splits_per_1k_rounds"] = round(1000.0 * splits / joins, 3) if joins else 0.0
        self.closing_lines.append(f"[agent] drift over the run: {json.dumps(t)}")
        if (path := self._episode_log_path()) is not None:
            path.with_name("drift_summary.json").write_text(json.dumps(t, indent=1) + "\n")


def apply_episode_outcomes(batch: DataProto, step: int, max_staleness: int, enforce_staleness: bool):
    """In place on the batch about to train at `step`: staleness per episode (column `agent_staleness`), too-stale
    episodes marked `stale` when enforced, every dropped row out of its group (a uid of its own) with response mask
    0. Returns (episode ids, statuses, staleness, the step's agent metrics)."""
    nt = batch.non_tensor_batch
    ids = [str(e) for e in nt["agent_episode_id"]]
    status = nt["agent_status"].astype(str).astype(object)
    versions = versions_of(nt["agent_policy_version"])
    stale_n = staleness(step, versions)
    if enforce_staleness:  # async mode; sync mode only records it (0, except in fast DAPO, whose kept prompts'
        # screening episodes are older by design and governed by the recipe's own bound)
        status[stale_mask(step, versions, max_staleness) & (status == "ok")] = "stale"
    nt["agent_status"], nt["agent_staleness"] = status, stale_n
    dropped = status != "ok"
    if dropped.any():
        uid = nt["uid"].copy()
        uid[dropped] = [f"{u}/dropped/{e}" for u, e in zip(uid[dropped], np.asarray(ids)[dropped], strict=True)]
        nt["uid"] = uid
        batch.batch["response_mask"][torch_index(dropped)] = 0
    m = episode_columns_metrics(status, nt["agent_rounds"], nt["agent_segments"])
    ok = ~dropped
    m["agent/staleness_max"] = float(stale_n[ok].max()) if ok.any() else 0.0
    m.update(token_metrics(batch, ok))
    if "agent_tool_calls" in nt:  # every episode of the step, dropped ones included
        m.update(tool_use_metrics(nt["agent_tool_calls"], nt["agent_tool_result_in_answer"]))
    return ids, status, stale_n, m


def token_metrics(batch: DataProto, ok: np.ndarray) -> dict[str, float]:
    """Mean per trained episode of its policy tokens (mask 1) and environment tokens (mask 0 inside the response:
    tool results, user turns, template markers between rounds)."""
    if not ok.any():
        return {"agent/policy_tokens_mean": 0.0, "agent/env_tokens_mean": 0.0}
    mask = batch.batch["response_mask"][torch_index(ok)]
    width = mask.shape[1]
    inside = batch.batch["attention_mask"][torch_index(ok)][:, -width:].bool()
    policy = mask.bool() & inside
    return {
        "agent/policy_tokens_mean": float(policy.sum(-1).float().mean()),
        "agent/env_tokens_mean": float((inside & ~policy).sum(-1).float().mean()),
    }


def torch_index(mask: np.ndarray):
    import torch

    return torch.from_numpy(np.asarray(mask, dtype=bool))


class AgentPPOTrainer(AgentEpisodesMixin, ExtRayPPOTrainer):
    """Plain PPO/GRPO on agent episodes (`verl_ext.trainer.agent_main`'s default `trainer.trainer_cls`)."""
