"""`external_agent`: a verl agent loop that runs one external agent process per task, through the gateway.

Where things live (decided so that weight sync, batching and sleep/wake stay verl's): verl's AgentLoopWorker (a Ray
actor, one asyncio loop) builds one agent-loop instance per trajectory. The first `external_agent` instance in a
worker process starts that process's `Gateway` on the worker's event loop (port `external_agent.port`, 0 = any
free port; with a fixed port each further worker takes the next free one), generating through the worker's own
`LLMServerClient`. Every trajectory then:

1. opens an episode (a session keyed by a fresh episode id) with the trainer's sampling settings;
2. starts `external_agent.command` with `OPENAI_BASE_URL=<gateway>/s/<episode>/v1`, `OPENAI_API_KEY`,
   `AGENT_SCORE_URL=<gateway>/s/<episode>/scores`, `AGENT_EPISODE_ID` and `AGENT_TASK` (the dataset row as JSON:
   `prompt`, `reward_model`, `extra_info`, `data_source`), in its own process group;
3. waits for it to exit (killing the group after `timeout_s`), collects the episode's rounds and score, and lets
   `episode.decide` say what is trained; `trajectory` joins the rounds into verl's multi-turn sample.

Groups for advantages are verl's: the n rollouts of one dataset row share its uid, so the n episodes of one task
form the group. A dropped episode (crash, timeout, no score, rewritten history) still fills its row as a
placeholder with response mask 0 and status columns `agent_status`, `agent_episode_id` (see
`verl_ext.trainer.agent_episodes`, which moves it out of its group and logs it).
"""

from __future__ import annotations

import atexit
import json
import logging
from typing import Any

import numpy as np
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)

from verl_ext.agent.agent_process import EpisodeResult, run_episode
from verl_ext.agent.episode import Outcome, Status
from verl_ext.agent.gateway.server import Gateway
from verl_ext.agent.gateway_owner import LoopGateways
from verl_ext.agent.settings import AGENT_LOOP_NAME, AgentSettings, gateway_key
from verl_ext.agent.tool_use import ToolUse, tool_use
from verl_ext.agent.trajectory import truncate
from verl_ext.agent.transcript import transcript, write_transcript

logger = logging.getLogger(__name__)

# this process's gateways, one per event loop (= per agent-loop worker), stopped when the process exits
GATEWAYS = LoopGateways()
atexit.register(GATEWAYS.close)
_PORT_TRIES = 64


def to_plain(value: Any) -> Any:
    """A dataset field as plain JSON (numpy arrays and scalars from the parquet row become lists and numbers)."""
    if isinstance(value, np.ndarray):
        return [to_plain(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_plain(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


@register(AGENT_LOOP_NAME)
class ExternalAgentLoop(AgentLoopBase):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.settings = AgentSettings.from_mapping(self.config.get("external_agent"))
        self.response_length = self.rollout_config.response_length

    async def _gateway(self) -> Gateway:
        return await GATEWAYS.get(self._start_gateway)

    async def _start_gateway(self) -> Gateway:
        server = self.server_manager

        async def generate(request_id, prompt_ids, sampling_params):
            out = await server.generate(request_id=request_id, prompt_ids=prompt_ids, sampling_params=sampling_params)
            return out.token_ids, out.log_probs, (out.extra_fields or {}).get("global_steps")

        s = self.settings
        last_error = None
        for offset in range(_PORT_TRIES if s.port else 1):
            gw = Gateway(
                tokenizer=self.tokenizer,
                builder=self.continuous_token_builder,
                generate=generate,
                model_name=str(self.config.actor_rollout_ref.model.path),
                prompt_length=self.rollout_config.prompt_length,
                response_length=self.response_length,
                host=s.host,
                port=s.port + offset if s.port else 0,
                max_inflight=s.max_inflight,
                api_key=gateway_key(s),
                tool_parser=s.tool_parser,
                reasoning_parser=s.reasoning_parser,
            )
            try:
                await gw.start()
                break
            except OSError as e:  # port taken (another worker on this node): try the next one
                last_error = e
                await gw.stop()  # the app runner was set up before the bind failed
        else:
            raise RuntimeError(f"external_agent: no free port in {s.port}..{s.port + _PORT_TRIES - 1}") from last_error
        logger.warning("external_agent gateway listening on %s", gw.base_url)
        return gw

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        gw = await self._gateway()
        s = self.settings
        task = {k: to_plain(kwargs.get(k)) for k in ("raw_prompt", "reward_model", "extra_info", "data_source")}
        task["prompt"] = task.pop("raw_prompt")
        res = await run_episode(gw, s, task, sampling_params)
        session, outcome = res.session, res.outcome
        if outcome.status is Status.CRASHED:
            logger.warning(
                "agent episode %s exited with %s: %s", session.episode_id, res.exit_code, res.stderr.strip()[-500:]
            )
        if s.transcripts:
            write_transcript(s.transcripts, transcript(session, outcome.status.value, outcome.segment))
        prompt_ids, response_ids, mask, logprobs, num_turns, version = await self._row_tokens(outcome, session, task)
        used = tool_use(session.history)
        extra = episode_columns(res, version, used)
        score = session.score if outcome.use_agent_score else None
        if score is not None and score.get("step_metas") is not None:
            extra["step_metas"] = score["step_metas"]
        reward = None
        if s.score_source == "agent":  # every row carries the same reward keys (verl reads the first row's)
            reward, extra["reward_extra_info"] = agent_reward(outcome, score, used)
        want_logprobs = bool(sampling_params.get("logprobs"))
        return AgentLoopOutput(
            prompt_ids=list(prompt_ids[-self.rollout_config.prompt_length :]),
            response_ids=list(response_ids),
            response_mask=list(mask),
            response_logprobs=list(logprobs) if want_logprobs and logprobs is not None else None,
            reward_score=reward,
            num_turns=num_turns,
            metrics=AgentLoopMetrics(generate_sequences=res.wall_s),
            extra_fields=extra,
        )

    async def _row_tokens(self, outcome, session, task: dict) -> tuple[list[int], list[int], list[int], Any, int, Any]:
        """(prompt, response, mask, log-probs, turns, oldest weight version) of the row: the trained segment cut to
        the response length, or a placeholder: the task's prompt, one masked token, no loss."""
        if outcome.segment is not None:
            seg = truncate(outcome.segment, self.response_length)
            return seg.prompt_ids, seg.response_ids, seg.response_mask, seg.log_probs, seg.num_turns, seg.min_version
        if session.rounds:
            prompt_ids = session.rounds[0].prompt_ids
        else:
            prompt = task["prompt"]
            messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
            prompt_ids = await self.ct_build_initial_tokens(messages)
        return prompt_ids, [self.tokenizer.eos_token_id], [0], [0.0], 1, None


def episode_columns(res: EpisodeResult, version: int | None, used: ToolUse) -> dict[str, Any]:
    """The row's `agent_*` status columns: the episode, how it ended and joined, its policy version and tool use."""
    session, outcome = res.session, res.outcome
    return {
        "agent_episode_id": session.episode_id,
        "agent_status": outcome.status.value,
        "agent_rounds": len(session.rounds),
        "agent_segments": outcome.n_segments,
        # how its rounds joined (core.Drift): extended / split by reason / tool-call faults, as JSON
        "agent_drift": json.dumps(session.drift.as_dict(), sort_keys=True),
        "agent_wall_s": res.wall_s,
        # oldest weight version that sampled the trained tokens; the trainer turns it into staleness (-1: unknown)
        "agent_policy_version": -1 if version is None else int(version),
        # its well-formed tool calls, and whether a tool's result reached its final answer (`tool_use`)
        "agent_tool_calls": used.calls,
        "agent_tool_result_in_answer": int(used.result_in_answer),
        # each round's request as the policy saw it and its reply (core.Session.turns), as JSON: where the
        # Composer's tool-error sites and turn replay read the episode (composer/agent_trace.py)
        "agent_turns": json.dumps(session.turns),
    }


def agent_reward(outcome: Outcome, score: dict[str, Any] | None, used: ToolUse) -> tuple[float, dict[str, float]]:
    """Under `score_source=agent`: the row's reward (the agent's posted score; 0 for a dropped episode) and its
    reward keys, the tool-use flags among them (verl's validation reports them per data source)."""
    ok = outcome.status is Status.OK
    reward = score["score"] if ok else 0.0
    return reward, {
        "score": reward,
        "acc": score["acc"] if ok else 0.0,
        "tool_call": float(used.calls > 0),
        "tool_result_in_answer": float(used.result_in_answer),
    }
