"""Episode launch modes (`external_agent.launch`): `fork` (a fork server per event loop forks each episode) and
`process` (a new process per episode) give the same guarantees. Real agent programs (tests/agent/agents/
isolation_agent.py) run through `agent_process.run_episode` against the project's gateway on 127.0.0.1 (scripted
rollout): a crash, a hang and a grandchild end only their own episode and leave nothing running; no module global,
module attribute or environment change survives into the next episode; each episode reads its own session
variables; a killed fork server is restarted; a command that cannot be forked runs as a process, the reason logged
once."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.agent.conftest import SAMPLING
from verl_ext.agent.agent_process import run_episode
from verl_ext.agent.fork_launch import LAUNCHERS, ForkPlan, fork_plan, unsafe_preload
from verl_ext.agent.forkserver import exit_code, top_level_imports
from verl_ext.agent.settings import AgentSettings

AGENT = str(Path(__file__).parent / "agents" / "isolation_agent.py")
MODES = ["fork", "process"]
# an agent process (python + the openai client) starts in ~1 s on an idle machine, many times that on a loaded one
TIMEOUT_S = 60.0


@pytest.fixture
def gw(scripted_gateway):
    gateway, _ = scripted_gateway(lambda prompt: "ok")
    return gateway


@pytest.fixture
def launchers(loop_thread):
    yield LAUNCHERS
    loop_thread.run(LAUNCHERS.aclose())


def settings(launch: str, command=None, **kw) -> AgentSettings:
    block = {"command": command or [sys.executable, AGENT], "launch": launch, "api_key": "k", "timeout_s": TIMEOUT_S}
    return AgentSettings.from_mapping({**block, **kw})


def make_task(behavior: str, report: Path) -> dict:
    return {
        "prompt": [{"role": "user", "content": "Say ok."}],
        "reward_model": {"ground_truth": "ok"},
        "extra_info": {"behavior": behavior, "report": str(report)},
        "data_source": "test",
    }


def episode(loop_thread, gw, s: AgentSettings, behavior: str, report: Path):
    res = loop_thread.run(run_episode(gw, s, make_task(behavior, report), SAMPLING))
    return res, (json.loads(report.read_text()) if report.exists() else None)


def gone(pid: int, within_s: float = 10.0) -> bool:
    """The process no longer runs (exited: reaped or a zombie), waiting up to `within_s` for it."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def launcher_of(loop_thread, s: AgentSettings):
    async def get():
        return LAUNCHERS.get(s.command, s.env)

    return loop_thread.run(get())


# ---- pure parts ----


def test_fork_plan_forks_python_scripts_and_modules_only(tmp_path):
    script = tmp_path / "a.py"
    script.write_text("")
    py = sys.executable
    assert fork_plan((py, str(script), "x")) == ForkPlan(py, "script", str(script), ("x",))
    assert fork_plan(("python3.11", "-m", "pkg.mod", "-v")) == ForkPlan("python3.11", "module", "pkg.mod", ("-v",))
    for command, why in [
        (("/bin/sh", str(script)), "is not a Python interpreter"),
        (("node", "agent.js"), "is not a Python interpreter"),
        ((py, "-u", str(script)), "interpreter option '-u'"),
        ((py, "-c", "pass"), "interpreter option '-c'"),
        ((py,), "no script"),
        ((py, "-m"), "-m without a module"),
        ((py, str(tmp_path / "missing.py")), "is not a file"),
    ]:
        assert why in fork_plan(command), command
    assert "Linux only" in fork_plan((py, str(script)), platform="darwin")


def test_fork_is_the_default_launch():
    from verl_ext.config.errors import ConfigError

    assert AgentSettings.from_mapping({"command": [sys.executable, AGENT]}).launch == "fork"
    assert AgentSettings.from_mapping({"command": [sys.executable, AGENT], "launch": "process"}).launch == "process"
    with pytest.raises(ConfigError, match=r"external_agent.launch must be one of \['fork', 'process', 'pool'\]"):
        AgentSettings.from_mapping({"command": [sys.executable, AGENT], "launch": "forkserver"})


def test_top_level_imports_and_exit_codes():
    src = (
        "from __future__ import annotations\nimport os, a.b\nfrom c import d, e\nfrom . import rel\n"
        "try:\n    import f\nexcept ImportError:\n    f = None\n"
        "def main():\n    import inner\nif True:\n    import cond\n"
    )
    assert top_level_imports(src) == ["os", "a.b", "c", "c.d", "c.e", "f"]
    assert [exit_code(c) for c in (None, 0, 3, 256 + 4)] == [0, 0, 3, 4]
    assert exit_code("a message") == 1
    ok = {"threads": [], "session_env_reads": []}
    assert unsafe_preload(ok) is None
    assert "threads" in unsafe_preload({**ok, "threads": ["t1"]})
    assert "OPENAI_BASE_URL" in unsafe_preload({**ok, "session_env_reads": ["OPENAI_BASE_URL"]})


# ---- episodes through the gateway ----


@pytest.mark.parametrize("launch", MODES)
def test_each_episode_gets_its_session_and_nothing_leaks(launch, loop_thread, gw, launchers, tmp_path):
    s = settings(launch)
    env_before = dict(os.environ)
    reports = []
    for i in range(3):
        res, rep = episode(loop_thread, gw, s, "ok", tmp_path / f"r{i}.json")
        assert res.outcome.status.value == "ok", res.stderr
        eid = res.session.episode_id
        assert rep["episode_id"] == eid and rep["base_url"] == f"{gw.session_url(eid)}/v1"
        assert rep["task"] == make_task("ok", tmp_path / f"r{i}.json")
        assert rep["argv"] == [AGENT] and rep["name"] == "__main__"
        assert rep["pgid"] == rep["sid"] == rep["pid"]  # its own session and process group
        # what the previous episode left (a global, an attribute of a preloaded module, a variable) is not seen
        assert (rep["counter"], rep["module_attr"], rep["env_leak"]) == (0, None, None)
        assert gone(rep["pid"])
        reports.append(rep)
    assert len({r["random"] for r in reports}) == len({r["numpy_random"] for r in reports}) == 3
    assert dict(os.environ) == env_before
    launcher = launcher_of(loop_thread, s)
    if launch == "fork":  # all three were forked by one server, which is still up
        assert launcher.fallback is None and launcher.starts == 1 and not launcher.server.dead
        assert "openai" in launcher.server.hello["preloaded"] and "numpy" in launcher.server.hello["preloaded"]
    else:
        assert launcher.server is None and launcher.starts == 0  # never started: process mode


@pytest.mark.parametrize("launch", MODES)
def test_a_crash_ends_only_its_episode(launch, loop_thread, gw, launchers, tmp_path):
    s = settings(launch)

    async def three():
        return await asyncio.gather(
            *[run_episode(gw, s, make_task(b, tmp_path / f"{b}.json"), SAMPLING) for b in ("crash", "exit3", "ok")]
        )

    crash, exit3, ok = loop_thread.run(three())
    assert crash.outcome.status.value == "crashed" and crash.exit_code == 1
    assert f"RuntimeError: boom in {crash.session.episode_id}" in crash.stderr
    assert exit3.outcome.status.value == "crashed" and exit3.exit_code == 3
    assert ok.outcome.status.value == "ok" and ok.exit_code == 0
    assert gw.sessions == {}


@pytest.mark.parametrize("launch", MODES)
def test_a_hang_times_out_and_its_group_is_killed(launch, loop_thread, gw, launchers, tmp_path):
    # a forked episode's clock starts at the fork (the server imported the agent's libraries before); a process's
    # includes its interpreter's start (2-3 s idle, over 10 s on a loaded machine)
    timeout_s = 8.0 if launch == "fork" else 15.0
    s = settings(launch, timeout_s=timeout_s)
    res, rep = episode(loop_thread, gw, s, "hang", tmp_path / "hang.json")
    assert res.outcome.status.value == "timeout" and res.timed_out and res.exit_code is None
    assert res.wall_s < timeout_s + 5.0
    assert rep is not None and len(res.session.rounds) == 1  # it did start, played a round, then hung
    assert gone(rep["pid"], within_s=1.0)
    assert not [p for p in psutil.process_iter(["pid"]) if _pgid(p.pid) == rep["pgid"]]


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


@pytest.mark.parametrize("launch", MODES)
def test_a_grandchild_ignoring_sigterm_is_killed_when_the_episode_ends(launch, loop_thread, gw, launchers, tmp_path):
    s = settings(launch)
    res, rep = episode(loop_thread, gw, s, "grandchild", tmp_path / "g.json")
    assert res.outcome.status.value == "ok", res.stderr
    # the grandchild holds the agent's stderr open: the episode still ends when the agent exits, not at the timeout
    assert res.wall_s < TIMEOUT_S / 2
    assert gone(rep["grandchild"], within_s=5.0)


def test_a_killed_fork_server_is_restarted(loop_thread, gw, launchers, tmp_path):
    s = settings("fork")
    res, _ = episode(loop_thread, gw, s, "ok", tmp_path / "a.json")
    assert res.outcome.status.value == "ok"
    launcher = launcher_of(loop_thread, s)
    first = launcher.server.pid
    os.kill(first, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while not launcher.server.dead and time.monotonic() < deadline:
        time.sleep(0.05)
    assert launcher.server.dead and "died" in launcher.server.dead
    res, _ = episode(loop_thread, gw, s, "ok", tmp_path / "b.json")
    assert res.outcome.status.value == "ok", res.stderr
    assert launcher.server.pid != first and launcher.starts == 2 and launcher.fallback is None


def test_an_episode_running_when_the_fork_server_dies_fails_by_name(loop_thread, gw, launchers, tmp_path):
    s = settings("fork")
    report = tmp_path / "hang.json"
    fut = asyncio.run_coroutine_threadsafe(run_episode(gw, s, make_task("hang", report), SAMPLING), loop_thread.loop)
    deadline = time.monotonic() + TIMEOUT_S
    while not report.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    rep = json.loads(report.read_text())
    os.kill(launcher_of(loop_thread, s).server.pid, signal.SIGKILL)
    res = fut.result(30)
    assert res.outcome.status.value == "crashed" and res.exit_code is None and not res.timed_out
    assert "fork server" in res.stderr and "died" in res.stderr
    assert gone(rep["pid"], within_s=5.0)  # the orphaned episode's group was killed from the worker
    res, _ = episode(loop_thread, gw, s, "ok", tmp_path / "next.json")
    assert res.outcome.status.value == "ok"


def test_a_command_that_cannot_be_forked_runs_as_a_process_the_reason_logged_once(loop_thread, gw, launchers, caplog):
    s = settings("fork", command=["/bin/sh", "-c", 'echo "episode $AGENT_EPISODE_ID" >&2; exit 3'])
    with caplog.at_level(logging.WARNING, logger="verl_ext.agent.fork_launch"):
        results = [loop_thread.run(run_episode(gw, s, make_task("ok", Path("-")), SAMPLING)) for _ in range(2)]
    for r in results:
        assert r.outcome.status.value == "crashed" and r.exit_code == 3
        assert f"episode {r.session.episode_id}" in r.stderr
    reasons = [rec.getMessage() for rec in caplog.records if "process per episode" in rec.getMessage()]
    assert len(reasons) == 1 and "'/bin/sh' is not a Python interpreter" in reasons[0]


@pytest.mark.parametrize(
    "module_source, why",
    [
        ("import os\nURL = os.environ.get('OPENAI_BASE_URL')\n", "read OPENAI_BASE_URL while imported"),
        (
            "import threading, time\nURL = None\n"
            "threading.Thread(target=time.sleep, args=(3600,), name='poller', daemon=True).start()\n",
            "threads running (poller)",
        ),
    ],
)
def test_a_preload_unsafe_to_fork_falls_back_to_processes(
    module_source, why, loop_thread, gw, launchers, tmp_path, caplog
):
    """A library that reads a session variable at import, or starts a thread at import, is not forked: the server
    refuses its preload, and the episodes run as processes (which see the right values)."""
    lib, agent_dir = tmp_path / "lib", tmp_path / "agent"
    lib.mkdir()
    agent_dir.mkdir()
    (lib / "eagerlib.py").write_text(module_source)
    script = agent_dir / "agent.py"
    script.write_text("import sys\nimport eagerlib\nimport os\nopen(sys.argv[1], 'w').write(str(eagerlib.URL))\n")
    out = tmp_path / "out.txt"
    s = settings("fork", command=[sys.executable, str(script), str(out)], env={"PYTHONPATH": str(lib)})
    with caplog.at_level(logging.WARNING, logger="verl_ext.agent.fork_launch"):
        res, _ = episode(loop_thread, gw, s, "ok", tmp_path / "unused.json")
    assert res.exit_code == 0, res.stderr
    reasons = [rec.getMessage() for rec in caplog.records if "process per episode" in rec.getMessage()]
    assert len(reasons) == 1 and why in reasons[0]
    if "OPENAI_BASE_URL" in why:  # the process read its own episode's value
        assert out.read_text() == f"{gw.session_url(res.session.episode_id)}/v1"


def test_a_forked_episode_exits_as_the_interpreter_does(loop_thread, gw, launchers, tmp_path):
    """atexit handlers run, non-daemon threads are joined, SystemExit's message goes to stderr with code 1."""
    script = tmp_path / "exits.py"
    script.write_text(
        "import atexit, sys, threading, time\n"
        "out = sys.argv[1]\n"
        "atexit.register(lambda: open(out + '.atexit', 'w').write('ran'))\n"
        "threading.Thread(target=lambda: (time.sleep(0.5), open(out + '.thread', 'w').write('joined'))).start()\n"
        "sys.exit('leaving with a message')\n"
    )
    out = tmp_path / "o"
    s = settings("fork", command=[sys.executable, str(script), str(out)])
    res, _ = episode(loop_thread, gw, s, "ok", tmp_path / "unused.json")
    assert res.exit_code == 1 and "leaving with a message" in res.stderr
    assert Path(f"{out}.atexit").read_text() == "ran" and Path(f"{out}.thread").read_text() == "joined"
    assert launcher_of(loop_thread, s).server is not None  # it was forked, not run as a process


def test_the_preload_takes_the_agents_imports_and_leaves_its_own_code(loop_thread, tmp_path):
    """Script: the libraries it imports at top level are preloaded, its sibling module is not (it is the agent's own
    code). `-m`: the module's own top-level package is left out."""
    from verl_ext.agent.fork_launch import ForkServer

    (tmp_path / "helper.py").write_text("VALUE = 1\n")
    script = tmp_path / "agent.py"
    script.write_text("import json\nimport helper\nfrom email import message\n\ndef main():\n    import csv\n")

    async def hello(plan):
        server = await ForkServer.start(plan, dict(os.environ))
        await server.aclose()
        return server.hello

    h = loop_thread.run(hello(fork_plan((sys.executable, str(script)))))
    assert h["preloaded"] == ["json", "email", "email.message"] and h["local"] == ["helper"] and h["failed"] == {}
    h = loop_thread.run(hello(fork_plan((sys.executable, "-m", "verl_ext.agent.examples.calc_agent"))))
    assert h["preloaded"] == ["ast", "operator", "os", "re", "openai"]
    assert h["local"] == ["verl_ext.agent.examples.score"]
