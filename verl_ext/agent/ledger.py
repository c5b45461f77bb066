"""The episode ledger: one JSONL line per training step naming every episode of the step, so that no episode is
trained twice or lost silently, across crashes and resumes.

Line: `{"step": k, "trained": [episode ids], "dropped": {episode id: status}, "staleness": {episode id: updates},
"drift": {episode id: {"extended": n, "split": {reason: n}, "tool_faults": {kind: n}}}}` (`staleness` lists trained
episodes only; `drift`, how each episode's rounds joined (`core.Drift`), lists episodes of more than one round or
with a tool-call fault). Each line is flushed before the step's update runs.

Resume: verl resumes from the last checkpoint, step c, and regenerates steps c+1, ... with new episodes. Lines of
steps after c are cut on opening (the metrics log does the same), so the ledger again holds exactly the steps whose
updates the checkpoint contains, each episode once; a torn last line (crash mid-write) is ignored. Ids of the kept
lines count as seen: a batch holding one of them is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from verl_ext.metrics_log import JsonlMetricsWriter, read_jsonl


class EpisodeLedger:
    def __init__(self, path: str | Path, resume_from_step: int = 0):
        self.path = Path(path)
        self._writer = JsonlMetricsWriter(self.path, resume_from_step=resume_from_step)
        self.seen: set[str] = set()
        for rec in read_jsonl(self.path):
            self.seen.update(rec.get("trained", []))
            self.seen.update(rec.get("dropped", {}))

    def record(
        self,
        step: int,
        ids: Sequence[str],
        statuses: Sequence[str],
        staleness: Sequence[int] | None = None,
        drift: dict[str, dict] | None = None,
    ):
        """Check that no id repeats (within the step or against earlier steps), then append the step's line."""
        ids = [str(e) for e in ids]
        if len(statuses) != len(ids) or (staleness is not None and len(staleness) != len(ids)):
            raise ValueError(f"ledger: {len(ids)} episode ids but {len(statuses)} statuses")
        repeated = sorted(set(ids) & self.seen)
        if repeated or len(set(ids)) != len(ids):
            dup = repeated or sorted({e for e in ids if ids.count(e) > 1})
            raise RuntimeError(f"agent episodes about to be trained twice (step {step}): {dup[:5]}")
        trained = [e for e, s in zip(ids, statuses, strict=True) if s == "ok"]
        line = {
            "trained": trained,
            "dropped": {e: str(s) for e, s in zip(ids, statuses, strict=True) if s != "ok"},
        }
        if staleness is not None:
            line["staleness"] = {e: int(n) for e, s, n in zip(ids, statuses, staleness, strict=True) if s == "ok"}
        if drift:
            line["drift"] = {str(e): d for e, d in drift.items()}
        self._writer.log(step, line)
        self.seen.update(ids)

    def close(self) -> None:
        self._writer.close()
