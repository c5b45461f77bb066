"""A real multi-node Ray cluster on one machine: a head and worker nodes, each a separate `ray start --block` process
with its own CPU and (pretend) GPU resources, for tests and for trying cluster jobs without a cluster.

    with LocalCluster(num_nodes=2, cpus_per_node=4, gpus_per_node=1, temp_dir="/tmp/vxc") as c:
        c.dashboard_url   # http://127.0.0.1:<port>: Ray's job submission and state API
        c.kill_node(1)    # SIGKILL a worker node's whole process group: what a lost machine looks like to Ray

Every node is a separate raylet (own node id, own temp dir `<temp_dir>/n<i>`) in its own process group, so killing
one takes its raylet, object store and every worker process on it, and nothing else. Every port a node listens on
(the GCS, dashboard, node manager, object manager, dashboard agent, metrics, runtime-env agent and client server) is
set explicitly from a `PortPool`, so the nodes can share 127.0.0.1 with each other and with other Ray sessions on
the machine: ports left to Ray come from the kernel's ephemeral range, and a port picked by binding port 0 and
releasing it came from there too, so two picks (or a pick and one of Ray's own) could meet ("Ray component
dashboard_agent_http is trying to use a port number ... that is used by other components"). The nodes' PATH starts
with this Python's bin directory, so a job's `python` is this environment's.

The cluster keeps its session files under `temp_dir` and not under /tmp/ray: Ray's `ray.init()` without an address
connects to the cluster whose address is in `<default temp dir>/ray_current_cluster`, so a cluster started with the
default temp dir would capture every unrelated local run on the machine (and they would fail: they pass num_cpus).
Keep `temp_dir` short: Ray's socket paths must stay under 107 bytes.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Self

# Ray's workers bind ports 10002-19999 by default (`--min-worker-port`, `--max-worker-port`); the kernel's ephemeral
# range (/proc/sys/net/ipv4/ip_local_port_range, 32768-60999 on Linux) serves every port 0 bind. A node's fixed
# ports come from between the two, where nothing on the machine is handed a port it did not ask for.
PORT_RANGE = (20000, 32768)


def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


class PortPool:
    """Distinct free ports for one cluster's nodes: never one given out twice, never one in the kernel's ephemeral
    range (where Ray's own port-0 binds land) or in Ray's worker range. Each port is checked free by binding it; the
    scan starts at a random offset, so two clusters started side by side rarely probe the same ports."""

    def __init__(self, lo: int = PORT_RANGE[0], hi: int = PORT_RANGE[1], seed: int | None = None):
        eph_lo, eph_hi = _ephemeral_range()
        self.candidates = [p for p in range(lo, hi) if not eph_lo <= p <= eph_hi]
        if not self.candidates:
            raise ValueError(f"no port in [{lo}, {hi}) lies outside the ephemeral range [{eph_lo}, {eph_hi}]")
        self._next = random.Random(seed).randrange(len(self.candidates))
        self.given: set[int] = set()

    def take(self) -> int:
        for _ in range(len(self.candidates)):
            port = self.candidates[self._next]
            self._next = (self._next + 1) % len(self.candidates)
            if port not in self.given and _bindable(port):
                self.given.add(port)
                return port
        raise RuntimeError(f"no free port left in {len(self.candidates)} candidates")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# the ports every node listens on besides the head's GCS, dashboard and client server (`ray start --help`)
NODE_PORT_FLAGS = (
    "node-manager-port",
    "object-manager-port",
    "dashboard-agent-listen-port",
    "dashboard-agent-grpc-port",
    "metrics-export-port",
    "runtime-env-agent-port",
)


@dataclass
class NodeProcess:
    index: int
    proc: subprocess.Popen
    log_path: Path

    def alive(self) -> bool:
        return self.proc.poll() is None


class LocalCluster:
    def __init__(
        self,
        num_nodes: int = 2,
        cpus_per_node: int = 4,
        gpus_per_node: int = 1,
        temp_dir: str | Path = "/tmp/vxc",
        env: dict[str, str] | None = None,
        resources: dict[str, float] | None = None,
        start_timeout_s: float = 120.0,
    ):
        if num_nodes < 1:
            raise ValueError(f"num_nodes must be >= 1, got {num_nodes}")
        if len(str(temp_dir)) > 40:
            raise ValueError(f"temp_dir {temp_dir!r} is too long for Ray's socket paths (keep it under 40 characters)")
        self.num_nodes, self.cpus, self.gpus = num_nodes, cpus_per_node, gpus_per_node
        self.temp_dir = Path(temp_dir)
        self.env = {**os.environ, **(env or {})}
        self.env.pop("RAY_ADDRESS", None)
        self.env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{self.env.get('PATH', '')}"
        # Ray (>= 2.5x) turns token auth on for `ray start` whenever a token file exists in ~/.ray, while clients
        # without RAY_AUTH_MODE send none: a cluster bound to 127.0.0.1 says explicitly that it has no auth.
        self.env.setdefault("RAY_AUTH_MODE", "disabled")
        self.resources = dict(resources or {})
        self.start_timeout_s = start_timeout_s
        self.ports = PortPool()
        self.gcs_port = self.ports.take()
        self.dashboard_port = self.ports.take()
        self.nodes: list[NodeProcess] = []

    @property
    def gcs_address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def _ray(self) -> str:
        ray_bin = Path(sys.executable).with_name("ray")
        return str(ray_bin) if ray_bin.exists() else "ray"

    def _node_command(self, index: int) -> list[str]:
        """`ray start` for node `index` (0: the head), every port it listens on taken from the pool."""
        cmd = [
            self._ray(),
            "start",
            "--block",
            "--disable-usage-stats",
            "--node-ip-address=127.0.0.1",
            f"--num-cpus={self.cpus}",
            f"--num-gpus={self.gpus}",
            f"--temp-dir={self.temp_dir / f'n{index}'}",
            *(f"--{flag}={self.ports.take()}" for flag in NODE_PORT_FLAGS),
        ]
        if self.resources:
            cmd.append(f"--resources={json.dumps(self.resources)}")
        if index == 0:
            cmd += [
                "--head",
                f"--port={self.gcs_port}",
                "--include-dashboard=true",
                "--dashboard-host=127.0.0.1",
                f"--dashboard-port={self.dashboard_port}",
                f"--ray-client-server-port={self.ports.take()}",
            ]
        else:
            cmd += [f"--address={self.gcs_address}"]
        return cmd

    def _start_node(self, index: int) -> NodeProcess:
        cmd = self._node_command(index)
        log_path = self.temp_dir / f"node{index}.log"
        with open(log_path, "a") as log:
            # Own session (process group): kill_node takes this node's raylet and workers, nothing else.
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        return NodeProcess(index, proc, log_path)

    def start(self) -> Self:
        self.temp_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.nodes.append(self._start_node(0))
            self._wait_alive(1)  # workers register with a running head
            for i in range(1, self.num_nodes):
                self.nodes.append(self._start_node(i))
            self._wait_alive(self.num_nodes)
        except BaseException:
            self.stop()
            raise
        return self

    def alive_nodes(self) -> list[dict]:
        """Ray's own view (state API through the dashboard): [{node_id, state, resources_total, ...}] of ALIVE nodes."""
        from ray.util.state import list_nodes

        nodes = list_nodes(address=self.dashboard_url, filters=[("state", "=", "ALIVE")], raise_on_missing_output=False)
        return [dict(vars(n)) for n in nodes]

    def _wait_alive(self, count: int) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        last_err: Exception | None = None
        while time.monotonic() < deadline:
            dead = [n for n in self.nodes if not n.alive()]
            if dead:
                tail = dead[0].log_path.read_text()[-3000:]
                raise RuntimeError(f"ray node {dead[0].index} exited while starting:\n{tail}")
            try:  # Ray's own client: it sends the auth token when the cluster requires one
                if len(self.alive_nodes()) >= count:
                    return
            except Exception as e:  # noqa: BLE001 -- dashboard not up yet
                last_err = e
            time.sleep(1.0)
        raise TimeoutError(f"{count} ray nodes not alive within {self.start_timeout_s} s (last error: {last_err})")

    def worker_node_ids(self) -> list[str]:
        """Ray node ids of the alive non-head nodes."""
        return [n["node_id"] for n in self.alive_nodes() if not n["is_head_node"]]

    def restart_node(self, index: int) -> None:
        """Start worker node `index` again after kill_node (a new raylet, so a new node id)."""
        if index == 0 or self.nodes[index].alive():
            raise ValueError(f"node {index} is the head or still alive")
        self.nodes[index] = self._start_node(index)
        self._wait_alive(self.num_nodes)

    def kill_node(self, index: int) -> None:
        """SIGKILL node `index`'s whole process group (raylet, object store, workers): an abrupt machine loss."""
        if index == 0:
            raise ValueError("kill_node(0) would kill the head; kill a worker node")
        node = self.nodes[index]
        with _suppress_lookup():
            os.killpg(node.proc.pid, signal.SIGKILL)
        node.proc.wait(timeout=30)

    def stop(self) -> None:
        for node in reversed(self.nodes):
            if node.alive():
                with _suppress_lookup():
                    os.killpg(node.proc.pid, signal.SIGTERM)
        for node in reversed(self.nodes):
            try:
                node.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with _suppress_lookup():
                    os.killpg(node.proc.pid, signal.SIGKILL)
                node.proc.wait(timeout=10)
        self.nodes.clear()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def cleanup(self) -> None:
        shutil.rmtree(self.temp_dir, ignore_errors=True)


class _suppress_lookup:
    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        return exc_type is ProcessLookupError
