"""Run a campaign: every (condition, seed) of a spec, one process each, then all runs' curves in one plot.

    .venv/bin/python scripts/campaign.py configs/campaign/advantage_ablation_cpu.yaml [--out-root outputs/campaign]
        [--only maxrl+gtpo_sepa grpo+none] [--dry-run]
    .venv/bin/python scripts/campaign.py report SPEC [...]   # seed-band curves and tables: verl_ext/campaign/report.py
    .venv/bin/python scripts/campaign.py publish SPEC --to docs/results   # finished runs' logs: campaign/publish.py
    .venv/bin/python scripts/campaign.py restore SPEC --from docs/results # published runs back: campaign/restore.py
    .venv/bin/python scripts/campaign.py SPEC --submit http://HEAD:8265 --out-root /shared/campaigns \
        [--local-root outputs/campaign] [--max-concurrent 2]   # on a Ray cluster: verl_ext/campaign/submit.py

Four subcommands: `run` (running a campaign), `report`, `publish` and `restore`; `run` is the default, so
`campaign.py SPEC ...` is `campaign.py run SPEC ...`.

Before the first run, one run of every condition goes through its recipe's pre-flight check: a bad override fails
the campaign at once (exit 2). `--preflight config` leaves out the data and model files (paths on a cluster's
storage only), `--preflight none` skips the check. Runs go one after another (each already uses every GPU or core it
is given); on a Ray cluster run this on the head node, where each run's driver joins the cluster (RAY_ADDRESS).
Re-running the same command resumes: runs with a DONE file are skipped, an interrupted run continues from its last
checkpoint (trainer.resume_mode=auto). A failed run is reported and the others still run; the exit code is 1 if any
failed. Each run's output is in <run>/run.log.
The spec format is in verl_ext/campaign/spec.py; the local runner is verl_ext/campaign/local.py, the cluster one
verl_ext/campaign/submit.py.

With --submit, each run is a Ray job on the cluster at that address (dashboard URL), at most --max-concurrent at a
time; --out-root is then the runs' root on the cluster's shared storage (absolute) and each run's metrics.jsonl,
plots and config are collected into <--local-root>/<name>/<run>/ (where `report --out-root <local-root>` reads
them). Restarting the same command skips runs that succeeded, follows jobs still running, re-submits failed ones.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from verl_ext.campaign import publish, report, restore
from verl_ext.campaign.local import plot_curves, run_local
from verl_ext.campaign.spec import CampaignSpec
from verl_ext.launch.job import DEFAULT_PYTHON, PREFLIGHT_MODES

COMMANDS = ("run", "report", "publish", "restore")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in (*COMMANDS, "-h", "--help"):
        argv = ["run", *argv]  # the default subcommand: `campaign.py SPEC ...` is `campaign.py run SPEC ...`
    args = _parser().parse_args(argv)
    return args.func(args)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = p.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "run",
        help="run every (condition, seed) of a spec (the default subcommand)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_run_arguments(run)
    run.set_defaults(func=_run)
    # the other subcommands: a module each, with its docstring, add_arguments and run
    for name, module, summary in (
        ("report", report, "seed-band curves and tables of a campaign's runs"),
        ("publish", publish, "copy the finished runs' metrics logs into a results directory"),
        ("restore", restore, "copy published runs back, marked done, to continue a campaign on a fresh machine"),
    ):
        sub = commands.add_parser(
            name, help=summary, description=module.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        module.add_arguments(sub)
        sub.set_defaults(func=module.run)
    return p


def _run(args: argparse.Namespace) -> int:
    """The `run` subcommand: pre-flight, then the runs, here or on a cluster."""
    spec = CampaignSpec.from_yaml(args.spec)
    plans = _selected(spec, args)
    if spec.plot_keys:
        from verl_ext.metrics_log.plot import require_matplotlib

        require_matplotlib()  # before hours of runs, not after
    if args.submit or args.dry_run:
        if args.preflight != "none" and not _preflight(spec, plans, args.preflight):
            return 2
        if args.dry_run:
            run_local(spec, plans, dry_run=True)
            return 0
        return _submit(spec, plans, args)
    # A local campaign: its terminal shows the [campaign] lines, the pre-flight's and verl's chatter goes to
    # <out-root>/<name>/run.log (verl_ext/metrics_log/terminal.py); each run's own logs are in its directory.
    from verl_ext.metrics_log.terminal import Terminal

    with Terminal(Path(args.out_root) / spec.name) as terminal:
        if args.preflight != "none" and not _preflight(spec, plans, args.preflight, say=terminal.error):
            return 2
        failed = run_local(spec, plans)
        plot_curves(spec, plans, Path(args.out_root))
        if failed:
            print(f"[campaign] {len(failed)} of {len(plans)} runs failed: {failed}", flush=True)
            return 1
    return 0


def _add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec")
    p.add_argument("--out-root", default="outputs/campaign")
    p.add_argument("--only", nargs="+", help="condition names to run (default: all)")
    p.add_argument("--runs", nargs="+", metavar="LABEL", help="run labels to run, e.g. grpo+none_s0 (default: all)")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    p.add_argument("--submit", metavar="ADDRESS", help="run each (condition, seed) as a Ray job on this cluster")
    p.add_argument("--local-root", default="outputs/campaign", help="--submit: where outputs are collected")
    p.add_argument("--max-concurrent", type=int, default=1, help="--submit: jobs running at once")
    p.add_argument("--python", default=DEFAULT_PYTHON, help="--submit: the interpreter on the cluster's head node")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="--submit: job env variables")
    p.add_argument(
        "--preflight",
        choices=PREFLIGHT_MODES,
        default="full",
        help="check one run per condition before the first run (verl_ext/campaign/check.py), and each job before "
        "it is submitted: full, config (no data/model files), none",
    )


def _selected(spec: CampaignSpec, args) -> list:
    """The runs `--only` and `--runs` select (all by default)."""
    try:
        return spec.select(args.out_root, only=args.only, labels=args.runs)
    except ValueError as e:
        raise SystemExit(str(e)) from None


def _preflight(spec: CampaignSpec, plans, files: str, say=None) -> bool:
    """One run per condition through its recipe's pre-flight; False (and the reasons said: `say`, default stderr) if
    any fails."""
    from verl_ext.campaign.check import check_campaign

    say = say or (lambda text: print(text, file=sys.stderr, flush=True))
    errors = check_campaign(spec, plans, files=files)
    for condition, message in errors.items():
        say(f"[campaign] condition {condition!r} fails the pre-flight check:\n{message}")
    if errors:
        say(f"[campaign] {len(errors)} condition(s) fail their check; nothing was run")
    return not errors


def _submit(spec: CampaignSpec, plans, args) -> int:
    from verl_ext.campaign.submit import submit_campaign
    from verl_ext.launch import job

    if not Path(args.out_root).is_absolute():
        raise SystemExit(
            "--submit: --out-root is the runs' root on the cluster's shared storage and must be "
            f"absolute, got {args.out_root!r}"
        )
    env = dict(pair.split("=", 1) for pair in args.env)
    try:
        result = submit_campaign(
            spec,
            plans,
            job.client(args.submit),
            args.local_root,
            max_concurrent=args.max_concurrent,
            python=args.python,
            env_vars=env,
            preflight=args.preflight,
        )
    except (job.JobError, ValueError) as e:
        raise SystemExit(f"--submit: {e}") from e
    plot_curves(spec, plans, Path(args.local_root))
    print(
        f"[campaign] {len(result.succeeded)} succeeded, {len(result.skipped)} done earlier, "
        f"{len(result.failed)} failed of {len(plans)} runs"
    )
    for label, message in result.failed.items():
        print(f"[campaign] FAILED {label}: {message[-300:]}")
    return 1 if result.failed else 0


if __name__ == "__main__":
    sys.exit(main())
