"""Pass-rate memory: skip prompts that screened uniform in an earlier epoch (GRESO-style, arXiv 2506.02177).

GRESO (Zheng et al., "Act Only When It Pays") observes that a prompt whose responses were all right or all wrong
(zero reward variance, no GRPO signal) in one epoch is likely to be so again in the next, and skips such prompts
before rollout with a probability, so every prompt keeps a chance to be re-examined. Here the same idea sits in
front of the two-phase screening of SPEED-RL (docs/ALGORITHMS.md section 5): a skipped prompt costs no screening
responses at all.

The rule. Every prompt has a stable key (a hash of its content, see ``prompt_keys``) and a visit count v (times the
prompt was offered for screening, skipped or not; with an epoch-based dataloader one visit = one epoch). After each
screening the memory records the outcome at that visit: mixed, all-wrong or all-correct (the filter metric's
minimum <= 0.5 or > 0.5 when it is uniform, as the controller's discard counters), and the streak s = how many
consecutive screenings of this prompt ended with that same uniform outcome. When the prompt is offered again at
visit v, with ``age = v - v_last`` (visits since the last screening, >= 1):

    p_skip = min(max_skip, (1 - (1 - base)^s) * decay^(age - 1))      if the last screening was uniform
    p_skip = 0                                                         if it was mixed, or the prompt is new

``base`` is ``skip_all_wrong`` or ``skip_all_correct`` by the last outcome (separate: too-hard prompts may become
solvable as the policy learns, too-easy ones rarely become informative again). ``1 - (1 - base)^s`` is GRESO's
exploration rule (the prompt is kept with probability ``(1 - base)^s``, shrinking with each consecutive uniform
epoch); ``decay^(age - 1)`` lets a skipped prompt come back: each epoch it is skipped, its skip probability is
multiplied by ``decay`` because the evidence is getting older while the policy moves. ``max_skip`` < 1 is the
exploration floor: every prompt is screened with probability >= ``1 - max_skip`` at every visit, so no prompt is
skipped forever. A skipped prompt gets no new observation (nothing was generated for it).

``MemorySettings`` has no defaults: the recommended values are the fast DAPO recipe's ``curriculum.memory`` in
recipe/fast_dapo/config/fast_dapo.yaml, the one place they are set. Its skip_all_wrong keeps >= 80% of the
informative prompts (those whose N responses would be mixed) screened, with a margin (the cost model's limit is
0.48), in the second epoch of the simulated benchmark (scripts/bench_sampling.py; the measured trade-off between
responses per training group and informative prompts screened is in docs/PASS_RATE_MEMORY.md); all-correct prompts
are skipped more readily because a learning policy rarely unlearns them.

Decisions draw one uniform number per offered prompt from the memory's own seeded ``numpy`` generator, whose state
is part of ``state_dict()``: a resumed run makes the same decisions as an uninterrupted one. State is five arrays
sorted by key (lookups and updates are vectorised with ``searchsorted``): key (uint64), visits, last screened visit,
last outcome and streak; a prompt costs 33 bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass

import numpy as np

from verl_ext.config.fields import check_declared, setting
from verl_ext.config.settings import read_settings

MIXED, ALL_WRONG, ALL_CORRECT = 0, 1, 2  # outcome codes of one screening
STATE_VERSION = 1


@dataclass(frozen=True)
class MemorySettings:
    """Settings of the pass-rate memory (``curriculum.memory`` in the fast DAPO recipe). Every field is required:
    the values, with the reasons for them, are in recipe/fast_dapo/config/fast_dapo.yaml only.

    enable: turn the memory on (off: the curriculum screens every prompt).
    key: non_tensor_batch column identifying a prompt across epochs (hashed; ``raw_prompt`` is the chat messages
        verl's RLHFDataset gives every row. ``index`` works only if the data sets ``extra_info.index``).
    skip_all_wrong / skip_all_correct: GRESO base skip probability after one uniform screening of that kind.
    decay: per-visit factor on the skip probability of a prompt not re-screened since (0 < decay <= 1).
    max_skip: cap on the skip probability (exploration floor 1 - max_skip), 0 <= max_skip < 1.
    seed: seed of the decision generator.
    init_file: a pass-rate probe's ``pass_rates.jsonl`` (``python -m recipe.fast_dapo.probe``, run with the same
        model, data and ``key``): each prompt's probe outcome counts as its first screening, so the memory skips from
        the first epoch on. None: the memory starts empty.
    """

    enable: bool = setting(help="turn the memory on (off: the curriculum screens every prompt)")
    key: str = setting(help="the non_tensor_batch column identifying a prompt across epochs")
    skip_all_wrong: float = setting(ge=0.0, le=1.0, help="base skip probability after an all-wrong screening")
    skip_all_correct: float = setting(ge=0.0, le=1.0, help="base skip probability after an all-correct screening")
    decay: float = setting(gt=0.0, le=1.0, help="per-visit factor on the skip probability of a prompt not re-screened")
    max_skip: float = setting(ge=0.0, lt=1.0, help="cap on the skip probability (exploration floor 1 - max_skip)")
    seed: int = setting(ge=0, help="seed of the decision generator")
    init_file: str | None = setting(help="a pass-rate probe's pass_rates.jsonl: its outcomes as first screenings")

    def __post_init__(self):
        check_declared(self)  # built directly too (tests, code), not only by read_settings
        if not self.key:
            raise ValueError(f"memory.key must name a non_tensor_batch column, got {self.key!r}")
        if self.init_file is not None and not os.path.isfile(self.init_file):
            raise ValueError(
                f"memory.init_file must be null or an existing probe pass_rates.jsonl, got {self.init_file!r}"
            )

    @classmethod
    def from_mapping(cls, cfg: Mapping) -> MemorySettings:
        """From a dict / OmegaConf node with every field; unknown or missing keys are an error naming them."""
        note = " (the recipe's values are in recipe/fast_dapo/config/fast_dapo.yaml)"
        return read_settings(cls, cfg, "curriculum.memory", required_note=note)


def prompt_keys(values: np.ndarray) -> np.ndarray:
    """Stable 64-bit key per prompt: blake2b of the value's canonical JSON (dict keys sorted, arrays as lists,
    bytes as hex).

    Python's ``hash`` is salted per process, so it would not survive a resume; this does. Values with no content
    form (e.g. a PIL image inside multi-modal messages, whose repr holds a memory address) are an error: key such
    prompts by another column. One hash per prompt (not per response): the Python loop is over prompts only.
    """
    out = np.empty(len(values), dtype=np.uint64)
    for i, value in enumerate(values):
        try:
            text = json.dumps(value, sort_keys=True, default=_jsonable, separators=(",", ":"))
        except (TypeError, ValueError) as e:
            raise ValueError(
                f"pass-rate memory: cannot key a prompt by this value ({e}); set memory.key to a "
                "column of plain values (text, numbers, lists, dicts), e.g. index"
            ) from None
        out[i] = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
    return out


def _jsonable(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"a {type(value).__name__} has no stable content form")


def probe_outcome(correct: np.ndarray, k: int) -> np.ndarray:
    """Outcome code per prompt from a probe's correct counts out of k (uniform iff none or all of k are right)."""
    c = np.asarray(correct)
    return np.where(c == 0, ALL_WRONG, np.where(c == k, ALL_CORRECT, MIXED)).astype(np.int8)


def uniform_outcome(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Outcome code per prompt from the min and max of its screening metric (uniform iff max == min)."""
    return np.where(hi > lo, MIXED, np.where(lo > 0.5, ALL_CORRECT, ALL_WRONG)).astype(np.int8)


class PassRateMemory:
    """Per-prompt screening history and the skip decision (rule in the module docstring)."""

    def __init__(self, settings: MemorySettings):
        self.settings = settings
        self.rng = np.random.default_rng(settings.seed)
        self.keys = np.zeros(0, dtype=np.uint64)
        self.visits = np.zeros(0, dtype=np.int64)  # times offered
        self.last_visit = np.zeros(0, dtype=np.int64)  # visit number of the last screening (0: never screened)
        self.outcome = np.zeros(0, dtype=np.int8)  # outcome of the last screening
        self.streak = np.zeros(0, dtype=np.int64)  # consecutive uniform screenings with that outcome

    def __len__(self) -> int:
        return len(self.keys)

    def offer(self, keys: np.ndarray) -> np.ndarray:
        """Count one visit per offered prompt and return the skip mask (True = do not screen it now).

        Draws exactly ``len(keys)`` uniform numbers, whatever the history, so decisions after a resume match.
        A key offered twice in one call counts two visits; both rows see the history before the call.
        """
        keys = np.asarray(keys, dtype=np.uint64)
        u = self.rng.random(len(keys))
        if len(keys) == 0:
            return np.zeros(0, dtype=bool)
        pos = self._insert(keys)
        age = self.visits[pos] + 1 - self.last_visit[pos]
        p = self.skip_probability(self.outcome[pos], self.streak[pos], age)
        np.add.at(self.visits, pos, 1)
        return u < p

    def skip_probability(self, outcome: np.ndarray, streak: np.ndarray, age: np.ndarray) -> np.ndarray:
        s = self.settings
        base = np.where(outcome == ALL_CORRECT, s.skip_all_correct, s.skip_all_wrong)
        p = (1.0 - (1.0 - base) ** streak) * s.decay ** np.maximum(age - 1, 0)
        return np.where((outcome != MIXED) & (age >= 1), np.minimum(p, s.max_skip), 0.0)

    def record(self, keys: np.ndarray, outcome: np.ndarray) -> None:
        """Record the screening outcome (``MIXED``/``ALL_WRONG``/``ALL_CORRECT``) of each prompt at its current visit.
        A key recorded twice in one call keeps the last outcome given."""
        keys, outcome = np.asarray(keys, dtype=np.uint64), np.asarray(outcome, dtype=np.int8)
        if len(keys) != len(outcome):
            raise ValueError(f"record: {len(keys)} keys for {len(outcome)} outcomes")
        if not np.isin(outcome, (MIXED, ALL_WRONG, ALL_CORRECT)).all():
            raise ValueError("record: outcome codes must be MIXED, ALL_WRONG or ALL_CORRECT")
        if len(keys) == 0:
            return
        # Last occurrence of each key wins: reverse, take the first of each unique key.
        rev_keys, rev_outcome = keys[::-1], outcome[::-1]
        _, first = np.unique(rev_keys, return_index=True)
        keys, outcome = rev_keys[first], rev_outcome[first]
        pos = self._insert(keys)
        same = (self.outcome[pos] == outcome) & (self.last_visit[pos] > 0)
        self.streak[pos] = np.where(outcome == MIXED, 0, np.where(same, self.streak[pos] + 1, 1))
        self.outcome[pos] = outcome
        # A prompt recorded without an offer (never through offer()) counts as visited once.
        self.visits[pos] = np.maximum(self.visits[pos], 1)
        self.last_visit[pos] = self.visits[pos]

    def _insert(self, keys: np.ndarray) -> np.ndarray:
        """Positions of ``keys`` in the sorted state, adding unseen keys with an empty history."""
        new = np.unique(keys[~np.isin(keys, self.keys)])
        if len(new):
            at = np.searchsorted(self.keys, new)
            self.keys = np.insert(self.keys, at, new)
            self.visits = np.insert(self.visits, at, 0)
            self.last_visit = np.insert(self.last_visit, at, 0)
            self.outcome = np.insert(self.outcome, at, MIXED)
            self.streak = np.insert(self.streak, at, 0)
        return np.searchsorted(self.keys, keys)

    # ------------------------------------------------------------------ checkpointing

    def state_dict(self) -> dict:
        return {
            "version": STATE_VERSION,
            "settings": asdict(self.settings),
            "rng": self.rng.bit_generator.state,
            "arrays": {name: getattr(self, name).copy() for name in _ARRAYS},
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore history and generator state. The constants may differ from the checkpoint's (they only shape
        future decisions); the key column may not (the stored keys would mean other prompts)."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"PassRateMemory.load_state_dict: unsupported state version {state.get('version')!r}")
        if state["settings"]["key"] != self.settings.key:
            raise ValueError(
                f"PassRateMemory.load_state_dict: checkpoint keys prompts by '{state['settings']['key']}', "
                f"this run by '{self.settings.key}'"
            )
        arrays = state["arrays"]
        lengths = {len(arrays[name]) for name in _ARRAYS}
        if len(lengths) != 1:
            raise ValueError(f"PassRateMemory.load_state_dict: arrays of different lengths {lengths}")
        for name, dtype in _ARRAYS.items():
            setattr(self, name, np.asarray(arrays[name], dtype=dtype).copy())
        if not (self.keys[:-1] < self.keys[1:]).all():
            raise ValueError("PassRateMemory.load_state_dict: keys are not sorted and unique")
        self.rng.bit_generator.state = state["rng"]


_ARRAYS = {
    "keys": np.uint64,
    "visits": np.int64,
    "last_visit": np.int64,
    "outcome": np.int8,
    "streak": np.int64,
}
