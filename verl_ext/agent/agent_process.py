"""One episode = one run of the user's agent command against its own gateway session (no verl import: the
`external_agent` loop calls this inside verl's agent-loop worker; tests and the benchmark call it directly).

The agent gets its session through environment variables only, so an unchanged OpenAI-client program works:

    OPENAI_BASE_URL  <gateway>/s/<episode_id>/v1     (read by the openai client itself)
    OPENAI_API_KEY   the gateway's key (external_agent.api_key, or the random per-run key when unset)
    ANTHROPIC_BASE_URL <gateway>/s/<episode_id>     (read by the anthropic client, which appends /v1/messages)
    ANTHROPIC_API_KEY  the same key
    AGENT_SCORE_URL  <gateway>/s/<episode_id>/scores (POST {"score": float, "acc"?: float, "step_metas"?: [...]})
    AGENT_EPISODE_ID <episode_id>
    AGENT_TASK       the dataset row as JSON: {"prompt", "reward_model", "extra_info", "data_source"}

plus `external_agent.env`. The process runs in its own process group: a timeout (or shutdown) kills the agent and
any children it started.

Pool mode (`external_agent.launch=pool`): no process per episode; long-running agent workers (started by the user,
any number) poll `GET <gateway>/tasks/next` and get `{"episode_id", "task", "base_url", "score_url"}`; the episode
ends when its score is posted, or is dropped as `timeout` after `timeout_s`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from dataclasses import dataclass
from typing import Any

from verl_ext.agent.episode import Outcome, decide
from verl_ext.agent.gateway.core import Session
from verl_ext.agent.gateway.server import Gateway
from verl_ext.agent.settings import AgentSettings


async def run_agent(command: tuple[str, ...], env: dict[str, str], timeout_s: float) -> tuple[int | None, bool, str]:
    """Run the agent to completion or timeout: (exit code or None, timed out, last 2 kB of its stderr)."""
    proc = await asyncio.create_subprocess_exec(
        *command,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # its own group: a timeout kills its children too
    )
    try:
        _, err = await asyncio.wait_for(proc.communicate(), timeout_s)
        return proc.returncode, False, err.decode(errors="replace")[-2048:]
    except TimeoutError:
        return proc.returncode, True, ""
    finally:  # also on cancellation (shutdown): never leave an agent running
        if proc.returncode is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            await proc.wait()


async def wait_for_pool_worker(gateway: Gateway, session: Session, task: dict[str, Any], timeout_s: float):
    """Pool mode: offer the episode on `GET /tasks/next`; it ends when a worker posts its score, or times out
    (no worker took it, or the worker died or hung: the pool gives no exit code). Returns as `run_agent`."""
    gateway.offer_task(session.episode_id, task)
    try:
        await asyncio.wait_for(session.scored.wait(), timeout_s)
        return 0, False, ""
    except TimeoutError:
        return None, True, ""


def agent_env(settings: AgentSettings, gateway: Gateway, episode_id: str, task: dict[str, Any]) -> dict[str, str]:
    url = gateway.session_url(episode_id)
    return {
        **os.environ,
        **settings.env,
        "OPENAI_BASE_URL": f"{url}/v1",
        "OPENAI_API_KEY": gateway.api_key or "",
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": gateway.api_key or "",
        "AGENT_SCORE_URL": f"{url}/scores",
        "AGENT_EPISODE_ID": episode_id,
        "AGENT_TASK": json.dumps(task),
    }


@dataclass
class EpisodeResult:
    session: Session  # its rounds and posted score
    outcome: Outcome
    exit_code: int | None
    timed_out: bool
    stderr: str
    wall_s: float


async def run_episode(
    gateway: Gateway,
    settings: AgentSettings,
    task: dict[str, Any],
    sampling_params: dict[str, Any],
    episode_id: str | None = None,
) -> EpisodeResult:
    """Open a session, run the agent on `task`, close the session (later requests get 404) and decide the status."""
    session = gateway.open_session(sampling_params, episode_id)
    eid = session.episode_id
    t0 = time.monotonic()
    try:
        if settings.launch == "pool":
            exit_code, timed_out, stderr = await wait_for_pool_worker(gateway, session, task, settings.timeout_s)
        else:
            exit_code, timed_out, stderr = await run_agent(
                settings.command, agent_env(settings, gateway, eid, task), settings.timeout_s
            )
    finally:
        session = gateway.close_session(eid)
    outcome = decide(
        session.rounds,
        exit_code=exit_code,
        timed_out=timed_out,
        score_posted=session.score is not None,
        on_rewrite=settings.on_rewrite,
        score_source=settings.score_source,
    )
    return EpisodeResult(session, outcome, exit_code, timed_out, stderr, time.monotonic() - t0)
