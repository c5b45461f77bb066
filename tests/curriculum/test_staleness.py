"""Policy-version bookkeeping of fast DAPO's held screening responses, against plain-python references, and the
re-screening of stale kept prompts on a real DataController with verl's DataProto."""

import numpy as np
import pytest
import torch
from verl import DataProto

from verl_ext.curriculum.controller import PHASE_KEY, SCREEN, DataController
from verl_ext.curriculum.staleness import (
    VERSION_KEY,
    probs_diff_by_staleness,
    rescreen_stale,
    stale_prompts,
    staleness,
    staleness_metrics,
)


def test_staleness_and_stale_prompts_match_a_loop():
    rng = np.random.default_rng(0)
    for _ in range(50):
        step = int(rng.integers(1, 20))
        versions = rng.integers(1, step + 1, size=int(rng.integers(1, 30)))
        uids = np.array([f"p{u}" for u in rng.integers(0, 6, size=len(versions))], dtype=object)
        k = int(rng.integers(0, 4))
        ages = [step - int(v) for v in versions]
        assert staleness(versions, step).tolist() == ages
        expected = sorted({u for u, a in zip(uids, ages, strict=True) if a > k})
        assert stale_prompts(uids, versions, step, k).tolist() == expected
        m = staleness_metrics(versions, step)
        assert m["curriculum/train_staleness_mean"] == pytest.approx(sum(ages) / len(ages))
        assert m["curriculum/train_staleness_max"] == max(ages)
        assert m["curriculum/train_staleness_offpolicy_frac"] == pytest.approx(sum(a > 0 for a in ages) / len(ages))


def test_bad_tags_and_settings_are_errors():
    with pytest.raises(ValueError, match="newer than step 3"):
        staleness(np.array([2, 4]), 3)
    with pytest.raises(ValueError, match="max_staleness"):
        stale_prompts(np.array(["a"], dtype=object), np.array([1]), 1, -1)
    assert staleness_metrics(np.zeros(0, dtype=np.int64), 3) == {}


def test_probs_diff_split_by_age_matches_a_loop():
    g = torch.Generator().manual_seed(0)
    rows, length = 7, 5
    rollout = -torch.rand(rows, length, generator=g) * 3
    old = -torch.rand(rows, length, generator=g) * 3
    mask = (torch.rand(rows, length, generator=g) > 0.3).long()
    mask[:, 0] = 1
    age = np.array([0, 1, 0, 2, 1, 0, 0])
    got = probs_diff_by_staleness(rollout, old, mask, age)
    best = {"onpolicy": 0.0, "stale": 0.0}
    for i in range(rows):
        for t in range(length):
            if mask[i, t]:
                d = abs(float(np.exp(rollout[i, t].item())) - float(np.exp(old[i, t].item())))
                name = "onpolicy" if age[i] == 0 else "stale"
                best[name] = max(best[name], d)
    assert got["curriculum/probs_diff_max_onpolicy"] == pytest.approx(best["onpolicy"], rel=1e-6)
    assert got["curriculum/probs_diff_max_stale"] == pytest.approx(best["stale"], rel=1e-6)
    assert set(probs_diff_by_staleness(rollout, old, mask, np.zeros(rows, dtype=int))) == {
        "curriculum/probs_diff_max_onpolicy"
    }


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_probs_diff_of_a_cuda_batch_matches_cpu():
    g = torch.Generator().manual_seed(1)
    rollout, old = -torch.rand(2, 6, 9, generator=g) * 3
    mask = torch.rand(6, 9, generator=g) > 0.3
    age = np.array([0, 1, 0, 2, 1, 0])
    assert probs_diff_by_staleness(rollout.cuda(), old.cuda(), mask.cuda(), age) == pytest.approx(
        probs_diff_by_staleness(rollout, old, mask, age), rel=1e-6
    )


# ---------------------------------------------------------------- re-screening on a real controller


def fresh(names):
    return DataProto.from_dict(
        tensors={"input_ids": torch.arange(len(names))[:, None].repeat(1, 3)},
        non_tensors={"uid": np.array(names, dtype=object)},
    )


def generate(ctrl: DataController, acc_by_uid: dict, version: int) -> None:
    """One fused call answered with the given 0/1 acc per uid (all rows of a uid alike unless a list is given)."""
    gen_in = ctrl.get_generation_inputs()
    seen: dict[str, int] = {}
    acc = []
    for uid in gen_in.non_tensor_batch["uid"]:
        v = acc_by_uid[uid]
        i = seen.get(uid, 0)
        seen[uid] = i + 1
        acc.append(v[i % len(v)] if isinstance(v, list) else v)
    m = len(gen_in)
    out = gen_in.union(
        DataProto.from_dict(
            tensors={"responses": torch.arange(m)[:, None]}, non_tensors={"acc": np.array(acc, dtype=float)}
        )
    )
    out.non_tensor_batch[VERSION_KEY] = np.full(m, version, dtype=np.int64)
    ctrl.update(out)


def test_rescreen_sends_prompts_older_than_k_back_to_screening():
    ctrl = DataController(train_batch_size=2, n=2, n_continue=2, mode="fast")
    ctrl.add_fresh_prompts(fresh(["a", "b", "c"]))
    generate(ctrl, {"a": [0.0, 1.0], "b": [1.0, 0.0], "c": 1.0}, version=1)  # a, b kept; c all-correct
    # Two training steps run on buffered groups before the next generation call: at step 2 the held responses are
    # one update old (kept with K=1), at step 3 two (re-screened).
    assert rescreen_stale(ctrl, current_step=2, max_staleness=1) == 0
    assert ctrl.prompts_for_second_generation_phase.non_tensor_batch["uid"].tolist() == ["a", "b"]
    assert rescreen_stale(ctrl, current_step=3, max_staleness=1) == 2
    assert ctrl.screened_responses is None and ctrl.prompts_for_second_generation_phase is None
    assert ctrl.prompts_for_first_generation_phase.non_tensor_batch["uid"].tolist() == ["a", "b"]

    ctrl.add_fresh_prompts(fresh(["d"]))
    gen_in = ctrl.get_generation_inputs()
    assert set(gen_in.non_tensor_batch[PHASE_KEY]) == {SCREEN} and len(gen_in) == 3 * 2
    ctrl.prompts_in_flight = None  # answer the same call through the helper below
    ctrl.prompts_for_first_generation_phase = fresh(["a", "b", "d"])
    generate(ctrl, {"a": [1.0, 0.0], "b": 1.0, "d": [0.0, 1.0]}, version=3)  # a, d kept; b now all-correct
    generate(ctrl, {"a": 1.0, "d": 0.0}, version=3)  # continuation in the next call, same policy
    assert ctrl.num_groups_ready == 2
    batch = ctrl.get_training_data()
    # Every row of the trained groups comes from the policy of step 3: none of the version-1 rows survived.
    assert batch.non_tensor_batch["uid"].tolist() == ["a"] * 4 + ["d"] * 4
    assert set(batch.non_tensor_batch[VERSION_KEY].tolist()) == {3}
    assert ctrl.counters["prompts_screened"] == 3 + 3 and ctrl.counters["prompts_kept"] == 2 + 2


def test_rescreen_leaves_untagged_rows_alone():
    ctrl = DataController(train_batch_size=1, n=2, n_continue=1, mode="fast")
    ctrl.add_fresh_prompts(fresh(["a"]))
    gen_in = ctrl.get_generation_inputs()
    out = gen_in.union(
        DataProto.from_dict(
            tensors={"responses": torch.zeros(len(gen_in), 1, dtype=torch.long)},
            non_tensors={"acc": np.array([0.0, 1.0])},
        )
    )
    ctrl.update(out)
    assert rescreen_stale(ctrl, current_step=10, max_staleness=0) == 0
    assert ctrl.prompts_for_second_generation_phase.non_tensor_batch["uid"].tolist() == ["a"]
