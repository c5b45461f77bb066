"""Cost metrics the campaign report derives from the logged ones, as a new campaign: the loaded records are left as
read, and each derived key goes on copies of them.

- Training time net of evaluation (NET_TIME_KEY): on every row that logged the training time, that time less the
  evaluations run so far during training (the row's own included): the validations, the large held-out evaluations
  and the held-out pass@k (EVAL_TIME_KEYS; what runs before training, step 0, is not in the training time and is not
  subtracted). The evaluations are the same in every condition of a campaign (same sets, same schedule), so they add
  a constant to each arm's cost at each evaluation and pull cost ratios towards 1; the net time is what the
  conditions spend differently.
- Informative groups trained (INFORMATIVE_KEY): on every row that logged a training batch, the groups with a mixed
  reward (the only ones with a non-zero group-relative advantage) trained on up to and including the row's step. The
  arms differ in what a step holds (plain trains every group it drew, dapo and fast only mixed ones), so accuracy
  against this count asks whether progress follows the informative groups, the unit the cost model prices
  (responses per informative group, docs/ALGORITHMS.md section 5).

Each function returns None (nothing to derive) when no run logged what it needs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from verl_ext.campaign.summary import Campaign, Records
from verl_ext.metrics_log.console import is_number
from verl_ext.metrics_log.keys import MIXED_FRAC_KEY, TRAIN_BATCH_GROUPS_KEY

VAL_TIME_KEY = "timing_s/testing"  # a step's validation time (verl's timer), in the step's training time
# every evaluation a step's training time holds (the trainer's timers: verl_ext/trainer/loop.py)
EVAL_TIME_KEYS = (VAL_TIME_KEY, "timing_s/heldout", "timing_s/pass_at_k")
NET_TIME_KEY = "time/train_net_of_val_s"  # derived: training time less the evaluations during training
INFORMATIVE_KEY = "curriculum/informative_groups_trained"  # derived: mixed groups trained on so far


def time_net_of_validation(campaign: Campaign, time_key: str) -> Campaign | None:
    """The campaign with NET_TIME_KEY beside `time_key` (module docstring); None if no run logged evaluation time."""
    if not any(is_number(r.get(k)) for r in _rows(campaign) for k in EVAL_TIME_KEYS):
        return None
    return _with_key(campaign, NET_TIME_KEY, lambda records: _net_of_validation(records, time_key))


def informative_groups(campaign: Campaign) -> Campaign | None:
    """The campaign with INFORMATIVE_KEY on the training steps (module docstring); None if no row logged both the
    training batch's groups and its mixed fraction."""
    if not any(is_number(r.get(TRAIN_BATCH_GROUPS_KEY)) and is_number(r.get(MIXED_FRAC_KEY)) for r in _rows(campaign)):
        return None
    return _with_key(campaign, INFORMATIVE_KEY, _informative_groups)


def _net_of_validation(records: Records, time_key: str) -> dict[int, float]:
    net, validating = {}, 0.0
    for i, r in _by_step(records):
        if r["step"] > 0:
            validating += sum(float(r[k]) for k in EVAL_TIME_KEYS if is_number(r.get(k)))
        if is_number(r.get(time_key)):
            net[i] = float(r[time_key]) - validating
    return net


def _informative_groups(records: Records) -> dict[int, float]:
    out, trained = {}, 0.0
    for i, r in _by_step(records):
        if is_number(r.get(TRAIN_BATCH_GROUPS_KEY)) and is_number(r.get(MIXED_FRAC_KEY)):
            trained += float(r[TRAIN_BATCH_GROUPS_KEY]) * float(r[MIXED_FRAC_KEY])
            out[i] = trained
    return out


def _rows(campaign: Campaign) -> Iterator[Mapping]:
    return (r for runs in campaign.values() for records in runs.values() for r in records)


def _by_step(records: Records) -> list[tuple[int, Mapping]]:
    """(index, record) in step order; rows of one step keep their order."""
    return sorted(enumerate(records), key=lambda item: item[1]["step"])


def _with_key(campaign: Campaign, key: str, values: Callable[[Records], dict[int, float]]) -> Campaign:
    """A copy of every run's records, `key` added to the rows `values(records)` ({row index: value}) gives."""
    out: dict[str, dict[int, list[dict]]] = {}
    for cond, runs in campaign.items():
        out[cond] = {}
        for seed, records in runs.items():
            derived = values(records)
            out[cond][seed] = [{**r, key: derived[i]} if i in derived else dict(r) for i, r in enumerate(records)]
    return out
