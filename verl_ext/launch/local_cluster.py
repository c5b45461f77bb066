"""A real multi-node Ray cluster on one machine: a head and worker nodes, each a separate `ray start --block` process
with its own CPU and (pretend) GPU resources, for tests and for trying cluster jobs without a cluster.

    with LocalCluster(num_nodes=2, cpus_per_node=4, gpus_per_node=1, temp_dir="/tmp/vxc") as c:
        c.dashboard_url   # http://127.0.0.1:<port>: Ray's job submission and state API
        c.kill_node(1)    # SIGKILL a worker node's whole process group: what a lost machine looks like to Ray

Every node is a separate raylet (own node id, own temp dir `<temp_dir>/n<i>`) in its own process group, so killing
one takes its raylet, object store and every worker process on it, and nothing else. Ports that Ray fixes by default
on a host (the dashboard agent's, the Ray client server's, ...) are picked free per node, so the nodes can share
127.0.0.1 with each other and with other Ray sessions on the machine. The nodes' PATH starts with this Python's bin
directory, so a job's `python` is this environment's.

The cluster keeps its session files under `temp_dir` and not under /tmp/ray: Ray's `ray.init()` without an address
connects to the cluster whose address is in `<default temp dir>/ray_current_cluster`, so a cluster started with the
default temp dir would capture every unrelated local run on the machine (and they would fail: they pass num_cpus).
Keep `temp_dir` short: Ray's socket paths must stay under 107 bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Self


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
        self.gcs_port = free_port()
        self.dashboard_port = free_port()
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

    def _start_node(self, index: int) -> NodeProcess:
        cmd = [
            self._ray(),
            "start",
            "--block",
            "--disable-usage-stats",
            "--node-ip-address=127.0.0.1",
            f"--num-cpus={self.cpus}",
            f"--num-gpus={self.gpus}",
            f"--temp-dir={self.temp_dir / f'n{index}'}",
            f"--dashboard-agent-listen-port={free_port()}",
            f"--metrics-export-port={free_port()}",
            f"--runtime-env-agent-port={free_port()}",
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
                f"--ray-client-server-port={free_port()}",
            ]
        else:
            cmd += [f"--address={self.gcs_address}"]
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
