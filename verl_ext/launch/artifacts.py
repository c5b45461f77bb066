"""A run's small outputs (metrics.jsonl, plots, the resolved config) carried from the cluster to the submitting
machine inside the job's own log.

The job's driver runs on the head node and the client may be a laptop that does not mount the cluster's storage; Ray
keeps every job's driver log and serves it through the job API, so the driver prints one gzip'd tar of the files as
base64 lines between two markers at the end of its log, and the client cuts that block out of the log and unpacks
it. Checkpoints never travel this way (they stay in the run directory on the cluster's shared storage); a size cap
keeps the log small.
"""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
from pathlib import Path

METRICS_FILE = "metrics.jsonl"  # a run's metric log, in its run directory (cluster jobs and campaigns alike)
# verl 0.9.1's checkpoint tracker in a run directory (verl.utils.checkpoint.checkpoint_manager.
# get_checkpoint_tracker_filename), written after the checkpoint: a run directory holding it resumes from there
CHECKPOINT_TRACKER = "latest_checkpointed_iteration.txt"
BEGIN = "===VERL_EXT_ARTIFACTS_BEGIN==="
END = "===VERL_EXT_ARTIFACTS_END==="
LINE = "VERL_EXT_ARTIFACT "
LINE_CHARS = 4000  # base64 characters per log line (Ray's log readers are line based)
MAX_BYTES = 32 * 1024 * 1024


def pack(files: dict[str, Path], max_bytes: int = MAX_BYTES) -> list[str]:
    """{name in archive: path} -> the log lines (markers included). Missing files are skipped; the archive is
    limited to `max_bytes` (compressed), raising ValueError beyond it."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, path in sorted(files.items()):
            if Path(path).is_file():
                tar.add(str(path), arcname=name, recursive=False)
    data = buf.getvalue()
    if len(data) > max_bytes:
        raise ValueError(f"run artifacts are {len(data)} bytes compressed, over the {max_bytes} byte limit")
    b64 = base64.b64encode(data).decode()
    digest = hashlib.sha256(data).hexdigest()
    lines = [f"{BEGIN} {len(data)} {digest}"]
    lines += [LINE + b64[i : i + LINE_CHARS] for i in range(0, len(b64), LINE_CHARS)]
    lines.append(END)
    return lines


def is_artifact_line(line: str) -> bool:
    """The lines `pack` prints: kept out of the log a user watches."""
    s = line.strip()
    return s.startswith((LINE, BEGIN, END))


def strip(text: str | None) -> str:
    """`text` (a job log or Ray's failure message, which ends with the log's tail) without the artifact block."""
    return "\n".join(line for line in (text or "").splitlines() if not is_artifact_line(line))


def unpack(log_text: str, dest: str | Path) -> list[str]:
    """Extract the LAST complete artifact block of a job log into `dest`; returns the extracted names ([] if the
    log holds no complete block, e.g. the driver was killed before it printed one). A block whose size or checksum
    does not match raises ValueError (a truncated or interleaved log)."""
    lines = log_text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip().startswith(BEGIN)]
    for start in reversed(starts):
        try:
            end = next(i for i in range(start + 1, len(lines)) if lines[i].strip().startswith(END))
        except StopIteration:
            continue  # cut off: an earlier block may be whole
        _, size, digest = lines[start].strip().split()
        b64 = "".join(line.strip()[len(LINE) :] for line in lines[start + 1 : end] if line.strip().startswith(LINE))
        data = base64.b64decode(b64)
        if len(data) != int(size) or hashlib.sha256(data).hexdigest() != digest:
            raise ValueError(f"the artifact block in the job log is damaged ({len(data)} of {size} bytes)")
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            tar.extractall(dest, filter="data")  # regular files inside dest only
            return sorted(m.name for m in tar.getmembers() if m.isfile())
    return []
