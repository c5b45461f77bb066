"""A test agent for the launch modes' isolation (tests/agent/test_fork_launch.py): its behaviour is the task's
`extra_info.behavior`, and it writes what it saw to the JSON file `extra_info.report` before acting.

Every behaviour reports: its pid, process group and session, the session variables it read, Python's and numpy's
first random numbers, and what earlier episodes may have left behind (this script's global `COUNTER`, an attribute
set on the preloaded `urllib.request` module, the environment variable `LEAKED`). Then it leaves traces of its own
(all three) and:

    ok          one chat round through the openai client, then posts a score
    crash       raises (exit code 1, the traceback on stderr)
    exit3       exits with code 3 by sys.exit
    hang        one chat round, then sleeps an hour (the episode times out)
    grandchild  starts a grandchild that ignores SIGTERM and sleeps an hour (its pid in the report, sharing this
                agent's stderr), then plays as `ok` and exits 0
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import urllib.request

import numpy
from openai import OpenAI

from verl_ext.agent.examples.score import post_score, task

COUNTER = 0


def chat(client) -> str:
    messages = [{"role": "user", "content": "Say ok."}]
    return client.chat.completions.create(model="policy", messages=messages, max_tokens=8).choices[0].message.content


def main() -> None:
    global COUNTER
    t = task()
    info = t["extra_info"]
    behavior = info["behavior"]
    report = {
        "pid": os.getpid(),
        "pgid": os.getpgid(0),
        "sid": os.getsid(0),
        "argv": sys.argv,
        "name": __name__,
        "base_url": os.environ["OPENAI_BASE_URL"],
        "episode_id": os.environ["AGENT_EPISODE_ID"],
        "task": t,
        "counter": COUNTER,
        "module_attr": getattr(urllib.request, "LEAKED_BY_EPISODE", None),
        "env_leak": os.environ.get("LEAKED"),
        "random": random.random(),
        "numpy_random": float(numpy.random.random()),
    }
    COUNTER += 1
    urllib.request.LEAKED_BY_EPISODE = report["episode_id"]
    os.environ["LEAKED"] = report["episode_id"]
    if behavior == "grandchild":
        code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)"
        report["grandchild"] = subprocess.Popen([sys.executable, "-c", code]).pid
    with open(info["report"], "w") as f:
        json.dump(report, f)
    if behavior == "crash":
        raise RuntimeError(f"boom in {report['episode_id']}")
    if behavior == "exit3":
        sys.exit(3)
    client = OpenAI(max_retries=20)
    reply = chat(client)
    if behavior == "hang":
        time.sleep(3600)
    post_score(1.0 if reply else 0.0)


if __name__ == "__main__":
    main()
