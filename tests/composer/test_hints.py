"""Error sites, hint rendering, and the teacher-context alignment with the tiny tokenizer and model."""

import pytest
import torch

from verl_ext.composer.hints import (
    ErrorSite,
    assistant_turn_index,
    build_teacher_context,
    error_sites_for_batch,
    error_sites_from_step_meta,
    math_error_sites,
    place_teacher_values,
    plan_teacher_rows,
    render_hint,
    response_token_log_probs,
    sdpo_loss_mask,
    turn_span,
)


@pytest.fixture(scope="module")
def tiny():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl_ext.toy import ensure_tiny_assets

    model_dir = ensure_tiny_assets().model_dir
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    return tokenizer, model


def chat_ids(tokenizer, messages):
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer.encode(text, add_special_tokens=False)


# ---- error sites and hint text ---------------------------------------------------------------------------------


def test_error_sites_from_step_meta():
    metas = [
        None,
        {"error_kind": "tool_not_found", "hint_template_key": "tool_not_found", "tool_name": "grep"},
        {"reward": 1.0},
        {"error_kind": "tool_error", "error_message": "exit code 2"},
    ]
    sites = error_sites_from_step_meta(metas)
    assert [(s.turn, s.error_kind, s.template_key) for s in sites] == [
        (2, "tool_not_found", "tool_not_found"),
        (4, "tool_error", "tool_error"),
    ]
    assert render_hint(sites[0]) == "The tool grep does not exist. Use one of the available tools."
    assert render_hint(sites[1]) == "The last tool call failed with: exit code 2. Fix the call before continuing."


def test_math_error_sites_prefer_a_successful_sibling():
    sites = math_error_sites(
        accs=[1.0, 0.0, 0.0, 1.0, 0.0],
        ground_truths=["4", "4", "4", "9", "7"],
        uids=["a", "a", "a", "b", "c"],
        responses=["2+2=4", "5", "3", "3*3=9", "8"],
    )
    assert sites[0] is None and sites[3] is None
    assert render_hint(sites[1]) == "Here is a correct solution to this problem:\n2+2=4"
    assert sites[2].fields["solution"] == "2+2=4"
    assert render_hint(sites[4]) == "The correct answer is 7."  # group c has no success
    no_siblings = math_error_sites([0.0, 1.0], ["4", "4"], ["a", "a"])
    assert render_hint(no_siblings[0]) == "The correct answer is 4." and no_siblings[1] is None
    with pytest.raises(ValueError, match="one entry per response"):
        math_error_sites([0.0], ["4", "5"], ["a"])


def test_render_hint_errors_are_clear():
    with pytest.raises(KeyError, match="no hint template 'nope'"):
        render_hint(ErrorSite(0, "nope", "nope"))
    with pytest.raises(ValueError, match="needs fields \\['ground_truth'\\]"):
        render_hint(ErrorSite(0, "wrong_answer", "wrong_answer"))
    custom = {"k": "use {x}"}
    assert render_hint(ErrorSite(0, "e", "k", {"x": 1}), templates=custom) == "use 1"


# ---- teacher context -------------------------------------------------------------------------------------------


def test_turn_mode_equals_templating_the_hint_as_a_user_turn(tiny):
    tokenizer, _ = tiny
    question = [{"role": "user", "content": "What is 3 + 4?"}]
    context = chat_ids(tokenizer, question)
    response = tokenizer.encode("The answer is 7.<|im_end|>", add_special_tokens=False)
    hint = "The correct answer is 7."
    ctx = build_teacher_context(context, response, hint, tokenizer, mode="turn")
    expected_prefix = chat_ids(tokenizer, question + [{"role": "user", "content": hint}])
    assert ctx.input_ids[: ctx.response_start] == expected_prefix
    assert ctx.input_ids[ctx.response_start :] == response and ctx.response_len == len(response)
    assert tokenizer.decode(ctx.hint_ids).strip().endswith(hint + "<|im_end|>")


def test_append_mode_and_bad_context(tiny):
    tokenizer, _ = tiny
    context = tokenizer.encode("Question: 3 + 4 = ?", add_special_tokens=False)
    response = tokenizer.encode(" 7", add_special_tokens=False)
    ctx = build_teacher_context(context, response, " Hint: it is odd.", tokenizer, mode="append")
    hint_ids = tokenizer.encode(" Hint: it is odd.", add_special_tokens=False)
    assert ctx.input_ids == context + hint_ids + response and ctx.response_start == len(context) + len(hint_ids)
    with pytest.raises(ValueError, match="generation prompt"):
        build_teacher_context(context, response, "hint", tokenizer, mode="turn")
    with pytest.raises(ValueError, match="mode"):
        build_teacher_context(context, response, "hint", tokenizer, mode="prepend")


def forward_logits(model, ids):
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0]


@pytest.mark.parametrize("mode", ["turn", "append"])
def test_teacher_log_probs_align_with_student_tokens(tiny, mode):
    tokenizer, model = tiny
    context = chat_ids(tokenizer, [{"role": "user", "content": "Add 12 and 30."}])
    response = tokenizer.encode("12 + 30 = 42<|im_end|>", add_special_tokens=False)

    # an empty hint: the teacher input is the student input, so the log-probs must be identical
    same = build_teacher_context(context, response, "", tokenizer, mode=mode)
    assert same.input_ids == context + response
    plain = context + response
    student_lp = response_token_log_probs(forward_logits(model, plain), plain, len(context), len(response))
    teacher_lp = response_token_log_probs(
        forward_logits(model, same.input_ids), same.input_ids, same.response_start, same.response_len
    )
    torch.testing.assert_close(teacher_lp, student_lp)

    # with a hint: token j's log-prob from the full forward equals scoring the prefix that ends right before it
    ctx = build_teacher_context(context, response, "The answer is 42.", tokenizer, mode=mode)
    full = forward_logits(model, ctx.input_ids)
    aligned = response_token_log_probs(full, ctx.input_ids, ctx.response_start, ctx.response_len)
    by_slice = torch.log_softmax(full[ctx.logit_slice], -1).gather(-1, torch.tensor(response)[:, None])[:, 0]
    assert torch.equal(by_slice, aligned)
    for j, token in enumerate(response):
        prefix = ctx.input_ids[: ctx.response_start + j]
        last = torch.log_softmax(forward_logits(model, prefix)[-1], -1)[token]
        assert aligned[j].item() == pytest.approx(last.item(), abs=1e-4)
    assert not torch.allclose(aligned, student_lp)  # the hint changed the teacher's view


# ---- post-hint loss mask ---------------------------------------------------------------------------------------


def loop_turn_index(row):
    out, turn, prev = [], -1, 0
    for m in row:
        if m and not prev:
            turn += 1
        out.append(turn if m else -1)
        prev = m
    return out


def test_turn_index_and_loss_mask_match_loops():
    g = torch.Generator().manual_seed(0)
    mask = (torch.rand(6, 15, generator=g) < 0.6).long()
    mask[0] = torch.tensor([1, 1, 0, 0, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0])
    turns = assistant_turn_index(mask)
    for row in range(mask.shape[0]):
        assert turns[row].tolist() == loop_turn_index(mask[row].tolist())
    targets = [[1], [], [0, 2], [5, 50], [0], [1, 3]]
    got = sdpo_loss_mask(mask, targets)
    for row in range(mask.shape[0]):
        want = [t in targets[row] for t in loop_turn_index(mask[row].tolist())]
        assert got[row].tolist() == want
    assert got[0].tolist() == [False] * 4 + [True] * 3 + [False] * 8
    with pytest.raises(ValueError, match="rows"):
        sdpo_loss_mask(mask, targets[:2])


# ---- batch error sites and teacher rows --------------------------------------------------------------------------


def test_error_sites_for_batch_sources():
    import numpy as np

    rm = np.array([{"ground_truth": "4"}, {"ground_truth": "5"}], dtype=object)
    uid = np.array(["a", "b"], dtype=object)
    metas = np.array([[{"error_kind": "tool_error", "error_message": "boom"}, None], []], dtype=object)
    sites = error_sites_for_batch({"uid": uid, "reward_model": rm, "step_metas": metas, "acc": np.array([0.0, 0.0])})
    assert [[(s.turn, s.error_kind) for s in row] for row in sites] == [[(1, "tool_error")], []]

    kinds = {
        "uid": uid,
        "reward_model": rm,
        "error_kind": np.array(["format_error", None], dtype=object),
        "error_fields": np.array([{"format_spec": "Use \\boxed{}."}, None], dtype=object),
    }
    sites = error_sites_for_batch(kinds)
    assert render_hint(sites[0][0]) == "Your answer does not follow the required format. Use \\boxed{}."
    assert sites[0][0].fields["ground_truth"] == "4" and sites[1] == []

    sites = error_sites_for_batch({"uid": uid, "reward_model": rm, "acc": np.array([1.0, 0.0])})
    assert sites[0] == [] and render_hint(sites[1][0]) == "The correct answer is 5."
    with pytest.raises(KeyError, match="step_metas.*error_kind.*acc"):
        error_sites_for_batch({"uid": uid, "reward_model": rm})


def test_plan_teacher_rows_multi_turn_hint_before_the_targeted_turn(tiny):
    """A tool error after turn 0 targets turn 1: the teacher context is the conversation so far with the hint as a
    user turn (what the chat template renders), and only turn 1's columns get the teacher's values."""
    tokenizer, _ = tiny
    q = {"role": "user", "content": "What is 3 + 4?"}
    prompt = chat_ids(tokenizer, [q])
    seg1 = tokenizer.encode("call add 3 4<|im_end|>", add_special_tokens=False)
    full = chat_ids(
        tokenizer, [q, {"role": "assistant", "content": "call add 3 4"}, {"role": "user", "content": "error: boom"}]
    )
    assert full[: len(prompt) + len(seg1)] == prompt + seg1  # the template tokenizes turn by turn here
    env = full[len(prompt) + len(seg1) :]  # the tool's answer and the next assistant header: no loss
    seg2 = tokenizer.encode("7<|im_end|>", add_special_tokens=False)
    response = seg1 + env + seg2
    width = len(response) + 2
    mask = torch.zeros(2, width, dtype=torch.long)
    mask[0, : len(seg1)] = 1
    mask[0, len(seg1) + len(env) : len(response)] = 1
    mask[1, :3] = 1
    site = ErrorSite(1, "tool_error", "tool_error", {"error_message": "boom"})
    rows = plan_teacher_rows(
        [prompt, prompt], [response, response[:3]], mask, [[site], [site]], tokenizer, mode="turn"
    )  # row 1 never reached turn 1
    assert len(rows) == 1 and rows[0].row == 0 and rows[0].start == len(seg1) + len(env)
    hint = render_hint(site)
    assert rows[0].prefix == chat_ids(
        tokenizer,
        [
            q,
            {"role": "assistant", "content": "call add 3 4"},
            {"role": "user", "content": "error: boom"},
            {"role": "user", "content": hint},
        ],
    )
    assert rows[0].continuation == seg2
    values = torch.arange(1.0, width + 1).unsqueeze(0)  # teacher output j = j + 1
    into = place_teacher_values(rows, values, torch.zeros(2, width))
    start = rows[0].start
    expected = torch.zeros(2, width)
    expected[0, start : start + len(seg2)] = torch.arange(1.0, len(seg2) + 1)
    assert torch.equal(into, expected)
    assert turn_span(mask[1], 1) is None and turn_span(mask[0], 0)[0] == 0


def test_sibling_site_share_counts_failed_responses_whose_group_succeeded():
    import numpy as np

    from verl_ext.composer.hints import sibling_site_share

    uid = np.array(["a", "a", "a", "b", "b", "c"], dtype=object)
    acc = np.array([1.0, 0.0, 0.0, 0.0, 0.0, 1.0])
    # four failed responses: two in group a (which has a success), two in group b (none); c has no failure
    assert sibling_site_share({"uid": uid, "acc": acc}) == 0.5
    assert sibling_site_share({"uid": uid, "acc": np.ones(6)}) is None  # no error site
    assert sibling_site_share({"uid": uid[:2], "acc": acc[:2], "step_metas": np.array([[], []], dtype=object)}) is None
    assert sibling_site_share({"uid": uid}) is None  # no acc column: sites come from elsewhere or nowhere


# ---- the answer scope (sites: answer) ----------------------------------------------------------------------------


def prefix_decode_answer_columns(response_ids, width, tokenizer):
    """Slow reference: token j covers characters [len(decode(ids[:j])), len(decode(ids[:j+1]))) of the decoded
    response; it is marked when that range overlaps the last box's content in the decoded response."""
    from verl_ext.reward.answer_extraction import last_boxed_span

    out = torch.zeros(len(response_ids), width, dtype=torch.bool)
    for i, ids in enumerate(response_ids):
        ids = list(ids)[:width]
        span = last_boxed_span(tokenizer.decode(ids, skip_special_tokens=True))
        if span is None:
            continue
        ends = [len(tokenizer.decode(ids[: j + 1], skip_special_tokens=True)) for j in range(len(ids))]
        for j, end in enumerate(ends):
            start = ends[j - 1] if j else 0
            out[i, j] = start < span[1] and end > span[0]
    return out


def _responses(rng):
    numbers = lambda: str(rng.choice([rng.randint(0, 9), rng.randint(10, 999), rng.randint(1000, 10**7)]))  # noqa: E731
    shapes = [
        lambda: f"{numbers()} + {numbers()} = {numbers()}. The final answer is \\boxed{{{numbers()}}}.",
        lambda: f"The answer is \\boxed{{{numbers()}}}",
        lambda: f"\\boxed{{{numbers()}}} then \\boxed{{-{numbers()}}}.",
        lambda: f"So x = \\boxed{{\\frac{{{numbers()}}}{{{numbers()}}}}}",
        lambda: f"It is \\boxed {numbers()} and done",
        lambda: f"{numbers()} * {numbers()} is about {numbers()}",  # no box
        lambda: f"truncated \\boxed{{{numbers()}",  # unclosed: no answer
    ]
    return [rng.choice(shapes)() for _ in range(60)]


@pytest.fixture(scope="module", params=["tiny", "smollm2"])
def answer_tokenizer(request):
    """The tests' tiny tokenizer and the real model's (SmolLM2-135M-Instruct: the campaign's)."""
    from transformers import AutoTokenizer

    if request.param == "tiny":
        from verl_ext.toy import ensure_tiny_assets

        return AutoTokenizer.from_pretrained(ensure_tiny_assets().model_dir)
    from verl_ext.pretrained.smollm2 import ensure_smollm2

    return AutoTokenizer.from_pretrained(ensure_smollm2())


def test_answer_columns_match_prefix_decoding(answer_tokenizer):
    import random

    from verl_ext.composer.hints import answer_columns

    tokenizer = answer_tokenizer
    rng = random.Random(0)
    texts = _responses(rng)
    eos = tokenizer.eos_token_id
    ids = [tokenizer.encode(t, add_special_tokens=False) + ([eos] if k % 2 else []) for k, t in enumerate(texts)]
    width = max(map(len, ids)) + 3
    got = answer_columns(ids, width, tokenizer)
    assert torch.equal(got, prefix_decode_answer_columns(ids, width, tokenizer))
    boxed = [k for k, t in enumerate(texts) if "\\boxed" in t and "truncated" not in t]
    assert boxed and all(got[k].any() for k in boxed)
    assert not any(got[k].any() for k in range(len(texts)) if k not in boxed)
    for k in boxed:  # the marked tokens decode to the box's content, give or take the tokens' edges
        marked = tokenizer.decode([t for t, m in zip(ids[k], got[k]) if m])
        from verl_ext.reward.answer_extraction import last_boxed

        assert last_boxed(texts[k]).strip() in marked, (texts[k], marked)
    # a narrower width cuts the rows: the box beyond it is not seen
    cut = answer_columns([ids[boxed[0]]], 2, tokenizer)
    assert cut.shape == (1, 2) and not cut.any()


def test_answer_columns_mark_a_multibyte_answer(answer_tokenizer):
    from verl_ext.composer.hints import answer_columns

    tokenizer = answer_tokenizer
    ids = tokenizer.encode("so \\boxed{π²} ok", add_special_tokens=False)
    got = answer_columns([ids], len(ids), tokenizer)[0]
    assert tokenizer.decode([t for t, m in zip(ids, got) if m]) == "π²"


def test_restrict_rows_keeps_answer_columns_and_drops_empty_rows():
    from verl_ext.composer.hints import TeacherRow, restrict_rows

    cols = torch.tensor([[1, 1, 1, 0], [0, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    rows = [TeacherRow(i, int(c.nonzero()[0]), c, [7], [1, 2, 3]) for i, c in enumerate(cols)]
    keep = torch.tensor([[0, 0, 1, 1], [0, 0, 0, 1], [0, 0, 1, 1]], dtype=torch.bool)
    out = restrict_rows(rows, keep)
    assert [t.row for t in out] == [0, 1]  # row 2's turn has no answer token
    assert out[0].columns.tolist() == [False, False, True, False]
    assert out[1].columns.tolist() == [False, False, False, True]
    assert (out[0].start, out[0].prefix, out[0].continuation) == (0, [7], [1, 2, 3])  # the teacher row is unchanged
    assert rows[0].columns.tolist() == [True, True, True, False]  # the input rows are left alone


def test_failed_coverage_is_the_share_of_failed_rows_with_a_site():
    from verl_ext.composer.hints import ErrorSite, failed_coverage

    site = [ErrorSite(1, "tool_error", "tool_error", {})]
    sites = [site, [], site, [], []]
    accs = [0.0, 0.0, 1.0, 0.0, None]  # row 2 succeeded with a site (a fixed error); row 4 has no accuracy
    assert failed_coverage(sites, accs) == {"sdpo/failed_rows": 3.0, "sdpo/failed_covered_frac": 1 / 3}
    assert failed_coverage(sites, None) == {}
    assert failed_coverage([[]], [1.0]) == {"sdpo/failed_rows": 0.0, "sdpo/failed_covered_frac": 0.0}
