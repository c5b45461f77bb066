"""PassRateMemory (GRESO-style skip rule) against a slow plain-python reference, plus its settings and keys."""

import copy
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from verl import DataProto

from recipe.fast_dapo.config_check import DEFAULTS
from verl_ext.curriculum import memory as memory_module
from verl_ext.curriculum.controller import PHASE_KEY, SCREEN, DataController
from verl_ext.curriculum.dataproto_ops import PAD_KEY, pad_to_multiple
from verl_ext.curriculum.memory import (
    ALL_CORRECT,
    ALL_WRONG,
    MIXED,
    MemorySettings,
    PassRateMemory,
    prompt_keys,
    uniform_outcome,
)

# fast_dapo.yaml's curriculum.memory, the one place its values are set (MemorySettings has no defaults)
RECIPE_MEMORY = DEFAULTS.value("curriculum.memory")


def recipe_memory(**changes) -> MemorySettings:
    """The recipe's memory settings with `changes`."""
    return MemorySettings(**{**RECIPE_MEMORY, **changes})


# ---------------------------------------------------------------- slow reference (plain python, one prompt at a time)


class ReferenceMemory:
    """The rule of the module docstring written out per prompt with dicts and math."""

    def __init__(self, s: MemorySettings):
        self.s = s
        self.rng = np.random.default_rng(s.seed)
        self.visits: dict[int, int] = {}
        self.last: dict[int, tuple[int, int, int]] = {}  # key -> (visit of last screening, outcome, streak)

    def p_skip(self, key: int, visit: int) -> float:
        if key not in self.last:
            return 0.0
        last_visit, outcome, streak = self.last[key]
        age = visit - last_visit
        if outcome == MIXED or age < 1:
            return 0.0
        base = self.s.skip_all_correct if outcome == ALL_CORRECT else self.s.skip_all_wrong
        return min(self.s.max_skip, (1 - (1 - base) ** streak) * self.s.decay ** (age - 1))

    def offer(self, keys):
        u = self.rng.random(len(keys))  # one draw per offered prompt, as documented
        before = dict(self.visits)
        skip = []
        for i, k in enumerate(keys):
            k = int(k)
            skip.append(bool(u[i] < self.p_skip(k, before.get(k, 0) + 1)))
            self.visits[k] = self.visits.get(k, 0) + 1
        return skip

    def record(self, keys, outcomes):
        last_of = {}
        for k, o in zip(keys, outcomes, strict=True):
            last_of[int(k)] = int(o)
        for k, o in last_of.items():
            visit = max(self.visits.get(k, 0), 1)
            self.visits[k] = visit
            prev = self.last.get(k)
            if o == MIXED:
                streak = 0
            elif prev is not None and prev[1] == o:
                streak = prev[2] + 1
            else:
                streak = 1
            self.last[k] = (visit, o, streak)


SETTINGS = [
    recipe_memory(enable=True),
    recipe_memory(enable=True, skip_all_wrong=0.9, skip_all_correct=0.3, decay=0.8, max_skip=0.95, seed=7),
    recipe_memory(enable=True, skip_all_wrong=1.0, skip_all_correct=1.0, decay=1.0, max_skip=0.5, seed=3),
]


@pytest.mark.parametrize("settings", SETTINGS)
@pytest.mark.parametrize("seed", range(3))
def test_random_histories_match_reference(settings, seed):
    rng = np.random.default_rng(seed)
    mem, ref = PassRateMemory(settings), ReferenceMemory(settings)
    pool = rng.integers(0, 2**63, size=25, dtype=np.uint64)
    # each prompt has a fixed tendency, so streaks of one outcome happen
    tendency = rng.choice([MIXED, ALL_WRONG, ALL_CORRECT], size=len(pool), p=[0.3, 0.5, 0.2])
    skipped_any = False
    for _ in range(300):
        picks = rng.integers(0, len(pool), size=int(rng.integers(0, 8)))  # duplicates allowed
        keys = pool[picks]
        skip = mem.offer(keys)
        assert skip.tolist() == ref.offer(keys)
        skipped_any |= bool(skip.any())
        screened = picks[~skip]
        noisy = rng.random(len(screened)) < 0.2
        outcome = np.where(noisy, rng.integers(0, 3, size=len(screened)), tendency[screened]).astype(np.int8)
        if rng.random() < 0.8:  # sometimes the screening results have not come back yet
            mem.record(pool[screened], outcome)
            ref.record(pool[screened], outcome)
    assert skipped_any
    assert len(mem) == len(ref.visits)
    for k, v, lv, o, s in zip(mem.keys, mem.visits, mem.last_visit, mem.outcome, mem.streak, strict=True):
        assert ref.visits[int(k)] == v
        assert (lv, o, s) == (ref.last[int(k)] if int(k) in ref.last else (0, MIXED, 0))


def test_rule_on_hand_cases():
    s = recipe_memory(enable=True, skip_all_wrong=0.5, skip_all_correct=0.8, decay=0.5, max_skip=0.9)
    mem = PassRateMemory(s)
    out = np.array([MIXED, ALL_WRONG, ALL_WRONG, ALL_WRONG, ALL_CORRECT, ALL_CORRECT, ALL_WRONG])
    streak = np.array([0, 1, 2, 2, 1, 3, 1])
    age = np.array([1, 1, 1, 3, 1, 1, 0])
    expected = [0.0, 0.5, 0.75, 0.75 * 0.25, 0.8, 0.9, 0.0]  # 1 - 0.2^3 = 0.992 capped at max_skip 0.9
    assert mem.skip_probability(out, streak, age) == pytest.approx(expected)


def test_new_and_mixed_prompts_are_never_skipped_and_uniform_ones_at_the_base_rate():
    s = recipe_memory(enable=True, skip_all_wrong=0.6, skip_all_correct=0.3, seed=1)
    mem = PassRateMemory(s)
    keys = np.arange(30000, dtype=np.uint64)
    assert not mem.offer(keys).any()  # first epoch: nothing known
    outcome = np.array([MIXED, ALL_WRONG, ALL_CORRECT], dtype=np.int8)[np.arange(30000) % 3]
    mem.record(keys, outcome)
    skip = mem.offer(keys)  # second epoch, age 1, streak 1: skip rate = base
    assert not skip[outcome == MIXED].any()
    for code, base in ((ALL_WRONG, 0.6), (ALL_CORRECT, 0.3)):
        rate, sd = skip[outcome == code].mean(), np.sqrt(base * (1 - base) / 10000)
        assert abs(rate - base) < 4 * sd
    # the prompts skipped get no new observation: next epoch their age is 2, so decay applies
    again = mem.offer(keys[skip])
    wrong_skipped = outcome[skip] == ALL_WRONG
    rate, expected = again[wrong_skipped].mean(), 0.6 * s.decay
    assert abs(rate - expected) < 4 * np.sqrt(expected * (1 - expected) / wrong_skipped.sum())


def test_exploration_floor_no_prompt_is_skipped_forever():
    s = recipe_memory(enable=True, skip_all_wrong=1.0, decay=1.0, max_skip=0.9, seed=0)
    mem = PassRateMemory(s)
    keys = np.arange(2000, dtype=np.uint64)
    mem.offer(keys)
    mem.record(keys, np.full(len(keys), ALL_WRONG, dtype=np.int8))
    screened_at = np.zeros(len(keys), dtype=bool)
    for _ in range(150):  # P(skipped 150 times in a row) = 0.9^150 = 1.4e-7 per prompt
        skip = mem.offer(keys)
        assert skip.mean() < 0.95
        screened_at |= ~skip
    assert screened_at.all()


def test_state_dict_resume_gives_the_same_decisions():
    s = recipe_memory(enable=True, seed=5)
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 2**63, size=200, dtype=np.uint64)
    a = PassRateMemory(s)
    for _ in range(3):
        a.offer(keys)
        a.record(keys, rng.integers(0, 3, size=len(keys)).astype(np.int8))
    buffer = io.BytesIO()
    torch.save(a.state_dict(), buffer)
    b = PassRateMemory(s)
    b.load_state_dict(torch.load(io.BytesIO(buffer.getvalue()), weights_only=False))
    for _ in range(3):
        outcome = rng.integers(0, 3, size=len(keys)).astype(np.int8)
        skip_a, skip_b = a.offer(keys), b.offer(keys)
        assert skip_a.any() and (skip_a == skip_b).all()
        a.record(keys[~skip_a], outcome[~skip_a])
        b.record(keys[~skip_b], outcome[~skip_b])
    # without the generator state the decisions differ: the test can fail
    c = PassRateMemory(s)
    state = a.state_dict()
    c.load_state_dict({**state, "rng": np.random.default_rng(99).bit_generator.state})
    assert not (a.offer(keys) == c.offer(keys)).all()


def test_load_state_dict_errors():
    mem = PassRateMemory(recipe_memory(enable=True))
    mem.offer(np.arange(3, dtype=np.uint64))
    state = mem.state_dict()
    with pytest.raises(ValueError, match="keys prompts by 'raw_prompt', this run by 'index'"):
        PassRateMemory(recipe_memory(enable=True, key="index")).load_state_dict(state)
    with pytest.raises(ValueError, match="version"):
        PassRateMemory(recipe_memory(enable=True)).load_state_dict({**state, "version": 99})
    bad = {**state, "arrays": {**state["arrays"], "keys": state["arrays"]["keys"][::-1].copy()}}
    with pytest.raises(ValueError, match="sorted"):
        PassRateMemory(recipe_memory(enable=True)).load_state_dict(bad)


def test_uniform_outcome():
    lo, hi = np.array([0.0, 1.0, 0.0, 0.7, 0.3]), np.array([0.0, 1.0, 1.0, 0.7, 0.3])
    assert uniform_outcome(lo, hi).tolist() == [ALL_WRONG, ALL_CORRECT, MIXED, ALL_CORRECT, ALL_WRONG]


def test_prompt_keys_are_stable_across_processes_and_content_based():
    msgs = [
        [{"role": "user", "content": "1+1?"}],
        [{"content": "1+1?", "role": "user"}],  # same message, other dict order
        np.array([{"role": "user", "content": "1+1?"}], dtype=object),  # as a parquet loader may give it
        [{"role": "user", "content": "1+2?"}],
        7,
    ]
    values = np.empty(len(msgs), dtype=object)
    values[:] = msgs
    keys = prompt_keys(values)
    assert keys.dtype == np.uint64
    assert keys[0] == keys[1] == keys[2] and len({keys[0], keys[3], keys[4]}) == 3
    # The module alone (numpy only), loaded from its file: a fresh interpreter with another hash salt.
    code = (
        "import importlib.util, json, sys, numpy as np\n"
        "spec = importlib.util.spec_from_file_location('memory', sys.argv[1])\n"
        "memory = sys.modules['memory'] = importlib.util.module_from_spec(spec); spec.loader.exec_module(memory)\n"
        "v = np.empty(1, dtype=object); v[0] = json.loads(input()); print(int(memory.prompt_keys(v)[0]))"
    )
    other = subprocess.run(
        [sys.executable, "-c", code, memory_module.__file__],
        input=json.dumps(msgs[3]),
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "123"},
    )
    assert int(other.stdout) == int(keys[3])


def test_prompt_keys_refuse_values_without_a_content_form():
    class Image:  # stands for a PIL image in multi-modal messages: its repr holds a memory address
        pass

    values = np.empty(1, dtype=object)
    values[0] = [{"role": "user", "content": [{"type": "image", "image": Image()}]}]
    with pytest.raises(ValueError, match="cannot key a prompt.*Image has no stable content form.*e.g. index"):
        prompt_keys(values)
    raw = np.empty(2, dtype=object)
    raw[:] = [{"bytes": b"\x00\x01"}, {"bytes": b"\x00\x02"}]
    first, second = prompt_keys(raw), prompt_keys(raw)
    assert (first == second).all() and first[0] != first[1]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"skip_all_wrong": 1.5}, "skip_all_wrong"),
        ({"skip_all_correct": -0.1}, "skip_all_correct"),
        ({"decay": 0.0}, "decay"),
        ({"max_skip": 1.0}, "max_skip"),
        ({"max_skip": float("nan")}, "max_skip"),
        ({"enable": "yes"}, "enable"),
        ({"key": ""}, "key"),
        ({"seed": -1}, "seed"),
        ({"skip_all_wrong": True}, "skip_all_wrong"),
    ],
)
def test_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        recipe_memory(**kwargs)


def test_settings_from_mapping():
    assert MemorySettings.from_mapping(RECIPE_MEMORY) == MemorySettings(**RECIPE_MEMORY)
    assert MemorySettings.from_mapping({**RECIPE_MEMORY, "enable": True, "decay": 0.7}).decay == 0.7
    with pytest.raises(ValueError, match=r"unknown curriculum.memory keys \['decya'\]"):
        MemorySettings.from_mapping({"decya": 0.7})
    # no defaults in the library: a key left out is an error naming it, not a second copy of fast_dapo.yaml's value
    with pytest.raises(ValueError, match=r"missing curriculum.memory keys \['key', 'skip_all_wrong'"):
        MemorySettings.from_mapping({"enable": True})
    with pytest.raises(TypeError, match="missing"):
        MemorySettings(enable=True)
    assert DataController(2, n=2, n_continue=2, mode="fast", memory=None).memory is None


# ---------------------------------------------------------------- inside the DataController


class EpochLoop:
    """The fast DAPO trainer loop over a fixed prompt set for several epochs (shuffled each epoch), with a simulated
    policy (fixed pass rate per prompt). Each prompt carries verl's ``raw_prompt`` messages, the memory's key."""

    def __init__(self, ctrl: DataController, seed: int, num_prompts: int = 48, batch: int = 8):
        self.ctrl, self.batch = ctrl, batch
        self.rng = np.random.default_rng(seed)
        kinds = self.rng.choice(4, size=num_prompts, p=[0.4, 0.15, 0.25, 0.2])  # always wrong/right, hard, mid
        self.rate = np.select([kinds == 0, kinds == 1, kinds == 2], [0.0, 1.0, 0.1], self.rng.uniform(0.3, 0.7))
        self.messages = [[{"role": "user", "content": f"question {i}"}] for i in range(num_prompts)]
        self.epoch, self.order, self.cursor = 0, self.rng.permutation(num_prompts), 0
        self.offered, self.screened, self.batches = [], [], []  # per call: uids offered / uids screened
        self.rate_of: dict[str, float] = {}

    def fresh(self) -> DataProto:
        if self.cursor >= len(self.order):
            self.epoch, self.order, self.cursor = self.epoch + 1, self.rng.permutation(len(self.order)), 0
        idx = self.order[self.cursor : self.cursor + self.batch]
        self.cursor += len(idx)
        uids = np.array([f"e{self.epoch}-p{i}" for i in idx], dtype=object)
        self.rate_of.update(zip(uids, self.rate[idx], strict=True))
        raw = np.empty(len(idx), dtype=object)
        raw[:] = [self.messages[i] for i in idx]
        return DataProto.from_dict(
            tensors={"input_ids": torch.as_tensor(idx)[:, None].repeat(1, 3)},
            non_tensors={"uid": uids, "raw_prompt": raw, "index": idx.astype(np.int64)},
        )

    def step(self) -> None:
        ctrl = self.ctrl
        if ctrl.is_ready_for_training():
            self.batches.append(ctrl.get_training_data())
            return
        fresh = self.fresh()
        queued = ctrl.add_fresh_prompts(fresh)
        self.offered.append(fresh)
        if not ctrl.has_generation_inputs:
            self.screened.append([])
            return
        gen_in = ctrl.get_generation_inputs()
        phase = gen_in.non_tensor_batch[PHASE_KEY]
        screened = list(dict.fromkeys(gen_in.non_tensor_batch["uid"][phase == SCREEN]))
        assert len(screened) == queued
        self.screened.append(screened)
        padded, _ = pad_to_multiple(gen_in, 3)
        rate = np.array([self.rate_of[u] for u in padded.non_tensor_batch["uid"]])
        acc = (self.rng.random(len(padded)) < rate).astype(np.float64)
        out = padded.union(
            DataProto.from_dict(tensors={"responses": torch.zeros(len(padded), 2)}, non_tensors={"acc": acc})
        )
        ctrl.update(out.select_idxs(self.rng.permutation(len(out))))


def outcomes_by_uid(ctrl_rows_uid, ctrl_rows_acc):
    lo, hi = {}, {}
    for u, a in zip(ctrl_rows_uid, ctrl_rows_acc, strict=True):
        lo[u], hi[u] = min(lo.get(u, a), a), max(hi.get(u, a), a)
    return {u: int(uniform_outcome(np.array([lo[u]]), np.array([hi[u]]))[0]) for u in lo}


@pytest.mark.parametrize(("mode", "n", "n_continue"), [("fast", 4, 4), ("fast", 2, 0), ("dapo", 3, 3)])
def test_controller_skips_exactly_as_the_reference_rule(mode, n, n_continue, monkeypatch):
    settings = recipe_memory(enable=True, skip_all_wrong=0.7, skip_all_correct=0.9, decay=0.6, seed=4)
    ctrl = DataController(train_batch_size=4, n=n, n_continue=n_continue, mode=mode, memory=settings)
    loop = EpochLoop(ctrl, seed=1)
    # Record what each update screened, through the controller's real update (wrapped, not replaced).
    seen = []
    real_update = ctrl.update

    def spy(out, metric_values=None):
        screen = out.non_tensor_batch[PHASE_KEY] == SCREEN
        real = screen & ~out.non_tensor_batch[PAD_KEY]
        seen.append(outcomes_by_uid(out.non_tensor_batch["uid"][real], out.non_tensor_batch["acc"][real]))
        real_update(out, metric_values)

    monkeypatch.setattr(ctrl, "update", spy)
    while loop.epoch < 4:
        loop.step()

    ref = ReferenceMemory(settings)
    calls, skipped = 0, 0
    for fresh, screened in zip(loop.offered, loop.screened, strict=True):
        uids = fresh.non_tensor_batch["uid"]
        skip = ref.offer(prompt_keys(fresh.non_tensor_batch["raw_prompt"]))
        skipped += sum(skip)
        assert screened == [u for u, s in zip(uids, skip, strict=True) if not s]
        if screened:
            outcome = seen[calls]
            calls += 1
            keys = prompt_keys(fresh.non_tensor_batch["raw_prompt"][[not s for s in skip]])
            ref.record(keys, [outcome[u] for u in screened])
    c = ctrl.counters
    assert skipped > 0 and c["prompts_skipped_by_memory"] == skipped
    assert c["prompts_screened"] + skipped == sum(len(f) for f in loop.offered)
    assert c["memory_prompts"] == 48
    # the memory only ever skips prompts of earlier uniform screenings: no informative prompt is dropped in epoch 0
    assert all(len(s) == len(f) for f, s in zip(loop.offered[:6], loop.screened[:6], strict=True))


@pytest.mark.parametrize("mid_flight", [False, True])
def test_controller_resume_makes_the_same_decisions(mid_flight):
    settings = {**RECIPE_MEMORY, "enable": True, "key": "index", "seed": 2}
    loop = EpochLoop(DataController(4, n=4, n_continue=4, mode="fast", memory=settings), seed=3)
    while loop.epoch < 2:
        loop.step()
    if mid_flight:  # stop between get_generation_inputs and update
        loop.ctrl.get_generation_inputs = _stop_after(loop.ctrl.get_generation_inputs)
        with pytest.raises(_Stop):
            while True:
                loop.step()
        del loop.ctrl.get_generation_inputs
    buffer = io.BytesIO()
    torch.save(loop.ctrl.state_dict(), buffer)
    restored = DataController(4, n=4, n_continue=4, mode="fast", memory=settings)
    restored.load_state_dict(torch.load(io.BytesIO(buffer.getvalue()), weights_only=False))
    twin = copy.copy(loop)
    twin.rng, twin.offered, twin.screened, twin.batches = copy.deepcopy(loop.rng), [], [], []
    twin.ctrl, twin.rate_of = restored, dict(loop.rate_of)
    done = (len(loop.screened), len(loop.batches))  # a stopped call has its offer but no screened entry
    if mid_flight:
        for ctrl in (loop.ctrl, restored):  # finish the pending call identically
            pending = ctrl.prompts_in_flight.sample_level_repeat(ctrl._repeats())
            m = len(pending)
            ctrl.update(
                pending.union(
                    DataProto.from_dict(tensors={"responses": torch.zeros(m, 2)}, non_tensors={"acc": np.zeros(m)})
                )
            )
    for _ in range(60):
        loop.step()
        twin.step()
    assert loop.screened[done[0] :] == twin.screened
    assert restored.counters["prompts_skipped_by_memory"] > 0
    assert restored.counters == pytest.approx(loop.ctrl.counters, nan_ok=True)
    assert len(twin.batches) == len(loop.batches) - done[1] > 0
    for a, b in zip(loop.batches[done[1] :], twin.batches, strict=True):
        assert a.non_tensor_batch["uid"].tolist() == b.non_tensor_batch["uid"].tolist()


def with_acc(data: DataProto, acc: np.ndarray) -> DataProto:
    data.non_tensor_batch["acc"] = acc
    return data


class _Stop(Exception):
    pass


def _stop_after(fn):
    def wrapped():
        fn()
        raise _Stop

    return wrapped


def test_version_1_checkpoint_resumes_with_an_empty_memory():
    plain_ctrl = DataController(2, n=2, n_continue=2, mode="fast")
    EpochLoop(plain_ctrl, seed=0).step()
    state = plain_ctrl.state_dict()
    v1 = {**state, "version": 1, "counters": dict(state["counters"])}
    del v1["memory"], v1["counters"]["prompts_skipped_by_memory"]
    ctrl = DataController(2, n=2, n_continue=2, mode="fast", memory={**RECIPE_MEMORY, "enable": True})
    ctrl.load_state_dict(v1)
    assert ctrl.counters["prompts_skipped_by_memory"] == 0 and len(ctrl.memory) == 0
    assert ctrl.counters["prompts_awaiting_continuation"] == plain_ctrl.counters["prompts_awaiting_continuation"]


def test_memory_errors_and_all_skipped_batches():
    with pytest.raises(ValueError, match="needs mode fast or dapo"):
        DataController(2, n=2, n_continue=2, mode="plain", memory={**RECIPE_MEMORY, "enable": True})
    with pytest.raises(ValueError, match="unknown curriculum.memory keys"):
        DataController(2, n=2, n_continue=2, memory={**RECIPE_MEMORY, "enable": True, "bogus": 1})
    ctrl = DataController(2, n=2, n_continue=2, memory={**RECIPE_MEMORY, "enable": True, "key": "question"})
    loop = EpochLoop(ctrl, seed=0)
    with pytest.raises(ValueError, match=r"column 'question'.*available: \['index', 'raw_prompt', 'uid'\]"):
        ctrl.add_fresh_prompts(loop.fresh())
    assert ctrl.counters["memory_prompts"] == 0 and not ctrl.has_generation_inputs  # nothing half-done
    # every prompt screened all-wrong once and certain skipping: the next epoch's batch queues nothing
    ctrl = DataController(
        2, n=2, n_continue=0, memory={**RECIPE_MEMORY, "enable": True, "skip_all_wrong": 1.0, "max_skip": 0.999999}
    )
    batch = EpochLoop(ctrl, seed=0).fresh()
    assert ctrl.add_fresh_prompts(batch) == len(batch)
    gen_in = ctrl.get_generation_inputs()
    ctrl.update(with_acc(gen_in, np.zeros(len(gen_in))))
    again = copy.deepcopy(batch)
    again.non_tensor_batch["uid"] = np.array([u + "-again" for u in again.non_tensor_batch["uid"]], dtype=object)
    assert ctrl.add_fresh_prompts(again) == 0 and not ctrl.has_generation_inputs
    assert ctrl.counters["prompts_skipped_by_memory"] == len(batch)


def test_a_probe_file_seeds_the_memory_as_a_first_screening(tmp_path):
    """A probe's pass_rates.jsonl (as verl_ext.trainer.probe writes it) seeds the memory: all-wrong and all-right
    prompts are skipped at their first offer with the base probabilities, mixed and unknown ones never."""
    from verl_ext.curriculum.memory import ALL_CORRECT, ALL_WRONG, MIXED, PassRateMemory, probe_outcome
    from verl_ext.trainer.probe import read_pass_rates

    path = tmp_path / "pass_rates.jsonl"
    rows = [(11, 0), (12, 16), (13, 5)]
    path.write_text("".join(json.dumps({"index": i, "memory_key": key, "k": 16, "correct": c}) + "\n"
                            for i, (key, c) in enumerate(rows)))  # fmt: skip
    keys, correct, k = read_pass_rates(path)
    assert k == 16 and keys.tolist() == [11, 12, 13] and correct.tolist() == [0, 16, 5]
    assert probe_outcome(correct, k).tolist() == [ALL_WRONG, ALL_CORRECT, MIXED]
    settings = recipe_memory(enable=True, init_file=str(path), skip_all_wrong=0.4, skip_all_correct=0.6, seed=3)
    memory = PassRateMemory(settings)
    memory.record(keys, probe_outcome(correct, k))
    age1 = memory.skip_probability(memory.outcome, memory.streak, memory.visits + 1 - memory.last_visit)
    np.testing.assert_allclose(age1, [0.4, 0.6, 0.0])
    assert not memory.offer(np.array([99], dtype=np.uint64)).any()  # a prompt the probe never saw is screened


def test_probe_file_errors_are_clear(tmp_path):
    from verl_ext.trainer.probe import read_pass_rates

    with pytest.raises(ValueError, match="init_file"):
        recipe_memory(enable=True, init_file=str(tmp_path / "missing.jsonl"))
    mixed_k = tmp_path / "a.jsonl"
    mixed_k.write_text('{"memory_key": 1, "k": 8, "correct": 1}\n{"memory_key": 2, "k": 16, "correct": 1}\n')
    with pytest.raises(ValueError, match="different k"):
        read_pass_rates(mixed_k)
    no_key = tmp_path / "b.jsonl"
    no_key.write_text(json.dumps({"memory_key": None, "k": 8, "correct": 1}) + "\n")
    with pytest.raises(ValueError, match="memory.key"):
        read_pass_rates(no_key)
