"""Where a run's memory goes, sampled while it runs: every process of a run (a root process and all its descendants:
the driver, Ray's GCS and raylet, the trainer's workers, the rollout's vLLM server and engine, agent episodes, teacher
servers) and its proportional set size (PSS: each shared page counted once, split among the processes that map it, so
forked agents and Ray workers sharing imports add up to what the machine really holds), every few seconds, until the
root exits. Sizes are GiB (2^30 bytes; the JSON's keys say gb). Linux only (/proc/<pid>/smaps_rollup).

`MemoryWatch` samples a run in a thread (the campaign runner watches each run: `<run>/memory.json`);
`scripts/measure_memory.py` watches any command or pid from the command line.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

# (part, pattern searched in the process's command line), the first match names the part
PARTS: tuple[tuple[str, str], ...] = (
    ("actor+ref (FSDP workers)", r"ray::WorkerDict|ray::.*ActorRolloutRef|ray::.*Worker\.(?:update|compute)"),
    ("rollout: vLLM engine", r"VLLM::(?:Worker|EngineCore)"),
    ("rollout: vLLM server", r"vLLMHttpServer|GlobalRequestLoadBalancer"),
    ("agent loop + gateway", r"AgentLoopWorker"),
    ("reward workers", r"RewardLoopWorker|_verify_worker"),
    ("trainer (TaskRunner)", r"TaskRunner"),
    ("teacher servers", r"vllm\.entrypoints"),  # scripts/serve_teachers.py's vLLM OpenAI servers
    ("agent episodes", r"agents_sdk_calc|langgraph_calc|forkserver|fork_launch|verl_ext\.agent\.examples"),
    (
        "Ray system (GCS, raylet, dashboard, idle workers)",
        r"gcs_server|raylet|dashboard|ray::IDLE|log_monitor|"
        r"runtime_env|ray/_private|monitor\.py",
    ),
    ("driver / campaign", r"recipe\.\w+\.main|campaign\.py|verl_ext\.trainer\.agent_main|serve_teachers\.py"),
)
OTHER = "other"
FIRST_WAIT_S = 0.5  # seconds before the second reading; each wait doubles up to the watch's interval
# a part whose processes' children belong to it whatever their names: a teacher server's vLLM engine is named as the
# rollout's is (VLLM::EngineCore), but it is the teacher's memory
STICKY = ("teacher servers",)


def part_of(cmdline: str) -> str:
    """The part of the run a process belongs to, from its command line (Ray names its workers `ray::Class.method`)."""
    for part, pattern in PARTS:
        if re.search(pattern, cmdline):
            return part
    return OTHER


def children_map() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        out.setdefault(ppid, []).append(int(entry))
    return out


def parts_below(root: int, children: dict[int, list[int]], name_of=None) -> dict[int, str]:
    """`root` and every process below it, each with its part: its own name's, unless an ancestor's part is sticky."""
    name_of = name_of or cmdline
    seen: dict[int, str] = {}
    stack: list[tuple[int, str | None]] = [(root, None)]
    while stack:
        pid, inherited = stack.pop()
        part = inherited if inherited in STICKY else part_of(name_of(pid))
        seen[pid] = part
        stack.extend((child, part) for child in children.get(pid, ()))
    return seen


def pss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def meminfo_gib() -> tuple[float, float]:
    """(MemAvailable, MemTotal) of this machine, GiB (/proc/meminfo)."""
    fields = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, value = line.split(":", 1)
        fields[key] = int(value.split()[0]) / 2**20
    return fields["MemAvailable"], fields["MemTotal"]


def sample(root: int) -> dict:
    """One reading: total PSS (GiB), per part (GiB) and the processes counted."""
    parts: dict[str, float] = {}
    n = 0
    for pid, part in parts_below(root, children_map()).items():
        kb = pss_kb(pid)
        if kb is None:
            continue
        n += 1
        parts[part] = parts.get(part, 0.0) + kb / 2**20
    return {"total_gb": sum(parts.values()), "parts_gb": parts, "processes": n, "available_gb": meminfo_gib()[0]}


def summarise(timeline: list[dict]) -> dict:
    """The peak reading and, per part, its own peak over the run (parts peak at different moments)."""
    peak = max(timeline, key=lambda r: r["total_gb"])
    part_peaks: dict[str, float] = {}
    for r in timeline:
        for part, gb in r["parts_gb"].items():
            part_peaks[part] = max(part_peaks.get(part, 0.0), gb)
    return {"peak": peak, "part_peaks_gb": part_peaks, "samples": len(timeline)}


def running(pid: int) -> bool:
    """Whether `pid` runs: a process that has exited but not been waited for keeps its /proc entry (a zombie)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def watch(root: int, every: float, out: Path | None, stop: threading.Event | None = None) -> dict:
    """Sample `root`'s tree every `every` seconds until it exits (or `stop` is set), the first readings sooner
    (0.5 s apart, doubling up to `every`: a run's processes start in its first seconds, and a short run gets readings
    too); the timeline and its summary, written to `out` as it goes (a killed run keeps its figures) and at the end."""
    t0, timeline = time.monotonic(), []
    stop = stop or threading.Event()
    wait = min(FIRST_WAIT_S, every)
    while running(root) and not stop.is_set():
        reading = sample(root)
        reading["t_s"] = round(time.monotonic() - t0, 1)
        timeline.append(reading)
        if out is not None and len(timeline) % 12 == 1:
            _write(out, timeline)
        stop.wait(wait)
        wait = min(2 * wait, every)
    if out is not None:
        _write(out, timeline)
    return _result(timeline)


def _result(timeline: list[dict]) -> dict:
    return {"timeline": timeline, **summarise(timeline)} if timeline else {"timeline": []}


def _write(out: Path, timeline: list[dict]) -> None:
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(json.dumps(_result(timeline), indent=1))
    tmp.replace(out)


class MemoryWatch:
    """`watch` in a thread for the length of a block: `with MemoryWatch(out).of(pid): ...` samples `pid`'s tree until
    the block ends or the process does. The peak (GiB) is `.peak_gib` after the block (None without a reading)."""

    def __init__(self, out: Path | None, every: float = 10.0):
        self.out, self.every = out, every
        self._result: dict = {"timeline": []}

    @contextlib.contextmanager
    def of(self, pid: int) -> Iterator[MemoryWatch]:
        stop = threading.Event()

        def run() -> None:
            self._result = watch(pid, self.every, self.out, stop)

        thread = threading.Thread(target=run, name="memory-watch", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join()

    @property
    def peak_gib(self) -> float | None:
        return self._result["peak"]["total_gb"] if self._result.get("timeline") else None


def report(result: dict) -> str:
    if not result.get("timeline"):
        return "no reading: the process had already exited"
    peak = result["peak"]
    lines = [
        f"peak PSS of the run: {peak['total_gb']:.1f} GiB at {peak['t_s']:.0f} s ({peak['processes']} processes; "
        f"the machine had {peak['available_gb']:.1f} GiB available then)",
        "at the peak, by part (and each part's own peak over the run):",
    ]
    for part, gb in sorted(peak["parts_gb"].items(), key=lambda kv: -kv[1]):
        lines.append(f"  {part:<50} {gb:5.2f} GiB  (peak {result['part_peaks_gb'][part]:5.2f})")
    return "\n".join(lines)
