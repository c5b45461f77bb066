"""The local cluster's port choice (no Ray: the cluster itself is in test_e2e_multinode.py)."""

from __future__ import annotations

import socket

import pytest

from verl_ext.launch import local_cluster
from verl_ext.launch.local_cluster import NODE_PORT_FLAGS, LocalCluster, PortPool


def test_ports_are_distinct_and_outside_the_ranges_ray_and_the_kernel_pick_from():
    eph_lo, eph_hi = local_cluster._ephemeral_range()
    pool = PortPool(seed=0)
    ports = [pool.take() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(local_cluster.PORT_RANGE[0] <= p < local_cluster.PORT_RANGE[1] for p in ports)
    assert not [p for p in ports if eph_lo <= p <= eph_hi]
    assert not [p for p in ports if 10002 <= p <= 19999], "Ray's worker ports"


def test_a_port_in_use_is_skipped():
    pool = PortPool(seed=1)
    first = pool.candidates[pool._next]
    with socket.socket() as s:
        s.bind(("127.0.0.1", first))
        s.listen()
        assert pool.take() != first


def test_an_exhausted_pool_says_so():
    pool = PortPool(lo=21000, hi=21003, seed=0)
    taken = {pool.take() for _ in range(3)}
    assert taken == {21000, 21001, 21002}
    with pytest.raises(RuntimeError, match="no free port left in 3 candidates"):
        pool.take()


def test_every_port_a_node_listens_on_is_set():
    """Each node's command line fixes every port flag `ray start` has (none left to Ray's own random pick), and no
    two nodes or flags share one."""
    c = LocalCluster(num_nodes=2, temp_dir="/tmp/vxc-ports")  # nothing is started or written
    cmds = [c._node_command(index) for index in (0, 1)]
    ports = []
    for index, cmd in enumerate(cmds):
        pairs = [a[2:].split("=", 1) for a in cmd if a.startswith("--") and "=" in a]
        flags = {k: int(v) for k, v in pairs if k.endswith("port")}
        assert set(NODE_PORT_FLAGS) <= set(flags), cmd
        if index == 0:
            assert {"port", "dashboard-port", "ray-client-server-port"} <= set(flags)
        ports += flags.values()
    assert len(ports) == len(set(ports)), ports
