"""Bookkeeping for two-phase curriculum sampling ("fast DAPO", SPEED-RL, arXiv 2506.09016).

Algorithm (docs/ALGORITHMS.md section 5). Screening: sample ``n`` responses for each fresh prompt and keep the prompt
iff the filter metric's std over them is > 0 (its pass rate is strictly inside (0, 1)). Continuation: sample
``n_continue = N - n`` more for each kept prompt; the prompt's N responses form one training group. One
generation call per iteration carries both the screening of fresh prompts and the continuation of the prompts
kept by the previous call. Any n and N work: the repeat count is set per prompt (``sample_level_repeat``).

Modes, for side-by-side comparison in one trainer:
- ``fast``:  the two-phase scheme above (needs n >= 2: the std of one response is always 0).
- ``dapo``:  verl-recipe DAPO dynamic sampling: N responses per fresh prompt in one shot, drop groups whose metric
  is uniform, keep mixed ones. As in the recipe, mixed groups beyond the training batch are dropped when a batch is
  taken (``get_training_data``; counted in ``surplus_groups_dropped``), not kept for the next step: they would be
  trained on one update late.
- ``plain``: N responses per prompt, every group goes to training (no filter).

Assumptions: the caller assigns a unique ``uid`` string per fresh prompt; generated rows come back (in any order,
possibly with pad rows from ``pad_to_multiple``) carrying their ``uid`` and phase column, and every prompt sent
comes back with exactly its repeat count (checked: a lost or duplicated response is an error, never silent).
"keep iff std > 0" is evaluated as ``max != min`` over the group, which is the same predicate without the
round-off of a variance (a group of equal values 0.7 must not look mixed).

State, one ``DataProto`` (or None) per stage, rows in FIFO order:
  prompts_for_first_generation_phase   fresh prompt rows (one per prompt) awaiting screening
  prompts_for_second_generation_phase  kept prompt rows awaiting continuation (copies of the fresh rows, so they
                                       have the fresh rows' exact schema and can share one fused batch)
  prompts_in_flight                    prompt rows of the pending generation call, with their phase
  screened_responses                   the n screening responses of kept prompts awaiting continuation
  prompts_for_training                 complete groups of N responses, each uid's rows contiguous
Buffered rows carry no meta_info (verl's concat refuses differing meta_info, e.g. per-call timings).

Optional pass-rate memory (``memory=``; GRESO, arXiv 2506.02177; rule in ``verl_ext.curriculum.memory``): fresh
prompts that screened uniform in an earlier epoch may be skipped before screening (fast and dapo modes).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import torch
from verl import DataProto

from verl_ext.curriculum.dataproto_ops import PAD_KEY
from verl_ext.curriculum.memory import MemorySettings, PassRateMemory, prompt_keys, uniform_outcome
from verl_ext.curriculum.screen_size import kept_prompts_wanted, recent_keep_rate, screening_size

PHASE_KEY = "__phase__"
SCREEN = "screen"
CONTINUE = "continue"
MODES = ("fast", "dapo", "plain")
BUFFERS = (
    "prompts_for_first_generation_phase",
    "prompts_for_second_generation_phase",
    "prompts_in_flight",
    "screened_responses",
    "prompts_for_training",
)
COUNTERS = (
    "prompts_screened",  # prompts whose screening responses came back (dapo/plain: all prompts generated for)
    "prompts_kept",  # screened prompts with a mixed metric (plain: all)
    "discarded_all_correct",  # uniform groups with metric > 0.5
    "discarded_all_wrong",  # uniform groups with metric <= 0.5
    "responses_generated",  # generated rows, pad rows excluded
    "tokens_generated",  # sum of response_mask over generated rows (0 if the rows have no response_mask)
    "generation_calls",  # get_generation_inputs() calls
    "generation_calls_since_training",  # reset by get_training_data(); for the trainer's max_num_gen_batches
    "groups_completed",  # groups of N that reached prompts_for_training
    "training_groups_emitted",  # groups handed out by get_training_data()
    "surplus_groups_dropped",  # dapo: ready groups beyond the batch, dropped by get_training_data() (the recipe's trim)
    "prompts_skipped_by_memory",  # fresh prompts the pass-rate memory did not queue for screening
)
STATE_VERSION = 3  # 2: pass-rate memory state and its counter; 3: screening history (1 and 2 still load)
SCREEN_HISTORY = 64  # (screened, kept) of the most recent screening calls kept for the keep-rate estimate


class DataController:
    """Holds prompts and responses between generation calls and hands out full training batches.

    Args:
        train_batch_size: groups (prompts) per training step. Recommended: ``data.train_batch_size``.
        n: screening responses per fresh prompt (``actor_rollout_ref.rollout.n``); fast mode needs n >= 2.
            Recommended 4 for N = 16 (SPEED-RL).
        n_continue: responses added to each kept prompt (``rollout.n_continue`` = N - n), >= 0.
        mode: "fast" (two-phase), "dapo" (N in one shot, drop uniform groups) or "plain" (N, no filter).
            dapo and plain generate N = n + n_continue responses per prompt in one shot.
        filter_metric: non_tensor_batch column of the generated rows used by the keep rule ("acc", "score" or any
            reward extra key); default "acc".
        uid_key: non_tensor_batch column holding the prompt id; default "uid" (verl's).
        memory: pass-rate memory settings (``MemorySettings`` or a mapping of all its fields, e.g. the recipe's
            ``curriculum.memory`` node); None or ``enable: false`` = off. When on (fast and dapo modes), fresh prompts
            that screened uniform in an earlier epoch may be skipped by ``add_fresh_prompts`` (GRESO-style rule in
            ``verl_ext.curriculum.memory``); the memory is part of ``state_dict()``.
    """

    def __init__(
        self,
        train_batch_size: int,
        n: int,
        n_continue: int = 0,
        mode: str = "fast",
        filter_metric: str = "acc",
        uid_key: str = "uid",
        memory: MemorySettings | Mapping | None = None,
    ):
        _check_config(train_batch_size, n, n_continue, mode)
        settings = memory if isinstance(memory, MemorySettings | None) else MemorySettings.from_mapping(memory)
        if settings is not None and settings.enable and mode == "plain":
            raise ValueError(
                "DataController: the pass-rate memory skips prompts that would give no signal; plain sampling "
                "trains on every group, so the memory needs mode fast or dapo"
            )
        self.memory = PassRateMemory(settings) if settings is not None and settings.enable else None
        self.train_batch_size = int(train_batch_size)
        self.n = int(n)
        self.n_continue = int(n_continue)
        self.N = self.n + self.n_continue
        self.mode = mode
        self.filter_metric = filter_metric
        self.uid_key = uid_key
        # dapo and plain screen with all N responses; fast screens with n.
        self.n_screen = self.n if mode == "fast" else self.N
        self.prompts_for_first_generation_phase: DataProto | None = None
        self.prompts_for_second_generation_phase: DataProto | None = None
        self.prompts_in_flight: DataProto | None = None
        self.screened_responses: DataProto | None = None
        self.prompts_for_training: DataProto | None = None
        self._counts = dict.fromkeys(COUNTERS, 0)
        self.generation_counts: dict[str, int] = {}
        self.screen_history: list[tuple[int, int]] = []  # (prompts screened, prompts kept) per call, newest last

    # ------------------------------------------------------------------ trainer-facing API

    def add_fresh_prompts(self, batch: DataProto) -> int:
        """Queue fresh prompt rows (one row per prompt, unique ``uid`` strings) for screening. With the pass-rate
        memory on, prompts it skips are not queued (counted in ``prompts_skipped_by_memory``). Returns the number of
        prompts queued; check ``has_generation_inputs`` before ``get_generation_inputs``."""
        uids = self._uids(batch, "add_fresh_prompts")
        if len(batch) == 0:
            return 0
        for marker in (PHASE_KEY, PAD_KEY):
            if marker in batch.non_tensor_batch:
                raise ValueError(f"add_fresh_prompts: the rows already carry '{marker}'; pass dataloader rows")
        if len(np.unique(uids)) != len(uids):
            raise ValueError("add_fresh_prompts: uids in the batch are not unique (one row per prompt expected)")
        clash = np.isin(uids, self._held_uids())
        if clash.any():
            raise ValueError(f"add_fresh_prompts: uids already held by the controller, e.g. {uids[clash][:3]}")
        fresh = _stripped(batch)
        if self.memory is not None:
            skip = self.memory.offer(self._memory_keys(fresh, "add_fresh_prompts"))
            self._counts["prompts_skipped_by_memory"] += int(skip.sum())
            fresh = _nonempty(fresh.select_idxs(~skip))
        self.prompts_for_first_generation_phase = _concat([self.prompts_for_first_generation_phase, fresh])
        return _len(fresh)

    @property
    def has_generation_inputs(self) -> bool:
        """True iff ``get_generation_inputs`` has prompts to send (fresh ones queued or kept ones to continue)."""
        return (
            self.prompts_for_first_generation_phase is not None or self.prompts_for_second_generation_phase is not None
        )

    def screening_target(self, cap: int, *, confidence: float, window: int) -> int:
        """Fresh prompts the next call should screen to keep what completes the next training batch
        (``verl_ext.curriculum.screen_size``): keep rate over the last ``window`` screening calls, at most ``cap``.
        No defaults: the recipe's ``curriculum.auto_gen_batch`` values live in fast_dapo.yaml."""
        wanted = kept_prompts_wanted(
            self.num_groups_ready, _len(self.prompts_for_second_generation_phase), self.train_batch_size
        )
        return screening_size(wanted, recent_keep_rate(self.screen_history, window), cap, confidence=confidence)

    def get_generation_inputs(self, max_fresh: int | None = None) -> DataProto:
        """One fused batch: each queued fresh prompt repeated n times (dapo/plain: N) with ``PHASE_KEY`` "screen",
        then each kept prompt repeated n_continue times with "continue". Sizes go to ``self.generation_counts``.
        ``max_fresh``: screen only the oldest ``max_fresh`` queued fresh prompts; the rest stay queued (None: all)."""
        if self.prompts_in_flight is not None:
            raise RuntimeError("get_generation_inputs: the previous generation has not been passed to update() yet")
        if max_fresh is not None and max_fresh < 0:
            raise ValueError(f"get_generation_inputs: max_fresh must be >= 0 or None, got {max_fresh}")
        fresh, kept = self.prompts_for_first_generation_phase, self.prompts_for_second_generation_phase
        if fresh is None and kept is None:
            raise RuntimeError("get_generation_inputs: nothing to generate; call add_fresh_prompts first")
        queued = None
        if fresh is not None and max_fresh is not None and max_fresh < len(fresh):
            fresh, queued = _nonempty(fresh[:max_fresh]), fresh[max_fresh:]
        if fresh is None and kept is None:
            raise RuntimeError("get_generation_inputs: max_fresh=0 and no kept prompt to continue")
        self.prompts_in_flight = _concat([_with_phase(fresh, SCREEN), _with_phase(kept, CONTINUE)])
        self.prompts_for_first_generation_phase, self.prompts_for_second_generation_phase = queued, None
        n_fresh, n_kept = _len(fresh), _len(kept)
        self.generation_counts = {
            "screen_prompts": n_fresh,
            "screen_responses": n_fresh * self.n_screen,
            "continue_prompts": n_kept,
            "continue_responses": n_kept * self.n_continue,
        }
        self._counts["generation_calls"] += 1
        self._counts["generation_calls_since_training"] += 1
        return self.prompts_in_flight.sample_level_repeat(self._repeats())

    def update(
        self, gen_output: DataProto, metric_values: np.ndarray | None = None, valid: np.ndarray | None = None
    ) -> None:
        """Take the generated rows of the pending call (any order; pad rows allowed and dropped).

        The filter metric is ``metric_values`` (one value per row of ``gen_output``) if given, else
        ``gen_output.non_tensor_batch[filter_metric]``; the stored rows carry it (as float64) in
        ``non_tensor_batch[filter_metric]``. ``valid`` (bool per row, default all true) marks responses the keep
        rule may look at: an invalid one (an agent episode that crashed or timed out) says nothing about the prompt's
        difficulty, so a prompt is kept when its valid screening responses disagree, and a prompt with no valid
        screening response counts as all wrong. Invalid rows are still stored and trained as the trainer decides.
        """
        if self.prompts_in_flight is None:
            raise RuntimeError("update: no pending generation (call get_generation_inputs first)")
        metric = self._metric(gen_output, metric_values)
        valid = np.ones(len(gen_output), dtype=bool) if valid is None else np.asarray(valid, dtype=bool).reshape(-1)
        if len(valid) != len(gen_output):
            raise ValueError(f"update: {len(valid)} validity flags for {len(gen_output)} rows")
        self._uids(gen_output, "update")
        if PHASE_KEY not in gen_output.non_tensor_batch:
            raise ValueError(f"update: the rows lack the '{PHASE_KEY}' column set by get_generation_inputs")
        real = ~np.asarray(gen_output.non_tensor_batch.get(PAD_KEY, np.zeros(len(gen_output))), dtype=bool)
        rows, metric, valid = _stripped(gen_output.select_idxs(real), drop=(PAD_KEY,)), metric[real], valid[real]
        # Rows keep the values the keep rule saw, so groups from different calls share one schema either way.
        rows.non_tensor_batch[self.filter_metric] = metric
        prompt_of_row = self._match_in_flight(rows)

        self._counts["responses_generated"] += len(rows)
        if rows.batch is not None and "response_mask" in rows.batch.keys():
            self._counts["tokens_generated"] += int(rows.batch["response_mask"].sum())
        continued = rows.non_tensor_batch[PHASE_KEY] == CONTINUE
        # Older prompts first: completed continuations join the training FIFO before this call's screened groups.
        self._complete_continuations(rows.select_idxs(continued), prompt_of_row[continued])
        screened = ~continued & valid
        self._screen(rows.select_idxs(~continued), prompt_of_row[~continued], metric[screened], prompt_of_row[screened])
        self.prompts_in_flight = None

    def is_ready_for_training(self) -> bool:
        return self.num_groups_ready >= self.train_batch_size

    def get_training_data(self) -> DataProto:
        """The oldest ``train_batch_size`` groups, N rows each, each uid's rows contiguous (screening first).
        Groups beyond that stay buffered for the next step (fast, plain) or are dropped (dapo, as verl-recipe)."""
        if not self.is_ready_for_training():
            raise RuntimeError(
                f"get_training_data: {self.num_groups_ready} of {self.train_batch_size} groups ready; "
                "check is_ready_for_training() first"
            )
        take = self.train_batch_size * self.N
        ready = self.prompts_for_training
        self.prompts_for_training = ready[take:] if len(ready) > take else None
        if self.mode == "dapo" and self.prompts_for_training is not None:
            self._counts["surplus_groups_dropped"] += len(self.prompts_for_training) // self.N
            self.prompts_for_training = None
        self._counts["training_groups_emitted"] += self.train_batch_size
        self._counts["generation_calls_since_training"] = 0
        return ready[:take]

    @property
    def num_groups_ready(self) -> int:
        return _len(self.prompts_for_training) // self.N

    @property
    def counters(self) -> dict[str, float]:
        """Cumulative counters, two ratios (nan until defined) and the current buffer sizes."""
        c: dict[str, float] = dict(self._counts)
        c["responses_per_training_group"] = _ratio(c["responses_generated"], c["training_groups_emitted"])
        c["keep_rate"] = _ratio(c["prompts_kept"], c["prompts_screened"])
        c["prompts_awaiting_screening"] = _len(self.prompts_for_first_generation_phase)
        c["prompts_awaiting_continuation"] = _len(self.screened_responses) // self.n_screen
        c["groups_ready"] = self.num_groups_ready
        c["memory_prompts"] = 0 if self.memory is None else len(self.memory)
        return c

    # ------------------------------------------------------------------ checkpointing

    def state_dict(self) -> dict:
        """Plain dict (tensors, numpy arrays, ints): save it with torch.save (load with weights_only=False, the
        non-tensor columns are numpy object arrays) or pickle. Tensors are cloned: the snapshot is independent."""
        return {
            "version": STATE_VERSION,
            "config": {"n": self.n, "n_continue": self.n_continue, "mode": self.mode, "uid_key": self.uid_key},
            "counters": dict(self._counts),
            "buffers": {name: _to_plain(getattr(self, name)) for name in BUFFERS},
            "memory": None if self.memory is None else self.memory.state_dict(),
            "screen_history": [list(h) for h in self.screen_history],
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore buffers, counters and the pass-rate memory. n, n_continue, mode and uid_key must match (they
        shape the buffers); train_batch_size, filter_metric and the memory constants are taken from this controller's
        constructor. A checkpoint without memory state (memory off, or a version 1 checkpoint) resumes with an empty
        memory; memory state in the checkpoint is ignored when this controller's memory is off. A checkpoint before
        version 3 has no screening history: the keep-rate estimate starts afresh."""
        version = state.get("version")
        if version not in (1, 2, STATE_VERSION):
            raise ValueError(f"load_state_dict: unsupported state version {version!r}")
        mine = {"n": self.n, "n_continue": self.n_continue, "mode": self.mode, "uid_key": self.uid_key}
        if state["config"] != mine:
            raise ValueError(f"load_state_dict: checkpoint config {state['config']} does not match {mine}")
        counters = dict(state["counters"])
        if version == 1:
            counters.setdefault("prompts_skipped_by_memory", 0)
        if set(counters) != set(COUNTERS):
            raise ValueError(f"load_state_dict: counters {sorted(counters)} != expected {sorted(COUNTERS)}")
        if self.memory is not None:
            memory = PassRateMemory(self.memory.settings)
            if state.get("memory") is not None:
                memory.load_state_dict(state["memory"])
            self.memory = memory
        self._counts = counters
        self.screen_history = [(int(s), int(k)) for s, k in state.get("screen_history", [])]
        for name in BUFFERS:
            setattr(self, name, _from_plain(state["buffers"][name]))

    # ------------------------------------------------------------------ internals

    def _repeats(self) -> np.ndarray:
        phase = self.prompts_in_flight.non_tensor_batch[PHASE_KEY]
        return np.where(phase == SCREEN, self.n_screen, self.n_continue)

    def _uids(self, data: DataProto, where: str) -> np.ndarray:
        if self.uid_key not in data.non_tensor_batch:
            raise ValueError(
                f"{where}: no non_tensor_batch column '{self.uid_key}'; available: {sorted(data.non_tensor_batch)}"
            )
        return data.non_tensor_batch[self.uid_key]

    def _held_uids(self) -> np.ndarray:
        held = [getattr(self, name) for name in BUFFERS]
        columns = [d.non_tensor_batch[self.uid_key] for d in held if d is not None]
        return np.concatenate([np.zeros(0, dtype=object), *columns])

    def _memory_keys(self, data: DataProto, where: str) -> np.ndarray:
        column = self.memory.settings.key
        if column not in data.non_tensor_batch:
            raise ValueError(
                f"{where}: the pass-rate memory keys prompts by non_tensor_batch column '{column}', which the rows "
                f"lack (available: {sorted(data.non_tensor_batch)}); set curriculum.memory.key"
            )
        return prompt_keys(data.non_tensor_batch[column])

    def _metric(self, gen_output: DataProto, metric_values) -> np.ndarray:
        if metric_values is None:
            if self.filter_metric not in gen_output.non_tensor_batch:
                raise ValueError(
                    f"update: filter metric '{self.filter_metric}' not in the generated rows' non_tensor_batch "
                    f"(available: {sorted(gen_output.non_tensor_batch)}); pass metric_values or set filter_metric"
                )
            metric_values = gen_output.non_tensor_batch[self.filter_metric]
        metric = np.asarray(metric_values, dtype=np.float64).reshape(-1)
        if len(metric) != len(gen_output):
            raise ValueError(f"update: {len(metric)} metric values for {len(gen_output)} rows")
        if not np.isfinite(metric).all():
            raise ValueError(f"update: filter metric '{self.filter_metric}' has non-finite values")
        return metric

    def _match_in_flight(self, rows: DataProto) -> np.ndarray:
        """Index into prompts_in_flight of each row; checks every prompt came back exactly its repeat count."""
        sent = self.prompts_in_flight.non_tensor_batch
        row_uid, row_phase = rows.non_tensor_batch[self.uid_key], rows.non_tensor_batch[PHASE_KEY]
        prompt = _positions(sent[self.uid_key], row_uid)
        if (prompt < 0).any():
            raise ValueError(f"update: rows with uids that were not sent, e.g. {row_uid[prompt < 0][:3]}")
        if (sent[PHASE_KEY][prompt] != row_phase).any():
            raise ValueError("update: some rows carry a phase different from the one their uid was sent with")
        got, expected = np.bincount(prompt, minlength=len(self.prompts_in_flight)), self._repeats()
        if (got != expected).any():
            bad = np.flatnonzero(got != expected)
            raise ValueError(
                f"update: {len(bad)} prompts came back with the wrong number of responses (lost or duplicated "
                f"rows), e.g. uid {sent[self.uid_key][bad[0]]}: expected {expected[bad[0]]}, got {got[bad[0]]}"
            )
        return prompt

    def _complete_continuations(self, rows: DataProto, prompt_of_row: np.ndarray) -> None:
        if len(rows) == 0:
            return
        held = self.screened_responses
        if held is None:
            raise AssertionError("internal: continuation rows came back but no screening responses are held")
        sent_uids = self.prompts_in_flight.non_tensor_batch[self.uid_key]
        held_prompt = _positions(sent_uids, held.non_tensor_batch[self.uid_key])
        joined = held_prompt >= 0
        groups = _concat([held.select_idxs(joined), rows])
        order = np.argsort(np.concatenate([held_prompt[joined], prompt_of_row]), kind="stable")
        self.screened_responses = _nonempty(held.select_idxs(~joined))
        self._add_ready(groups.select_idxs(order))

    def _screen(
        self, rows: DataProto, prompt_of_row: np.ndarray, metric: np.ndarray, metric_prompt: np.ndarray
    ) -> None:
        """rows: this call's screening rows; metric / metric_prompt: the valid ones' metric and prompt index."""
        if len(rows) == 0:
            return
        n_sent = len(self.prompts_in_flight)
        hi, lo = np.full(n_sent, -np.inf), np.full(n_sent, np.inf)
        np.maximum.at(hi, metric_prompt, metric)
        np.minimum.at(lo, metric_prompt, metric)
        nothing_valid = np.isinf(hi)
        hi[nothing_valid] = lo[nothing_valid] = 0.0  # no valid response: all wrong
        screened = self.prompts_in_flight.non_tensor_batch[PHASE_KEY] == SCREEN
        mixed = hi > lo
        keep = screened & (mixed | (self.mode == "plain"))
        self._counts["prompts_screened"] += int(screened.sum())
        self._counts["prompts_kept"] += int(keep.sum())
        self.screen_history = [*self.screen_history, (int(screened.sum()), int(keep.sum()))][-SCREEN_HISTORY:]
        self._counts["discarded_all_correct"] += int((screened & ~keep & (lo > 0.5)).sum())
        self._counts["discarded_all_wrong"] += int((screened & ~keep & (lo <= 0.5)).sum())
        if self.memory is not None:
            sent = self.prompts_in_flight.select_idxs(screened)
            self.memory.record(self._memory_keys(sent, "update"), uniform_outcome(lo[screened], hi[screened]))

        row_kept = keep[prompt_of_row]
        order = np.argsort(prompt_of_row[row_kept], kind="stable")
        kept_rows = rows.select_idxs(np.flatnonzero(row_kept)[order])
        if self.mode == "fast" and self.n_continue > 0:
            self.screened_responses = _concat([self.screened_responses, kept_rows])
            kept_prompts = _stripped(self.prompts_in_flight.select_idxs(keep), drop=(PHASE_KEY,))
            self.prompts_for_second_generation_phase = _concat([self.prompts_for_second_generation_phase, kept_prompts])
        else:
            self._add_ready(kept_rows)

    def _add_ready(self, groups: DataProto) -> None:
        if len(groups) % self.N:
            raise AssertionError(f"internal: {len(groups)} rows is not a whole number of groups of {self.N}")
        self._counts["groups_completed"] += len(groups) // self.N
        self.prompts_for_training = _concat([self.prompts_for_training, groups])


def _check_config(train_batch_size, n, n_continue, mode) -> None:
    if mode not in MODES:
        raise ValueError(f"DataController: unknown mode {mode!r}; expected one of {MODES}")
    for name, value, low in (("train_batch_size", train_batch_size, 1), ("n", n, 1), ("n_continue", n_continue, 0)):
        if not isinstance(value, int | np.integer) or value < low:
            raise ValueError(f"DataController: {name} must be an int >= {low}, got {value!r}")
    if mode == "fast" and n < 2:
        raise ValueError(f"DataController: fast mode needs n >= 2 (the std of {n} response is always 0), got n={n}")
    if mode == "dapo" and n + n_continue < 2:
        raise ValueError("DataController: dapo mode needs N = n + n_continue >= 2 (one response is never mixed)")


def _positions(keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Index of each query in ``keys`` (unique), -1 where absent. Vectorised with a sorted search."""
    if len(keys) == 0 or len(queries) == 0:
        return np.full(len(queries), -1, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    pos = np.clip(np.searchsorted(keys[order], queries), 0, len(keys) - 1)
    return np.where(keys[order][pos] == queries, order[pos], -1)


def _with_phase(data: DataProto | None, phase: str) -> DataProto | None:
    if data is None:
        return None
    column = np.full(len(data), phase, dtype=object)
    return DataProto(batch=data.batch, non_tensor_batch={**data.non_tensor_batch, PHASE_KEY: column}, meta_info={})


def _stripped(data: DataProto, drop: tuple[str, ...] = ()) -> DataProto:
    """Same rows without meta_info and without the ``drop`` columns, in containers of its own (so the caller's
    later ``pop``/``union`` on ``data`` cannot change what the controller holds)."""
    kept = {k: v for k, v in data.non_tensor_batch.items() if k not in drop}
    tensors = None if data.batch is None else data.batch.clone(recurse=False)
    return DataProto(batch=tensors, non_tensor_batch=kept, meta_info={})


def _concat(parts: list[DataProto | None]) -> DataProto | None:
    """verl's concat over the non-empty parts, with a clear error when their columns differ."""
    parts = [p for p in parts if p is not None and len(p) > 0]
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    for p in parts[1:]:
        for kind, a, b in (
            ("tensor", _keys(parts[0].batch), _keys(p.batch)),
            ("non-tensor", set(parts[0].non_tensor_batch), set(p.non_tensor_batch)),
        ):
            if a != b:
                raise ValueError(
                    f"DataController: rows from different calls have different {kind} columns: "
                    f"only in the older rows {sorted(a - b)}, only in the newer rows {sorted(b - a)}"
                )
    return DataProto.concat(parts)


def _keys(batch) -> set:
    return set() if batch is None else set(batch.keys())


def _nonempty(data: DataProto | None) -> DataProto | None:
    return data if data is not None and len(data) > 0 else None


def _len(data: DataProto | None) -> int:
    return 0 if data is None else len(data)


def _ratio(num: float, den: float) -> float:
    return num / den if den else math.nan


def _to_plain(data: DataProto | None) -> dict | None:
    if data is None:
        return None
    tensors = {} if data.batch is None else {k: v.detach().clone() for k, v in data.batch.items()}
    return {"tensors": tensors, "non_tensors": {k: v.copy() for k, v in data.non_tensor_batch.items()}}


def _from_plain(plain: dict | None) -> DataProto | None:
    if plain is None:
        return None
    tensors = {k: torch.as_tensor(v) for k, v in plain["tensors"].items()}
    return DataProto.from_dict(tensors=tensors or None, non_tensors=dict(plain["non_tensors"]))
