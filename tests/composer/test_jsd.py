"""generalized_jsd_loss against a plain-loop reference, dense autograd, and its memory contract."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from verl_ext.composer import generalized_jsd_loss

# ---- references ------------------------------------------------------------------------------------------------


def loop_jsd(student, teacher, labels, beta, temperature, token_clip, reduction):
    """Obviously-correct form: python floats, one token and one vocabulary entry at a time."""

    def log_softmax(row):
        xs = [x / temperature for x in row]
        mx = max(xs)
        lse = mx + math.log(sum(math.exp(x - mx) for x in xs))
        return [x - lse for x in xs]

    s_rows = student.reshape(-1, student.shape[-1]).tolist()
    t_rows = teacher.reshape(-1, teacher.shape[-1]).tolist()
    lab = [True] * len(s_rows) if labels is None else [x != -100 for x in labels.reshape(-1).tolist()]
    per_token = []
    for s_row, t_row, valid in zip(s_rows, t_rows, lab):
        if not valid:
            per_token.append(0.0)
            continue
        s, t = log_softmax(s_row), log_softmax(t_row)
        total = 0.0
        for sv, tv in zip(s, t):
            if beta == 0:
                term = math.exp(tv) * (tv - sv)
            elif beta == 1:
                term = math.exp(sv) * (sv - tv)
            else:
                m = math.log(beta * math.exp(tv) + (1 - beta) * math.exp(sv))
                term = beta * math.exp(tv) * (tv - m) + (1 - beta) * math.exp(sv) * (sv - m)
            if token_clip is not None:
                term = min(term, token_clip)
            total += term
        per_token.append(total)
    n_valid = sum(lab)
    vocab = student.shape[-1]
    if reduction == "none":
        return torch.tensor(per_token, dtype=torch.float64).reshape(student.shape[:-1])
    total = sum(per_token)
    return {"sum": total, "batchmean": total / max(n_valid, 1), "mean": total / max(n_valid * vocab, 1)}[reduction]


def dense_jsd(student, teacher, labels, beta, temperature=1.0, token_clip=None):
    """TRL-style unchunked autograd form (batchmean), the thing chunking must reproduce, gradients included."""
    s = F.log_softmax(student / temperature, dim=-1)
    t = F.log_softmax(teacher / temperature, dim=-1)
    if beta == 0:
        jsd = F.kl_div(s, t, reduction="none", log_target=True)
    elif beta == 1:
        jsd = F.kl_div(t, s, reduction="none", log_target=True)
    else:
        b = torch.tensor(beta, dtype=s.dtype)
        m = torch.logsumexp(torch.stack([s + torch.log(1 - b), t + torch.log(b)]), dim=0)
        kl_t = F.kl_div(m, t, reduction="none", log_target=True)
        kl_s = F.kl_div(m, s, reduction="none", log_target=True)
        jsd = b * kl_t + (1 - b) * kl_s
    if token_clip is not None:
        jsd = jsd.clamp(max=token_clip)
    mask = torch.ones(student.shape[:-1], dtype=torch.bool) if labels is None else labels != -100
    return jsd[mask].sum() / mask.sum()


def random_case(seed, shape=(3, 5), vocab=11, dtype=torch.float64, masked_frac=0.3, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    student = (torch.randn(*shape, vocab, generator=g, dtype=dtype) * scale).requires_grad_(True)
    teacher = torch.randn(*shape, vocab, generator=g, dtype=dtype) * scale
    labels = torch.randint(0, vocab, shape, generator=g)
    labels[torch.rand(shape, generator=g) < masked_frac] = -100
    return student, teacher, labels


# ---- values against the loop reference -------------------------------------------------------------------------


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0, 0.2, 0.9])
@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.0])
@pytest.mark.parametrize("token_clip", [None, 0.02])
def test_matches_loop_reference(beta, temperature, token_clip):
    student, teacher, labels = random_case(seed=int(beta * 10 + temperature * 100))
    got = generalized_jsd_loss(student, teacher, labels, beta, temperature, token_clip, chunk_size=4)
    want = loop_jsd(student.detach(), teacher, labels, beta, temperature, token_clip, "batchmean")
    assert got.item() == pytest.approx(want, rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("reduction", ["batchmean", "sum", "mean", "none"])
def test_reductions_match_loop_reference(reduction):
    student, teacher, labels = random_case(seed=7)
    got = generalized_jsd_loss(student, teacher, labels, beta=0.3, reduction=reduction, chunk_size=2)
    want = loop_jsd(student.detach(), teacher, labels, 0.3, 1.0, None, reduction)
    if reduction == "none":
        assert got.shape == labels.shape
        torch.testing.assert_close(got.detach(), want, rtol=1e-10, atol=1e-12)
    else:
        assert got.item() == pytest.approx(want, rel=1e-10)


def test_special_cases_are_the_named_divergences():
    student, teacher, _ = random_case(seed=3, masked_frac=0.0)
    s = F.log_softmax(student.detach(), -1)
    t = F.log_softmax(teacher, -1)
    n_tokens = s.shape[0] * s.shape[1]
    forward_kl = (t.exp() * (t - s)).sum() / n_tokens
    reverse_kl = (s.exp() * (s - t)).sum() / n_tokens
    assert generalized_jsd_loss(student, teacher, beta=0.0).item() == pytest.approx(forward_kl.item(), rel=1e-10)
    assert generalized_jsd_loss(student, teacher, beta=1.0).item() == pytest.approx(reverse_kl.item(), rel=1e-10)
    # beta = 0.5 is the symmetric JSD: swapping roles changes nothing, and it is bounded by log 2.
    a = generalized_jsd_loss(student, teacher, beta=0.5)
    b = generalized_jsd_loss(teacher, student.detach(), beta=0.5)
    assert a.item() == pytest.approx(b.item(), rel=1e-10)
    assert 0 < a.item() < math.log(2)
    # identical distributions: zero for every beta
    for beta in (0.0, 0.4, 1.0):
        assert generalized_jsd_loss(student, student.detach(), beta=beta).item() == pytest.approx(0.0, abs=1e-12)


def test_temperature_is_division_of_logits():
    student, teacher, labels = random_case(seed=5)
    hot = generalized_jsd_loss(student, teacher, labels, beta=0.5, temperature=2.0)
    scaled = generalized_jsd_loss(student / 2.0, teacher / 2.0, labels, beta=0.5)
    assert hot.item() == pytest.approx(scaled.item(), rel=1e-12)


def test_masked_positions_do_not_matter_and_get_no_gradient():
    student, teacher, labels = random_case(seed=11, masked_frac=0.5)
    masked = labels == -100
    assert masked.any() and (~masked).any()
    loss = generalized_jsd_loss(student, teacher, labels, beta=0.5, chunk_size=3)
    loss.backward()
    assert torch.all(student.grad[masked] == 0)
    assert torch.any(student.grad[~masked] != 0)
    # garbage (even inf) at masked positions changes nothing
    student2 = student.detach().clone()
    student2[masked] = float("inf")
    teacher2 = teacher.clone()
    teacher2[masked] = -1e30
    again = generalized_jsd_loss(student2, teacher2, labels, beta=0.5)
    assert again.item() == pytest.approx(loss.item(), rel=1e-12)


def test_bool_mask_equals_minus_100_labels():
    student, teacher, labels = random_case(seed=12)
    by_labels = generalized_jsd_loss(student, teacher, labels)
    by_mask = generalized_jsd_loss(student, teacher, labels != -100)
    assert by_labels.item() == by_mask.item()


def test_all_masked_gives_zero_and_zero_gradient():
    student, teacher, labels = random_case(seed=13)
    labels[:] = -100
    loss = generalized_jsd_loss(student, teacher, labels)
    loss.backward()
    assert loss.item() == 0.0
    assert torch.all(student.grad == 0)


def test_token_clip_clips_each_vocabulary_summand():
    student, teacher, labels = random_case(seed=14, scale=6.0)
    unclipped = generalized_jsd_loss(student, teacher, labels, beta=0.0, reduction="none")
    clipped = generalized_jsd_loss(student, teacher, labels, beta=0.0, token_clip=0.01, reduction="none")
    assert torch.all(clipped <= 0.01 * student.shape[-1] + 1e-12)
    assert torch.all(clipped <= unclipped + 1e-12)
    assert torch.any(clipped < unclipped - 1e-6)
    # per-summand clipping is not per-token clipping: the loop reference decides
    want = loop_jsd(student.detach(), teacher, labels, 0.0, 1.0, 0.01, "none")
    torch.testing.assert_close(clipped.detach(), want, rtol=1e-10, atol=1e-12)
    # a clip above every summand is no clip
    loose = generalized_jsd_loss(student, teacher, labels, beta=0.0, token_clip=1e6, reduction="none")
    torch.testing.assert_close(loose, unclipped)


# ---- chunked == unchunked, gradients included ------------------------------------------------------------------


@pytest.mark.parametrize("chunk_size", [1, 3, 7, 1000])
@pytest.mark.parametrize("beta,token_clip", [(0.0, None), (0.5, None), (1.0, None), (0.7, 0.05)])
def test_chunked_equals_dense_with_gradients(chunk_size, beta, token_clip):
    student, teacher, labels = random_case(seed=chunk_size, shape=(4, 6), vocab=37)
    teacher.requires_grad_(True)
    got = generalized_jsd_loss(student, teacher, labels, beta, 1.3, token_clip, chunk_size=chunk_size)
    gs, gt = torch.autograd.grad(got, [student, teacher])
    want = dense_jsd(student, teacher, labels, beta, 1.3, token_clip)
    ws, wt = torch.autograd.grad(want, [student, teacher])
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(gs, ws, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(gt, wt, rtol=1e-9, atol=1e-12)


def test_upstream_gradient_is_applied_per_token():
    """reduction='none' with a weighted sum downstream: each row's gradient is scaled by its own weight."""
    student, teacher, labels = random_case(seed=21)
    weights = torch.rand(labels.shape, dtype=torch.float64)
    got = (generalized_jsd_loss(student, teacher, labels, reduction="none", chunk_size=2) * weights).sum()
    (g,) = torch.autograd.grad(got, student)
    s = F.log_softmax(student, -1)
    t = F.log_softmax(teacher, -1)
    m = torch.logaddexp(s + math.log(0.5), t + math.log(0.5))
    per_tok = (0.5 * t.exp() * (t - m) + 0.5 * s.exp() * (s - m)).sum(-1) * (labels != -100)
    (w,) = torch.autograd.grad((per_tok * weights).sum(), student)
    torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-12)


def test_non_contiguous_views_work_without_copies():
    """Logits sliced along the sequence (as when scoring a response) are indexed in place."""
    g = torch.Generator().manual_seed(25)
    base_s = torch.randn(2, 40, 101, generator=g, dtype=torch.float64).requires_grad_(True)
    base_t = torch.randn(2, 40, 101, generator=g, dtype=torch.float64)
    labels = torch.randint(0, 101, (2, 32), generator=g)
    labels[0, :5] = -100
    view_s, view_t = base_s[:, 3:35], base_t[:, 3:35]
    assert not view_s.is_contiguous()
    with LargeAllocations(16 * 101) as allocs:
        got = generalized_jsd_loss(view_s, view_t, labels, beta=0.4, chunk_size=16)
    # forward allocates only chunk-sized tensors besides the gradient buffer (no reshape copy of the view)
    assert [name for name, _ in allocs.events] == ["aten.zeros_like.default"]
    (g_view,) = torch.autograd.grad(got, base_s)
    want = dense_jsd(view_s.detach().clone().requires_grad_(True), view_t.clone(), labels, 0.4)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    (g_want,) = torch.autograd.grad(dense_jsd(view_s, view_t, labels, 0.4), base_s)
    torch.testing.assert_close(g_view, g_want, rtol=1e-9, atol=1e-12)


def test_bfloat16_inputs_are_computed_in_float32():
    student, teacher, labels = random_case(seed=22, dtype=torch.float32)
    s16 = student.detach().to(torch.bfloat16).requires_grad_(True)
    t16 = teacher.to(torch.bfloat16)
    got = generalized_jsd_loss(s16, t16, labels, chunk_size=4)
    got.backward()
    assert got.dtype == torch.float32 and s16.grad.dtype == torch.bfloat16
    s32 = s16.detach().float().requires_grad_(True)
    want = dense_jsd(s32, t16.float(), labels, 0.5)
    want.backward()
    assert got.item() == pytest.approx(want.item(), rel=1e-5)
    torch.testing.assert_close(s16.grad.float(), s32.grad, rtol=2e-2, atol=1e-4)


def test_no_grad_path_and_second_backward():
    student, teacher, labels = random_case(seed=23)
    with torch.no_grad():
        value = generalized_jsd_loss(student, teacher, labels)
    loss = generalized_jsd_loss(student, teacher, labels)
    assert value.item() == pytest.approx(loss.item(), rel=1e-12)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward called twice"):
        loss.backward()


def test_bad_inputs_fail_early():
    student, teacher, labels = random_case(seed=24)
    with pytest.raises(ValueError, match="differ"):
        generalized_jsd_loss(student, teacher[..., :-1])
    with pytest.raises(ValueError, match="labels shape"):
        generalized_jsd_loss(student, teacher, labels[:, :-1])
    with pytest.raises(TypeError, match="labels"):
        generalized_jsd_loss(student, teacher, labels.double())
    with pytest.raises(ValueError, match="beta"):
        generalized_jsd_loss(student, teacher, beta=1.5)
    with pytest.raises(ValueError, match="temperature"):
        generalized_jsd_loss(student, teacher, temperature=0.0)
    with pytest.raises(ValueError, match="reduction"):
        generalized_jsd_loss(student, teacher, reduction="batch_mean")
    with pytest.raises(ValueError, match="chunk_size"):
        generalized_jsd_loss(student, teacher, chunk_size=0)


# ---- memory contract -------------------------------------------------------------------------------------------


class LargeAllocations(TorchDispatchMode):
    """Records every op whose output is a new tensor (not a view of, or in-place on, an argument) with more than
    `threshold` elements."""

    def __init__(self, threshold):
        super().__init__()
        self.threshold = threshold
        self.events = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.numel() > self.threshold:
                ptr = t.untyped_storage().data_ptr()
                if ptr not in inputs:
                    self.events.append((str(func), ptr))
        return out


def test_only_the_gradient_buffer_exceeds_one_chunk():
    """Forward + backward: no op produces a tensor bigger than one chunk of (tokens x vocab), except the one
    gradient buffer; the dense form produces many."""
    n_tokens, vocab, chunk = 64, 257, 8
    g = torch.Generator().manual_seed(0)
    student = torch.randn(n_tokens, vocab, generator=g).requires_grad_(True)
    teacher = torch.randn(n_tokens, vocab, generator=g)
    threshold = chunk * vocab
    with LargeAllocations(threshold) as chunked:
        generalized_jsd_loss(student, teacher, chunk_size=chunk).backward()
    assert len(chunked.events) == 1, chunked.events  # the gradient buffer, returned as student.grad
    assert chunked.events[0][1] == student.grad.untyped_storage().data_ptr()
    student.grad = None
    with LargeAllocations(threshold) as dense:
        dense_jsd(student, teacher, None, 0.5).backward()
    assert len(dense.events) >= 6
