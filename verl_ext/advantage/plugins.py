"""Plugins by dotted path ("pkg.module.fn"): episode mode, transform, full algorithm, uncertainty.

Forms (the context objects follow retrain's seed; here one call covers the whole batch, row i = response i):
- episode (`advantage_mode`): `fn(rewards)` or `fn(rewards, params)` (a parameter named `params` receives
  `advantage_params`), called once per prompt group with a list of floats, returning one advantage per response.
  Vectorised form: decorate with `@episode_vectorized`; then `fn(rewards, group_ids, params)` is called once with
  rewards (bs,) float64 and group ids (bs,) long, and returns (bs,).
- transform (`transform_mode`): `fn(ctx: TransformContext) -> TransformOutput | Tensor | list of lists`.
- full algorithm (`algorithm_mode`): `fn(ctx: AlgorithmContext) -> AlgorithmOutput | Tensor | list of lists`.
- uncertainty (`uncertainty_kind`): `fn(log_probs, entropys, mask, params) -> Tensor` of log_probs' shape
  (entropys may be None; params is `transform_params`).
Token advantages come back as a (bs, T) tensor, or one list per response holding either T values or one value
per masked-in token. Optional attributes on the function tell the trainer what to feed:
`needs_planning = True` (planning masks), `uses_sepa_controller = True` (a SEPA lambda), `needs_entropy = True`.

Loading checks the import and the signature and raises PluginError (a ConfigError) naming the path and the reason,
so `validate_algorithm_config` fails before any Ray worker starts; wrong outputs fail at call time, also by name.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from verl_ext.advantage.gtpo import gtpo_weights
from verl_ext.advantage.hicra import hicra
from verl_ext.advantage.sepa import sepa_pool
from verl_ext.config.errors import ConfigError


class PluginError(ConfigError):
    pass


@dataclass(frozen=True, kw_only=True)
class TransformContext:
    """What a transform plugin sees (the whole batch). Tensors are (bs, T) unless noted. Built by keyword only; the
    strengths come from the run's AdvantageConfig (defaults in advantage.yaml), never from a default here."""

    episode_advantages: torch.Tensor  # (bs,), after the uninformative-group rule
    logprobs: torch.Tensor  # old log-probs of the sampled tokens
    uncertainty: torch.Tensor  # u of the configured uncertainty_kind, capped at 50, 0 on padding
    response_mask: torch.Tensor  # bool
    planning_mask: torch.Tensor | None  # bool, None when the config needs none and none was passed
    group_ids: torch.Tensor  # (bs,) long, 0..G-1
    entropys: torch.Tensor | None = None
    sepa_lambda: float = 0.0
    step: int = 0
    gtpo_beta: float
    hicra_alpha: float
    params: Mapping[str, Any] = field(default_factory=dict)  # transform_params

    @property
    def beta(self) -> float:
        return self.gtpo_beta

    @property
    def alpha(self) -> float:
        return self.hicra_alpha

    @property
    def logprobs_G(self) -> list[list[float]]:
        """Per response, the log-probs of its masked-in tokens (list form; slow, for small plugins)."""
        return [row[m].tolist() for row, m in zip(self.logprobs, self.response_mask)]

    @property
    def planning_masks_G(self) -> list[list[int]]:
        if self.planning_mask is None:
            raise ValueError("this transform has no planning mask: set `needs_planning = True` on the plugin")
        return [row[m].int().tolist() for row, m in zip(self.planning_mask, self.response_mask)]

    def gtpo(self, u: torch.Tensor | None = None, beta: float | None = None) -> torch.Tensor:
        """Built-in GTPO token advantages (bs, T) for u (default: ctx.uncertainty)."""
        u = self.uncertainty if u is None else u
        w = gtpo_weights(u, self.response_mask, self.gtpo_beta if beta is None else beta)
        return w * self.episode_advantages[:, None].to(w.dtype) * self.response_mask

    def hicra(self, token_advs: torch.Tensor, alpha: float | None = None) -> torch.Tensor:
        return hicra(token_advs, self.planning_mask, self.hicra_alpha if alpha is None else alpha)

    def sepa_pool(self, u: torch.Tensor | None = None, lam: float | None = None) -> torch.Tensor:
        u = self.uncertainty if u is None else u
        return sepa_pool(u, self.planning_mask, self.response_mask, self.sepa_lambda if lam is None else lam)


@dataclass
class TransformOutput:
    token_advs: Any  # Tensor (bs, T), or one list per response (T values or one per masked-in token)
    extra_metrics: dict[str, float] = field(default_factory=dict)  # logged as adv/<key>


@dataclass(frozen=True, kw_only=True)
class AlgorithmContext:
    """What a full-algorithm plugin sees (the whole batch). Tensors are (bs, T) unless noted. Keyword-only, like
    TransformContext."""

    rewards: torch.Tensor  # (bs,) float64, sum of token_level_rewards
    group_ids: torch.Tensor  # (bs,) long
    index: Any  # verl's uid array
    logprobs: torch.Tensor
    uncertainty: torch.Tensor
    response_mask: torch.Tensor  # bool
    planning_mask: torch.Tensor | None
    entropys: torch.Tensor | None = None
    sepa_lambda: float = 0.0
    step: int = 0
    gtpo_beta: float
    hicra_alpha: float
    advantage_params: Mapping[str, Any] = field(default_factory=dict)
    transform_params: Mapping[str, Any] = field(default_factory=dict)


AlgorithmOutput = TransformOutput


def episode_vectorized(fn: Callable) -> Callable:
    """Mark an episode plugin as `fn(rewards (bs,), group_ids (bs,), params) -> (bs,)`, called once per batch."""
    fn.vectorized = True
    return fn


@dataclass(frozen=True)
class Plugin:
    path: str
    role: str  # the config key it came from
    fn: Callable
    form: str  # episode: "group" | "group_params" | "vectorized"; others: "ctx" | "uncertainty"
    needs_planning: bool = False
    uses_sepa_controller: bool = False
    needs_entropy: bool = False


def _resolve(path: str, role: str) -> Callable:
    module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise PluginError(f"{role}={path!r}: expected a dotted path 'pkg.module.fn'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import-time failure is the plugin's; report it by path
        reason = f"{type(exc).__name__}: {exc}"
        raise PluginError(f"{role}={path!r}: cannot import module {module_name!r}: {reason}") from exc
    if not hasattr(module, attr):
        raise PluginError(f"{role}={path!r}: module {module_name!r} has no attribute {attr!r}")
    fn = getattr(module, attr)
    if not callable(fn):
        raise PluginError(f"{role}={path!r}: {attr!r} is a {type(fn).__name__}, not a function")
    return fn


def _check_signature(fn: Callable, n_args: int, role: str, path: str, expected: str, **kwargs) -> None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins have no signature: nothing to check
        return
    try:
        sig.bind(*range(n_args), **kwargs)
    except TypeError as exc:
        raise PluginError(f"{role}={path!r}: {sig} cannot be called as {expected} ({exc})") from exc


def _plugin(path: str, role: str, fn: Callable, form: str) -> Plugin:
    return Plugin(
        path,
        role,
        fn,
        form,
        needs_planning=bool(getattr(fn, "needs_planning", False)),
        uses_sepa_controller=bool(getattr(fn, "uses_sepa_controller", False)),
        needs_entropy=bool(getattr(fn, "needs_entropy", False)),
    )


@functools.cache
def load_episode_plugin(path: str) -> Plugin:
    fn = _resolve(path, "advantage_mode")
    if getattr(fn, "vectorized", False):
        _check_signature(fn, 3, "advantage_mode", path, "fn(rewards, group_ids, params)")
        return _plugin(path, "advantage_mode", fn, "vectorized")
    try:
        takes_params = "params" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        takes_params = False
    if takes_params:
        _check_signature(fn, 1, "advantage_mode", path, "fn(rewards, params=...)", params={})
        return _plugin(path, "advantage_mode", fn, "group_params")
    _check_signature(fn, 1, "advantage_mode", path, "fn(rewards) or fn(rewards, params)")
    return _plugin(path, "advantage_mode", fn, "group")


@functools.cache
def load_context_plugin(path: str, role: str) -> Plugin:
    """A transform (role "transform_mode") or full-algorithm (role "algorithm_mode") plugin: fn(ctx)."""
    fn = _resolve(path, role)
    _check_signature(fn, 1, role, path, "fn(ctx)")
    return _plugin(path, role, fn, "ctx")


@functools.cache
def load_uncertainty_plugin(path: str) -> Plugin:
    fn = _resolve(path, "uncertainty_kind")
    _check_signature(fn, 4, "uncertainty_kind", path, "fn(log_probs, entropys, mask, params)")
    return _plugin(path, "uncertainty_kind", fn, "uncertainty")


def _finite(values: torch.Tensor, what: str) -> torch.Tensor:
    if not torch.isfinite(values).all():
        raise ValueError(f"{what} returned non-finite values")
    return values


def run_episode_plugin(plugin: Plugin, rewards: torch.Tensor, gid: torch.Tensor, n_groups: int, params) -> torch.Tensor:
    """(bs,) float64 advantages from (bs,) float64 rewards."""
    what = f"advantage_mode={plugin.path!r}"
    if plugin.form == "vectorized":
        out = torch.as_tensor(plugin.fn(rewards, gid, params), dtype=torch.float64)
        if out.shape != rewards.shape:
            raise ValueError(f"{what} returned shape {tuple(out.shape)}, expected {tuple(rewards.shape)}")
        return _finite(out, what)
    order = torch.argsort(gid, stable=True)
    sizes = torch.bincount(gid, minlength=n_groups).tolist()
    out = torch.empty_like(rewards)
    for members in torch.split(order, sizes):
        group_rewards = rewards[members].tolist()
        if plugin.form == "group_params":
            values = plugin.fn(group_rewards, params=params)
        else:
            values = plugin.fn(group_rewards)
        try:
            values = [float(v) for v in values]
        except TypeError as exc:
            raise ValueError(f"{what} must return a sequence of numbers, got {type(values).__name__}") from exc
        if len(values) != len(group_rewards):
            raise ValueError(f"{what} returned {len(values)} advantages for a group of {len(group_rewards)}")
        out[members] = torch.tensor(values, dtype=torch.float64)
    return _finite(out, what)


def run_uncertainty_plugin(plugin: Plugin, log_probs, entropys, mask, params) -> torch.Tensor:
    what = f"uncertainty_kind={plugin.path!r}"
    out = plugin.fn(log_probs, entropys, mask, params)
    if not isinstance(out, torch.Tensor) or out.shape != log_probs.shape:
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"{what} returned {shape}, expected a tensor of shape {tuple(log_probs.shape)}")
    return out


def token_advantages_from(out: Any, mask: torch.Tensor, what: str) -> tuple[torch.Tensor, dict[str, float]]:
    """(bs, T) float tensor and extra metrics from a transform/algorithm plugin's output; errors name `what`."""
    metrics = {}
    if isinstance(out, TransformOutput):
        metrics = {str(k): float(v) for k, v in out.extra_metrics.items()}
        out = out.token_advs
    bs, T = mask.shape
    if isinstance(out, torch.Tensor):
        if out.shape != (bs, T):
            raise ValueError(f"{what} returned token advantages of shape {tuple(out.shape)}, expected {(bs, T)}")
        advs = out.to(torch.float32)
    else:
        try:
            rows = list(out)
        except TypeError as exc:
            raise ValueError(f"{what} must return a tensor or one list per response, got {type(out).__name__}") from exc
        if len(rows) != bs:
            raise ValueError(f"{what} returned {len(rows)} rows of token advantages, expected {bs}")
        advs = torch.zeros((bs, T), dtype=torch.float32)
        lengths = mask.sum(dim=-1).tolist()
        for i, row in enumerate(rows):
            values = torch.as_tensor([float(v) for v in row], dtype=torch.float32)
            if values.numel() == T:
                advs[i] = values
            elif values.numel() == lengths[i]:
                advs[i, mask[i]] = values
            else:
                raise ValueError(
                    f"{what} returned {values.numel()} token advantages for response {i}, expected {lengths[i]} "
                    f"(its masked-in tokens) or {T}"
                )
    return _finite(advs, what) * mask, metrics
