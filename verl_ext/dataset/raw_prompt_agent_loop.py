"""verl single-turn agent loop that also accepts a plain-string prompt (base models: no chat template).

verl 0.9.1's ``SingleTurnAgentLoop`` does ``list(kwargs["raw_prompt"])`` and renders it with the chat template,
so a string prompt becomes a list of characters and fails inside the template. This subclass tokenises a string
prompt as raw text (``prompt_ids.raw_text_ids``) and leaves everything else (generation, the prompt-length cap,
output assembly) to verl's class; chat-message prompts take verl's path unchanged.

Registered in verl's agent-loop registry under ``AGENT_NAME`` when this module is imported. Importing
``verl_ext.dataset.raw_prompt`` (the dataset class named by ``data.custom_cls``) imports it, and verl's
AgentLoopWorker loads that class in its constructor, so the name is known in every rollout worker before the
first trajectory. Select it with ``actor_rollout_ref.rollout.agent.default_agent_loop=raw_prompt_single_turn``.
"""

from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from verl_ext.dataset.prompt_ids import raw_text_ids

AGENT_NAME = "raw_prompt_single_turn"


@register(AGENT_NAME)
class RawPromptAgentLoop(SingleTurnAgentLoop):
    """SingleTurnAgentLoop plus raw-string prompts. verl builds one instance per trajectory."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._raw_text: str | None = None

    async def run(self, sampling_params: dict[str, Any], priority: int = 0, **kwargs) -> AgentLoopOutput:
        raw_prompt = kwargs["raw_prompt"]
        if not isinstance(raw_prompt, str):
            return await super().run(sampling_params, priority=priority, **kwargs)
        self._raw_text = raw_prompt
        # No messages: verl's run then finds no multimodal content and asks ct_build_initial_tokens for the ids.
        return await super().run(sampling_params, priority=priority, **{**kwargs, "raw_prompt": []})

    async def ct_build_initial_tokens(self, messages: list[dict], **kwargs) -> list[int]:
        if self._raw_text is None:
            return await super().ct_build_initial_tokens(messages, **kwargs)
        text = self._raw_text
        prompt_ids = await self.loop.run_in_executor(None, lambda: raw_text_ids(self.tokenizer, text))
        return self._cap_text_prompt_length(prompt_ids)
