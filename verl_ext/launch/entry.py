"""The entrypoint of a cluster job (runs on the head node, in the job's working directory; the client builds its
command line, see job.py):

    python -m verl_ext.launch.entry --run-dir /shared/runs/x --module recipe.fast_dapo.main -- <hydra overrides>

1. Runs `python -m <module> <overrides> hydra.run.dir=<run-dir>/hydra` as a child process (its Ray driver joins the
   cluster through the RAY_ADDRESS the job supervisor sets).
2. Watches the cluster's nodes while it runs. When a node that was alive at the start dies, the job must not hang:
   verl's collective calls (gloo/NCCL) can wait on the lost rank long after Ray has marked the node dead. The watch
   prints which node was lost (id, IP, Ray's death reason), gives the run `--lost-node-grace-s` to fail by itself,
   then stops it and exits 3 with a message naming the node. The time to fail is bounded by Ray's health check
   (~15 s by default) plus that grace. A run that fails by itself first (a worker actor on the node died) is still
   attributed to the node if Ray declares it dead within `--lost-node-settle-s`.
3. Writes the resolved config to <run-dir>/config.yaml and prints the run's small outputs (metrics.jsonl, plots,
   config) into the log for the client to collect (artifacts.py), whether the run succeeded or not.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from verl_ext.launch import artifacts

# after a node is lost, how long the run may go on before it is stopped (default of every launch entry point)
LOST_NODE_GRACE_S = 30.0

LOST_NODE_EXIT = 3  # our exit code when the watch stopped the run (distinct from the recipe's own failures)


class NodeWatch(threading.Thread):
    """Polls Ray's state API for nodes that were ALIVE when the watch started and are DEAD now."""

    def __init__(self, on_lost, period_s: float = 2.0):
        super().__init__(daemon=True, name="verl-ext-node-watch")
        self.on_lost, self.period_s = on_lost, period_s
        self._halt = threading.Event()
        self.initial: dict[str, str] = {}

    @staticmethod
    def _nodes() -> list:
        from ray.util.state import list_nodes

        return list_nodes(raise_on_missing_output=False, timeout=10)

    def run(self) -> None:
        try:
            self.initial = {n.node_id: n.node_ip for n in self._nodes() if n.state == "ALIVE"}
        except Exception as e:  # noqa: BLE001 -- no state API: run unwatched rather than not at all
            print(f"[verl_ext.launch] node watch disabled: {e}", flush=True)
            return
        print(f"[verl_ext.launch] watching {len(self.initial)} nodes: {sorted(self.initial)}", flush=True)
        while not self._halt.wait(self.period_s):
            try:
                nodes = self._nodes()
            except Exception:  # noqa: BLE001, S112 -- a transient state-API error is not a lost node
                continue
            dead = [n for n in nodes if n.node_id in self.initial and n.state == "DEAD"]
            if dead:
                self.on_lost(dead)
                return

    def stop(self) -> None:
        self._halt.set()


def describe_lost(nodes) -> str:
    parts = []
    for n in nodes:
        reason = getattr(n, "state_message", None) or "no reason recorded"
        parts.append(f"node {n.node_id} ({n.node_ip}) died: {reason}")
    return "; ".join(parts)


def write_resolved_config(run_dir: Path) -> Path | None:
    """<run-dir>/config.yaml from Hydra's composed config, interpolations resolved where they can be."""
    from omegaconf import OmegaConf

    from verl_ext.trainer.launch import register_lazy_resolvers

    src = run_dir / "hydra" / ".hydra" / "config.yaml"
    if not src.exists():
        return None
    cfg = OmegaConf.load(src)
    register_lazy_resolvers()
    try:
        OmegaConf.resolve(cfg)
    except Exception as e:  # noqa: BLE001 -- e.g. an env var only workers have: keep the composed form
        print(f"[verl_ext.launch] config kept unresolved: {e}", flush=True)
    out = run_dir / "config.yaml"
    out.write_text(OmegaConf.to_yaml(cfg))
    return out


def collect_files(run_dir: Path, jsonl: Path | None) -> dict[str, Path]:
    files = {p.name: p for p in sorted(run_dir.glob("*.png"))}
    for name in ("config.yaml",):
        files[name] = run_dir / name
    files["overrides.yaml"] = run_dir / "hydra" / ".hydra" / "overrides.yaml"
    jsonl = jsonl or run_dir / artifacts.METRICS_FILE
    files[artifacts.METRICS_FILE] = jsonl
    files.update({p.name: p for p in sorted(jsonl.parent.glob(f"{jsonl.stem}*.png"))})
    return files


def _parser() -> argparse.ArgumentParser:
    """The entrypoint's command line (job.py builds it)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run-dir", required=True, type=Path)
    p.add_argument("--module", required=True, help="python -m <module>, e.g. recipe.fast_dapo.main")
    p.add_argument("--jsonl", type=Path, default=None, help="the run's metrics.jsonl (default <run-dir>/metrics.jsonl)")
    p.add_argument("--lost-node-grace-s", type=float, default=LOST_NODE_GRACE_S)
    p.add_argument(
        "--lost-node-settle-s",
        type=float,
        default=20.0,
        help="after a failed run, how long to watch for a node being declared dead",
    )
    p.add_argument("overrides", nargs="*")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    args.run_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", args.module, *args.overrides, f"hydra.run.dir={args.run_dir / 'hydra'}"]
    print(f"[verl_ext.launch] run: {' '.join(cmd)}", flush=True)
    # Same process group as this process: `ray job stop` signals the group, so the run goes down with the job.
    child = subprocess.Popen(cmd)
    signal.signal(signal.SIGTERM, lambda *_: (_stop_child(child), sys.exit(143)))
    lost: list[str] = []

    def on_lost(nodes) -> None:
        msg = describe_lost(nodes)
        lost.append(msg)
        print(
            f"[verl_ext.launch] LOST NODE: {msg}; the run has {args.lost_node_grace_s:.0f} s to fail by itself",
            flush=True,
        )
        deadline = time.monotonic() + args.lost_node_grace_s
        while child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        if child.poll() is None:
            print("[verl_ext.launch] the run did not stop by itself; stopping it", flush=True)
            _stop_child(child)

    watch = NodeWatch(on_lost)
    watch.start()
    try:
        rc = child.wait()
        if rc != 0 and watch.is_alive() and watch.initial:
            # The run may fail on its own (a worker's actor died) before Ray has declared the node dead: keep
            # watching a little so that the failure is attributed to the lost node.
            watch.join(timeout=args.lost_node_settle_s)
    except BaseException:  # the job was stopped (SIGTERM/SIGINT): take the run down with us
        _stop_child(child)
        raise
    finally:
        watch.stop()
    if rc != 0:
        print(f"[verl_ext.launch] run exited with code {rc}", flush=True)
    attach_outputs(args.run_dir, args.jsonl)
    if lost:
        print(f"[verl_ext.launch] FAILED: lost {lost[0]}", flush=True)
        return LOST_NODE_EXIT
    return rc


def attach_outputs(run_dir: Path, jsonl: Path | None) -> None:
    """Step 3 of the module docstring: the resolved config written, the run's small outputs printed into the log for
    the client to collect; a failure here is reported, never raised (the run's own outcome matters more)."""
    try:
        write_resolved_config(run_dir)
        for line in artifacts.pack(collect_files(run_dir, jsonl)):
            print(line)
        sys.stdout.flush()
    except Exception as e:  # noqa: BLE001 -- the run's own outcome matters more than its outputs' copy
        print(f"[verl_ext.launch] could not attach the run's outputs to the log: {e}", flush=True)


def _stop_child(child: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL: the run's Ray driver exits and Ray reclaims its actors on every node."""
    for sig, wait_s in ((signal.SIGTERM, 15), (signal.SIGKILL, 10)):
        if child.poll() is not None:
            return
        child.send_signal(sig)
        try:
            child.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


if __name__ == "__main__":
    sys.exit(main())
