"""The drivers' plumbing around the pre-flight: `--check` on a Hydra command line (`translate_check_flag`) and
`+check_only=true` in the config (`check_only_requested`), a bad config ending the driver with exit code 2 and its
message (`failing_cleanly`), the one call before `ray.init` (`gate`), and a driver's check on a composed config for
a cluster job submission or a campaign (`check_composed`).

Every check comes from the caller: a driver passes its own `check` (its recipe's settings, then `preflight`), and the
library code that checks a driver it does not run here (verl_ext/launch/job.py, verl_ext/campaign/check.py) passes the
`check` of the driver module it was given. Nothing here imports a recipe (docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from omegaconf import DictConfig, OmegaConf, open_dict

from verl_ext.config.errors import ConfigError
from verl_ext.config.preflight.plan import Plan

CHECK_ONLY_KEY = "check_only"
CHECK_FLAG = "--check"


def check_only_requested(cfg: DictConfig) -> bool:
    """Pop `check_only` (given as `+check_only=true`) from the config: verl's workers never see it."""
    if CHECK_ONLY_KEY not in cfg:
        return False
    value = cfg[CHECK_ONLY_KEY]
    with open_dict(cfg):
        cfg.pop(CHECK_ONLY_KEY)
    if not isinstance(value, bool):
        raise ConfigError(f"{CHECK_ONLY_KEY}={value!r} must be true or false")
    return value


def translate_check_flag(argv: list[str]) -> list[str]:
    """`--check` on a Hydra command line becomes `+check_only=true` (Hydra's own parser rejects unknown flags)."""
    if CHECK_FLAG not in argv:
        return argv
    return [a for a in argv if a != CHECK_FLAG] + [f"+{CHECK_ONLY_KEY}=true"]


@contextmanager
def failing_cleanly(what: str, error: Callable[[str], None] | None = None) -> Iterator[None]:
    """A bad config ends the driver with its message and exit code 2, not a traceback from deep in a check. `error`
    says it (default: print to stderr)."""
    try:
        yield
    except ValueError as e:  # ConfigError, and the plain ValueErrors of older settings checks
        message = f"[preflight] {what}: bad config, nothing started:\n{e}"
        if error is None:
            print(message, file=sys.stderr, flush=True)
        else:
            error(message)
        raise SystemExit(2) from e


def _print(text: str) -> None:
    print(text, flush=True)


def gate(
    what: str,
    cfg: DictConfig,
    check: Callable[[DictConfig], Plan],
    show: Callable[[str], None] = _print,
    error: Callable[[str], None] | None = None,
) -> bool:
    """The drivers' one call before `ray.init`: run `check` (the recipe's settings, then `preflight`), show the plan
    (`show`, `error`: the driver's terminal), and say whether to start the run (False after `+check_only=true`). A bad
    config exits 2 with its message."""
    with failing_cleanly(what, error):
        check_only = check_only_requested(cfg)
        plan = check(cfg)
    show(plan.render())
    if check_only:
        show(f"[preflight] {what}: check passed; check_only=true, so nothing was started")
    return not check_only


def check_composed(what: str, check: Callable[..., Plan], cfg: DictConfig, files: str = "full") -> Plan:
    """A driver's `check(cfg, files=...)` on a composed config (left unchanged: the check runs on a resolved copy).
    What a cluster job submission and a campaign run before anything is queued; `what` names the run in the error
    (the recipe). The caller hands in the check: the driver module it was given has it, and importing that module
    registered the resolvers its presets use (`${smollm2:...}`, ...)."""
    probe = copy.deepcopy(cfg)
    try:
        OmegaConf.resolve(probe)
    except Exception as e:  # noqa: BLE001 -- a resolver's own error (e.g. ${tiny_assets:nope}) names the value
        raise ConfigError(f"{what}: the config does not resolve: {e}") from e
    return check(probe, files=files)
