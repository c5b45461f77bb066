"""Teacher disagreement -> DPO pairs: rule tables, provenance, JSONL writer and reader."""

import json

import pytest

from verl_ext.composer import DisagreementConfig, PairReader, PairWriter, StepRecord, extract_pairs, pair_from_step
from verl_ext.composer.disagreement import answer_key

MAJORITY = DisagreementConfig(rule="majority", min_agree=2)  # composer.yaml's defaults
ANY = DisagreementConfig(rule="any_differs", min_agree=2)


def step(student, *answers, names="abcd"):
    return StepRecord("tr", 3, student, dict(zip(names, answers)), prompt=[{"role": "user", "content": "s"}])


# (student, teacher answers, majority-rule chosen or None, any_differs chosen or None)
TABLE = [
    ("ls", ("cat f", "cat f", "pwd"), "cat f", "cat f"),  # 2 of 3 agree on X != student
    ("ls", ("cat f", "cat f", "cat f"), "cat f", "cat f"),  # all agree on X != student
    ("ls", ("cat f", "pwd", "rm x"), None, "cat f"),  # all disagree: majority skips; any_differs: earliest wins
    ("ls", ("ls", "ls", "ls"), None, None),  # all agree with the student
    ("ls", ("ls", "ls", "pwd"), None, "pwd"),  # majority agrees with the student
    ("ls", ("ls", "pwd", "pwd"), "pwd", "pwd"),  # majority against the student
    ("ls", ("cat f", None, "cat f"), "cat f", "cat f"),  # a failed teacher is ignored
    ("ls", ("cat f", None, None), None, "cat f"),  # one answer cannot make a majority of 2
    ("ls", (None, None, None), None, None),  # no answers
    ("LS ", ("ls", "  ls", "Ls"), None, None),  # normalisation: case and whitespace
    ("ls", ("a", "a", "b", "b"), None, "a"),  # two answers tie at the threshold: ambiguous under majority
    ("ls", ("a", "b", "b", "ls"), "b", "b"),  # any_differs picks the most supported differing answer
]


@pytest.mark.parametrize("student,answers,majority,any_differs", TABLE)
def test_rule_table(student, answers, majority, any_differs):
    got_majority = pair_from_step(step(student, *answers), MAJORITY)
    got_any = pair_from_step(step(student, *answers), ANY)
    assert (got_majority and got_majority.chosen) == majority
    assert (got_any and got_any.chosen) == any_differs
    for pair in (got_majority, got_any):
        if pair is not None:
            assert pair.rejected == student


def test_min_agree_threshold():
    record = step("ls", "cat f", "cat f", "pwd")
    assert pair_from_step(record, DisagreementConfig(rule="majority", min_agree=3)) is None
    assert (
        pair_from_step(step("ls", "cat f", "cat f", "cat f"), DisagreementConfig(rule="majority", min_agree=3)).chosen
        == "cat f"
    )
    assert (
        pair_from_step(step("ls", "pwd", None, None), DisagreementConfig(rule="majority", min_agree=1)).chosen == "pwd"
    )


def test_provenance_and_raw_text():
    record = step("LS", "Cat  F", "cat f", "pwd")
    pair = pair_from_step(record, MAJORITY)
    assert pair.chosen == "Cat  F"  # raw text of the first supporting teacher, not the normalised key
    assert pair.rejected == "LS"
    assert pair.teachers == ["a", "b"]
    assert pair.answers == {"a": "Cat  F", "b": "cat f", "c": "pwd"}
    assert (pair.trace_id, pair.step, pair.rule) == ("tr", 3, "majority>=2")
    assert pair.prompt == [{"role": "user", "content": "s"}]


def test_custom_normalisation():
    first_word = DisagreementConfig(rule="majority", min_agree=2, normalize=lambda a: a.split()[0])
    assert pair_from_step(step("cat g", "cat f", "cat h", "pwd"), first_word) is None
    assert pair_from_step(step("ls", "cat f", "cat h", "pwd"), first_word).chosen == "cat f"


def test_bad_config():
    with pytest.raises(ValueError, match="rule"):
        DisagreementConfig(rule="two_of_three", min_agree=2)
    with pytest.raises(ValueError, match="min_agree"):
        DisagreementConfig(rule="majority", min_agree=0)


def test_writer_appends_and_reader_yields_new_pairs(tmp_path):
    path = tmp_path / "pairs" / "pairs.jsonl"
    records = [step("ls", "cat f", "cat f", "pwd"), step("ls", "ls", "ls", "ls"), step("x", "y", "y", "y")]
    reader = PairReader(path)
    assert list(reader.read_new()) == []  # nothing written yet
    with PairWriter(path) as writer:
        assert writer.write(extract_pairs(records, MAJORITY)) == 2
        first = list(reader.read_new())  # flushed: visible before close
        assert [p.chosen for p in first] == ["cat f", "y"]
        assert list(reader.read_new()) == []
        writer.write(extract_pairs([step("a", "b", "b", "c")], MAJORITY))
    with PairWriter(path) as writer:  # a restart appends, never truncates
        writer.write(extract_pairs([step("q", "r", "r", "r")], MAJORITY))
    assert [p.chosen for p in reader.read_new()] == ["b", "r"]
    with path.open("a") as f:
        f.write(json.dumps({"trace_id": "t"})[:-3])  # a writer mid-line
    assert list(reader.read_new()) == []
    lines = path.read_text().splitlines()
    assert json.loads(lines[0])["answers"] == {"a": "cat f", "b": "cat f", "c": "pwd"}
    resumed = PairReader(path, offset=0)
    assert len(list(resumed.read_new())) == 4


def test_answer_key_compares_boxed_answers():
    assert answer_key("so it is \\boxed{ 3 }") == answer_key("The answer is \\boxed{3}")
    assert answer_key("\\boxed{3}") != answer_key("\\boxed{4}")
    assert answer_key("no box  Here") == "no box here"


class _Answer:
    def __init__(self, text):
        self.text = text


def test_prompt_groups_and_step_records():
    from verl_ext.composer.disagreement import prompt_groups, step_records, trace_id

    uids = ["b", "a", "b", "a", "b"]
    raw = [[{"role": "user", "content": f"q{u}"}] for u in uids]
    ids = [[1, 2] if u == "a" else [3] for u in uids]
    texts = ["\\boxed{1}", "x", "so \\boxed{ 1 }", "y", "\\boxed{2}"]
    groups = prompt_groups(uids, raw, ids, texts)
    # one group per uid in first-seen order, the first row's prompt, every row's response in order
    assert [g.messages for g in groups] == [[{"role": "user", "content": "qb"}], [{"role": "user", "content": "qa"}]]
    assert [g.ids for g in groups] == [[3], [1, 2]]
    assert [g.responses for g in groups] == [("\\boxed{1}", "so \\boxed{ 1 }", "\\boxed{2}"), ("x", "y")]
    assert groups[0].trace_id == trace_id([{"role": "user", "content": "qb"}]) and len(groups[0].trace_id) == 16
    assert groups[0].trace_id != groups[1].trace_id

    answers = {"t1": _Answer("\\boxed{2}"), "t2": None, "t3": _Answer("\\boxed{2}")}
    records = step_records(groups[0], 7, answers)
    # one record per distinct boxed answer: "1" (first response giving it) and "2"
    assert [r.student_action for r in records] == ["\\boxed{1}", "\\boxed{2}"]
    for r in records:
        assert (r.trace_id, r.step) == (groups[0].trace_id, 7)
        assert r.teacher_answers == {"t1": "\\boxed{2}", "t2": None, "t3": "\\boxed{2}"}
        assert r.prompt == {"messages": groups[0].messages, "ids": [3]}
    pairs = extract_pairs(records, DisagreementConfig(rule="majority", min_agree=2, normalize=answer_key))
    assert [(p.chosen, p.rejected) for p in pairs] == [("\\boxed{2}", "\\boxed{1}")]


def test_agreement_counts_pairs_of_answering_teachers():
    from verl_ext.composer.disagreement import agreement_counts

    assert agreement_counts({"a": "x \\boxed{4}", "b": "\\boxed{ 4 }"}, answer_key) == (1, 1)
    assert agreement_counts({"a": "\\boxed{4}", "b": "\\boxed{5}"}, answer_key) == (0, 1)
    assert agreement_counts({"a": "\\boxed{4}", "b": None}, answer_key) == (0, 0)  # a failed teacher: no pair
    assert agreement_counts({"a": "4", "b": "4", "c": "5"}, answer_key) == (1, 3)


def test_replay_tally_metrics_over_a_run():
    from verl_ext.composer.disagreement import ReplayTally

    tally = ReplayTally()
    assert tally.metrics(0) == {
        "replay/pairs_built": 0.0,
        "replay/pairs_built_total": 0.0,
        "teacher/queries_answered": 0.0,
    }  # no agreement before two teachers answered one query
    tally.add_query({"a": "\\boxed{4}", "b": "\\boxed{4}"}, answer_key)
    tally.add_query({"a": "\\boxed{4}", "b": "\\boxed{5}"}, answer_key)
    tally.add_query({"a": "\\boxed{4}", "b": None}, answer_key)
    tally.pairs_built += 3
    m = tally.metrics(2)
    assert m["teacher/agreement"] == 0.5 and m["teacher/queries_answered"] == 3.0
    assert m["replay/pairs_built"] == 2.0 and m["replay/pairs_built_total"] == 3.0
