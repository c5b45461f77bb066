"""Shim for verl 0.9.1: ChatML checkpoints of other families get verl's ChatML prompt-token builder.

Why: verl's agent loop renders and extends prompt tokens with a "Continuous Token builder" picked by exact lookup of
the checkpoint's `config.json` `model_type` (`verl.utils.tokenizer.continuous_token_wiring._MODEL_TYPE_TO_FAMILY`);
an unknown type gets the default builder and a warning, once per sample. SmolLM2-135M-Instruct, the project's real
model (docs/REAL_MODEL.md), is a `llama` with a ChatML template: its turns end `<|im_end|>\\n`, generation stops at
`<|im_end|>`, and the default builder appends the next turn without the newline. A multi-turn (agent, tool-call)
episode then trains on a token stream the template never produces (one token per turn missing), and every rollout
logs "No model-specific Continuous Token builder is registered for config.json model_type='llama'". verl's Qwen
builder is plain ChatML handling (insert the newline after a final `<|im_end|>`, recorded as a boundary token that
carries no loss), which is what any ChatML template needs.

`apply()` wraps the builder factory the agent loop calls: for a model type verl's table does not know and a text-only
run, it names the family itself, `qwen` when the tokenizer's template renders ChatML turns and `default` otherwise
(both chosen explicitly, so verl logs no warning). Known model types and multimodal runs go to verl unchanged.

Upstream: verl 0.9.1 `verl/experimental/agent_loop/agent_loop.py` (`create_continuous_token_builder`, imported by
name) and `continuous_token_wiring`. tests/agent/test_continuous_token.py fails when verl's default builder starts
producing the template's tokens for a ChatML Llama, when its table gains `llama`, or when the factory moves.
"""

from __future__ import annotations

import functools
from typing import Any

_CHATML: dict[str, bool] = {}  # chat template -> renders ChatML turns


def _renders_chatml(tokenizer: Any) -> bool:
    template = getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str):
        return False
    if template not in _CHATML:
        turns = [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c"},
        ]
        try:
            text = tokenizer.apply_chat_template(turns, add_generation_prompt=True, tokenize=False)
        except Exception:  # a template that cannot render this conversation is not ChatML as far as we can tell
            text = ""
        _CHATML[template] = "b<|im_end|>\n<|im_start|>user" in text
    return _CHATML[template]


def family_for(tokenizer: Any, hf_model_type: str | None) -> str | None:
    """The builder family to name for a text-only run, or None to leave the choice to verl."""
    from verl.utils.tokenizer import continuous_token_wiring as wiring

    if hf_model_type is not None and hf_model_type.lower() in wiring._MODEL_TYPE_TO_FAMILY:
        return None
    return (
        wiring.ContinuousTokenModelFamily.QWEN
        if _renders_chatml(tokenizer)
        else wiring.ContinuousTokenModelFamily.DEFAULT
    ).value


def apply() -> None:
    from verl.experimental.agent_loop import agent_loop

    upstream = agent_loop.create_continuous_token_builder
    if getattr(upstream, "__wrapped__", None) is not None:
        return  # applied already in this process

    @functools.wraps(upstream)
    def create_builder(tokenizer: Any, *, model_family: Any = "auto", hf_model_type: str | None = None, **kwargs):
        if model_family == "auto" and kwargs.get("processor") is None:
            model_family = family_for(tokenizer, hf_model_type) or model_family
        return upstream(tokenizer, model_family=model_family, hf_model_type=hf_model_type, **kwargs)

    agent_loop.create_continuous_token_builder = create_builder
