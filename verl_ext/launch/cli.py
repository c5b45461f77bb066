"""`python -m verl_ext.launch` (or scripts/ray_job.py): recipes as Ray cluster jobs.

    python -m verl_ext.launch submit --address http://HEAD:8265 --recipe fast_dapo \\
        --run-dir /shared/runs/dapo1 --local-dir runs/dapo1 [--env HF_TOKEN=...] -- <hydra overrides>
    python -m verl_ext.launch status|logs|stop|collect --address http://HEAD:8265 JOB_ID [--local-dir DIR]

`submit` checks the request, submits, streams the log until the job ends (Ctrl-C detaches; the job keeps running),
then collects metrics.jsonl, plots and the resolved config into --local-dir (default runs/<job id>). Exit code 0
iff the job SUCCEEDED. --no-wait prints the job id and returns. The address is Ray's dashboard (port 8265 by
default), or RAY_ADDRESS. See docs/CLUSTER.md.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from verl_ext.launch import artifacts, job


def _env_pairs(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise SystemExit(f"--env takes KEY=VALUE, got {pair!r}")
        k, v = pair.split("=", 1)
        out[k] = v
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m verl_ext.launch", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    _submit_arguments(sub.add_parser("submit", help="submit a recipe run"))
    for name in ("status", "logs", "stop", "collect"):
        q = sub.add_parser(name)
        q.add_argument("job_id")
        if name == "collect":
            q.add_argument("--local-dir")
    for q in sub.choices.values():
        q.add_argument("--address", default=os.environ.get("RAY_ADDRESS", "http://127.0.0.1:8265"))
    return p


def _submit_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("--recipe", required=True, help=f"one of {job.available_recipes()}")
    s.add_argument("--run-dir", required=True, help="absolute path on the cluster's shared storage")
    s.add_argument("--local-dir", help="where the outputs are collected (default runs/<job id>)")
    s.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    s.add_argument(
        "--working-dir",
        default=str(job.PROJECT_ROOT),
        help="uploaded as the job's working dir; 'none' if the project is installed on every node",
    )
    s.add_argument(
        "--python", default=job.DEFAULT_PYTHON, help=f"the interpreter on the head node (default: {job.DEFAULT_PYTHON})"
    )
    s.add_argument("--submission-id")
    s.add_argument("--lost-node-grace-s", type=float, default=job.LOST_NODE_GRACE_S)
    s.add_argument("--no-wait", action="store_true")
    s.add_argument(
        "--preflight",
        choices=job.PREFLIGHT_MODES,
        default="full",
        help="the driver's check before submitting: full (default), config (data/model paths exist on the "
        "cluster's storage only: leave them out), none (composition only)",
    )
    s.add_argument("overrides", nargs="*")


def _request(args) -> job.JobRequest:
    return job.JobRequest(
        recipe=args.recipe,
        overrides=args.overrides,
        run_dir=args.run_dir,
        env_vars=_env_pairs(args.env),
        working_dir=None if args.working_dir == "none" else Path(args.working_dir),
        python=args.python,
        lost_node_grace_s=args.lost_node_grace_s,
        preflight=args.preflight,
    )


def _submit(args) -> int:
    req = _request(args)
    try:
        cfg = job.validate(req)  # before connecting: a bad request fails without a cluster
    except job.JobError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    c = job.client(args.address)
    job_id = job.submit(c, req, submission_id=args.submission_id, cfg=cfg)  # composed and checked once, above
    print(f"[verl_ext.launch] submitted {job_id} to {args.address}", flush=True)
    if args.no_wait:
        return 0
    try:
        status = job.follow(c, job_id)
    except KeyboardInterrupt:
        print(f"\n[verl_ext.launch] detached; {job_id} keeps running (stop: ... stop {job_id})")
        return 130
    return _finish(c, job_id, status, args.local_dir)


def _status(args) -> int:
    info = job.client(args.address).get_job_info(args.job_id)
    print(f"{info.status.value}: {artifacts.strip(info.message)}")
    return 0


def _logs(args) -> int:
    print(job.client(args.address).get_job_logs(args.job_id), end="")
    return 0


def _stop(args) -> int:
    print("stopped" if job.client(args.address).stop_job(args.job_id) else "not running")
    return 0


def _collect(args) -> int:
    c = job.client(args.address)
    status = str(c.get_job_status(args.job_id).value)
    return _finish(c, args.job_id, status, args.local_dir)


COMMANDS = {"submit": _submit, "status": _status, "logs": _logs, "stop": _stop, "collect": _collect}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return COMMANDS[args.cmd](args)


def _finish(c, job_id: str, status: str, local_dir: str | None) -> int:
    local = Path(local_dir or Path("runs") / job_id)
    names = job.collect(c, job_id, local)
    info = c.get_job_info(job_id)
    message = artifacts.strip(info.message)[-3000:]
    print(f"[verl_ext.launch] {job_id}: {status}{': ' + message if status != 'SUCCEEDED' else ''}")
    print(f"[verl_ext.launch] collected {names or 'nothing'} into {local}")
    return 0 if status == "SUCCEEDED" else 1


if __name__ == "__main__":
    sys.exit(main())
