"""The Composer actor loss on a real tiny Qwen2 and verl's own ppo_loss / padding helpers.

`engine_step` does for one micro-batch what verl 0.9.1's FSDP engine does (prepare_model_outputs, no-padding
layout): packed logits, the loss function as a logits processor when `distillation_use_topk` is set, log-probs of
the rolled labels, then the loss call. The checks compare gradients w.r.t. the model's weights:
- alpha = beta = 0: exactly verl's ppo_loss (the update equals plain GRPO's on the same batch);
- alpha > 0: ppo_loss + alpha * the plain-loop JSD at the site tokens;
- replay rows: ppo_loss + beta * the DPO loss of the pair (autograd on dpo_loss).
"""

from __future__ import annotations

import math

import pytest
import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.utils import tensordict_utils as tu
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.utils.losses import ppo_loss
from verl.workers.utils.padding import left_right_2_no_padding

from verl_ext.composer.actor_loss import (
    COLLECT_FLAG,
    JSD_KEY,
    TOPK_PREFIX,
    ComposerActorLoss,
    pack_topk,
    response_positions,
    unpack_topk,
)
from verl_ext.composer.dpo import dpo_loss
from verl_ext.composer.jsd import generalized_jsd_loss
from verl_ext.composer.rows import pack_rows
from verl_ext.composer.sdpo import topk_generalized_jsd

P_WIDTH, R_WIDTH = 6, 5


@pytest.fixture(scope="module")
def model(tiny_assets):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(tiny_assets.model_dir, torch_dtype=torch.float32)


@pytest.fixture(scope="module")
def actor_config():
    from verl_ext.config.compose import compose_config

    cfg = compose_config(
        "composer",
        [
            "+arm=baseline",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        ],
        config_module="recipe.composer.config",
        backend="cpu",
    )
    OmegaConf.resolve(cfg)
    return omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)


def composer_loss(actor_config, **overrides):
    """ComposerActorLoss with composer.yaml's values (SDPO and replay off) unless overridden."""
    settings = dict(alpha_sdpo=0.0, jsd_beta=0.5, token_clip=None, beta_replay=0.0, beta_dpo=0.1)
    return ComposerActorLoss(actor_config, **{**settings, **overrides})


def _rows(vocab: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    prefixes = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in (3, 6, 4, 5)]
    responses = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in (5, 2, 4, 3)]
    return pack_rows(prefixes, responses, pad_token_id=0, response_width=R_WIDTH, prefix_width=P_WIDTH)


def _packed_logits(model, td) -> tuple[torch.Tensor, torch.Tensor]:
    """(nnz, V) logits of the packed sequences and the rolled labels, as verl's engine computes them."""
    seqs = td["input_ids"].unbind()
    logits = torch.cat([model(s.unsqueeze(0), position_ids=torch.arange(len(s)).unsqueeze(0)).logits[0] for s in seqs])
    labels = torch.roll(torch.cat(seqs), shifts=-1)
    return logits, labels


def engine_step(model, td, loss_fn, distill: bool):
    logits, labels = _packed_logits(model, td)
    offsets = td["input_ids"].offsets()
    model_output = {}
    if distill:
        for key, value in loss_fn(student_logits=logits.unsqueeze(0), data=td).items():
            model_output[key] = torch.nested.nested_tensor_from_jagged(value.squeeze(0), offsets)
    log_probs = torch.log_softmax(logits.float(), -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    model_output["log_probs"] = torch.nested.nested_tensor_from_jagged(log_probs, offsets)
    return loss_fn(model_output=model_output, data=td, dp_group=None)


def _micro_batch(tensors: dict[str, torch.Tensor], **flags):
    td = left_right_2_no_padding(DataProto.from_dict(tensors=dict(tensors)).to_tensordict())
    tu.assign_non_tensor(
        td,
        dp_size=1,
        batch_num_tokens=int(tensors["response_mask"].sum()),
        global_batch_size=tensors["input_ids"].shape[0],
        **flags,
    )
    return td


def _response_log_probs(model, tensors) -> torch.Tensor:
    """(B, R) log-probs of the response tokens, plain per-row loop."""
    out = torch.zeros(tensors["responses"].shape)
    for i in range(out.shape[0]):
        ids = tensors["input_ids"][i][tensors["attention_mask"][i].bool()]
        n_resp = int(tensors["attention_mask"][i, P_WIDTH:].sum())
        logits = model(ids.unsqueeze(0)).logits[0]
        lp = torch.log_softmax(logits, -1)[:-1].gather(-1, ids[1:].unsqueeze(-1)).squeeze(-1)
        out[i, :n_resp] = lp[len(ids) - 1 - n_resp :]
    return out


def _batch(model, seed=0) -> dict[str, torch.Tensor]:
    tensors = _rows(model.config.vocab_size, seed)
    with torch.no_grad():
        old = _response_log_probs(model, tensors)
    g = torch.Generator().manual_seed(seed + 100)
    tensors["old_log_probs"] = old  # ratio 1 at the first pass: no PPO clipping
    tensors["ref_log_prob"] = old - 0.05 * torch.rand(old.shape, generator=g)
    tensors["advantages"] = torch.randn(old.shape[0], 1, generator=g) * tensors["response_mask"]
    return tensors


def _grads(model, loss) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss.backward()
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


def _assert_grads_close(a, b, **tol):
    assert len(a) == len(b) and len(a) > 0
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, **tol)


def test_response_positions_match_a_loop():
    prompt_lens, response_lens = torch.tensor([3, 1, 4]), torch.tensor([2, 3, 0])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(prompt_lens + response_lens, 0)])
    rows, cols, pos = response_positions(offsets, prompt_lens, response_lens)
    want = [
        (i, t, int(offsets[i]) + int(prompt_lens[i]) + t - 1) for i in range(3) for t in range(int(response_lens[i]))
    ]
    assert list(zip(rows.tolist(), cols.tolist(), pos.tolist())) == want


def test_pack_topk_round_trips_exactly():
    lp = torch.tensor([0.0, -1e-30, -3.25, -87.5, float("-inf"), -1e38, 1.5])
    ids = torch.tensor([0, 1, 151_935, 7, 2**31 - 1, 42, 3])
    got_lp, got_ids = unpack_topk(pack_topk(lp, ids))
    assert torch.equal(got_ids, ids) and torch.equal(got_lp, lp)
    assert pack_topk(lp, ids).dtype == torch.int64


def test_topk_jsd_full_vocab_is_the_full_logit_jsd():
    g = torch.Generator().manual_seed(1)
    student = torch.randn(7, 11, generator=g, dtype=torch.float64, requires_grad=True)
    teacher = torch.randn(7, 11, generator=g, dtype=torch.float64)
    top = torch.log_softmax(teacher, -1).sort(-1, descending=True)
    got = topk_generalized_jsd(student, top.values, top.indices, beta=0.3, token_clip=None)
    want = generalized_jsd_loss(student, teacher, beta=0.3, reduction="none")
    torch.testing.assert_close(got, want)
    (g1,) = torch.autograd.grad(got.sum(), student)
    (g2,) = torch.autograd.grad(generalized_jsd_loss(student, teacher, beta=0.3, reduction="none").sum(), student)
    torch.testing.assert_close(g1, g2)


def test_topk_jsd_restricts_both_sides_to_the_teacher_support():
    g = torch.Generator().manual_seed(2)
    student = torch.randn(4, 9, generator=g, dtype=torch.float64)
    teacher = torch.randn(4, 9, generator=g, dtype=torch.float64)
    top = torch.log_softmax(teacher, -1).topk(3, -1)
    got = topk_generalized_jsd(student, top.values, top.indices, beta=0.5)
    for i in range(4):  # plain loop: renormalise both on the 3 ids, then the JSD of two 3-way distributions
        ids = top.indices[i].tolist()
        s = torch.softmax(student[i, ids], -1).tolist()
        t = torch.softmax(teacher[i, ids], -1).tolist()
        m = [(a + b) / 2 for a, b in zip(s, t)]
        want = sum(0.5 * b * math.log(b / c) + 0.5 * a * math.log(a / c) for a, b, c in zip(s, t, m))
        assert got[i].item() == pytest.approx(want, rel=1e-9)


def test_alpha_beta_zero_is_exactly_verl_ppo_loss(model, actor_config):
    """The update with both channels off: same loss, same gradient as verl's ppo_loss on the same micro-batch
    (with the SDPO and DPO columns present and the logits processor running)."""
    tensors = _batch(model)
    b, vocab = tensors["input_ids"].shape[0], model.config.vocab_size
    tensors["sdpo_weight"] = tensors["response_mask"].float()
    tensors["sdpo_topk_log_probs"] = torch.log_softmax(torch.randn(b, R_WIDTH, 8), -1)
    tensors["sdpo_topk_ids"] = torch.randint(0, vocab, (b, R_WIDTH, 8), dtype=torch.int32)
    tensors["dpo_sign"] = torch.tensor([0.0, 0.0, 1.0, -1.0])
    for key in ("dpo_weight", "dpo_ref_logp", "dpo_partner_logratio"):
        tensors[key] = torch.tensor([0.0, 0.0, 0.5, 0.5])
    td = _micro_batch(tensors, distillation_use_topk=True)

    ours_loss, ours_metrics = engine_step(model, td, composer_loss(actor_config), True)
    ours = _grads(model, ours_loss)
    plain_loss, plain_metrics = engine_step(model, td, lambda **kw: ppo_loss(actor_config, **kw), False)
    plain = _grads(model, plain_loss)
    assert ours_loss.item() == plain_loss.item()
    _assert_grads_close(ours, plain, rtol=0, atol=0)
    assert ours_metrics.keys() == plain_metrics.keys()
    for key, metric in plain_metrics.items():
        assert getattr(ours_metrics[key], "values", ours_metrics[key]) == getattr(metric, "values", metric), key


def test_sdpo_term_is_alpha_times_the_loop_jsd(model, actor_config):
    tensors = _batch(model, seed=3)
    b, vocab = tensors["input_ids"].shape[0], model.config.vocab_size
    g = torch.Generator().manual_seed(5)
    teacher_logits = torch.randn(b, R_WIDTH, vocab, generator=g) * 2
    top = torch.log_softmax(teacher_logits, -1).sort(-1, descending=True)  # k = V: the exact full-logit JSD
    site = tensors["response_mask"].bool().clone()
    site[1] = False  # a row without error site
    weight = site.float() * (2.0 / site.sum())
    tensors.update(sdpo_weight=weight, sdpo_topk_log_probs=top.values, sdpo_topk_ids=top.indices.to(torch.int32))
    td = _micro_batch(tensors, distillation_use_topk=True)
    alpha, jsd_beta = 0.7, 0.3

    loss, metrics = engine_step(model, td, composer_loss(actor_config, alpha_sdpo=alpha, jsd_beta=jsd_beta), True)
    ours = _grads(model, loss)

    plain_loss, _ = engine_step(model, td, lambda **kw: ppo_loss(actor_config, **kw), False)
    term, count, total = 0.0, 0, 0.0
    for i in range(b):  # the reference: per row, full logits, dense JSD formula at each site token
        ids = tensors["input_ids"][i][tensors["attention_mask"][i].bool()]
        n_resp = int(tensors["attention_mask"][i, P_WIDTH:].sum())
        logits = model(ids.unsqueeze(0)).logits[0]
        for t in range(n_resp):
            if not site[i, t]:
                continue
            s = torch.log_softmax(logits[len(ids) - n_resp - 1 + t], -1)
            tt = torch.log_softmax(teacher_logits[i, t], -1)
            m = torch.logsumexp(torch.stack([tt + math.log(jsd_beta), s + math.log(1 - jsd_beta)]), 0)
            jsd = (jsd_beta * tt.exp() * (tt - m) + (1 - jsd_beta) * s.exp() * (s - m)).sum()
            term = term + weight[i, t] * jsd
            total, count = total + jsd.item(), count + 1
    want = _grads(model, plain_loss + alpha * term)
    assert loss.item() == pytest.approx((plain_loss + alpha * term).item(), rel=1e-5)
    _assert_grads_close(ours, want, rtol=1e-4, atol=1e-6)
    assert metrics["composer/sdpo_tokens"].values[0] == count
    assert metrics["composer/sdpo_jsd_sum"].values[0] == pytest.approx(total, rel=1e-5)


def test_replay_rows_add_beta_times_the_dpo_loss(model, actor_config):
    tensors = _batch(model, seed=4)
    tensors["advantages"][2:] = 0.0  # rows 2 (chosen) and 3 (rejected) are a replay pair
    with torch.no_grad():
        seq = (_response_log_probs(model, tensors) * tensors["response_mask"]).sum(-1)
    ref = seq - torch.tensor([0.0, 0.0, 0.4, -0.3])
    tensors["dpo_sign"] = torch.tensor([0.0, 0.0, 1.0, -1.0])
    tensors["dpo_weight"] = torch.tensor([0.0, 0.0, 1.0, 1.0])  # one pair, one slot
    tensors["dpo_ref_logp"] = ref
    tensors["dpo_partner_logratio"] = (seq - ref)[[1, 0, 3, 2]]  # each row: its partner's lp - ref
    td = _micro_batch(tensors)
    beta_replay, beta_dpo = 0.5, 0.2

    loss, metrics = engine_step(
        model, td, composer_loss(actor_config, beta_replay=beta_replay, beta_dpo=beta_dpo), False
    )
    ours = _grads(model, loss)
    plain_loss, _ = engine_step(model, td, lambda **kw: ppo_loss(actor_config, **kw), False)
    live = (_response_log_probs(model, tensors) * tensors["response_mask"]).sum(-1)
    pair_loss, _ = dpo_loss(live[2:3], live[3:4], ref[2:3], ref[3:4], beta=beta_dpo)
    want = _grads(model, plain_loss + beta_replay * pair_loss)
    assert loss.item() == pytest.approx((plain_loss + beta_replay * pair_loss).item(), rel=1e-5)
    _assert_grads_close(ours, want, rtol=1e-4, atol=1e-6)
    assert metrics["composer/dpo_loss_sum"].values[0] == pytest.approx(pair_loss.item(), rel=1e-5)
    assert metrics["composer/dpo_pairs"].values[0] == pytest.approx(1.0)


@pytest.mark.parametrize("k", [4, 0])
def test_collect_mode_returns_the_top_k_of_every_position(model, actor_config, k):
    tensors = _batch(model, seed=6)
    td = _micro_batch(tensors, distillation_use_topk=True, **{COLLECT_FLAG: k})
    fn = composer_loss(actor_config, alpha_sdpo=0.1)
    with torch.no_grad():
        logits, _ = _packed_logits(model, td)
        out = fn(student_logits=logits.unsqueeze(0), data=td)
        loss, metrics = fn(model_output={"log_probs": torch.zeros(3)}, data=td)
    width = k or model.config.vocab_size
    assert len(out) == width and JSD_KEY not in out
    want = torch.log_softmax(logits, -1).topk(width, -1)
    got_lp, got_id = unpack_topk(torch.stack([out[f"{TOPK_PREFIX}{j}"][0] for j in range(width)], -1))
    torch.testing.assert_close(got_lp, want.values)
    assert torch.equal(got_id, want.indices)
    assert loss.item() == 0.0 and metrics == {}


def test_update_means_pop_the_sums():
    from verl_ext.composer.actor_loss import update_means

    sums = {
        "actor/composer/sdpo_jsd_sum": 3.0,
        "actor/composer/sdpo_tokens": 4.0,
        "actor/composer/dpo_loss_sum": 1.5,
        "actor/composer/dpo_pairs": 2.0,
        "actor/pg_loss": 0.1,
    }
    assert update_means(sums) == (0.75, 0.75)
    assert sums == {"actor/pg_loss": 0.1}
    assert update_means(sums) == (0.0, None)  # no site token, no pair
    assert update_means({"actor/composer/sdpo_tokens": 0.0, "actor/composer/dpo_pairs": 0.0}) == (0.0, None)
