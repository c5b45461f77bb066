"""The Continuous Token shim (verl_ext/agent/continuous_token.py) on verl 0.9.1 and the project's real model,
SmolLM2-135M-Instruct (a `llama` with a ChatML template): verl's own default builder drops the newline between
turns (the bug the shim exists for; this test fails when verl fixes it), the builder the agent loop gets after the
shim reproduces the template token for token across turns, silently, and known or non-ChatML models are left alone."""

from __future__ import annotations

import copy
import logging

import pytest
from verl.experimental.agent_loop import agent_loop
from verl.utils.tokenizer import continuous_token_wiring as wiring

from verl_ext.agent import continuous_token

QUESTION = [{"role": "user", "content": "What is 2 + 2? Give the final answer in \\boxed{}."}]
CONVERSATION = QUESTION + [{"role": "assistant", "content": "\\boxed{4}"}, {"role": "user", "content": "And 3 + 5?"}]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from verl_ext.pretrained.smollm2 import ensure_smollm2

    return AutoTokenizer.from_pretrained(ensure_smollm2())


def template_ids(tok, messages):
    return list(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False))


def two_turns(builder, tok) -> list[int]:
    """The agent loop's token stream: first prompt, the model's answer up to <|im_end|>, the next user turn."""
    ids = builder.build_initial_tokens(QUESTION)
    answer = tok.encode("\\boxed{4}", add_special_tokens=False) + [tok.convert_tokens_to_ids("<|im_end|>")]
    ids = builder.merge_assistant_tokens(ids, answer).token_ids
    return builder.merge_context_tokens(CONVERSATION[:2], CONVERSATION, ids).token_ids


def test_verls_fallback_builder_drops_the_chatml_newline_between_turns(tokenizer):
    """Fails when verl's table learns `llama` or its default builder handles ChatML: then delete the shim."""
    assert "llama" not in wiring._MODEL_TYPE_TO_FAMILY and "qwen2" in wiring._MODEL_TYPE_TO_FAMILY
    default = wiring.get_continuous_token_builder_class(wiring.ContinuousTokenModelFamily.DEFAULT)(tokenizer)
    got, want = two_turns(default, tokenizer), template_ids(tokenizer, CONVERSATION)
    newline = tokenizer.encode("\n", add_special_tokens=False)
    assert got != want and len(want) == len(got) + 1
    i = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
    assert [want[i]] == newline and got[i:] == want[i + 1 :]


def test_agent_loop_builder_reproduces_the_template_across_turns_without_warning(tokenizer, caplog):
    continuous_token.apply()
    continuous_token.apply()  # idempotent: one wrapper however many times the plugin loads
    assert agent_loop.create_continuous_token_builder.__wrapped__ is wiring.create_continuous_token_builder
    with caplog.at_level(logging.WARNING):
        builder = agent_loop.create_continuous_token_builder(tokenizer, hf_model_type="llama", processor=None)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert builder.build_initial_tokens(QUESTION) == template_ids(tokenizer, QUESTION)
    assert two_turns(builder, tokenizer) == template_ids(tokenizer, CONVERSATION)


def test_known_model_types_and_other_templates_are_verls_choice(tokenizer):
    assert continuous_token.family_for(tokenizer, "qwen2") is None  # verl's own table decides
    assert continuous_token.family_for(tokenizer, "llama") == "qwen"
    plain = copy.deepcopy(tokenizer)
    plain.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    assert continuous_token.family_for(plain, "llama") == "default"
    no_template = copy.deepcopy(tokenizer)
    no_template.chat_template = None
    assert continuous_token.family_for(no_template, "mistral") == "default"
