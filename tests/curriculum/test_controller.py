"""DataController on random sequences of inputs, checked against a slow plain-python reference controller.

A simulated policy gives each prompt a pass rate and stamps every generated response with a unique id (rid) in
``responses[:, 0]``; rows come back shuffled and padded for a random number of workers, as from verl's agent loop.
"""

import copy
import io
import statistics
from collections import defaultdict

import numpy as np
import pytest
import torch
from verl import DataProto

from verl_ext.curriculum.controller import CONTINUE, PHASE_KEY, SCREEN, DataController
from verl_ext.curriculum.dataproto_ops import PAD_KEY, pad_to_multiple

PROMPT_LEN, RESPONSE_LEN = 3, 4


# ---------------------------------------------------------------- slow reference (plain python)


def reference_keep(values: list[float]) -> bool:
    """The keep rule as stated: std of the filter metric over the group > 0 (exact, via statistics)."""
    return statistics.pstdev(values) > 0


class ReferenceController:
    """Dicts and lists; FIFO semantics documented by DataController."""

    def __init__(self, tbs, n, n_continue, mode):
        self.tbs, self.n, self.n_continue, self.mode = tbs, n, n_continue, mode
        self.N = n + n_continue
        self.n_screen = n if mode == "fast" else self.N
        self.fresh, self.kept, self.in_flight = [], [], []
        self.held: dict[str, list[int]] = {}
        self.ready: list[tuple[str, list[int]]] = []
        self.discarded: list[int] = []
        self.counts = defaultdict(int)

    def add(self, uids):
        self.fresh += list(uids)

    def generate(self, max_fresh=None):
        take = len(self.fresh) if max_fresh is None else max_fresh
        self.in_flight = [(u, SCREEN) for u in self.fresh[:take]] + [(u, CONTINUE) for u in self.kept]
        self.fresh, self.kept = self.fresh[take:], []
        self.counts["generation_calls"] += 1
        return [(u, p, self.n_screen if p == SCREEN else self.n_continue) for u, p in self.in_flight]

    def update(self, rows):  # rows: (uid, phase, rid, metric, tokens) of real rows, in output order
        rids, metric = defaultdict(list), defaultdict(list)
        for uid, _, rid, value, tokens in rows:
            rids[uid].append(rid)
            metric[uid].append(value)
            self.counts["responses_generated"] += 1
            self.counts["tokens_generated"] += tokens
        for uid, phase in self.in_flight:
            if phase == CONTINUE:
                self.ready.append((uid, self.held.pop(uid) + rids[uid]))
        for uid, phase in self.in_flight:
            if phase != SCREEN:
                continue
            self.counts["prompts_screened"] += 1
            if self.mode == "plain" or reference_keep(metric[uid]):
                self.counts["prompts_kept"] += 1
                if self.mode == "fast" and self.n_continue > 0:
                    self.held[uid] = rids[uid]
                    self.kept.append(uid)
                else:
                    self.ready.append((uid, rids[uid]))
            else:
                self.counts["discarded_all_correct" if metric[uid][0] > 0.5 else "discarded_all_wrong"] += 1
                self.discarded += rids[uid]
        self.in_flight = []

    def ready_for_training(self):
        return len(self.ready) >= self.tbs

    def train(self):
        batch, self.ready = self.ready[: self.tbs], self.ready[self.tbs :]
        self.counts["training_groups_emitted"] += self.tbs
        if self.mode == "dapo":  # verl-recipe trims the surplus
            self.counts["surplus_groups_dropped"] += len(self.ready)
            self.discarded += [r for _, rids in self.ready for r in rids]
            self.ready = []
        return batch


# ---------------------------------------------------------------- simulated policy and trainer loop


class SimulatedPolicy:
    def __init__(self, seed: int, metric: str = "acc"):
        self.rng = np.random.default_rng(seed)
        self.metric = metric
        self.pass_rate: dict[str, float] = {}
        self.prompt_code: dict[str, int] = {}
        self.next_prompt = 0
        self.next_rid = 0

    def fresh_prompts(self, k: int) -> DataProto:
        uids, codes = [], []
        for _ in range(k):
            uid = f"prompt-{self.next_prompt}"
            # a third of the prompts always fail, a sixth always pass, the rest are mixed
            self.pass_rate[uid] = float(self.rng.choice([0.0, 0.0, 1.0, self.rng.uniform(0.05, 0.95)] + [0.5]))
            self.prompt_code[uid] = 1000 + self.next_prompt
            uids.append(uid)
            codes.append(1000 + self.next_prompt)
            self.next_prompt += 1
        input_ids = torch.zeros(k, PROMPT_LEN, dtype=torch.long)
        input_ids[:, 0] = torch.tensor(codes, dtype=torch.long)
        return DataProto.from_dict(
            tensors={"input_ids": input_ids, "attention_mask": torch.ones(k, PROMPT_LEN, dtype=torch.long)},
            non_tensors={
                "uid": np.array(uids, dtype=object),
                "reward_model": np.array([{"ground_truth": c} for c in codes], dtype=object),
            },
            meta_info={"from": "dataloader"},
        )

    def generate(self, gen_in: DataProto, workers: int) -> DataProto:
        """Pads for `workers`, samples every row (pad rows too: they must be ignored), returns shuffled rows."""
        padded, _ = pad_to_multiple(gen_in, workers)
        m = len(padded)
        rids = torch.arange(self.next_rid, self.next_rid + m)
        self.next_rid += m
        rate = np.array([self.pass_rate[u] for u in padded.non_tensor_batch["uid"]])
        value = (self.rng.random(m) < rate).astype(np.float64)
        value[padded.non_tensor_batch[PAD_KEY]] = 0.25  # pad rows lie: counting them would break the keep rule
        responses = torch.zeros(m, RESPONSE_LEN, dtype=torch.long)
        responses[:, 0] = rids
        lengths = torch.from_numpy(self.rng.integers(1, RESPONSE_LEN + 1, size=m))
        mask = (torch.arange(RESPONSE_LEN)[None, :] < lengths[:, None]).long()
        out = DataProto.from_dict(
            tensors={"responses": responses, "response_mask": mask},
            non_tensors={self.metric: value},
            meta_info={"timing": {"gen": float(self.rng.random())}},  # differs per call, like verl's
        )
        merged = padded.union(out)
        return merged.select_idxs(self.rng.permutation(m))


def real_rows(out: DataProto):
    keep = ~out.non_tensor_batch[PAD_KEY]
    return [
        (u, p, int(r), float(v), int(t))
        for u, p, r, v, t, k in zip(
            out.non_tensor_batch["uid"],
            out.non_tensor_batch[PHASE_KEY],
            out.batch["responses"][:, 0],
            out.non_tensor_batch["acc"],
            out.batch["response_mask"].sum(-1),
            keep,
            strict=True,
        )
        if k
    ]


class Episode:
    """The trainer loop with random choices; `ref` (optional) mirrors every call."""

    def __init__(self, ctrl: DataController, seed: int, ref: ReferenceController | None = None):
        self.ctrl, self.ref = ctrl, ref
        self.policy = SimulatedPolicy(seed)
        self.rng = np.random.default_rng(seed + 1)
        self.pending: DataProto | None = None
        self.outputs: list[DataProto] = []
        self.generated_rids: list[int] = []

    def step(self):
        if self.pending is not None:
            out = self.policy.generate(self.pending, workers=int(self.rng.integers(1, 5)))
            rows = real_rows(out)
            self.generated_rids += [r[2] for r in rows]
            if self.rng.random() < 0.5:
                self.ctrl.update(out)
            else:  # the metric passed separately must give the same result
                values = out.non_tensor_batch.pop("acc")
                self.ctrl.update(out, metric_values=values)
            if self.ref:
                self.ref.update(rows)
            self.pending = None
        elif self.ctrl.is_ready_for_training() and self.rng.random() < 0.75:
            self.outputs.append(self.ctrl.get_training_data())
            if self.ref:
                self.check_batch(self.outputs[-1], self.ref.train())
        else:
            fresh = self.policy.fresh_prompts(int(self.rng.integers(0, 7)))
            self.ctrl.add_fresh_prompts(fresh)
            if self.ref:
                self.ref.add(fresh.non_tensor_batch["uid"])
            c = self.ctrl
            # half the calls screen only the oldest few queued prompts (curriculum.auto_gen_batch), the rest wait
            max_fresh = None if self.rng.random() < 0.5 else int(self.rng.integers(0, 4))
            fresh_to_send = c.prompts_for_first_generation_phase is not None and max_fresh != 0
            if not fresh_to_send and c.prompts_for_second_generation_phase is None:
                return  # nothing to generate this time (0 fresh prompts, none kept)
            self.pending = self.ctrl.get_generation_inputs(max_fresh=max_fresh)
            if self.ref:
                self.check_generation_inputs(self.pending, self.ref.generate(max_fresh))

    def check_generation_inputs(self, gen_in: DataProto, expected):
        flat = [(u, p) for u, p, count in expected for _ in range(count)]
        assert list(zip(gen_in.non_tensor_batch["uid"], gen_in.non_tensor_batch[PHASE_KEY], strict=True)) == flat
        # every row is its prompt's original row (the continuation re-sends the same prompt)
        codes = [self.policy.prompt_code[u] for u, _ in flat]
        assert gen_in.batch["input_ids"][:, 0].tolist() == codes
        assert gen_in.meta_info == {}

    def check_batch(self, batch: DataProto, expected_groups):
        ctrl = self.ctrl
        assert len(batch) == ctrl.train_batch_size * ctrl.N
        got = list(zip(batch.non_tensor_batch["uid"], batch.batch["responses"][:, 0].tolist(), strict=True))
        assert got == [(u, rid) for u, rids in expected_groups for rid in rids]
        codes = [self.policy.prompt_code[u] for u in batch.non_tensor_batch["uid"]]
        assert batch.batch["input_ids"][:, 0].tolist() == codes
        assert [g["ground_truth"] for g in batch.non_tensor_batch["reward_model"]] == codes
        phases = batch.non_tensor_batch[PHASE_KEY].reshape(ctrl.train_batch_size, ctrl.N)
        if ctrl.mode == "fast":
            assert (phases[:, : ctrl.n] == SCREEN).all() and (phases[:, ctrl.n :] == CONTINUE).all()
        if ctrl.mode != "plain":  # every group mixed in its filter metric (the screening part)
            acc = np.asarray(batch.non_tensor_batch.get("acc", np.full(len(batch), np.nan)), dtype=float)
            screen_acc = acc.reshape(ctrl.train_batch_size, ctrl.N)[:, : ctrl.n_screen]
            assert all(np.isnan(row).any() or reference_keep(list(row)) for row in screen_acc)


CONFIGS = [
    ("fast", 4, 12, 2),
    ("fast", 3, 5, 3),  # no divisibility between n and n_continue
    ("fast", 2, 1, 1),
    ("fast", 5, 0, 2),  # n_continue == 0: screened groups are complete
    ("dapo", 4, 2, 2),
    ("dapo", 1, 1, 3),
    ("plain", 3, 4, 2),
    ("plain", 1, 0, 1),
]


def all_rids_in(data: DataProto | None) -> list[int]:
    return [] if data is None else data.batch["responses"][:, 0].tolist()


@pytest.mark.parametrize(("mode", "n", "n_continue", "tbs"), CONFIGS)
@pytest.mark.parametrize("seed", range(3))
def test_random_sequences_match_reference(mode, n, n_continue, tbs, seed):
    ctrl = DataController(train_batch_size=tbs, n=n, n_continue=n_continue, mode=mode)
    ref = ReferenceController(tbs, n, n_continue, mode)
    ep = Episode(ctrl, seed, ref)
    for _ in range(120):
        ep.step()
    assert ep.outputs, "the sequence should reach at least one training step"

    # no response lost or duplicated: emitted + buffered + discarded == generated, disjointly
    emitted = [r for out in ep.outputs for r in all_rids_in(out)]
    buffered = all_rids_in(ctrl.prompts_for_training) + all_rids_in(ctrl.screened_responses)
    everything = emitted + buffered + ref.discarded
    assert len(everything) == len(set(everything))
    assert sorted(everything) == sorted(ep.generated_rids)

    c = ctrl.counters
    for key, value in ref.counts.items():
        assert c[key] == value, key
    assert c["prompts_kept"] + c["discarded_all_correct"] + c["discarded_all_wrong"] == c["prompts_screened"]
    assert c["training_groups_emitted"] == len(ep.outputs) * tbs
    assert c["groups_ready"] == len(ref.ready) and c["prompts_awaiting_continuation"] == len(ref.held)
    queued = ctrl.prompts_for_first_generation_phase  # prompts not yet screened wait in arrival order
    assert ([] if queued is None else list(queued.non_tensor_batch["uid"])) == ref.fresh
    assert c["groups_completed"] == c["training_groups_emitted"] + c["groups_ready"] + c["surplus_groups_dropped"]
    assert c["responses_per_training_group"] == pytest.approx(c["responses_generated"] / c["training_groups_emitted"])
    assert c["keep_rate"] == pytest.approx(c["prompts_kept"] / c["prompts_screened"])


def same_proto(a: DataProto, b: DataProto) -> bool:
    if set(a.batch.keys()) != set(b.batch.keys()) or set(a.non_tensor_batch) != set(b.non_tensor_batch):
        return False
    return all(torch.equal(a.batch[k], b.batch[k]) for k in a.batch.keys()) and all(
        a.non_tensor_batch[k].tolist() == b.non_tensor_batch[k].tolist() for k in a.non_tensor_batch
    )


@pytest.mark.parametrize(("mode", "n", "n_continue", "tbs"), [CONFIGS[0], CONFIGS[1], CONFIGS[4], CONFIGS[6]])
@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("mid_flight", [False, True])
def test_state_dict_round_trip(mode, n, n_continue, tbs, seed, mid_flight):
    ep = Episode(DataController(tbs, n, n_continue, mode), seed)
    for _ in range(int(np.random.default_rng(seed).integers(15, 40))):
        ep.step()
    while (ep.pending is not None) != mid_flight:  # stop between get_generation_inputs and update, or not
        ep.step()
    buffer = io.BytesIO()
    torch.save(ep.ctrl.state_dict(), buffer)
    restored = DataController(tbs, n, n_continue, mode)
    restored.load_state_dict(torch.load(io.BytesIO(buffer.getvalue()), weights_only=False))
    twin = Episode(restored, seed)
    twin.policy, twin.rng, twin.pending = copy.deepcopy(ep.policy), copy.deepcopy(ep.rng), copy.deepcopy(ep.pending)
    done = len(ep.outputs)
    for _ in range(50):
        ep.step()
        twin.step()
    assert len(ep.outputs) > done and len(twin.outputs) == len(ep.outputs) - done
    assert all(same_proto(a, b) for a, b in zip(ep.outputs[done:], twin.outputs, strict=True))
    assert restored.counters == pytest.approx(ep.ctrl.counters, nan_ok=True)


# ---------------------------------------------------------------- deterministic scenarios


def scripted_output(gen_in: DataProto, values_by_uid: dict[str, list[float]], workers: int = 1) -> DataProto:
    """Rows get the metric values listed for their uid, in order; pad rows get 0.5."""
    padded, _ = pad_to_multiple(gen_in, workers)
    seen = defaultdict(int)
    values = []
    for uid, pad in zip(padded.non_tensor_batch["uid"], padded.non_tensor_batch[PAD_KEY], strict=True):
        if pad:
            values.append(0.5)
        else:
            values.append(values_by_uid[uid][seen[uid]])
            seen[uid] += 1
    m = len(padded)
    extra = DataProto.from_dict(
        tensors={"responses": torch.arange(m)[:, None].repeat(1, RESPONSE_LEN)}, non_tensors={"acc": np.array(values)}
    )
    return padded.union(extra)


def test_odd_number_of_kept_prompts_two_workers():
    policy = SimulatedPolicy(0)
    ctrl = DataController(train_batch_size=3, n=3, n_continue=5, mode="fast")
    first = policy.fresh_prompts(5)
    u = list(first.non_tensor_batch["uid"])
    ctrl.add_fresh_prompts(first)
    gen_in = ctrl.get_generation_inputs()
    assert len(gen_in) == 15 and ctrl.generation_counts["screen_prompts"] == 5
    screen = {u[0]: [1, 0, 0], u[1]: [1, 1, 1], u[2]: [0, 1, 1], u[3]: [0, 0, 0], u[4]: [0, 0, 1]}
    ctrl.update(scripted_output(gen_in, screen, workers=2))  # 15 rows + 1 pad
    c = ctrl.counters
    assert (c["prompts_kept"], c["discarded_all_correct"], c["discarded_all_wrong"]) == (3, 1, 1)

    second = policy.fresh_prompts(2)
    ctrl.add_fresh_prompts(second)
    gen_in = ctrl.get_generation_inputs()
    assert ctrl.generation_counts == {
        "screen_prompts": 2,
        "screen_responses": 6,
        "continue_prompts": 3,
        "continue_responses": 15,
    }
    assert gen_in.non_tensor_batch["uid"][6:].tolist() == [u[0]] * 5 + [u[2]] * 5 + [u[4]] * 5
    values = {uid: [0.0] * 5 for uid in (u[0], u[2], u[4])} | {v: [1, 1, 1] for v in second.non_tensor_batch["uid"]}
    padded = scripted_output(gen_in, values, workers=2)
    assert len(padded) == 22 and len(padded.chunk(2)[0]) == 11
    ctrl.update(padded)
    assert ctrl.is_ready_for_training()
    batch = ctrl.get_training_data()
    assert batch.non_tensor_batch["uid"].tolist() == [u[0]] * 8 + [u[2]] * 8 + [u[4]] * 8
    assert batch.non_tensor_batch["acc"].tolist()[:8] == [1, 0, 0, 0, 0, 0, 0, 0]
    assert ctrl.counters["responses_generated"] == 15 + 21 and not ctrl.is_ready_for_training()


@pytest.mark.parametrize(
    "values",
    [
        [0.7, 0.7, 0.7],
        [0.1, 0.1 + 1e-12, 0.1],
        [1e16, 1e16 + 2, 1e16],
        [-1.0, -1.0, -1.0],
        [0.3, 0.9, 0.3],
        [0.1] * 3,
        [1 / 3, 1 / 3, 1 / 3],
    ],
)
def test_keep_rule_matches_std_reference(values):
    ctrl = DataController(train_batch_size=1, n=3, n_continue=0, mode="fast")
    fresh = SimulatedPolicy(0).fresh_prompts(1)
    ctrl.add_fresh_prompts(fresh)
    uid = fresh.non_tensor_batch["uid"][0]
    ctrl.update(scripted_output(ctrl.get_generation_inputs(), {uid: values}))
    assert ctrl.is_ready_for_training() == reference_keep(values)
    if not reference_keep(values):
        expected = "discarded_all_correct" if values[0] > 0.5 else "discarded_all_wrong"
        assert ctrl.counters[expected] == 1


def test_plain_mode_keeps_uniform_groups_and_dapo_drops_them():
    for mode, ready in (("plain", True), ("dapo", False)):
        ctrl = DataController(train_batch_size=1, n=2, n_continue=2, mode=mode)
        fresh = SimulatedPolicy(0).fresh_prompts(1)
        ctrl.add_fresh_prompts(fresh)
        gen_in = ctrl.get_generation_inputs()
        assert len(gen_in) == 4  # N in one shot
        ctrl.update(scripted_output(gen_in, {fresh.non_tensor_batch["uid"][0]: [1, 1, 1, 1]}))
        assert ctrl.is_ready_for_training() == ready


def test_pad_rows_are_ignored():
    ctrl = DataController(train_batch_size=1, n=2, n_continue=1, mode="fast")
    fresh = SimulatedPolicy(0).fresh_prompts(1)
    ctrl.add_fresh_prompts(fresh)
    uid = fresh.non_tensor_batch["uid"][0]
    out = scripted_output(ctrl.get_generation_inputs(), {uid: [1.0, 1.0]}, workers=5)  # 3 pad rows of 0.5
    assert out.non_tensor_batch[PAD_KEY].sum() == 3
    ctrl.update(out)
    assert ctrl.counters["discarded_all_correct"] == 1 and ctrl.counters["responses_generated"] == 2


@pytest.mark.parametrize(
    ("values", "valid"),
    [
        ([1.0, 0.0, 1.0, 1.0], [True, False, True, True]),  # the only wrong answer is a crashed episode
        ([1.0, 0.0, 0.0, 1.0], [True, False, True, True]),  # still mixed without it
        ([0.0, 0.0, 1.0, 0.0], [True, True, True, True]),
        ([0.0, 0.0, 0.0, 0.0], [False, False, False, False]),  # nothing valid
        ([1.0, 1.0, 1.0, 1.0], [False, True, False, False]),
    ],
)
def test_invalid_responses_do_not_decide_the_keep_rule(values, valid):
    ctrl = DataController(train_batch_size=1, n=4, n_continue=0, mode="fast")
    fresh = SimulatedPolicy(0).fresh_prompts(1)
    ctrl.add_fresh_prompts(fresh)
    out = scripted_output(ctrl.get_generation_inputs(), {fresh.non_tensor_batch["uid"][0]: values})
    ctrl.update(out, valid=np.array(valid))
    judged = [v for v, ok in zip(values, valid, strict=True) if ok] or [0.0]  # nothing valid: all wrong
    assert ctrl.is_ready_for_training() == reference_keep(judged)
    if not reference_keep(judged):
        expected = "discarded_all_correct" if judged[0] > 0.5 else "discarded_all_wrong"
        assert ctrl.counters[expected] == 1
    assert ctrl.counters["responses_generated"] == 4  # generated all the same


def test_validity_flags_must_match_the_rows():
    ctrl = DataController(train_batch_size=1, n=2, n_continue=0, mode="fast")
    fresh = SimulatedPolicy(0).fresh_prompts(1)
    ctrl.add_fresh_prompts(fresh)
    out = scripted_output(ctrl.get_generation_inputs(), {fresh.non_tensor_batch["uid"][0]: [1.0, 0.0]})
    with pytest.raises(ValueError, match="3 validity flags for 2 rows"):
        ctrl.update(out, valid=np.ones(3, dtype=bool))


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n": 1, "mode": "fast"}, "n >= 2"),
        ({"n": 0, "mode": "plain"}, "n must be an int >= 1"),
        ({"n": 4, "n_continue": -1}, "n_continue must be an int >= 0"),
        ({"n": 4, "train_batch_size": 0}, "train_batch_size must be an int >= 1"),
        ({"n": 4, "mode": "speed"}, "unknown mode"),
        ({"n": 1, "n_continue": 0, "mode": "dapo"}, "dapo mode needs N"),
        ({"n": 2.0}, "n must be an int"),
    ],
)
def test_bad_settings(kwargs, match):
    kwargs = {"train_batch_size": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        DataController(**kwargs)


def fast_with_pending():
    policy = SimulatedPolicy(0)
    ctrl = DataController(train_batch_size=1, n=2, n_continue=2, mode="fast")
    ctrl.add_fresh_prompts(policy.fresh_prompts(3))
    return ctrl, policy, ctrl.get_generation_inputs()


def test_missing_metric_names_available_keys():
    ctrl, policy, gen_in = fast_with_pending()
    out = policy.generate(gen_in, workers=1)
    out.non_tensor_batch.pop("acc")
    with pytest.raises(ValueError, match=r"'acc' not in .*reward_model.*uid"):
        ctrl.update(out)
    with pytest.raises(ValueError, match="5 metric values for 6 rows"):
        ctrl.update(out, metric_values=np.zeros(5))
    with pytest.raises(ValueError, match="non-finite"):
        ctrl.update(out, metric_values=np.array([np.nan] + [0.0] * 5))


def test_lost_duplicated_or_foreign_rows_are_errors():
    ctrl, policy, gen_in = fast_with_pending()
    out = policy.generate(gen_in, workers=1)
    with pytest.raises(ValueError, match="wrong number of responses"):
        ctrl.update(out.select_idxs(np.arange(1, len(out))))
    with pytest.raises(ValueError, match="wrong number of responses"):
        ctrl.update(out.select_idxs(np.r_[np.arange(len(out)), 0]))
    foreign = copy.deepcopy(out)
    foreign.non_tensor_batch["uid"][0] = "never-sent"
    with pytest.raises(ValueError, match="not sent"):
        ctrl.update(foreign)
    wrong_phase = copy.deepcopy(out)
    wrong_phase.non_tensor_batch[PHASE_KEY][0] = CONTINUE
    with pytest.raises(ValueError, match="phase"):
        ctrl.update(wrong_phase)
    ctrl.update(out)  # the failed calls changed nothing
    assert ctrl.counters["responses_generated"] == 6


def test_call_order_and_uid_errors():
    ctrl, policy, gen_in = fast_with_pending()
    with pytest.raises(RuntimeError, match="not been passed to update"):
        ctrl.get_generation_inputs()
    with pytest.raises(ValueError, match="already held"):
        ctrl.add_fresh_prompts(gen_in.select_idxs([0]).select(non_tensor_batch_keys=["uid", "reward_model"]))
    dup = policy.fresh_prompts(2)
    dup.non_tensor_batch["uid"][1] = dup.non_tensor_batch["uid"][0]
    with pytest.raises(ValueError, match="not unique"):
        ctrl.add_fresh_prompts(dup)
    with pytest.raises(ValueError, match="already carry"):
        ctrl.add_fresh_prompts(gen_in)
    with pytest.raises(RuntimeError, match="groups ready"):
        ctrl.get_training_data()
    ctrl.update(policy.generate(gen_in, workers=2))
    with pytest.raises(RuntimeError, match="no pending generation"):
        ctrl.update(policy.generate(gen_in, workers=2))
    empty = DataController(train_batch_size=1, n=2, n_continue=2)
    with pytest.raises(RuntimeError, match="nothing to generate"):
        empty.get_generation_inputs()
    with pytest.raises(ValueError, match="no non_tensor_batch column 'uid'"):
        empty.add_fresh_prompts(DataProto.from_dict(tensors={"input_ids": torch.zeros(1, 2)}))


def test_load_state_dict_rejects_other_shapes():
    state = DataController(train_batch_size=2, n=4, n_continue=12).state_dict()
    with pytest.raises(ValueError, match="does not match"):
        DataController(train_batch_size=2, n=4, n_continue=4).load_state_dict(state)
    DataController(train_batch_size=8, n=4, n_continue=12, filter_metric="score").load_state_dict(state)


def test_caller_mutating_its_batch_does_not_reach_the_controller():
    policy = SimulatedPolicy(0)
    ctrl = DataController(train_batch_size=1, n=2, n_continue=2, mode="fast")
    fresh = policy.fresh_prompts(2)
    ctrl.add_fresh_prompts(fresh)
    fresh.pop(batch_keys=["input_ids"], non_tensor_batch_keys=["reward_model"])  # as verl's trainer does
    gen_in = ctrl.get_generation_inputs()
    assert "input_ids" in gen_in.batch.keys() and "reward_model" in gen_in.non_tensor_batch


def test_dapo_drops_the_surplus_like_verl_recipe_while_plain_keeps_it():
    for mode, left in (("dapo", 0), ("plain", 1)):
        ctrl = DataController(train_batch_size=2, n=1, n_continue=1, mode=mode)
        uids = np.array(["a", "b", "c"], dtype=object)
        ctrl.add_fresh_prompts(DataProto.from_dict(tensors={"x": torch.zeros(3, 1)}, non_tensors={"uid": uids}))
        rows = ctrl.get_generation_inputs()
        rows.non_tensor_batch["acc"] = np.tile([1.0, 0.0], 3)  # every group mixed: 3 ready groups
        ctrl.update(rows)
        batch = ctrl.get_training_data()
        assert len(batch) == 4 and list(dict.fromkeys(batch.non_tensor_batch["uid"])) == ["a", "b"]
        assert ctrl.counters["groups_ready"] == left
        assert ctrl.counters["surplus_groups_dropped"] == 1 - left


def test_the_counters_the_readers_name_are_the_controllers():
    """The console, the plots and the campaign report read counters by their metric keys (metrics_log/keys.py); fast
    DAPO's trainer logs every counter as the prefix plus its name, so each key names a counter the controller has."""
    from verl_ext.metrics_log.keys import CURRICULUM_PREFIX, KEEP_RATE_KEY, RESPONSES_PER_GROUP_KEY, TOKENS_KEY

    counters = DataController(train_batch_size=2, n=4, n_continue=4).counters
    for key in (TOKENS_KEY, KEEP_RATE_KEY, RESPONSES_PER_GROUP_KEY):
        assert key.startswith(CURRICULUM_PREFIX) and key.removeprefix(CURRICULUM_PREFIX) in counters, key
