"""Error sites from an agent's tool results (`verl_ext.composer.tool_errors`), with the calculator agent's rules as
shipped (recipe/composer/config/tool_errors/calculator.yaml, read by the recipe's config check):

- on the real model's recorded calculator episodes (the probe's replies, `agent_episodes.probe_episodes`): every tool
  error is exactly one site, at the turn after it, of the kind its error names; a valid call followed by a wrong
  answer has a site only where a rule names the mistake (a fraction copied in part, an operation the question does
  not name), and a failed episode without a call one at its answer;
- on episodes the Agents SDK agent, unchanged, played through the project's gateway (`agent_episodes.
  gateway_episodes`): the sites the trainer's batch gives (`hints.error_sites_for_batch` on the columns the agent
  loop writes), an explicit step_meta winning its turn, and each site's teacher row placed before the right turn of
  the trained tokens."""

from __future__ import annotations

import json
from collections import Counter
from fractions import Fraction

import pytest
import torch
from omegaconf import OmegaConf

from recipe.composer.config_check import read_tool_error_rules
from tests.composer.agent_episodes import ROOT, probe_episodes
from verl_ext.agent.trajectory import assemble_segments
from verl_ext.composer.agent_trace import expression_key, operations, question_operations, read_trace
from verl_ext.composer.hints import (
    agent_error_sites,
    error_sites_for_batch,
    hint_templates,
    plan_teacher_rows,
    render_hint,
)
from verl_ext.composer.tool_errors import ToolErrorRule, check_templates, tool_error_sites

CALCULATOR = ROOT / "recipe/composer/config/tool_errors/calculator.yaml"
RULES = read_tool_error_rules(
    OmegaConf.to_container(OmegaConf.load(CALCULATOR))["composer"]["sdpo"]["tool_error_rules"]
)
TEMPLATES = hint_templates(RULES)


def sites_of(episode, failed=None):
    failed = episode["acc"] == 0 if failed is None else failed
    return tool_error_sites(read_trace(episode["turns"]), RULES, failed)


# -- the real model's recorded episodes ------------------------------------------------------------------------------


def _part_copied(row) -> bool:
    """The probe's own grading: the tool answered a fraction p/q and the boxed answer was p or q alone."""
    result, pred = row["result"], row["final_grade"]["pred"]
    if "/" not in result or row["final_grade"]["correct"] or not pred:
        return False
    try:
        return any(Fraction(pred) == Fraction(part) for part in result.split("/"))
    except ValueError:
        return False


# the probe's failed episodes whose call applies an operation the question does not name, read from its replies
WRONG_OPERATION = {
    ("What is the distance between 0.4 and 0.03?", "0.4 + 0.03"),
    ("Calculate 78*-0.4.", "78 - 0.4"),
    ("Calculate 0.1*-0.2.", "0.1 + 0.2"),
    ("Calculate 0.1*-0.2.", "0.1 - 0.2"),
    ("Subtract -0.5 from -0.1.", "-0.5 * -0.1"),
}


def test_every_recorded_tool_error_is_one_site_at_the_next_turn():
    episodes = probe_episodes()
    assert len(episodes) == 120  # 30 greedy and 90 sampled episodes of the agent preset's prompt
    errors = 0
    for e in episodes:
        row, sites = e["row"], sites_of(e)
        assert len({s.turn for s in sites}) == len(sites) <= 1  # one site a turn; these episodes have two turns
        if row["expr"] is not None and row["result"].startswith("error"):
            errors += 1
            # each error the real model met: a call that writes "= value" after the expression
            assert row["result"] == "error: syntax error: invalid syntax" and "=" in row["expr"]
            (site,) = sites
            assert (site.turn, site.error_kind) == (1, "equation_in_call")
            assert site.fields["lhs"] == row["expr"].split("=")[0].strip()
            hint = render_hint(site, TEMPLATES)
            assert row["expr"] in hint and e["gold"] not in hint.replace(row["expr"], "")
    assert errors == 4


def test_a_valid_call_then_a_wrong_answer_has_a_site_only_where_a_rule_names_the_mistake():
    kinds = Counter()
    for e in probe_episodes():
        row, sites = e["row"], sites_of(e)
        kinds.update(s.error_kind for s in sites)
        if row["expr"] is None or row["result"].startswith("error"):
            continue
        named = [(s.turn, s.error_kind) for s in sites]
        if _part_copied(row):
            assert named == [(1, "fraction_in_part")]
            (site,) = sites
            assert site.fields["result"] == row["result"] and site.fields["answer"] == row["final_grade"]["pred"]
            assert site.fields["part"] == "numerator"  # the real model copies the numerator (16/5 -> 16)
        elif (e["question"].removesuffix(" Give the final answer in \\boxed{}."), row["expr"]) in WRONG_OPERATION:
            assert e["acc"] == 0 and named == [(1, "operation_not_named")]
        else:  # right, or wrong in a way no rule names (`The final answer is 4.` with no box): no site
            assert named == [], (e["question"], row)
    # the counts the calculator rules' comments quote
    assert kinds == {"no_tool_call": 17, "operation_not_named": 9, "fraction_in_part": 7, "equation_in_call": 4}


def test_no_call_and_the_wrong_operation_mark_only_failed_episodes():
    episodes = probe_episodes()
    no_call = [e for e in episodes if e["row"]["expr"] is None]
    assert [(s.turn, s.error_kind) for e in no_call if e["acc"] == 0 for s in sites_of(e)] == [(0, "no_tool_call")] * 17
    assert all(not sites_of(e) for e in no_call if e["acc"] > 0)
    # the same episodes told they succeeded: the `when: failed` rules stay quiet, the tool's own errors do not
    kinds = Counter(s.error_kind for e in episodes for s in sites_of(e, failed=False))
    assert kinds == {"fraction_in_part": 7, "equation_in_call": 4}
    # accuracy unknown: no `when: failed` site either
    assert all(
        s.error_kind != "no_tool_call" for e in no_call for s in tool_error_sites(read_trace(e["turns"]), RULES, None)
    )


def test_the_calculator_normal_form_and_operations():
    assert expression_key("(2*3)+4") == expression_key("2 * 3 + 4")
    assert expression_key("3+5") == expression_key("5 + 3") != expression_key("3 - 5")
    assert expression_key("(16)/(5)") == expression_key("16 / 5") == expression_key("16÷5")
    assert expression_key("(16 / 5") == "(16/5" != expression_key("16 / 5")  # unreadable: its text
    assert operations("78 - 0.4") == {"sub"} and operations("2 - -2") == {"sub"} and operations("(1") is None
    assert question_operations("What is the distance between 0.4 and 0.03?") == {"sub"}
    assert question_operations("Calculate 78*-0.4.") == {"mul"}
    assert question_operations("What is 1 + 2 - 3?") == {"add", "sub"}
    assert question_operations("Solve 3*x + 2 = 8 for x.") is None


# -- the rules' own checks ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rule, match",
    [
        ({"kind": "x", "result": "(", "hint": "h"}, "result: not a regular expression"),
        ({"kind": "x", "source": "tool", "hint": "h"}, "source must be one of"),
        ({"kind": "x", "when": "sometimes", "hint": "h"}, "when must be one of"),
        ({"kind": "x", "check": "vibes", "hint": "h"}, "check must be one of"),
        ({"kind": "x", "source": "no_call", "result": "e", "hint": "h"}, "result, call and check must be null"),
        ({"kind": "", "hint": "h"}, "kind must be a non-empty string"),
    ],
)
def test_a_bad_rule_is_refused_naming_the_key(rule, match):
    with pytest.raises(ValueError, match=match):
        ToolErrorRule(**rule)


def test_templates_are_checked_against_the_fields_a_rule_gives():
    check_templates(RULES, hint_templates())  # the shipped rules use only their own fields
    leak = ToolErrorRule(kind="x", result="error", hint="The answer is {ground_truth}.")
    with pytest.raises(ValueError, match=r"\[0\] \(x\): hint uses \['ground_truth'\]"):
        check_templates([leak], hint_templates())
    with pytest.raises(ValueError, match="no hint and no template 'nope'"):
        check_templates([ToolErrorRule(kind="nope")], hint_templates())
    # a rule may reuse a default template whose fields it gives (`tool_error` needs error_message)
    check_templates([ToolErrorRule(kind="e", template="tool_error", result="^error")], hint_templates())
    groups = ToolErrorRule(kind="g", result="(?P<num>\\d+)", hint="{num}")
    check_templates([groups], hint_templates())
    with pytest.raises(ValueError, match="two different hints"):
        check_templates([ToolErrorRule(kind="a", hint="1"), ToolErrorRule(kind="a", hint="2")], hint_templates())


def test_the_first_matching_rule_marks_a_turn_once():
    """Two rules on one error: the first in order marks the turn, the second adds no site for it."""
    (episode,) = [e for e in probe_episodes() if (e["row"]["expr"] or "").startswith("3 + 1.5 =")][:1]
    generic = ToolErrorRule(kind="generic", result="^error", hint="{error_message}")
    specific = RULES[1]  # equation_in_call
    trace = read_trace(episode["turns"])
    assert [s.error_kind for s in tool_error_sites(trace, [generic, specific], True)] == ["generic"]
    assert [s.error_kind for s in tool_error_sites(trace, [specific, generic], True)] == ["equation_in_call"]


# -- episodes played through the gateway -------------------------------------------------------------------------------

EXPECTED = {  # question -> (turn, kind) of its sites
    "Calculate 16 divided by 5.": [(1, "unbalanced_parenthesis"), (2, "fraction_in_part")],
    "What is the distance between 0.4 and 0.03?": [(1, "operation_not_named")],
    "What is -1 divided by -2?": [(0, "no_tool_call")],
    "What is 2 - -2?": [],
    "What is 3 + 5?": [],
}


@pytest.fixture(scope="module")
def played():
    from tests.composer.agent_episodes import gateway_episodes

    return gateway_episodes()


def columns_of(episodes):
    """The non-tensor columns the agent loop gives these rows (verl_ext/agent/external_loop.py), with the gateway's
    record as `agent_turns`."""
    return {
        "uid": [e["question"] for e in episodes],
        "agent_turns": [json.dumps(e["session"].turns) for e in episodes],
        "acc": [e["session"].score["acc"] for e in episodes],
        "agent_segments": [e["outcome"].n_segments for e in episodes],
    }


def test_gateway_episodes_get_their_sites_in_the_batch(played):
    episodes, _ = played
    assert all(e["outcome"].status.value == "ok" for e in episodes)
    sites = error_sites_for_batch(columns_of(episodes), tool_error_rules=RULES)
    assert {e["question"]: [(s.turn, s.error_kind) for s in row] for e, row in zip(episodes, sites)} == EXPECTED
    first = sites[0]
    # the real calculator's error, through the real agent, named in the hint with the student's own call
    assert first[0].fields["result"] == "error: syntax error: '(' was never closed"
    assert "(16 / 5" in render_hint(first[0], TEMPLATES) and "parentheses do not balance" in render_hint(
        first[0], TEMPLATES
    )
    assert render_hint(first[1], TEMPLATES).startswith("The calculator answered 16/5, a fraction, and your answer")
    # without rules, or without the record, the batch keeps its earlier sources (acc: the reference-answer hint)
    plain = error_sites_for_batch({**columns_of(episodes), "reward_model": [{"ground_truth": "g"}] * 5})
    assert [[(s.turn, s.error_kind) for s in row] for row in plain] == [[(0, "wrong_answer")]] * 3 + [[]] + [
        [(0, "wrong_answer")]
    ]
    # a split episode's record does not number its trained turns: no rule site
    split = error_sites_for_batch({**columns_of(episodes), "agent_segments": [2] * 5}, tool_error_rules=RULES)
    assert split == [[]] * 5


def test_an_explicit_step_meta_wins_its_turn(played):
    episodes, _ = played
    turns = episodes[0]["session"].turns
    posted = [{"error_kind": "tool_error", "error_message": "the agent's own words"}, None]  # turn 0's reply
    sites = agent_error_sites(posted, json.dumps(turns), RULES, failed=True)
    assert [(s.turn, s.error_kind, s.template_key) for s in sites] == [
        (1, "tool_error", "tool_error"),  # the agent's, not unbalanced_parenthesis
        (2, "fraction_in_part", "fraction_in_part"),
    ]
    cols = {**columns_of(episodes), "step_metas": [posted, None, None, None, None]}
    batch = error_sites_for_batch(cols, tool_error_rules=RULES)
    assert [(s.turn, s.error_kind) for s in batch[0]] == [(1, "tool_error"), (2, "fraction_in_part")]


def test_each_site_hints_before_its_turn_of_the_trained_tokens(played):
    """The SDPO teacher row of every site: the trained sample's tokens up to the targeted turn, the hint as a user
    turn, then exactly that turn's sampled tokens onwards (hints.plan_teacher_rows, mode turn)."""
    episodes, tok = played
    sites = error_sites_for_batch(columns_of(episodes), tool_error_rules=RULES)
    segments = [assemble_segments(e["session"].rounds) for e in episodes]
    assert all(len(s) == 1 for s in segments)
    segs = [s[0] for s in segments]
    width = max(len(s.response_ids) for s in segs)
    mask = torch.zeros(len(segs), width, dtype=torch.long)
    for i, s in enumerate(segs):
        mask[i, : len(s.response_mask)] = torch.tensor(s.response_mask)
    rows = plan_teacher_rows(
        [s.prompt_ids for s in segs], [s.response_ids for s in segs], mask, sites, tok, "turn", TEMPLATES
    )
    assert [(r.row, len(r.prefix) > 0) for r in rows] == [(0, True), (0, True), (1, True), (2, True)]
    for r in rows:
        site = next(s for s in sites[r.row] if r.start == _turn_start(mask[r.row], s.turn))
        turn = episodes[r.row]["session"].rounds[site.turn]
        assert r.continuation[: len(turn.response_ids)] == turn.response_ids  # the targeted turn's own tokens
        hint = render_hint(site, TEMPLATES)
        # what the policy saw before that turn, the hint as a user turn, the generation prompt
        g = len(tok.encode("<|im_start|>assistant\n", add_special_tokens=False))
        cut = len(turn.prompt_ids) - g
        assert r.prefix[:cut] == turn.prompt_ids[:cut] and r.prefix[-g:] == turn.prompt_ids[cut:]
        assert tok.decode(r.prefix[cut:-g]) == f"<|im_start|>user\n{hint}<|im_end|>\n"


def _turn_start(mask_row, turn):
    from verl_ext.composer.hints import turn_span

    span = turn_span(mask_row, turn)
    return None if span is None else span[0]
