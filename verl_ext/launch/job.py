"""Submit a project recipe to a running Ray cluster as a Ray job, follow its log, collect its outputs.

What `ray job submit --working-dir . -- python -m recipe.<name>.main <overrides>` does, through Ray's job SDK
(`ray.job_submission.JobSubmissionClient`), plus what a training run needs around it:

* checked before anything is sent: the recipe exists, the overrides compose into the recipe's config (a misspelled
  key or a bad value syntax fails here, in seconds, with Hydra's message), the run directory is absolute, and the
  recipe driver's own pre-flight check passes (the driver's `check`, verl_ext/config/preflight/: settings, estimator,
  reward, data and model files; `preflight="config"` leaves out the files, for paths that exist on the cluster's
  storage only);
* the job's runtime env: the project as working dir (uploaded by Ray to the head node and to every worker node, on
  each worker's sys.path), the backend's environment variables for a CPU-backend config (VERL_PLATFORM=cpu reaches
  every worker process; on one machine they inherit it from the driver, on a cluster they do not), your own
  `--env` variables, and RAY_OVERRIDE_JOB_RUNTIME_ENV=1 so that verl's own `ray.init(runtime_env=...)` in the
  driver merges with the job's instead of failing on a shared variable name;
* overrides the cluster needs: the run's outputs go to `run_dir` (on storage every node shares, as verl's
  checkpoints require), and `ray_kwargs.ray_init.num_cpus/num_gpus` are cleared (Ray refuses them when joining a
  cluster; a CPU preset sets them for its own local Ray);
* the entrypoint is verl_ext.launch.entry, which runs the recipe, stops it if a node is lost and prints the run's
  metrics.jsonl, plots and resolved config into the job log, from where `collect` unpacks them locally
  (artifacts.py): the submitting machine need not mount the cluster's storage.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from verl_ext.launch import artifacts
from verl_ext.launch.entry import LOST_NODE_GRACE_S

DEFAULT_PYTHON = "python"  # the cluster's interpreter, on the head node's PATH

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# Never uploaded with the working dir (Ray also honours .gitignore): environments, outputs, VCS data, and the published
# campaign logs (docs/results: over 100 MB, and Ray's job server refuses a package over 100 MiB).
WORKING_DIR_EXCLUDES = [".git", ".venv", "outputs", "runs", "docs/results", "**/__pycache__", ".pytest_cache", ".cache"]
TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}
PREFLIGHT_MODES = ("full", "config", "none")


class JobError(ValueError):
    """A job request that cannot be submitted; the message says what to change."""


def recipe_drivers(root: Path = PROJECT_ROOT) -> dict[str, str]:
    """name -> driver module of each recipe the project has: the `main.py` files of its `recipe/` directory (in the
    working dir a job uploads), each as the module its path is (what the job runs with `python -m`)."""
    return {
        p.parent.name: ".".join(p.relative_to(root).with_suffix("").parts)
        for p in sorted((root / "recipe").glob("*/main.py"))
    }


def available_recipes(root: Path = PROJECT_ROOT) -> list[str]:
    return sorted(recipe_drivers(root))


def _override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


@dataclass
class JobRequest:
    recipe: str
    overrides: list[str]
    run_dir: str  # absolute, on the cluster's shared storage
    env_vars: dict[str, str] = field(default_factory=dict)
    working_dir: Path | None = PROJECT_ROOT  # None: the project is installed on every node already
    python: str = DEFAULT_PYTHON
    lost_node_grace_s: float = LOST_NODE_GRACE_S
    # The driver's pre-flight before submitting: "full", "config" (no data/model files: they are on the cluster's
    # storage only) or "none" (composition only).
    preflight: str = "full"

    @property
    def module(self) -> str:
        """The driver the job runs (`validate` has checked that the project has this recipe)."""
        return recipe_drivers()[self.recipe]


def validate(req: JobRequest):
    """Everything checkable before submitting; returns the composed (unresolved) config."""
    recipes = available_recipes()
    if req.recipe not in recipes:
        raise JobError(f"unknown recipe {req.recipe!r}; this project has {recipes}")
    if not Path(req.run_dir).is_absolute():
        raise JobError(f"run_dir must be an absolute path on the cluster's shared storage, got {req.run_dir!r}")
    bad = [o for o in req.overrides if "=" not in o and not o.startswith("~")]
    if bad:
        raise JobError(f"overrides must be key=value (Hydra syntax), got {bad}")
    if any(_override_key(o).startswith("hydra.run") for o in req.overrides):
        raise JobError("hydra.run.* is set by the launcher (the run's Hydra files go to <run_dir>/hydra)")
    if req.working_dir is not None and not Path(req.working_dir).is_dir():
        raise JobError(f"working dir {req.working_dir} does not exist")
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from verl_ext.config.compose import compose_config, driver_config_module

    try:
        cfg = compose_config(req.recipe, cluster_overrides(req), config_module=driver_config_module(req.module))
    except (HydraException, OmegaConfBaseException) as e:
        raise JobError(f"the overrides do not compose into recipe {req.recipe!r}'s config: {e}") from e
    if req.preflight not in PREFLIGHT_MODES:
        raise JobError(f"preflight must be one of {PREFLIGHT_MODES}, got {req.preflight!r}")
    if req.preflight != "none":
        import importlib

        from verl_ext.config.preflight import check_composed

        check = importlib.import_module(req.module).check  # the check of the driver the job runs
        try:
            check_composed(req.recipe, check, cfg, files=req.preflight)
        except ValueError as e:
            raise JobError(f"the run would fail its pre-flight check on the cluster: {e}") from e
    return cfg


def cluster_overrides(req: JobRequest) -> list[str]:
    """The user's overrides plus the ones a cluster job needs (a user's own value of the same key wins)."""
    given = {_override_key(o) for o in req.overrides}
    extra = {
        "trainer.default_local_dir": req.run_dir,
        "trainer.jsonl_metrics_path": f"{req.run_dir}/{artifacts.METRICS_FILE}",
    }
    out = list(req.overrides) + [f"{k}={v}" for k, v in extra.items() if k not in given]
    # Joining a running cluster: Ray refuses num_cpus/num_gpus in ray.init (the nodes declared them).
    out += ["++ray_kwargs.ray_init.num_cpus=null", "++ray_kwargs.ray_init.num_gpus=null"]
    return out


def entrypoint(req: JobRequest) -> str:
    return shlex.join(
        [
            req.python,
            "-m",
            "verl_ext.launch.entry",
            "--run-dir",
            req.run_dir,
            "--module",
            req.module,
            "--lost-node-grace-s",
            str(req.lost_node_grace_s),
            "--",
            *cluster_overrides(req),
        ]
    )


def runtime_env(req: JobRequest, cfg=None) -> dict:
    env = {"RAY_OVERRIDE_JOB_RUNTIME_ENV": "1"}
    if cfg is not None and str(cfg.trainer.get("device", "")) == "cpu":
        from verl_ext.cpu.session import backend_env

        env.update(backend_env())
    env.update(req.env_vars)
    out: dict = {"env_vars": env}
    if req.working_dir is not None:
        out["working_dir"] = str(req.working_dir)
        out["excludes"] = list(WORKING_DIR_EXCLUDES)
    return out


def client(address: str):
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(address)


def submit(
    address_or_client, req: JobRequest, submission_id: str | None = None, metadata: dict | None = None, cfg=None
) -> str:
    """Submit; returns the submission id. `cfg`: what `validate(req)` returned, so a job is composed and checked
    once (None: validated here). Nothing is sent if validation fails."""
    cfg = validate(req) if cfg is None else cfg
    c = client(address_or_client) if isinstance(address_or_client, str) else address_or_client
    return c.submit_job(
        entrypoint=entrypoint(req),
        runtime_env=runtime_env(req, cfg),
        submission_id=submission_id,
        metadata={k: str(v) for k, v in (metadata or {}).items()},
    )


def follow(c, job_id: str, out=sys.stdout) -> str:
    """Stream the job's log (without the artifact block) until it ends; returns the final status."""

    async def _tail():
        async for chunk in c.tail_job_logs(job_id):
            text = "".join(line + "\n" for line in chunk.splitlines() if not artifacts.is_artifact_line(line))
            out.write(text)
            out.flush()

    asyncio.run(_tail())
    return wait(c, job_id)


def wait(c, job_id: str, timeout_s: float | None = None, poll_s: float = 1.0) -> str:
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        status = str(c.get_job_status(job_id).value)
        if status in TERMINAL:
            return status
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} still {status} after {timeout_s} s")
        time.sleep(poll_s)


def collect(c, job_id: str, local_dir: str | Path) -> list[str]:
    """Unpack the run's outputs from the job log into `local_dir`, with job.json (status, message, entrypoint) and
    job.log (the log without the artifact block). Returns the names unpacked."""
    local_dir = Path(local_dir)
    local_dir.mkdir(parents=True, exist_ok=True)
    log = c.get_job_logs(job_id)
    names = artifacts.unpack(log, local_dir)
    info = c.get_job_info(job_id)
    (local_dir / "job.json").write_text(
        json.dumps(
            {
                "submission_id": job_id,
                "status": str(info.status.value),
                "message": artifacts.strip(info.message),
                "entrypoint": info.entrypoint,
                "metadata": info.metadata,
                "start_time": info.start_time,
                "end_time": info.end_time,
            },
            indent=2,
        )
        + "\n"
    )
    (local_dir / "job.log").write_text(artifacts.strip(log) + "\n")
    return names
