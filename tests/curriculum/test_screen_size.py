"""Auto screening size (curriculum.auto_gen_batch): the rule against slow references, and what it buys the
controller on a simulated policy (trained rows wait fewer updates, nothing lost)."""

import math

import numpy as np
import pytest
from scipy import stats
from verl import DataProto

from recipe.fast_dapo.config_check import DEFAULTS
from tests.curriculum.test_controller import SimulatedPolicy
from verl_ext.curriculum.controller import DataController
from verl_ext.curriculum.screen_size import (
    binomial_at_least,
    kept_prompts_wanted,
    recent_keep_rate,
    screening_size,
)

# The recipe's values (fast_dapo.yaml, the one place they are set): the library takes them as arguments.
AUTO = {k: v for k, v in DEFAULTS.value("curriculum.auto_gen_batch").items() if k in ("confidence", "window")}


@pytest.mark.parametrize(
    ("ready", "awaiting", "batch", "wanted"),
    [(0, 0, 8, 8), (0, 5, 8, 3), (3, 2, 8, 3), (8, 0, 8, 8), (0, 11, 8, 5), (7, 9, 8, 8), (0, 0, 1, 1)],
)
def test_kept_prompts_wanted_completes_the_next_uncovered_batch(ready, awaiting, batch, wanted):
    assert kept_prompts_wanted(ready, awaiting, batch) == wanted


@pytest.mark.parametrize("m", [1, 5, 17, 64])
@pytest.mark.parametrize("p", [0.03, 0.2, 0.5, 0.97])
def test_binomial_tail_matches_scipy(m, p):
    for k in range(m + 2):
        assert binomial_at_least(m, p, k) == pytest.approx(stats.binom.sf(k - 1, m, p), abs=1e-9)


def reference_screening_size(wanted, keep_rate, cap, confidence):
    """The rule as stated: the smallest m in 1..cap with P(Binomial(m, p) >= wanted) >= confidence, else cap."""
    if keep_rate is None or keep_rate <= 0:
        return cap
    for m in range(1, cap + 1):
        if stats.binom.sf(wanted - 1, m, keep_rate) >= confidence:
            return m
    return cap


@pytest.mark.parametrize("wanted", [1, 3, 8])
@pytest.mark.parametrize("keep_rate", [None, 0.0, 0.05, 0.25, 0.6, 1.0])
@pytest.mark.parametrize("confidence", [0.5, 0.8, 0.95])
def test_screening_size_matches_the_reference(wanted, keep_rate, confidence):
    for cap in (1, 8, 32, 200):
        got = screening_size(wanted, keep_rate, cap, confidence=confidence)
        assert got == reference_screening_size(wanted, keep_rate, cap, confidence), (cap, got)
    if keep_rate and keep_rate < 1:  # more than the mean alone, to err toward a surplus
        assert screening_size(wanted, keep_rate, 10_000, confidence=0.8) >= math.ceil(wanted / keep_rate)


def test_bad_inputs_are_errors():
    with pytest.raises(ValueError, match="cap >= 1"):
        screening_size(1, 0.5, 0, confidence=0.8)
    with pytest.raises(ValueError, match="confidence"):
        screening_size(1, 0.5, 8, confidence=1.0)
    with pytest.raises(ValueError, match="bad counts"):
        kept_prompts_wanted(0, -1, 8)


def test_recent_keep_rate_pools_the_last_calls_that_screened():
    history = [(10, 1), (0, 0), (10, 5), (20, 10), (0, 0)]
    assert recent_keep_rate([], 4) is None and recent_keep_rate([(0, 0)], 4) is None
    assert recent_keep_rate(history, 2) == pytest.approx(15 / 30)
    assert recent_keep_rate(history, 10) == pytest.approx(16 / 40)


def run(ctrl: DataController, policy: SimulatedPolicy, steps: int, cap: int, auto: bool):
    """The trainer's loop (recipe/fast_dapo): draw prompts in batches of `cap`, screen all (fixed) or
    screening_target() of them (auto), train whenever a batch is ready. Returns the trained batches and, per
    trained group, its screening responses' age at training: policy updates between their call and the step."""
    screened_at: dict[str, int] = {}
    waits, batches = [], []
    while len(batches) < steps:
        if ctrl.is_ready_for_training():
            batch = ctrl.get_training_data()
            batches.append(batch)
            waits += [len(batches) - 1 - screened_at[u] for u in dict.fromkeys(batch.non_tensor_batch["uid"])]
            continue
        target = ctrl.screening_target(cap, **AUTO) if auto else None
        while ctrl.counters["prompts_awaiting_screening"] < (target or 1):
            ctrl.add_fresh_prompts(policy.fresh_prompts(cap))
        gen_in = ctrl.get_generation_inputs(max_fresh=target)
        for uid, phase in zip(gen_in.non_tensor_batch["uid"], gen_in.non_tensor_batch["__phase__"], strict=True):
            if phase == "screen":
                screened_at[uid] = len(batches)  # the policy after this many updates samples the call
        ctrl.update(policy.generate(gen_in, workers=1))
    return batches, np.array(waits)


@pytest.mark.parametrize("seed", range(3))
def test_auto_screening_shortens_the_wait_of_trained_groups_and_loses_nothing(seed):
    steps, cap, batch = 30, 64, 8  # keep rate ~0.5 on the simulated policy: a fixed 64 keeps ~4 batches a call
    results = {}
    for auto in (False, True):
        ctrl = DataController(train_batch_size=batch, n=4, n_continue=12, mode="fast")
        batches, waits = run(ctrl, SimulatedPolicy(seed), steps, cap, auto)
        uids = np.concatenate([b.non_tensor_batch["uid"] for b in batches])
        assert len(uids) == steps * batch * 16 and len(np.unique(uids)) == steps * batch, "each group trained once"
        results[auto] = (waits.mean(), ctrl.counters)
    (fixed_wait, fixed), (auto_wait, auto) = results[False], results[True]
    assert auto_wait < fixed_wait / 2, (auto_wait, fixed_wait)
    assert auto["keep_rate"] == pytest.approx(fixed["keep_rate"], abs=0.1), "the same prompts, the same rule"
    # responses per trained group are the screening arithmetic, not the call size: about the same
    assert auto["responses_per_training_group"] < 1.15 * fixed["responses_per_training_group"]


def test_the_screening_history_survives_a_checkpoint_and_old_checkpoints_load():
    ctrl = DataController(train_batch_size=2, n=2, n_continue=1, mode="fast")
    policy = SimulatedPolicy(0)
    ctrl.add_fresh_prompts(policy.fresh_prompts(12))
    ctrl.update(policy.generate(ctrl.get_generation_inputs(max_fresh=5), workers=2))
    assert ctrl.counters["prompts_awaiting_screening"] == 7 and ctrl.screen_history[-1][0] == 5
    state = ctrl.state_dict()
    twin = DataController(train_batch_size=2, n=2, n_continue=1, mode="fast")
    twin.load_state_dict(state)
    assert twin.screen_history == ctrl.screen_history
    assert twin.screening_target(cap=40, **AUTO) == ctrl.screening_target(cap=40, **AUTO)
    old = {**state, "version": 2}
    del old["screen_history"]
    twin.load_state_dict(old)
    assert twin.screen_history == [] and twin.screening_target(cap=40, **AUTO) == 40, "no estimate yet: the cap"
    assert isinstance(twin.prompts_for_first_generation_phase, DataProto)


def test_max_fresh_errors():
    ctrl = DataController(train_batch_size=1, n=2, n_continue=1, mode="fast")
    ctrl.add_fresh_prompts(SimulatedPolicy(0).fresh_prompts(3))
    with pytest.raises(ValueError, match="max_fresh"):
        ctrl.get_generation_inputs(max_fresh=-1)
    with pytest.raises(RuntimeError, match="max_fresh=0"):
        ctrl.get_generation_inputs(max_fresh=0)
    assert ctrl.counters["prompts_awaiting_screening"] == 3, "a refused call leaves the queue as it was"
