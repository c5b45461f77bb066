"""Replay rows: per-row DPO losses give each pair's DPO gradient whatever micro-batch each row lands in; fill_slots
keeps the per-pair sum; the update order puts each rank's replay share first."""

import math

import numpy as np
import pytest
import torch
from verl import DataProto

from verl_ext.composer.dpo import dpo_loss, dpo_row_losses
from verl_ext.composer.replay import fill_slots, replay_columns, rows_first_per_rank, update_batch


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("n_pairs,n_slots", [(1, 1), (2, 4), (3, 4)])
def test_replay_rows_give_the_mean_dpo_loss_and_its_gradient(seed, n_pairs, n_slots):
    """sum over rows of weight * (L_row - L_row.detach() / 2), as actor_loss.py forms it, has the value and the
    gradient (w.r.t. every scored row's log-prob) of the mean DPO loss over the pairs, at the scoring point."""
    g = torch.Generator().manual_seed(seed)
    seq_pol = (torch.randn(2 * n_pairs, generator=g, dtype=torch.float64) * 5).requires_grad_()
    seq_ref = torch.randn(2 * n_pairs, generator=g, dtype=torch.float64) * 5
    beta = 0.3

    ref_loss, _ = dpo_loss(seq_pol[0::2], seq_pol[1::2], seq_ref[0::2], seq_ref[1::2], beta=beta)
    (want,) = torch.autograd.grad(ref_loss, seq_pol)

    cols = replay_columns(seq_pol.detach(), seq_ref, n_slots)
    rows = seq_pol[cols["row_index"]]  # copies of the scored rows, as the update batch holds them
    per_row = dpo_row_losses(
        rows, cols["dpo_ref_logp"].double(), cols["dpo_partner_logratio"].double(), cols["dpo_sign"], beta=beta
    )
    w = cols["dpo_weight"].double()
    surrogate = (w * (per_row - 0.5 * per_row.detach())).sum()
    (got,) = torch.autograd.grad(surrogate, seq_pol)
    # the columns are stored in float32, as in the update batch
    assert surrogate.item() == pytest.approx(ref_loss.item(), rel=1e-5)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
    assert (w.sum() / 2).item() == pytest.approx(1.0)  # the dpo_pairs metric counts each pair once
    assert cols["dpo_sign"].tolist() == [1.0, -1.0] * n_slots


def test_dpo_row_losses_zero_where_no_pair_and_bad_input():
    x = torch.tensor([-3.0, -2.0, -1.0])
    out = dpo_row_losses(x, x, torch.zeros(3), torch.tensor([1.0, 0.0, -1.0]), beta=0.1)
    assert out[1] == 0 and out[0] > 0 and out[2] > 0
    with pytest.raises(ValueError):
        dpo_row_losses(x, x[:2], x, x, beta=0.1)
    with pytest.raises(ValueError):
        dpo_row_losses(x, x, x, x, beta=0.0)


@pytest.mark.parametrize("n_head,n_rest,n_ranks", [(4, 12, 1), (4, 12, 2), (6, 18, 3)])
def test_rows_first_per_rank(n_head, n_rest, n_ranks):
    order = rows_first_per_rank(n_head, n_rest, n_ranks)
    assert sorted(order.tolist()) == list(range(n_head + n_rest))
    chunk = (n_head + n_rest) // n_ranks
    for r in range(n_ranks):  # what verl's dispatch gives rank r: its head share first, then its rollout rows
        mine = order[r * chunk : (r + 1) * chunk].tolist()
        share = n_head // n_ranks
        assert all(i < n_head for i in mine[:share]) and all(i >= n_head for i in mine[share:])
    with pytest.raises(ValueError, match="split evenly"):
        rows_first_per_rank(3, 12, 2)


@pytest.mark.parametrize("n_items,n_slots", [(1, 1), (1, 8), (3, 8), (5, 5), (7, 8)])
def test_fill_slots_weights_sum_to_one_per_item(n_items, n_slots):
    index, weight = fill_slots(n_items, n_slots)
    assert index.shape == weight.shape == (n_slots,)
    for item in range(n_items):
        copies = [w for i, w in zip(index.tolist(), weight.tolist()) if i == item]
        assert copies and sum(copies) == pytest.approx(1.0)
    assert set(index.tolist()) == set(range(n_items))


def test_fill_slots_rejects_too_many_items():
    with pytest.raises(ValueError):
        fill_slots(5, 4)
    with pytest.raises(ValueError):
        fill_slots(0, 4)


@pytest.mark.parametrize("n_ranks", [1, 2])
def test_update_batch_puts_replay_rows_first_and_zero_fills_loss_columns(n_ranks):
    head = DataProto.from_dict(
        tensors={
            "input_ids": torch.arange(16).view(4, 4),
            "attention_mask": torch.ones(4, 4, dtype=torch.long),
            "advantages": torch.ones(4, 2),
            "token_level_scores": torch.ones(4, 2),
            "sdpo_weight": torch.full((4, 2), 0.5),
            "sdpo_topk_ids": torch.ones(4, 2, 3, dtype=torch.int32),
        },
        non_tensors={"uid": np.array(["a", "b", "c", "d"], dtype=object)},
        meta_info={"temperature": 1.0, "global_token_num": [4, 4, 4, 4]},
    )
    block = DataProto.from_dict(
        tensors={
            "input_ids": torch.full((2, 4), 7),
            "attention_mask": torch.tensor([[0, 1, 1, 1]] * 2),
            "advantages": torch.zeros(2, 2, dtype=torch.float64),
            "dpo_sign": torch.tensor([1.0, -1.0]),
        }
    )
    merged = update_batch(head, block, n_ranks)
    assert len(merged) == 6
    assert set(merged.batch.keys()) == {
        "input_ids",
        "attention_mask",
        "advantages",
        "dpo_sign",
        "sdpo_weight",
        "sdpo_topk_ids",
    }
    is_replay = merged.batch["input_ids"][:, 0] == 7
    chunk = 6 // n_ranks
    for r in range(n_ranks):  # each rank's chunk starts with its replay rows
        rows = is_replay[r * chunk : (r + 1) * chunk].tolist()
        assert rows == [True] * (2 // n_ranks) + [False] * (chunk - 2 // n_ranks)
    assert torch.equal(merged.batch["dpo_sign"][~is_replay], torch.zeros(4))  # the step's rows carry no DPO term
    assert torch.equal(merged.batch["sdpo_weight"][is_replay], torch.zeros(2, 2))  # the replay rows no SDPO term
    assert merged.batch["sdpo_topk_ids"].dtype == torch.int32
    assert merged.batch["advantages"].dtype == head.batch["advantages"].dtype
    assert sorted(merged.meta_info["global_token_num"]) == [3, 3, 4, 4, 4, 4]
    with pytest.raises(KeyError, match="lacks columns"):
        update_batch(head, DataProto.from_dict(tensors={"ref_log_prob": torch.zeros(2, 2)}), 1)


class CharTokenizer:
    """Token id = code point; enough for the row layout."""

    eos_token_id, pad_token_id = 2, 0

    def encode(self, text, add_special_tokens=False):
        assert add_special_tokens is False
        return [ord(c) for c in text]


def _pairs(n):
    from verl_ext.composer.disagreement import DPOPair

    return [
        DPOPair(f"t{p}", p, {"messages": [], "ids": list(range(10, 10 + 3 + p))}, "chosen" * (p + 1), "no", "r", [])
        for p in range(n)
    ]


@pytest.mark.parametrize("n_pairs", [1, 3])
def test_pair_rows_layout(n_pairs):
    from verl_ext.composer.replay import pair_rows

    pairs = _pairs(n_pairs)
    rows = pair_rows(pairs, CharTokenizer(), prompt_width=4, response_width=8)
    assert rows["prompts"].shape == (2 * n_pairs, 4) and rows["responses"].shape == (2 * n_pairs, 8)
    for p, pair in enumerate(pairs):
        prompt = pair.prompt["ids"][-4:]
        for r, text in ((2 * p, pair.chosen), (2 * p + 1, pair.rejected)):
            assert rows["prompts"][r].tolist() == [0] * (4 - len(prompt)) + prompt
            tokens = ([ord(c) for c in text] + [2])[:8]
            assert rows["responses"][r].tolist() == tokens + [0] * (8 - len(tokens))
            assert rows["response_mask"][r].tolist() == [1] * len(tokens) + [0] * (8 - len(tokens))


def _loop_dpo(pol, ref, beta):
    """Mean over pairs of -log sigmoid(beta * ((pc - rc) - (pr - rr))), and the mean margin, from plain floats."""
    losses, margins = [], []
    for p in range(len(pol) // 2):
        m = beta * ((pol[2 * p] - ref[2 * p]) - (pol[2 * p + 1] - ref[2 * p + 1]))
        losses.append(math.log1p(math.exp(-m)))
        margins.append(m)
    return sum(losses) / len(losses), sum(margins) / len(margins)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("n_pairs,n_slots", [(1, 2), (3, 4)])
@pytest.mark.parametrize("keys", [(), ("ref_log_prob", "rollout_log_probs", "rollout_is_weights")])
def test_replay_block_against_a_loop(seed, n_pairs, n_slots, keys):
    from verl_ext.composer.replay import pair_rows, replay_block

    rows = pair_rows(_pairs(n_pairs), CharTokenizer(), prompt_width=6, response_width=9)
    g = torch.Generator().manual_seed(seed)
    policy = -torch.rand(2 * n_pairs, 9, generator=g) * 2
    ref = -torch.rand(2 * n_pairs, 9, generator=g) * 2
    block, metrics = replay_block(rows, policy, ref, beta_dpo=0.3, n_slots=n_slots, batch_keys=keys)

    mask = rows["response_mask"].tolist()
    seq = [sum(v for v, m in zip(row, mrow) if m) for row, mrow in zip(policy.tolist(), mask)]
    seq_ref = [sum(v for v, m in zip(row, mrow) if m) for row, mrow in zip(ref.tolist(), mask)]
    loss, margin = _loop_dpo(seq, seq_ref, 0.3)
    assert metrics["loss/replay_dpo"] == pytest.approx(loss, rel=1e-5)
    assert metrics["replay/reward_margin"] == pytest.approx(margin, rel=1e-4, abs=1e-6)
    assert metrics["replay/pairs_used"] == float(n_pairs) and metrics["replay/pairs"] == float(n_pairs)

    source = [2 * (s % n_pairs) + side for s in range(n_slots) for side in (0, 1)]  # pairs cycled over the slots
    for key, value in rows.items():
        assert torch.equal(block[key], value[source]), key
    assert torch.equal(block["old_log_probs"], policy[source])
    assert torch.equal(block["advantages"], torch.zeros(2 * n_slots, 9))
    assert ("ref_log_prob" in block) == ("ref_log_prob" in keys)
    if keys:
        assert torch.equal(block["ref_log_prob"], ref[source])
        assert torch.equal(block["rollout_log_probs"], policy[source])
        assert torch.equal(block["rollout_is_weights"], torch.ones(2 * n_slots, 9))
    assert block["dpo_sign"].tolist() == [1.0, -1.0] * n_slots
    for r, s in enumerate(source):
        partner = s ^ 1
        assert block["dpo_ref_logp"][r].item() == pytest.approx(seq_ref[s], rel=1e-5, abs=1e-5)
        assert block["dpo_partner_logratio"][r].item() == pytest.approx(
            seq[partner] - seq_ref[partner], rel=1e-5, abs=1e-5
        )


@pytest.mark.parametrize(
    "pg,n_rows",
    [([0.5, 1.0, 2.0, 3.0], 24), ([0.5, 1.0], 8), (0.3, 24), ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 24), ([1.0] * 5, 24)],
)
def test_grpo_pg_loss_leaves_out_each_epochs_first_minibatch(pg, n_rows):
    from verl_ext.composer.replay import grpo_pg_loss

    rows_per_minibatch = 8
    per_epoch = n_rows // rows_per_minibatch
    if not isinstance(pg, list) or per_epoch < 2 or len(pg) % per_epoch:
        assert grpo_pg_loss(pg, n_rows, rows_per_minibatch) is None
        return
    rollout = []
    for epoch in range(len(pg) // per_epoch):
        rollout += pg[epoch * per_epoch + 1 : (epoch + 1) * per_epoch]  # the replay mini-batch comes first
    assert grpo_pg_loss(pg, n_rows, rows_per_minibatch) == pytest.approx(sum(rollout) / len(rollout))
