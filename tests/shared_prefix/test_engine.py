"""verl's FSDP engine step with shared prefixes against the same step unshared, on SmolLM2-135M-Instruct rows.

The engine's `forward_step` (verl's own: model call, loss function, the project's two overridden seams) runs on
verl's no-padding TensorDict (`rows.engine_batch`: what the trainer hands the actor) built from two of the task's
real prompts with four responses each, sampled from the real model at the training temperature. The model is the
unwrapped HF module (FSDP2 on one rank runs the same module), so the test needs no process group.

Tolerances: the packs' attention reduces over a longer key axis (the other responses' masked keys) than a row alone,
so float32 sums are associated differently: measured on this machine, log-probs differ by at most ~2e-5 on log-probs
of magnitude up to ~10 (median difference 0; the unshared pass's own distance from each row run alone is ~3e-6), and
parameter gradients by ~3e-5 relative. A real difference (a response seeing another's tokens, a shifted position, a
wrong label) moves log-probs by 1e-2 or more.
"""

from __future__ import annotations

import types

import pytest
import torch

from verl_ext.shared_prefix.rows import bare_engine, engine_batch

LP_ATOL = 5e-5
GRAD_RTOL = 1e-4
TEMPERATURE = 0.6


@pytest.fixture(scope="module")
def real():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl_ext.mathgen.prompts import prompt_messages
    from verl_ext.pretrained.smollm2 import ensure_smollm2

    path = ensure_smollm2()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    torch.manual_seed(0)
    prompts, responses = [], []
    for q in ("What is 12 + 7?", "Calculate -3 - 5."):
        ids = tok.apply_chat_template(prompt_messages(q), add_generation_prompt=True, return_tensors="pt")
        ids = ids["input_ids"] if not isinstance(ids, torch.Tensor) else ids
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            temperature=TEMPERATURE,
            max_new_tokens=32,
            num_return_sequences=4,
            pad_token_id=tok.pad_token_id,
        )
        for o in out:
            r = o[ids.shape[1] :].tolist()
            if tok.pad_token_id in r:
                r = r[: r.index(tok.pad_token_id) + 1]
            prompts.append(ids[0].tolist())
            responses.append(r)
    # interleave the two groups, as a batch may arrive
    order = [0, 4, 1, 5, 2, 6, 3, 7]
    return model, tok, [prompts[i] for i in order], [responses[i] for i in order]


def _engine(model):
    return bare_engine(model, torch.float32)


def _step(real, shared: bool, **flags):
    """One training micro-batch: per-token log-probs and entropies (response positions) and parameter gradients."""
    from verl.workers.utils.padding import no_padding_2_padding

    model, tok, prompts, responses = real
    td = engine_batch(
        prompts, responses, tok.pad_token_id, TEMPERATURE, shared_prefix=shared, calculate_entropy=True, **flags
    )
    advantages = torch.linspace(-1.0, 1.0, len(prompts))
    seen = {}

    def loss_fn(model_output, data, dp_group=None):
        lp = no_padding_2_padding(model_output["log_probs"], data)
        seen["lp"] = lp.detach()
        seen["entropy"] = no_padding_2_padding(model_output["entropy"], data).detach()
        mask = data["response_mask"].float()
        return -(lp * mask * advantages[:, None]).sum() / mask.sum(), {}

    engine = _engine(model)
    model.zero_grad(set_to_none=True)
    calls = {}
    original = model.forward

    def spy(*args, **kwargs):
        calls["input_ids"] = kwargs["input_ids"].shape
        return original(*args, **kwargs)

    model.forward = spy
    try:
        loss, out = engine.forward_step(td, loss_fn, forward_only=False)
    finally:
        del model.forward
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    seen["token_frac"] = out["metrics"].get("shared_prefix/token_frac")
    return seen, grads, td["response_mask"].bool(), calls["input_ids"]


@pytest.fixture(scope="module")
def plain_step(real):
    """The unshared step, the reference both comparisons below are made against (computed once)."""
    return _step(real, shared=False)


def test_shared_prefix_step_equals_the_unshared_step_on_real_rows(real, plain_step):
    plain, plain_grads, mask, plain_shape = plain_step
    shared, shared_grads, _, shared_shape = _step(real, shared=True)
    # the unshared pass runs 8 padded rows; the shared one 2 packs (one per prompt), and reports the tokens it saved
    assert plain_shape[0] == 8 and shared_shape[0] == 2
    assert plain["token_frac"] is None and 0 < shared["token_frac"] < 0.6
    assert shared_shape[0] * shared_shape[1] < 0.6 * plain_shape[0] * plain_shape[1]
    diff = (plain["lp"] - shared["lp"]).abs()[mask]
    assert diff.max() < LP_ATOL, diff.max()
    assert (plain["entropy"] - shared["entropy"]).abs()[mask].max() < LP_ATOL
    assert plain["lp"][mask].abs().max() > 1.0  # real, non-trivial log-probs were compared
    for name, g in plain_grads.items():
        rel = (g - shared_grads[name]).norm() / g.norm().clamp_min(1e-12)
        assert rel < GRAD_RTOL, (name, float(rel))


def test_the_comparison_catches_responses_that_see_each_other(real, plain_step, monkeypatch):
    """The comparison above can fail: with a plain causal mask over the pack, a response attends to the responses
    before it, and its log-probs move far beyond the tolerance."""
    from verl_ext.shared_prefix import packing

    def causal_only(segment):
        width = segment.shape[1]
        causal = torch.ones(width, width, dtype=torch.bool).tril()
        return causal & (segment[:, None, :] >= 0) | torch.eye(width, dtype=torch.bool)

    plain, _, mask, _ = plain_step
    monkeypatch.setattr(packing, "allowed_attention", causal_only)
    leaky, _, _, _ = _step(real, shared=True)
    assert (plain["lp"] - leaky["lp"]).abs()[mask].max() > 1e-2


@pytest.mark.parametrize("flag", ["use_fused_kernels", "calculate_sum_pi_squared"])
def test_passes_it_does_not_cover_run_unshared(real, flag):
    from verl_ext.shared_prefix.engine import ineligible

    model, tok, prompts, responses = real
    td = engine_batch(prompts, responses, tok.pad_token_id, TEMPERATURE, shared_prefix=True, **{flag: True})
    assert ineligible(_engine(model), td) == flag
    td = engine_batch(prompts, responses, tok.pad_token_id, TEMPERATURE, shared_prefix=True)
    assert ineligible(_engine(model), td) is None
    _, output_args = _engine(model).prepare_model_inputs(
        engine_batch(prompts, responses, tok.pad_token_id, TEMPERATURE, shared_prefix=False)
    )
    assert "shared_prefix_plan" not in output_args


def test_flash_attention_is_refused_by_name(real):
    model, tok, prompts, responses = real
    engine = _engine(types.SimpleNamespace(config=types.SimpleNamespace(_attn_implementation="flash_attention_2")))
    td = engine_batch(prompts, responses, tok.pad_token_id, TEMPERATURE, shared_prefix=True)
    with pytest.raises(ValueError, match="use_prefix_grouper.*attn_implementation"):
        engine.prepare_model_inputs(td)


def test_sliding_window_models_run_unshared(real):
    """The packs' 4-D mask would replace a sliding-window model's own window: such models keep verl's pass."""
    from verl_ext.shared_prefix.engine import ineligible

    model, tok, prompts, responses = real
    td = engine_batch(prompts, responses, tok.pad_token_id, TEMPERATURE, shared_prefix=True)
    for config in (
        types.SimpleNamespace(use_sliding_window=True, _attn_implementation="eager"),
        types.SimpleNamespace(layer_types=["full_attention", "sliding_attention"], _attn_implementation="eager"),
    ):
        assert ineligible(_engine(types.SimpleNamespace(config=config)), td) == "sliding-window attention"
    assert ineligible(_engine(model), td) is None
