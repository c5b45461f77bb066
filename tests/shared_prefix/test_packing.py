"""The pack layout and the log-prob gather against obvious per-row loops (verl_ext/shared_prefix/packing.py)."""

from __future__ import annotations

import pytest
import torch

from verl_ext.shared_prefix.packing import allowed_attention, attention_mask_4d, plan_packs, row_log_probs


def _rows():
    g = torch.Generator().manual_seed(0)
    p1, p2 = torch.randint(1, 50, (5,), generator=g), torch.randint(1, 50, (3,), generator=g)
    resp = [torch.randint(1, 50, (n,), generator=g) for n in (4, 2, 6, 1, 3, 5)]
    # interleaved groups, as a balanced batch may hand them over
    rows = [torch.cat([p1, resp[0]]), torch.cat([p2, resp[1]]), torch.cat([p1, resp[2]])]
    rows += [torch.cat([p2, resp[3]]), torch.cat([p1, resp[4]]), torch.cat([p2, resp[5]])]
    return rows, [5, 3, 5, 3, 5, 3]


def _reference_positions(plan, rows, prompt_lens):
    """For each row token, (pack, position) found by searching the pack for the row's own tokens."""
    out = []
    width = plan.input_ids.shape[1]
    for i, (row, plen) in enumerate(zip(rows, prompt_lens, strict=True)):
        b = int(plan.pack_of_row[i])
        ids, seg, pos = plan.input_ids[b], plan.segment[b], plan.position_ids[b]
        for t in range(row.numel()):
            if t < plen:
                (cands,) = torch.nonzero((seg == 0) & (pos == t), as_tuple=True)
            else:
                cands = torch.nonzero((seg > 0) & (pos == t), as_tuple=True)[0]
                cands = [c for c in cands.tolist() if _segment_is_row(ids, seg, pos, int(seg[c]), row, plen)]
            assert len(cands) == 1, (i, t, cands)
            c = int(cands[0])
            assert ids[c] == row[t]
            out.append(b * width + c)
    return torch.tensor(out)


def _segment_is_row(ids, seg, pos, j, row, plen):
    sel = seg == j
    return torch.equal(ids[sel], row[plen:]) and torch.equal(pos[sel], torch.arange(plen, row.numel()))


def test_each_prompt_once_per_pack_and_every_row_token_maps_to_its_own_token():
    rows, plens = _rows()
    plan = plan_packs(rows, plens)
    assert plan.num_packs == 2  # two distinct prompts
    assert plan.pack_tokens == 5 + 3 + sum(r.numel() - p for r, p in zip(rows, plens, strict=True))
    assert plan.row_tokens == sum(r.numel() for r in rows)
    flat = plan.used_positions[plan.row_to_used]
    assert torch.equal(flat, _reference_positions(plan, rows, plens))


def test_packs_are_cut_at_max_pack_tokens_and_repeat_the_prompt():
    rows, plens = _rows()
    plan = plan_packs(rows, plens, max_pack_tokens=12)
    lengths = (plan.segment >= 0).sum(-1)
    assert int(lengths.max()) <= 12
    assert plan.num_packs > 2
    assert torch.equal(plan.used_positions[plan.row_to_used], _reference_positions(plan, rows, plens))


def test_a_different_extra_key_keeps_rows_apart():
    rows, plens = _rows()
    plan = plan_packs(rows, plens, extra_keys=[0.6, 0.6, 1.0, 0.6, 0.6, 0.6])
    assert plan.num_packs == 3
    assert plan.pack_of_row[2] != plan.pack_of_row[0]


def test_mask_lets_a_response_see_the_prompt_and_itself_only():
    rows, plens = _rows()
    plan = plan_packs(rows, plens)
    allowed = allowed_attention(plan.segment)
    seg, pos = plan.segment, plan.position_ids
    for b in range(plan.num_packs):
        width = seg.shape[1]
        for q in range(width):
            for k in range(width):
                if seg[b, q] < 0:
                    want = q == k
                else:
                    same = seg[b, k] == 0 or seg[b, k] == seg[b, q]
                    want = bool(k <= q and seg[b, k] >= 0 and same) or q == k
                assert bool(allowed[b, q, k]) == want, (b, q, k)
        # a response's visible keys are its row's tokens in order: the prompt, then its own tokens so far
        for q in range(width):
            if seg[b, q] > 0:
                visible = pos[b][allowed[b, q]]
                assert torch.equal(visible, torch.arange(int(pos[b, q]) + 1))


def test_mask_forms():
    seg = torch.tensor([[0, 0, 1, 2, -1]])
    bool_mask = attention_mask_4d(seg, "bool")
    add = attention_mask_4d(seg, "additive", torch.float32)
    assert bool_mask.shape == add.shape == (1, 1, 5, 5)
    assert torch.equal(add == 0, bool_mask)
    with pytest.raises(ValueError, match="mask kind"):
        attention_mask_4d(seg, "flash")


def test_log_probs_and_entropies_equal_a_per_row_log_softmax():
    rows, plens = _rows()
    temps = [0.5, 1.0, 0.5, 1.0, 0.5, 1.0]
    plan = plan_packs(rows, plens, extra_keys=temps)
    g = torch.Generator().manual_seed(1)
    vocab = 50
    logits = torch.randn(*plan.input_ids.shape, vocab, generator=g, requires_grad=True)
    pack_temp = torch.empty(plan.num_packs)
    pack_temp[plan.pack_of_row] = torch.tensor(temps)
    labels = torch.roll(torch.cat(rows), -1)
    lp, ent = row_log_probs(logits, plan, labels, pack_temp, with_entropy=True)

    flat = logits.reshape(-1, vocab)
    positions = _reference_positions(plan, rows, plens)
    want_lp, want_ent, k = [], [], 0
    for row, temp in zip(rows, temps, strict=True):
        for _ in range(row.numel()):
            logp = torch.log_softmax(flat[positions[k]] / temp, -1)
            want_lp.append(logp[labels[k]])
            want_ent.append(-(logp.exp() * logp).sum())
            k += 1
    torch.testing.assert_close(lp, torch.stack(want_lp), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ent, torch.stack(want_ent), rtol=1e-5, atol=1e-6)
    # the gradient of a shared prompt position is the sum of its rows' gradients
    (g1,) = torch.autograd.grad(lp.sum(), logits)
    (g2,) = torch.autograd.grad(torch.stack(want_lp).sum(), logits)
    torch.testing.assert_close(g1, g2, rtol=1e-6, atol=1e-6)


def test_bad_prompt_length_is_refused():
    with pytest.raises(ValueError, match="prompt length"):
        plan_packs([torch.tensor([1, 2])], [3])
