"""Test runner: one agent command for a run whose tasks are played by different framework agents. It starts the
agent named by the task's `extra_info.framework` (the unmodified example modules), so one end-to-end run trains
episodes of every framework (each task's group is one framework's)."""

from __future__ import annotations

import json
import os
import runpy

AGENTS = {
    "openai_agents_sdk": "verl_ext.agent.examples.agents_sdk_calc",
    "langgraph_react": "verl_ext.agent.examples.langgraph_calc",
}

if __name__ == "__main__":
    framework = json.loads(os.environ["AGENT_TASK"])["extra_info"]["framework"]
    runpy.run_module(AGENTS[framework], run_name="__main__")
