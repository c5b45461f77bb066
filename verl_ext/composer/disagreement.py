"""N-teacher disagreement -> DPO pairs (Composer channel 3, "trace replay"; docs/ALGORITHMS.md section 6).

For each step t of a frozen trace, the student chose action Y and each teacher proposed an action (or failed).
Answers are compared after a normalisation (default: strip, collapse whitespace, lowercase).

rule "majority" (the Composer design's rule; min_agree = 2 recommended for 3 teachers):
    if at least min_agree teachers agree on X and norm(Y) != X: pair (chosen = X, rejected = Y).
    All teachers disagree, or the most supported answer is the student's: no pair. If two different answers both
    reach min_agree with equal support (possible with N >= 4), the step is ambiguous: no pair.
rule "any_differs" (the looser alternative: more pairs, noisier):
    if any teacher's answer differs from norm(Y): pair with chosen = the differing answer with the most support
    (ties: the one from the earliest teacher in pool order). All teachers agree with the student: no pair.

A failed teacher (None) neither supports nor opposes anything. The chosen text is the raw answer of the first
(in pool order) teacher supporting it; the rejected text is the student's raw action. Pairs carry provenance
(trace id, step, rule, supporting teachers, every teacher's raw answer) and the step's prompt for training later.
`PairWriter` appends one JSON line per pair and flushes; `PairReader` yields the pairs appended since its last read,
so a later training step consumes them off the rollout's critical path.

The trainer's side: `prompt_groups` turns a step's rows into one group per prompt (the teacher's query, with the
student's responses), `step_records` turns a group's teacher answers into StepRecords (one per distinct student
answer by `answer_key`, the last \\boxed{} content).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from verl_ext.reward.answer_extraction import last_boxed

RULES = ("majority", "any_differs")


def default_normalize(action: str) -> str:
    """Case- and whitespace-insensitive comparison of actions."""
    return re.sub(r"\s+", " ", action).strip().lower()


def answer_key(text: str) -> str:
    """Comparison key of an action: the last \\boxed{} content if any, else the whole text (normalised)."""
    return default_normalize(last_boxed(text) or text)


@dataclass(frozen=True)
class DisagreementConfig:
    """rule: "majority" (recommended) or "any_differs"; min_agree: teachers that must agree under "majority"
    (recommended 2); normalize: maps an action to its comparison key (recommended: task-specific, e.g. parse the
    tool call and compare name + arguments)."""

    rule: str  # composer.replay.rule (default in composer.yaml)
    min_agree: int  # composer.replay.min_agree (default in composer.yaml)
    normalize: Callable[[str], str] = default_normalize

    def __post_init__(self):
        if self.rule not in RULES:
            raise ValueError(f"rule must be one of {RULES}, got {self.rule!r}")
        if not (isinstance(self.min_agree, int) and self.min_agree >= 1):
            raise ValueError(f"min_agree must be a positive int, got {self.min_agree!r}")


@dataclass(frozen=True)
class StepRecord:
    trace_id: str
    step: int
    student_action: str
    teacher_answers: dict[str, str | None]  # teacher name -> raw answer (None: the teacher failed), pool order
    prompt: Any = None  # JSON-able context the actions answer (e.g. chat messages); carried into the pair


@dataclass(frozen=True)
class DPOPair:
    trace_id: str
    step: int
    prompt: Any
    chosen: str
    rejected: str
    rule: str
    teachers: list[str]  # teachers whose normalised answer equals the chosen one
    answers: dict[str, str | None] = field(default_factory=dict)  # every teacher's raw answer


def pair_from_step(record: StepRecord, config: DisagreementConfig) -> DPOPair | None:
    """The DPO pair for one step, or None (see module docstring for the rules)."""
    norm = config.normalize
    student = norm(record.student_action)
    keyed = [(name, raw, norm(raw)) for name, raw in record.teacher_answers.items() if raw is not None]
    support = Counter(key for _, _, key in keyed)
    if not support:
        return None

    if config.rule == "majority":
        ranked = support.most_common()
        best, count = ranked[0]
        if count < config.min_agree or (len(ranked) > 1 and ranked[1][1] == count):
            return None  # no answer reaches the threshold, or two tie at the top
        if best == student:
            return None
    else:  # any_differs
        differing = [key for _, _, key in keyed if key != student]
        if not differing:
            return None
        top = max(support[k] for k in differing)
        best = next(k for k in differing if support[k] == top)  # earliest teacher wins ties

    supporters = [name for name, _, key in keyed if key == best]
    chosen_raw = next(raw for _, raw, key in keyed if key == best)
    return DPOPair(
        trace_id=str(record.trace_id),
        step=int(record.step),
        prompt=record.prompt,
        chosen=chosen_raw,
        rejected=record.student_action,
        rule=config.rule if config.rule == "any_differs" else f"majority>={config.min_agree}",
        teachers=supporters,
        answers=dict(record.teacher_answers),
    )


def extract_pairs(records, config: DisagreementConfig) -> list[DPOPair]:
    return [p for p in (pair_from_step(r, config) for r in records) if p is not None]


@dataclass(frozen=True)
class PromptGroup:
    """One prompt of a step and its students' responses: what the teacher pool is asked, and what its answers are
    compared with. trace_id: the first 16 hex digits of the SHA-1 of the messages as sorted-key JSON."""

    trace_id: str
    messages: list[dict]
    ids: list[int]  # the prompt's token ids (unpadded)
    responses: tuple[str, ...]


def trace_id(messages: Sequence[Mapping]) -> str:
    return hashlib.sha1(json.dumps([dict(m) for m in messages], sort_keys=True).encode()).hexdigest()[:16]


def prompt_groups(
    uids: Sequence, raw_prompts: Sequence, prompt_ids: Sequence[list[int]], responses: Sequence[str]
) -> list[PromptGroup]:
    """One group per uid, in the order the uids first appear; the prompt (messages, ids) is the group's first
    row's, the responses all its rows' in order."""
    first: dict[Any, int] = {}
    texts: dict[Any, list[str]] = {}
    for i, uid in enumerate(uids):
        first.setdefault(uid, i)
        texts.setdefault(uid, []).append(responses[i])
    groups = []
    for uid, i in first.items():
        messages = [dict(m) for m in raw_prompts[i]]
        groups.append(PromptGroup(trace_id(messages), messages, prompt_ids[i], tuple(texts[uid])))
    return groups


def step_records(group: PromptGroup, step: int, answers: Mapping[str, Any]) -> list[StepRecord]:
    """The group's StepRecords for its teachers' answers (teacher name -> an answer with `.text`, or None when the
    teacher failed): one per distinct student answer (answer_key), the first response giving it, in order."""
    teacher_texts = {name: (a.text if a is not None else None) for name, a in answers.items()}
    seen, records = set(), []
    for text in group.responses:
        key = answer_key(text)
        if key in seen:
            continue
        seen.add(key)
        prompt = {"messages": group.messages, "ids": group.ids}
        records.append(StepRecord(group.trace_id, step, text, teacher_texts, prompt=prompt))
    return records


def agreement_counts(answers: Mapping[str, str | None], normalize: Callable[[str], str]) -> tuple[int, int]:
    """(pairs of teachers giving the same answer, pairs of teachers that both answered) for one query; a failed
    teacher (None) is left out. With two teachers: (1, 1) if they agree, (0, 1) if not, (0, 0) if one failed."""
    keys = [normalize(a) for a in answers.values() if a is not None]
    pairs = len(keys) * (len(keys) - 1) // 2
    same = sum(n * (n - 1) // 2 for n in Counter(keys).values())
    return same, pairs


@dataclass
class ReplayTally:
    """The replay channel's running counts over a run, for its metrics: how many queries the teachers answered, how
    often they agreed (why: pairs need `min_agree` agreeing teachers, so agreement bounds the pairs a step can get,
    and with weak teachers it says how much of the channel's signal is the teachers' shared error) and the pairs
    built. Checkpointed with the trainer's replay state, so a resumed run keeps counting."""

    queries: int = 0  # prompt groups whose teacher answers arrived
    teacher_pairs: int = 0  # pairs of teachers that both answered one of them
    agreeing_pairs: int = 0  # ... and gave the same answer (by the rule's normalisation)
    pairs_built: int = 0  # DPO pairs written

    def add_query(self, answers: Mapping[str, str | None], normalize: Callable[[str], str]) -> None:
        same, pairs = agreement_counts(answers, normalize)
        self.queries += 1
        self.agreeing_pairs += same
        self.teacher_pairs += pairs

    def metrics(self, built_now: int) -> dict[str, float]:
        """replay/pairs_built (this step), replay/pairs_built_total, teacher/queries_answered and teacher/agreement
        (the share of agreeing teacher pairs; absent until two teachers answered one query), both over the run."""
        out = {
            "replay/pairs_built": float(built_now),
            "replay/pairs_built_total": float(self.pairs_built),
            "teacher/queries_answered": float(self.queries),
        }
        if self.teacher_pairs:
            out["teacher/agreement"] = self.agreeing_pairs / self.teacher_pairs
        return out


class PairWriter:
    """Appends pairs to a JSONL file, one line each, flushed per write (a crash loses at most the line in progress)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")

    def write(self, pairs) -> int:
        n = 0
        for pair in pairs:
            self._file.write(json.dumps(asdict(pair)) + "\n")
            n += 1
        self._file.flush()
        return n

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> PairWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class PairReader:
    """Yields the pairs appended to a JSONL file since the previous `read_new()` (a line without its newline yet is
    left for the next read)."""

    def __init__(self, path: str | Path, offset: int = 0):
        self.path = Path(path)
        self.offset = offset  # bytes consumed so far; persist it to resume after a restart

    def read_new(self) -> Iterator[DPOPair]:
        if not self.path.exists():
            return
        with self.path.open("rb") as f:
            f.seek(self.offset)
            for line in f:
                if not line.endswith(b"\n"):
                    break  # being written right now
                self.offset += len(line)
                yield DPOPair(**json.loads(line))
