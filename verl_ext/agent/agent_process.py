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

plus `external_agent.env`. The agent runs in its own session and process group: when it exits, times out or the
episode is cancelled (shutdown), the group is killed, so nothing it started outlives its episode.

How it is started (`external_agent.launch`): `fork` (default) forks it from a fork server that imported the agent's
libraries once (`verl_ext.agent.fork_launch`, `verl_ext.agent.forkserver`), falling back to a process per episode
where fork cannot apply; `process` starts `external_agent.command` as a new process per episode (`run_agent`).

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
from verl_ext.agent.fork_launch import LAUNCHERS
from verl_ext.agent.forkserver import STDERR_GRACE_S, STDERR_TAIL
from verl_ext.agent.gateway.core import Session
from verl_ext.agent.gateway.server import Gateway
from verl_ext.agent.settings import AgentSettings


async def run_agent(command: tuple[str, ...], env: dict[str, str], timeout_s: float) -> tuple[int | None, bool, str]:
    """Run the agent as a new process to completion or timeout: (exit code or None, timed out, last 2 kB of its
    stderr). The episode ends when the agent exits; then its process group is killed (whatever it left running)."""
    # stderr through a pipe of our own, not asyncio's: asyncio's `wait()` also waits for its pipes to close, which a
    # grandchild holding stderr would delay to the timeout
    r, w = os.pipe()
    try:
        proc = await asyncio.create_subprocess_exec(
            *command,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=w,
            start_new_session=True,  # its own group: a timeout kills its children too
        )
    except BaseException:
        os.close(r)
        raise
    finally:
        os.close(w)
    stream = asyncio.StreamReader()
    transport, _ = await asyncio.get_running_loop().connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(stream), os.fdopen(r, "rb", buffering=0)
    )
    tail = bytearray()

    async def read_stderr():
        while chunk := await stream.read(1 << 16):
            tail.extend(chunk)
            del tail[:-STDERR_TAIL]

    reader = asyncio.create_task(read_stderr())
    timed_out = False
    try:
        await asyncio.wait_for(proc.wait(), timeout_s)
    except TimeoutError:
        timed_out = True
    finally:  # also on cancellation (shutdown): never leave an agent, or anything it started, running
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if proc.returncode is None:
            await proc.wait()
        # the group is dead, so the pipe closes at once (unless a process that left the group holds it)
        await asyncio.wait([reader], timeout=STDERR_GRACE_S)
        reader.cancel()
        transport.close()
    if timed_out:
        return None, True, ""
    return proc.returncode, False, tail.decode(errors="replace")[-STDERR_TAIL:]


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
            env = agent_env(settings, gateway, eid, task)
            ran = None
            if settings.launch == "fork":  # None: this command (or this episode) runs as a process
                ran = await LAUNCHERS.get(settings.command, settings.env).run(env, settings.timeout_s)
            exit_code, timed_out, stderr = ran or await run_agent(settings.command, env, settings.timeout_s)
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
