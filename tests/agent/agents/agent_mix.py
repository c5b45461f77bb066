"""Test runner: one agent command for a run whose tasks are played by different agents. It starts the agent named
by the task's `extra_info.agent` (an unmodified example module, or a test agent in this directory), so one
end-to-end run trains episodes of every agent (each task's group is one agent's)."""

from __future__ import annotations

import json
import os
import runpy
from pathlib import Path

MODULES = {
    "openai_agents_sdk": "verl_ext.agent.examples.agents_sdk_calc",
    "langgraph_react": "verl_ext.agent.examples.langgraph_calc",
    "guess": "verl_ext.agent.examples.guess_agent",
    "calc": "verl_ext.agent.examples.calc_agent",
}
TEST_AGENTS = {"stop_copy": Path(__file__).with_name("stop_copy.py")}

if __name__ == "__main__":
    agent = json.loads(os.environ["AGENT_TASK"])["extra_info"]["agent"]
    if agent in TEST_AGENTS:
        runpy.run_path(str(TEST_AGENTS[agent]), run_name="__main__")
    else:
        runpy.run_module(MODULES[agent], run_name="__main__")
