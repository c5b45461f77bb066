"""Token ids of a dataset prompt, for both prompt forms a verl-ext parquet file can hold.

- chat messages (instruct models): the tokenizer's chat template with the generation prompt, exactly what verl's
  agent loop renders;
- a plain string (base models): the text as is, no template, tokenised with the tokenizer's usual special
  tokens for raw text (a BOS where the tokenizer defines one; Qwen2.5 adds none).

The length filter (``raw_prompt.RawPromptRLHFDataset``) and the rollout (``raw_prompt_agent_loop``) both use
this, so a prompt that passes the filter is the prompt the model sees. A custom rollout path (e.g. a manager that
generates with HF ``generate``) should call ``prompt_token_ids`` too.
"""

from __future__ import annotations

from typing import Any


def raw_text_ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=True)["input_ids"])


def prompt_token_ids(tokenizer: Any, prompt: Any, chat_template_kwargs: dict | None = None) -> list[int]:
    """Ids of ``prompt``: a string is encoded raw, a list of messages goes through the chat template."""
    if isinstance(prompt, str):
        return raw_text_ids(tokenizer, prompt)
    messages = list(prompt)
    if not messages or not all(isinstance(m, dict) and "role" in m and "content" in m for m in messages):
        raise TypeError(
            f"prompt must be a string or a non-empty list of {{role, content}} messages, got {prompt!r:.200}"
        )
    kwargs = dict(chat_template_kwargs or {})
    for key in ("tokenize", "return_dict", "return_tensors", "add_generation_prompt"):
        kwargs.pop(key, None)  # fixed here: verl's agent loop renders token ids with the generation prompt
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **kwargs)
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return [int(i) for i in ids]
