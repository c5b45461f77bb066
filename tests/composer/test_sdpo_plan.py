"""One step of the SDPO channel (sdpo.SdpoPlan, sdpo_kl_estimate) against plain loops over rows and columns."""

from __future__ import annotations

import random

import pytest
import torch

from verl_ext.composer.hints import TeacherRow
from verl_ext.composer.sdpo import SdpoPlan, sdpo_kl_estimate

PAD = 0


def make_step(seed: int, b: int = 5, width: int = 9):
    """A response mask with gaps (several assistant turns per row) and a teacher row per targeted turn."""
    rng = random.Random(seed)
    mask = torch.zeros(b, width, dtype=torch.long)
    rows = []
    for i in range(b):
        length = rng.randint(2, width)
        mask[i, :length] = 1
        if length > 3 and rng.random() < 0.5:
            mask[i, rng.randint(1, length - 2)] = 0  # an environment token between two turns
        turns, t, prev = [], -1, 0
        for c in range(width):
            if mask[i, c] and not prev:
                t += 1
            turns.append(t if mask[i, c] else -1)
            prev = int(mask[i, c])
        for turn in range(t + 1):
            if rng.random() < 0.6:
                cols = torch.tensor([x == turn for x in turns])
                start = turns.index(turn)
                prefix = [rng.randint(1, 50) for _ in range(rng.randint(1, 6))]
                continuation = [rng.randint(1, 50) for _ in range(length - start)]
                rows.append(TeacherRow(i, start, cols, prefix, continuation))
    return mask, rows


def loop_error_mask(mask, rows):
    out = [[False] * mask.shape[1] for _ in range(mask.shape[0])]
    for t in rows:
        for c in range(mask.shape[1]):
            if t.columns[c]:
                out[t.row][c] = True
    return torch.tensor(out)


def loop_place(rows, values, shape, dtype):
    """values[r, j] belongs to column start + j of row r's batch row, kept only on the targeted turn's columns."""
    out = torch.zeros(shape, dtype=dtype)
    for r, t in enumerate(rows):
        for c in range(t.start, shape[1]):
            if t.columns[c]:
                out[t.row, c] = values[r, c - t.start]
    return out


@pytest.mark.parametrize("seed", range(6))
def test_plan_mask_metrics_and_teacher_rows(seed):
    mask, rows = make_step(seed)
    plan = SdpoPlan.of(rows, mask)
    want = loop_error_mask(mask, rows)
    assert torch.equal(plan.error_mask, want)
    assert plan.metrics == {"sdpo/error_sites": float(len(rows)), "sdpo/tokens": float(want.sum())}
    if not rows:
        return
    packed = plan.teacher_rows(mask, PAD)
    width = mask.shape[1]
    p_width = max(len(t.prefix) for t in rows)
    for r, t in enumerate(rows):
        assert packed["prompts"][r].tolist() == [PAD] * (p_width - len(t.prefix)) + t.prefix
        resp = t.continuation + [PAD] * (width - len(t.continuation))
        assert packed["responses"][r].tolist() == resp
        # the rollout's own mask from the turn on, shifted to the teacher row's first response column
        shifted = [int(mask[t.row, c]) if c < width else 0 for c in range(t.start, t.start + width)]
        assert packed["response_mask"][r].tolist() == shifted


def planned_step(seed):
    """A random step's error sites, their plan and the packed teacher rows (skips a draw without sites)."""
    mask, rows = make_step(seed)
    if not rows:
        pytest.skip("no site drawn")
    plan = SdpoPlan.of(rows, mask)
    return mask, rows, plan, plan.teacher_rows(mask, PAD)


@pytest.mark.parametrize("seed", range(6))
def test_full_logit_columns_match_a_loop(seed):
    mask, rows, plan, packed = planned_step(seed)
    g = torch.Generator().manual_seed(seed)
    k, b, width = 3, *mask.shape
    lp = -torch.rand(len(rows), width, k, generator=g)
    ids = torch.randint(0, 99, (len(rows), width, k), generator=g, dtype=torch.int32)
    out = plan.full_logit(packed, lp, ids, n_minibatches=2.5)
    cols = out.loss_columns
    assert torch.equal(cols["sdpo_topk_log_probs"], loop_place(rows, lp, (b, width, k), torch.float32))
    assert torch.equal(cols["sdpo_topk_ids"], loop_place(rows, ids, (b, width, k), torch.int32))
    sites = loop_error_mask(mask, rows)
    n_tokens = int(sites.sum())
    for i in range(b):
        for c in range(width):
            assert cols["sdpo_weight"][i, c].item() == pytest.approx(2.5 / n_tokens if sites[i, c] else 0.0)
    assert out.estimator_inputs is None
    assert out.metrics == {**plan.metrics, "sdpo/teacher_tokens": float(packed["attention_mask"].sum())}


@pytest.mark.parametrize("seed", range(6))
def test_sampled_token_inputs_match_a_loop(seed):
    mask, rows, plan, packed = planned_step(seed)
    g = torch.Generator().manual_seed(100 + seed)
    old = -torch.rand(mask.shape, generator=g) * 3
    teacher_rows = -torch.rand(len(rows), mask.shape[1], generator=g) * 3
    out = plan.sampled_token(packed, teacher_rows, old)
    teacher = loop_place(rows, teacher_rows, tuple(mask.shape), torch.float32)
    assert torch.equal(out.estimator_inputs["sdpo_teacher_log_probs"], teacher)
    assert torch.equal(out.estimator_inputs["sdpo_error_mask"], loop_error_mask(mask, rows))
    diffs = [
        float(old[i, c]) - float(teacher[i, c])
        for i in range(mask.shape[0])
        for c in range(mask.shape[1])
        if plan.error_mask[i, c]
    ]
    assert out.metrics["loss/sdpo"] == pytest.approx(sum(diffs) / len(diffs), rel=1e-5)
    assert out.loss_columns == {}


def test_no_site_gives_no_term():
    mask = torch.ones(3, 4, dtype=torch.long)
    plan = SdpoPlan.of([], mask)
    old = -torch.rand(3, 4)
    full = plan.without_teacher(old, full_logit=True)
    assert full.metrics == {"sdpo/error_sites": 0.0, "sdpo/tokens": 0.0}
    assert full.loss_columns == {} and full.estimator_inputs is None
    sampled = plan.without_teacher(old, full_logit=False)
    assert torch.equal(sampled.estimator_inputs["sdpo_teacher_log_probs"], torch.zeros(3, 4))
    assert not sampled.estimator_inputs["sdpo_error_mask"].any()


def test_sdpo_kl_estimate_masked_mean():
    s = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -0.5]])
    t = torch.tensor([[-1.5, -1.0, -9.0], [-0.1, -0.2, -0.3]])
    m = torch.tensor([[1, 1, 0], [0, 0, 1]])
    expected = ((-1.0 + 1.5) + (-2.0 + 1.0) + (-0.5 + 0.3)) / 3
    assert sdpo_kl_estimate(s, t, m) == pytest.approx(expected)
    assert sdpo_kl_estimate(s, t, torch.zeros_like(m)) == 0.0


@pytest.mark.parametrize("seed", range(3))
def test_sdpo_kl_estimate_against_a_loop(seed):
    g = torch.Generator().manual_seed(seed)
    s, t = -torch.rand(4, 7, generator=g) * 3, -torch.rand(4, 7, generator=g) * 3
    m = torch.rand(4, 7, generator=g) < 0.4
    picked = [float(s[i, j]) - float(t[i, j]) for i in range(4) for j in range(7) if m[i, j]]
    assert sdpo_kl_estimate(s, t, m) == pytest.approx(sum(picked) / len(picked) if picked else 0.0, rel=1e-5)
