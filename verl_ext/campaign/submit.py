"""A campaign on a Ray cluster: every (condition, seed) of a spec as one Ray job (verl_ext/launch/job.py), at most
`max_concurrent` at a time, the outputs of each collected locally as it ends.

    scripts/campaign.py SPEC --submit http://HEAD:8265 --out-root /shared/campaigns [--local-root outputs/campaign]
        [--max-concurrent 2]

State: `<local-root>/<name>/submit_state.json` records each run's submission ids and outcome, rewritten atomically
after every change, so the script survives its own restart (Ctrl-C, a lost laptop session):
* a run that SUCCEEDED is never submitted again;
* a run whose job is still PENDING/RUNNING on the cluster is followed again, not re-submitted;
* a run that FAILED or was STOPPED is submitted again on the next start (its overrides carry
  trainer.resume_mode=auto: it continues from its last checkpoint in its run dir on the shared storage).
Submission ids are `<campaign>-<label>-a<attempt>`: if the script dies between Ray accepting a job and the state
file recording it, the restart finds that job by its id instead of submitting a duplicate.
Failures are reported with Ray's message (exit code, log tail) and counted in the return value.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from verl_ext.campaign.spec import CampaignSpec, RunPlan
from verl_ext.launch import artifacts, job

STATE_FILE = "submit_state.json"
ACTIVE = {"PENDING", "RUNNING"}


def recipe_of(entry: str) -> str:
    """`recipe.<name>.main` -> <name>: cluster jobs run the project's recipes."""
    parts = entry.split(".")
    if len(parts) != 3 or parts[0] != "recipe" or parts[2] != "main":
        raise ValueError(f"--submit runs recipe entry points `recipe.<name>.main`; the spec's entry is {entry!r}")
    return parts[1]


@dataclass
class SubmitState:
    path: Path
    runs: dict[str, dict] = field(default_factory=dict)  # label -> {attempts, submission_id, status, message}

    @classmethod
    def load(cls, path: Path) -> SubmitState:
        path = Path(path)
        return cls(path, json.loads(path.read_text())["runs"] if path.exists() else {})

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps({"runs": self.runs}, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.path)  # a crash leaves the old state or the new one, never half a file

    def get(self, label: str) -> dict:
        return self.runs.setdefault(label, {"attempts": 0, "submission_id": None, "status": None, "message": None})


@dataclass
class CampaignResult:
    succeeded: list[str]
    failed: dict[str, str]  # label -> Ray's message
    skipped: list[str]  # already SUCCEEDED before this start


def submit_campaign(
    spec: CampaignSpec,
    plans: list[RunPlan],
    client,
    local_root: str | Path,
    max_concurrent: int = 1,
    python: str = job.DEFAULT_PYTHON,
    env_vars: dict | None = None,
    poll_s: float = 2.0,
    log: Callable[[str], None] = print,
    preflight: str = "full",
) -> CampaignResult:
    """Run `plans` (from spec.runs(<absolute cluster out root>)) as Ray jobs through `client`; each job's request
    passes its driver's pre-flight check (`preflight`, see verl_ext/launch/job.py) before it is submitted."""
    if max_concurrent < 1:
        raise ValueError(f"max_concurrent must be >= 1, got {max_concurrent}")
    requests = _checked_requests(recipe_of(spec.entry), plans, env_vars, python, preflight)
    local_dir = Path(local_root) / spec.name
    state = SubmitState.load(local_dir / STATE_FILE)
    skipped = [r.label for r in plans if state.get(r.label)["status"] == "SUCCEEDED"]
    for label in skipped:
        log(f"[campaign] {label}: succeeded earlier, skipped")
    queue = [r.label for r in plans if r.label not in skipped]
    running = _follow_previous(client, state, queue, log)  # the loop below collects those that have ended
    succeeded, failed = [], {}
    while queue or running:
        while queue and len(running) < max_concurrent:
            label = queue.pop(0)
            running.add(label)
            _submit(client, state, label, *requests[label], spec.name, log)
        time.sleep(poll_s)
        for label in sorted(running):
            entry = state.get(label)
            status = _status(client, entry["submission_id"])
            if status in ACTIVE:
                continue
            running.discard(label)
            message = _collect_ended(client, state, label, status, local_dir / label)
            if status == "SUCCEEDED":
                succeeded.append(label)
                log(f"[campaign] {label}: succeeded ({entry['submission_id']})")
            else:
                failed[label] = message or status
                log(f"[campaign] {label}: {status} ({entry['submission_id']}): {message[-500:]}")
    return CampaignResult(succeeded, failed, skipped)


def _checked_requests(
    recipe: str, plans: list[RunPlan], env_vars: dict | None, python: str, preflight: str
) -> dict[str, tuple]:
    """{label: (job request, its checked config)}: every run's request composed and checked once, all before the
    first submission."""
    requests = {}
    for run in plans:
        if not run.run_dir.is_absolute():
            raise ValueError(f"the cluster out root must be absolute (shared storage), got run dir {run.run_dir}")
        req = job.JobRequest(
            recipe, run.overrides, str(run.run_dir), env_vars=dict(env_vars or {}), python=python, preflight=preflight
        )
        requests[run.label] = (req, job.validate(req))
    return requests


def _follow_previous(client, state: SubmitState, queue: list[str], log: Callable[[str], None]) -> set[str]:
    """The labels whose job a previous start of this script submitted and did not see end (still running, or ended
    while it was down), taken out of `queue`: they are followed, not submitted again."""
    running = set()
    for label in list(queue):
        entry = state.get(label)
        if entry["status"] == "SUBMITTED" and _status(client, entry["submission_id"]) is not None:
            running.add(label)
            queue.remove(label)
            log(f"[campaign] {label}: following {entry['submission_id']} from the previous start")
    return running


def _collect_ended(client, state: SubmitState, label: str, status: str, out_dir: Path) -> str:
    """Record an ended job's status and Ray's message (which ends with the log's tail) in the state, collect its
    outputs into `out_dir`; the message."""
    entry = state.get(label)
    info = client.get_job_info(entry["submission_id"])
    message = artifacts.strip(info.message)[-3000:]
    entry.update(status=status, message=message)
    job.collect(client, entry["submission_id"], out_dir)
    state.save()
    return message


def _status(client, submission_id: str) -> str | None:
    """The job's status, None if the cluster has no job of that id (any other failure of the request raises: a
    network hiccup must not look like a job that was never submitted)."""
    try:
        return str(client.get_job_status(submission_id).value)
    except RuntimeError as e:  # the job SDK raises RuntimeError("Request failed with status code 404: ...")
        if "404" in str(e) or "does not exist" in str(e):
            return None
        raise


def _submit(client, state: SubmitState, label: str, req: job.JobRequest, cfg, name: str, log) -> None:
    entry = state.get(label)
    sid = f"{name}-{label}-a{entry['attempts'] + 1}".replace("+", "-")
    if _status(client, sid) is None:
        job.submit(client, req, submission_id=sid, metadata={"campaign": name, "run": label}, cfg=cfg)
        log(f"[campaign] {label}: submitted {sid}")
    else:  # accepted before a crash that kept it out of the state file
        log(f"[campaign] {label}: {sid} was already submitted, following it")
    entry.update(attempts=entry["attempts"] + 1, submission_id=sid, status="SUBMITTED", message=None)
    state.save()
