"""verl RLHFDataset that also accepts a plain-string prompt column (base models, ``--use-chat-template off``).

What verl 0.9.1 does with a string prompt, and why config alone is not enough:
- ``RLHFDataset.maybe_filter_out_long_prompts`` calls ``tokenizer.apply_chat_template(<str>)``, which raises;
  the filter catches it and scores the row as too long, so with ``data.filter_overlong_prompts=True`` every
  row is dropped (verl's default is False);
- ``RLHFDataset.__getitem__`` passes the string through as ``raw_prompt`` unchanged (fine);
- ``SingleTurnAgentLoop.run`` does ``list(raw_prompt)`` and applies the chat template: a string breaks there.
  (``actor_rollout_ref.model.custom_chat_template`` could make the template an identity, but then the prompt must
  stay chat messages, and every other template user in the run changes too.)

This class measures string prompts as raw text (the same ids the rollout will use, ``prompt_ids``) and defers to
verl for chat prompts. Importing this module registers ``raw_prompt_agent_loop.RawPromptAgentLoop``.

Trainer overrides for raw-string prompts:
    data.custom_cls.path=pkg://verl_ext.dataset.raw_prompt
    data.custom_cls.name=RawPromptRLHFDataset
    actor_rollout_ref.rollout.agent.default_agent_loop=raw_prompt_single_turn
"""

from __future__ import annotations

import datasets
from verl.utils.dataset.rl_dataset import RLHFDataset

from verl_ext.dataset import raw_prompt_agent_loop  # noqa: F401  registers the agent loop (see module docstring)
from verl_ext.dataset.prompt_ids import raw_text_ids


def prompt_column_is_string(dataframe: datasets.Dataset, prompt_key: str) -> bool:
    if prompt_key not in dataframe.features:
        raise KeyError(f"prompt column {prompt_key!r} not in the data set; columns: {list(dataframe.features)}")
    feature = dataframe.features[prompt_key]
    return isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string")


class RawPromptRLHFDataset(RLHFDataset):
    """RLHFDataset whose prompt column may be a plain string (encoded raw, never through a chat template)."""

    accepts_string_prompts = True  # read by the pre-flight (verl_ext/config/preflight/file_checks.py)

    def maybe_filter_out_long_prompts(self, dataframe: datasets.Dataset = None):
        if not prompt_column_is_string(dataframe, self.prompt_key):
            return super().maybe_filter_out_long_prompts(dataframe)
        if self.processor is not None:
            raise ValueError("string prompts are text-only, but a multimodal processor is configured for this model")
        if not self.filter_overlong_prompts:
            return dataframe
        tokenizer, key, max_len = self.tokenizer, self.prompt_key, self.max_prompt_length
        dataframe = dataframe.filter(
            lambda doc: len(raw_text_ids(tokenizer, doc[key])) <= max_len,
            num_proc=self.num_workers,
            desc=f"Filtering raw prompts longer than {max_len} tokens",
        )
        print(f"filter dataset len: {len(dataframe)}")
        return dataframe
