"""The one-line tool-call format, pure (`verl_ext.formats.line_calls`): a call is read only in the exact form
the template writes it, every other attempt is counted; on the real tokenizer through the gateway's codec and the
template in tests/pretrained/test_smollm2_tools.py."""

from __future__ import annotations

from verl_ext.formats.line_calls import argument_name, call_line, count_attempts, read_calls

NAMES = ["calc"]


def test_a_call_is_its_own_line_at_the_end_of_the_reply():
    assert call_line("calc", "2 - -2") == "calc: 2 - -2"
    assert read_calls("calc: 2 - -2", NAMES) == ("", [("calc", "2 - -2")])
    assert read_calls("Let me compute.\ncalc: 4 * 8", NAMES) == ("Let me compute.", [("calc", "4 * 8")])
    assert read_calls("calc: 1 + 1\ncalc: 2 * 3", NAMES) == ("", [("calc", "1 + 1"), ("calc", "2 * 3")])
    # a well-formed line whose argument is not arithmetic is still a call (the tool answers with an error)
    assert read_calls("calc: 2 - 2 = 0", NAMES) == ("", [("calc", "2 - 2 = 0")])


def test_other_forms_are_attempts_but_not_calls():
    for text in ("Calc: 4*8", "calc:4*8", "calc:  4*8", "calc: 4*8 ", "calc: 4*8\nResult: 32", " calc: 1"):
        assert read_calls(text, NAMES) == (text, []), text
        assert count_attempts(text, NAMES) == 1, text
    # a call line followed by another attempt's text, or an attempt before the calls: no calls at all
    assert read_calls("calc:1\ncalc: 2", NAMES) == ("calc:1\ncalc: 2", [])
    assert count_attempts("calc:1\ncalc: 2", NAMES) == 2


def test_lines_that_name_no_tool_are_plain_content():
    for text in ("The answer is \\boxed{4}.", "Calculator: 4 * 8", "Answer: 4", "calculate: 3"):
        assert read_calls(text, NAMES) == (text, []) and count_attempts(text, NAMES) == 0, text
    assert read_calls("calc: 1", []) == ("calc: 1", [])  # a request without tools calls nothing


def test_the_argument_fills_the_tools_one_parameter():
    assert argument_name({"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]}) == "expr"
    assert argument_name({"properties": {"a": {}, "b": {}}, "required": ["b"]}) == "b"
    assert argument_name({"properties": {"a": {}, "b": {}}}) == "a"
    assert argument_name({"type": "object"}) is None and argument_name(None) is None
